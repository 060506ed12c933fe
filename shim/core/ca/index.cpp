#include "index.h"

#include <algorithm>
#include <cstring>

namespace tlstune {

namespace {

/* One DER element: its tag byte, where its content starts and how long it is. */
struct Element {
	const unsigned char *start = nullptr;
	unsigned char tag = 0;
	const unsigned char *content = nullptr;
	std::size_t length = 0;
	const unsigned char *end() const noexcept { return content + length; }
};

/*
 * Reads the element at *at (before limit) and moves *at past it. Only what a DER
 * certificate holds: one-byte tags, definite minimal lengths up to 16 MiB. Anything else
 * (indefinite BER lengths that d2i would accept, say) makes the file go the eager way.
 */
bool readElement(const unsigned char **at, const unsigned char *limit, Element *element) noexcept
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

/* Every element inside a constructed one is well framed, down to the leaves. */
bool wellFramed(const Element &element, int depth) noexcept
{
	if (!(element.tag & 0x20))
		return true;
	if (depth > 16)
		return false;
	const unsigned char *at = element.content;
	while (at < element.end()) {
		Element child;
		if (!readElement(&at, element.end(), &child) || !wellFramed(child, depth + 1))
			return false;
	}
	return true;
}

/* The children of a constructed element, whatever their tags. */
std::vector<Element> allChildren(const Element &parent) noexcept
{
	std::vector<Element> out;
	const unsigned char *at = parent.content;
	Element child;
	while (at < parent.end() && readElement(&at, parent.end(), &child))
		out.push_back(child);
	return out;
}

/* The children of a constructed element, each of the expected tag. */
bool children(const Element &parent, std::initializer_list<unsigned char> tags,
	      std::vector<Element> *out) noexcept
{
	const unsigned char *at = parent.content;
	for (unsigned char tag : tags) {
		Element child;
		if (!readElement(&at, parent.end(), &child) || child.tag != tag)
			return false;
		out->push_back(child);
	}
	return at == parent.end();
}

} /* namespace */

namespace {

/* The element decodes, to its end, as item: what d2i_X509 asks of that field. */
bool decodes(const CaApi &api, const Element &element, const ASN1_ITEM *item) noexcept
{
	const unsigned char *p = element.start;
	ASN1_VALUE *value = api.ASN1_item_d2i(nullptr, &p, static_cast<long>(element.end() - element.start), item);
	if (value)
		api.ASN1_item_free(value, item);
	return value && p == element.end();
}

} /* namespace */

bool checkCertificate(const CaApi &api, const unsigned char *der, std::size_t length,
		      const unsigned char **subject, std::size_t *subjectLength,
		      std::string *keyAlgorithm) noexcept
{
	/*
	 * Certificate ::= SEQUENCE { tbsCertificate, signatureAlgorithm, signature BIT STRING },
	 * and nothing after it in the block: what OpenSSL makes of trailing bytes differs by
	 * version (3.5 reports them), so such a file loads the way OpenSSL loads it.
	 */
	const unsigned char *at = der;
	Element certificate;
	if (!readElement(&at, der + length, &certificate) || certificate.tag != 0x30 ||
	    at != der + length || !wellFramed(certificate, 0))
		return false;
	std::vector<Element> parts;
	if (!children(certificate, { 0x30, 0x30, 0x03 }, &parts) ||
	    !decodes(api, parts[1], api.X509_ALGOR_it()) || !decodes(api, parts[2], api.ASN1_BIT_STRING_it()))
		return false;
	/*
	 * TBSCertificate ::= SEQUENCE { [0] EXPLICIT version OPTIONAL, serial INTEGER,
	 * signature, issuer, validity, subject, subjectPublicKeyInfo, [1] [2] unique ids
	 * OPTIONAL (not taken here), [3] EXPLICIT extensions OPTIONAL }
	 */
	const Element &tbs = parts[0];
	const std::vector<Element> fields = allChildren(tbs);
	std::size_t i = 0;
	if (!fields.empty() && fields[0].tag == 0xa0) {
		std::vector<Element> version;
		if (!children(fields[0], { 0x02 }, &version) || !decodes(api, version[0], api.ASN1_INTEGER_it()))
			return false;
		i = 1;
	}
	static const unsigned char kRequired[] = { 0x02, 0x30, 0x30, 0x30, 0x30, 0x30 };
	if (fields.size() < i + sizeof(kRequired))
		return false;
	for (unsigned char tag : kRequired) {
		if (fields[i++].tag != tag)
			return false;
	}
	const Element &serial = fields[i - 6], &algorithm = fields[i - 5], &issuer = fields[i - 4];
	const Element &validity = fields[i - 3], &subjectField = fields[i - 2], &key = fields[i - 1];
	const std::vector<Element> times = allChildren(validity);
	std::vector<Element> keyParts;
	const bool selfIssued = issuer.end() - issuer.start == subjectField.end() - subjectField.start &&
				std::equal(issuer.start, issuer.end(), subjectField.start);
	/*
	 * Every field decoded by OpenSSL's own decoder but the public key, whose decoding
	 * d2i_X509 does not fail on (it keeps a key it cannot decode undecoded). The subject
	 * is decoded by the caller, and with it the issuer of a self-issued certificate.
	 */
	if (!decodes(api, serial, api.ASN1_INTEGER_it()) || !decodes(api, algorithm, api.X509_ALGOR_it()) ||
	    (!selfIssued && !decodes(api, issuer, api.X509_NAME_it())) ||
	    times.size() != 2 || !decodes(api, times[0], api.ASN1_TIME_it()) ||
	    !decodes(api, times[1], api.ASN1_TIME_it()) ||
	    !children(key, { 0x30, 0x03 }, &keyParts) || !decodes(api, keyParts[0], api.X509_ALGOR_it()) ||
	    !decodes(api, keyParts[1], api.ASN1_BIT_STRING_it()))
		return false;
	if (i < fields.size() && fields[i].tag == 0xa3) {
		std::vector<Element> extensions;
		if (!children(fields[i], { 0x30 }, &extensions) ||
		    !decodes(api, extensions[0], api.X509_EXTENSIONS_it()))
			return false;
		i++;
	}
	if (i != fields.size())
		return false;
	*subject = subjectField.start;
	*subjectLength = static_cast<std::size_t>(subjectField.end() - *subject);
	if (keyAlgorithm)
		keyAlgorithm->assign(reinterpret_cast<const char *>(keyParts[0].start),
				     static_cast<std::size_t>(keyParts[0].end() - keyParts[0].start));
	return true;
}

CaIndex::~CaIndex()
{
	for (const std::unique_ptr<Entry> &entry : entries_)
		api_.X509_NAME_free(entry->subject);
}

std::vector<int> CaIndex::withSubject(const X509_NAME *name) const
{
	auto less = [this](int position, const X509_NAME *n) {
		return api_.X509_NAME_cmp(entries_[position]->subject, n) < 0;
	};
	std::vector<int> found;
	for (auto it = std::lower_bound(bySubject_.begin(), bySubject_.end(), name, less);
	     it != bySubject_.end() && api_.X509_NAME_cmp(entries_[*it]->subject, name) == 0; ++it)
		found.push_back(*it);
	return found;
}

X509 *CaIndex::parse(int position) const
{
	const std::string &der = entries_[position]->der;
	const unsigned char *p = reinterpret_cast<const unsigned char *>(der.data());
	if (propq_.empty())
		return api_.d2i_X509(nullptr, &p, static_cast<long>(der.size()));
	/* As the loader does for a query: a certificate made for it, then decoded into. */
	X509 *x = api_.X509_new_ex ? api_.X509_new_ex(nullptr, propq_.c_str()) : nullptr;
	if (x && !api_.d2i_X509(&x, &p, static_cast<long>(der.size()))) {
		/* d2i frees what it was given when it fails. */
		x = nullptr;
	}
	return x;
}

X509 *CaIndex::certificate(int position) const
{
	Stats::add(stats_.caCertsParsed, 1);
	return parse(position);
}

DecodingState decodingState(const CaApi &api)
{
	DecodingState state;
	if (api.OSSL_PROVIDER_do_all) {
		/* Lists the active providers, activating the fallback as a decode would. */
		api.OSSL_PROVIDER_do_all(nullptr, [](void *provider, void *providers) {
			static_cast<std::vector<const void *> *>(providers)->push_back(provider);
			return 1;
		}, &state.providers);
	}
	if (api.EVP_default_properties_is_fips_enabled)
		state.fips = api.EVP_default_properties_is_fips_enabled(nullptr) == 1;
	if (api.EVP_get1_default_properties && api.CRYPTO_free) {
		if (char *properties = api.EVP_get1_default_properties(nullptr)) {
			state.properties = properties;
			api.CRYPTO_free(properties, __FILE__, __LINE__);
		}
	}
	return state;
}

bool CaIndex::keysDecode() const
{
	api_.ERR_set_mark();
	bool ok = true;
	for (int position : keyAlgorithms_) {
		X509 *x = parse(position);
		ok = ok && x && api_.X509_get0_pubkey(x);
		if (x)
			api_.X509_free(x);
	}
	api_.ERR_pop_to_mark();
	return ok;
}

bool CaIndex::keysDecodeNow() const
{
	return decodingState(api_) == decodedUnder_ || keysDecode();
}

namespace {

/* Each byte's base64 value, -1 for a byte that is not a base64 digit. */
struct Base64Table {
	signed char value[256];
	constexpr Base64Table() : value()
	{
		for (int c = 0; c < 256; c++)
			value[c] = -1;
		for (int c = 0; c < 26; c++) {
			value['A' + c] = static_cast<signed char>(c);
			value['a' + c] = static_cast<signed char>(c + 26);
		}
		for (int c = 0; c < 10; c++)
			value['0' + c] = static_cast<signed char>(c + 52);
		value[static_cast<unsigned char>('+')] = 62;
		value[static_cast<unsigned char>('/')] = 63;
	}
};
constexpr Base64Table kBase64;

/* Standard base64 with '=' padding only at its end; false for anything else. */
bool decodeBase64(const std::string &text, std::string *out) noexcept
{
	if (text.empty() || text.size() % 4 != 0)
		return false;
	const std::size_t padding = text.size() - text.find_last_not_of('=') - 1;
	if (padding > 2)
		return false;
	out->clear();
	unsigned int bits = 0;
	int held = 0;
	for (std::size_t i = 0; i < text.size() - padding; i++) {
		const int value = kBase64.value[static_cast<unsigned char>(text[i])];
		if (value < 0)
			return false;
		bits = bits << 6 | static_cast<unsigned int>(value);
		held += 6;
		if (held >= 8) {
			held -= 8;
			out->push_back(static_cast<char>(bits >> held & 0xff));
		}
	}
	/* The bits a padded block leaves over must be zero, as a strict decoder checks. */
	return (bits & ((1u << held) - 1)) == 0;
}

/*
 * The DER of every CERTIFICATE block, in file order, for files written the plain way
 * (Debian's bundle, openssl x509 output): BEGIN and END lines, base64 lines of at most
 * 76 characters ending in "\n", short text lines outside blocks. Anything else a PEM
 * reader might take otherwise (headers, CR, NUL, other block types, long lines in which
 * OpenSSL's 255-byte line reads could find a BEGIN) returns false: such a file loads
 * eagerly, by OpenSSL's own reader.
 */
bool scanPem(const std::string &content, std::vector<std::string> *ders)
{
	static const std::string kBegin = "-----BEGIN CERTIFICATE-----", kEnd = "-----END CERTIFICATE-----";
	if (content.find('\0') != std::string::npos || content.find('\r') != std::string::npos)
		return false;
	bool inside = false;
	std::string body, der;
	std::size_t at = 0;
	while (at < content.size()) {
		const std::size_t newline = content.find('\n', at);
		if (newline == std::string::npos)
			return false;
		const std::string line = content.substr(at, newline - at);
		at = newline + 1;
		if (!inside) {
			if (line == kBegin)
				inside = true;
			else if (line.size() > 200 || (!line.empty() && line[0] == '-'))
				return false;
			continue;
		}
		if (line == kEnd) {
			if (!decodeBase64(body, &der))
				return false;
			ders->push_back(der);
			body.clear();
			inside = false;
			continue;
		}
		/* Its characters are checked as they are decoded. */
		if (line.empty() || line.size() > 76)
			return false;
		body += line;
	}
	return !inside;
}

} /* namespace */

std::shared_ptr<CaIndex> indexFile(const CaApi &api, Stats &stats, const std::string &content,
				   const std::string &propq)
{
	std::vector<std::string> ders;
	if (!scanPem(content, &ders) || ders.empty())
		return nullptr;
	api.ERR_set_mark();
	auto index = std::make_shared<CaIndex>(api, stats, propq);
	bool ok = true;
	std::vector<std::string> keyAlgorithms;
	for (std::string &der : ders) {
		const unsigned char *subject = nullptr;
		std::size_t subjectLength = 0;
		std::string keyAlgorithm;
		ok = checkCertificate(api, reinterpret_cast<const unsigned char *>(der.data()), der.size(),
				      &subject, &subjectLength, &keyAlgorithm);
		if (ok && std::find(keyAlgorithms.begin(), keyAlgorithms.end(), keyAlgorithm) ==
				  keyAlgorithms.end()) {
			keyAlgorithms.push_back(keyAlgorithm);
			index->keyAlgorithms_.push_back(index->count());
		}
		X509_NAME *decoded = ok ? api.d2i_X509_NAME(nullptr, &subject, static_cast<long>(subjectLength))
					: nullptr;
		if (!decoded)
			break;
		auto entry = std::make_unique<CaIndex::Entry>();
		entry->der = std::move(der);
		entry->subject = decoded;
		index->entries_.push_back(std::move(entry));
	}
	ok = index->count() == static_cast<int>(ders.size());

	const int count = index->count();
	for (int i = 0; i < count; i++)
		index->bySubject_.push_back(i);
	std::stable_sort(index->bySubject_.begin(), index->bySubject_.end(), [&](int a, int b) {
		return api.X509_NAME_cmp(index->entries_[a]->subject, index->entries_[b]->subject) < 0;
	});
	index->subjectRank_.resize(static_cast<std::size_t>(count));
	for (int i = 0; i < count; i++) {
		const int position = index->bySubject_[i];
		if (i == 0 || api.X509_NAME_cmp(index->entries_[index->bySubject_[i - 1]]->subject,
						index->entries_[position]->subject) != 0)
			index->firstWithSubject_.push_back(position);
		index->subjectRank_[position] = static_cast<int>(index->firstWithSubject_.size()) - 1;
	}
	/*
	 * Loading compares certificates that share a subject; one whose extensions do not
	 * decode then leaves an error on the queue at load time, which a lazy load cannot.
	 */
	for (int i = 0; ok && i + 1 < count; i++) {
		const int a = index->bySubject_[i], b = index->bySubject_[i + 1];
		if (api.X509_NAME_cmp(index->entries_[a]->subject, index->entries_[b]->subject) != 0)
			continue;
		for (int position : { a, b }) {
			X509 *x = index->parse(position);
			ok = ok && x && api.X509_check_purpose(x, -1, 0) == 1;
			if (x)
				api.X509_free(x);
		}
	}
	api.ERR_pop_to_mark();
	/* Decided now, as loading decides it: a key that does not decode loads eagerly. */
	index->decodedUnder_ = decodingState(api);
	if (!ok || !index->keysDecode())
		return nullptr;
	Stats::add(stats.caCertsIndexed, static_cast<uint64_t>(count));
	return index;
}

} /* namespace tlstune */
