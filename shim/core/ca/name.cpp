#include "name.h"

#include "der.h"

namespace tlstune {

namespace {

/* OpenSSL's ossl_isspace, in the C locale. */
bool isSpace(unsigned char c) noexcept
{
	return c == ' ' || (c >= '\t' && c <= '\r');
}

/* A DER length, minimal, as i2d writes it. */
void appendLength(std::string *out, std::size_t length)
{
	if (length < 0x80) {
		out->push_back(static_cast<char>(length));
		return;
	}
	int bytes = 0;
	for (std::size_t l = length; l; l >>= 8)
		bytes++;
	out->push_back(static_cast<char>(0x80 | bytes));
	for (int i = bytes - 1; i >= 0; i--)
		out->push_back(static_cast<char>(length >> (8 * i) & 0xff));
}

void appendElement(std::string *out, unsigned char tag, const std::string &content)
{
	out->push_back(static_cast<char>(tag));
	appendLength(out, content.size());
	*out += content;
}

/*
 * Well-formed UTF-8 as OpenSSL's UTF8_getc and is_unicode_valid take it: shortest forms
 * of at most four bytes, no surrogates, nothing past U+10FFFF.
 */
bool validUtf8(const unsigned char *p, std::size_t length) noexcept
{
	std::size_t i = 0;
	while (i < length) {
		const unsigned char c = p[i];
		std::size_t more;
		unsigned long value;
		unsigned long least;
		if (c < 0x80) {
			i++;
			continue;
		} else if ((c & 0xe0) == 0xc0) {
			more = 1, value = c & 0x1f, least = 0x80;
		} else if ((c & 0xf0) == 0xe0) {
			more = 2, value = c & 0x0f, least = 0x800;
		} else if ((c & 0xf8) == 0xf0) {
			more = 3, value = c & 0x07, least = 0x10000;
		} else {
			return false;
		}
		if (length - i <= more)
			return false;
		for (std::size_t k = 1; k <= more; k++) {
			if ((p[i + k] & 0xc0) != 0x80)
				return false;
			value = value << 6 | (p[i + k] & 0x3f);
		}
		if (value < least || value > 0x10ffff || (value >= 0xd800 && value <= 0xdfff))
			return false;
		i += more + 1;
	}
	return true;
}

/* asn1_string_canon: the value in UTF-8 (a byte type's bytes are code points), then folded. */
bool canonicalValue(const DerElement &value, std::string *out)
{
	std::string utf8;
	switch (value.tag) {
	case 0x0c: /* UTF8String */
		if (!validUtf8(value.content, value.length))
			return false;
		utf8.assign(reinterpret_cast<const char *>(value.content), value.length);
		break;
	case 0x13: /* PrintableString */
	case 0x14: /* T61String */
	case 0x16: /* IA5String */
		for (std::size_t i = 0; i < value.length; i++) {
			const unsigned char c = value.content[i];
			if (c < 0x80) {
				utf8.push_back(static_cast<char>(c));
			} else {
				utf8.push_back(static_cast<char>(0xc0 | c >> 6));
				utf8.push_back(static_cast<char>(0x80 | (c & 0x3f)));
			}
		}
		break;
	default:
		return false;
	}
	std::size_t begin = 0, end = utf8.size();
	while (begin < end && isSpace(static_cast<unsigned char>(utf8[begin])))
		begin++;
	while (end > begin && isSpace(static_cast<unsigned char>(utf8[end - 1])))
		end--;
	out->clear();
	for (std::size_t i = begin; i < end;) {
		const unsigned char c = static_cast<unsigned char>(utf8[i]);
		if (isSpace(c)) {
			out->push_back(' ');
			while (isSpace(static_cast<unsigned char>(utf8[i])))
				i++;
			continue;
		}
		out->push_back(static_cast<char>(c >= 'A' && c <= 'Z' ? c - 'A' + 'a' : c));
		i++;
	}
	return true;
}

} /* namespace */

bool canonicalName(const unsigned char *der, std::size_t length, std::string *canon)
{
	const unsigned char *at = der;
	DerElement name;
	if (length > 64 * 1024 || !readDerElement(&at, der + length, &name) || name.tag != 0x30 ||
	    at != der + length)
		return false;
	canon->clear();
	std::string value, attribute, set;
	for (const unsigned char *rdn = name.content; rdn < name.end();) {
		DerElement relative, sequence, object, string;
		const unsigned char *inside, *fields;
		if (!readDerElement(&rdn, name.end(), &relative) || relative.tag != 0x31 ||
		    !(inside = relative.content, readDerElement(&inside, relative.end(), &sequence)) ||
		    sequence.tag != 0x30 || inside != relative.end() ||
		    !(fields = sequence.content, readDerElement(&fields, sequence.end(), &object)) ||
		    !validObjectIdentifier(object) ||
		    !readDerElement(&fields, sequence.end(), &string) || fields != sequence.end())
			return false;
		if (string.tag == 0x12) { /* NumericString: not folded, kept as it is */
			value.assign(reinterpret_cast<const char *>(string.content), string.length);
		} else if (!canonicalValue(string, &value)) {
			return false;
		}
		attribute.assign(reinterpret_cast<const char *>(object.start),
				 static_cast<std::size_t>(object.end() - object.start));
		appendElement(&attribute, string.tag == 0x12 ? 0x12 : 0x0c, value);
		set.clear();
		appendElement(&set, 0x30, attribute);
		appendElement(canon, 0x31, set);
	}
	return true;
}

} /* namespace tlstune */
