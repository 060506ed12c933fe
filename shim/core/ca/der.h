#pragma once

#include <cstddef>

namespace tlstune {

/* One DER element: its tag byte, where its content starts and how long it is. */
struct DerElement {
	const unsigned char *start = nullptr;
	unsigned char tag = 0;
	const unsigned char *content = nullptr;
	std::size_t length = 0;
	const unsigned char *end() const noexcept { return content + length; }
};

/*
 * Reads the element at *at (before limit) and moves *at past it. Only what a DER
 * certificate holds: one-byte tags, definite minimal lengths up to 16 MiB. Anything else
 * (indefinite BER lengths that d2i would accept, say) is refused, and what holds it goes
 * the eager way.
 */
inline bool readDerElement(const unsigned char **at, const unsigned char *limit,
			   DerElement *element) noexcept
{
	const unsigned char *p = *at;
	if (limit - p < 2 || (p[0] & 0x1f) == 0x1f)
		return false;
	element->start = p;
	element->tag = p[0];
	std::size_t length = p[1];
	p += 2;
	if (length & 0x80) {
		const std::size_t bytes = length & 0x7f;
		if (bytes == 0 || bytes > 3 || static_cast<std::size_t>(limit - p) < bytes || p[0] == 0)
			return false;
		length = 0;
		for (std::size_t i = 0; i < bytes; i++)
			length = length << 8 | *p++;
		if (length < 0x80)
			return false;
	}
	if (static_cast<std::size_t>(limit - p) < length)
		return false;
	element->content = p;
	element->length = length;
	*at = p + length;
	return true;
}

/*
 * An OBJECT IDENTIFIER's content as c2i_ASN1_OBJECT takes it: not empty, the last byte
 * ends a subidentifier, and no subidentifier starts with 0x80.
 */
inline bool validObjectIdentifier(const DerElement &object) noexcept
{
	if (object.tag != 0x06 || object.length == 0 || object.content[object.length - 1] & 0x80)
		return false;
	for (std::size_t i = 0; i < object.length; i++) {
		if (object.content[i] == 0x80 && (i == 0 || !(object.content[i - 1] & 0x80)))
			return false;
	}
	return true;
}

} /* namespace tlstune */
