#include "index.h"

#include <algorithm>
#include <cstring>

#include "der.h"
#include "name.h"

namespace tlstune {

namespace {

/* Every element inside a constructed one is well framed, down to the leaves. */
bool wellFramed(const DerElement &element, int depth) noexcept
{
	if (!(element.tag & 0x20))
		return true;
	if (depth > 16)
		return false;
	const unsigned char *at = element.content;
	while (at < element.end()) {
		DerElement child;
		if (!readDerElement(&at, element.end(), &child) || !wellFramed(child, depth + 1))
			return false;
	}
	return true;
}

/* The children of a constructed element, whatever their tags. */
std::vector<DerElement> allChildren(const DerElement &parent) noexcept
{
	std::vector<DerElement> out;
	const unsigned char *at = parent.content;
	DerElement child;
	while (at < parent.end() && readDerElement(&at, parent.end(), &child))
		out.push_back(child);
	return out;
}

/* The children of a constructed element, each of the expected tag. */
bool children(const DerElement &parent, std::initializer_list<unsigned char> tags,
	      std::vector<DerElement> *out) noexcept
{
	const unsigned char *at = parent.content;
	for (unsigned char tag : tags) {
		DerElement child;
		if (!readDerElement(&at, parent.end(), &child) || child.tag != tag)
			return false;
		out->push_back(child);
	}
	return at == parent.end();
}

} /* namespace */

namespace {

/* The element decodes, to its end, as item: what d2i_X509 asks of that field. */
bool decodes(const CaApi &api, const DerElement &element, const ASN1_ITEM *item) noexcept
{
	const unsigned char *p = element.start;
	ASN1_VALUE *value = api.ASN1_item_d2i(nullptr, &p, static_cast<long>(element.end() - element.start), item);
	if (value)
		api.ASN1_item_free(value, item);
	return value && p == element.end();
}

/*
 * What OpenSSL's decoder is sure to take, told from the bytes alone; each falls back on
 * the decoder for anything less plain, so each is true exactly when decodes() would be.
 */

/* An INTEGER of minimal length, not starting 0xff (whose padding rules are OpenSSL's to apply). */
bool plainInteger(const DerElement &e) noexcept
{
	return e.tag == 0x02 && e.length >= 1 && e.content[0] != 0xff &&
	       !(e.length > 1 && e.content[0] == 0 && !(e.content[1] & 0x80));
}

/* A BIT STRING of whole bytes. */
bool plainBitString(const DerElement &e) noexcept
{
	return e.tag == 0x03 && e.length >= 1 && e.content[0] == 0;
}

/* AlgorithmIdentifier ::= SEQUENCE { OID, parameters: absent, NULL or an OID (a curve's) }. */
bool plainAlgorithm(const DerElement &e) noexcept
{
	const unsigned char *at = e.content;
	DerElement algorithm, parameter;
	if (e.tag != 0x30 || !readDerElement(&at, e.end(), &algorithm) || !validObjectIdentifier(algorithm))
		return false;
	if (at == e.end())
		return true;
	return readDerElement(&at, e.end(), &parameter) && at == e.end() &&
	       ((parameter.tag == 0x05 && parameter.length == 0) || validObjectIdentifier(parameter));
}

/* Extensions ::= SEQUENCE OF SEQUENCE { OID, critical BOOLEAN OPTIONAL, OCTET STRING }. */
bool plainExtensions(const DerElement &e) noexcept
{
	if (e.tag != 0x30)
		return false;
	for (const unsigned char *at = e.content; at < e.end();) {
		DerElement extension, field;
		if (!readDerElement(&at, e.end(), &extension) || extension.tag != 0x30)
			return false;
		const unsigned char *in = extension.content;
		if (!readDerElement(&in, extension.end(), &field) || !validObjectIdentifier(field) ||
		    !readDerElement(&in, extension.end(), &field))
			return false;
		if (field.tag == 0x01 && (field.length != 1 || !readDerElement(&in, extension.end(), &field)))
			return false;
		if (field.tag != 0x04 || in != extension.end())
			return false;
	}
	return true;
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
	DerElement certificate;
	if (!readDerElement(&at, der + length, &certificate) || certificate.tag != 0x30 ||
	    at != der + length || !wellFramed(certificate, 0))
		return false;
	std::vector<DerElement> parts;
	if (!children(certificate, { 0x30, 0x30, 0x03 }, &parts) ||
	    !(plainAlgorithm(parts[1]) || decodes(api, parts[1], api.X509_ALGOR_it())) ||
	    !(plainBitString(parts[2]) || decodes(api, parts[2], api.ASN1_BIT_STRING_it())))
		return false;
	/*
	 * TBSCertificate ::= SEQUENCE { [0] EXPLICIT version OPTIONAL, serial INTEGER,
	 * signature, issuer, validity, subject, subjectPublicKeyInfo, [1] [2] unique ids
	 * OPTIONAL (not taken here), [3] EXPLICIT extensions OPTIONAL }
	 */
	const DerElement &tbs = parts[0];
	const std::vector<DerElement> fields = allChildren(tbs);
	std::size_t i = 0;
	if (!fields.empty() && fields[0].tag == 0xa0) {
		std::vector<DerElement> version;
		if (!children(fields[0], { 0x02 }, &version) ||
		    !(plainInteger(version[0]) || decodes(api, version[0], api.ASN1_INTEGER_it())))
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
	const DerElement &serial = fields[i - 6], &algorithm = fields[i - 5], &issuer = fields[i - 4];
	const DerElement &validity = fields[i - 3], &subjectField = fields[i - 2], &key = fields[i - 1];
	const std::vector<DerElement> times = allChildren(validity);
	std::vector<DerElement> keyParts;
	const bool selfIssued = issuer.end() - issuer.start == subjectField.end() - subjectField.start &&
				std::equal(issuer.start, issuer.end(), subjectField.start);
	/*
	 * Every field decoded by OpenSSL's own decoder but the public key, whose decoding
	 * d2i_X509 does not fail on (it keeps a key it cannot decode undecoded). The subject
	 * is checked by the caller (canonicalName), and with it the issuer of a self-issued
	 * certificate.
	 */
	std::string canon;
	if (!(plainInteger(serial) || decodes(api, serial, api.ASN1_INTEGER_it())) ||
	    !(plainAlgorithm(algorithm) || decodes(api, algorithm, api.X509_ALGOR_it())) ||
	    !(selfIssued || canonicalName(issuer.start, static_cast<std::size_t>(issuer.end() - issuer.start), &canon) ||
	      decodes(api, issuer, api.X509_NAME_it())) ||
	    times.size() != 2 || !decodes(api, times[0], api.ASN1_TIME_it()) ||
	    !decodes(api, times[1], api.ASN1_TIME_it()) ||
	    !children(key, { 0x30, 0x03 }, &keyParts) ||
	    !(plainAlgorithm(keyParts[0]) || decodes(api, keyParts[0], api.X509_ALGOR_it())) ||
	    !(plainBitString(keyParts[1]) || decodes(api, keyParts[1], api.ASN1_BIT_STRING_it())))
		return false;
	if (i < fields.size() && fields[i].tag == 0xa3) {
		std::vector<DerElement> extensions;
		if (!children(fields[i], { 0x30 }, &extensions) ||
		    !(plainExtensions(extensions[0]) || decodes(api, extensions[0], api.X509_EXTENSIONS_it())))
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
	for (const std::unique_ptr<Entry> &entry : entries_) {
		if (X509_NAME *name = entry->subject.load(std::memory_order_acquire))
			api_.X509_NAME_free(name);
	}
}

namespace {

/* X509_NAME_cmp's order on canonical encodings: the shorter first, then by bytes. */
int compareCanonical(const std::string &a, const std::string &b) noexcept
{
	if (a.size() != b.size())
		return a.size() < b.size() ? -1 : 1;
	return a.compare(b);
}

} /* namespace */

std::vector<int> CaIndex::withSubject(const X509_NAME *name) const
{
	std::vector<int> found;
	const unsigned char *der = nullptr;
	std::size_t length = 0;
	std::string canon;
	if (api_.X509_NAME_get0_der(name, &der, &length) == 1 && canonicalName(der, length, &canon))
		return withCanonical(canon);
	/* A name the canonical encoder does not follow (a BMPString, say): OpenSSL compares. */
	for (int position = 0; position < count(); position++) {
		const X509_NAME *subject = this->subject(position);
		if (subject && api_.X509_NAME_cmp(subject, name) == 0)
			found.push_back(position);
	}
	return found;
}

std::vector<int> CaIndex::withCanonical(const std::string &canon) const
{
	auto less = [this](int position, const std::string &c) {
		return compareCanonical(entries_[position]->canon, c) < 0;
	};
	std::vector<int> found;
	for (auto it = std::lower_bound(bySubject_.begin(), bySubject_.end(), canon, less);
	     it != bySubject_.end() && entries_[*it]->canon == canon; ++it)
		found.push_back(*it);
	return found;
}

const X509_NAME *CaIndex::subject(int position) const noexcept
{
	const Entry &entry = *entries_[position];
	X509_NAME *name = entry.subject.load(std::memory_order_acquire);
	if (name)
		return name;
	/* Indexing proved that it decodes: only memory can fail here. */
	api_.ERR_set_mark();
	const unsigned char *p = reinterpret_cast<const unsigned char *>(entry.der.data()) + entry.subjectAt;
	X509_NAME *decoded = api_.d2i_X509_NAME(nullptr, &p, static_cast<long>(entry.subjectLength));
	api_.ERR_pop_to_mark();
	if (decoded && !entry.subject.compare_exchange_strong(name, decoded, std::memory_order_acq_rel)) {
		api_.X509_NAME_free(decoded);
		return name;
	}
	return decoded;
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
	/* A provider's name is its identity: a configuration cannot give "default" a module of its own. */
	state.builtinDefault = !state.providers.empty() && api.OSSL_PROVIDER_get0_name && !state.fips &&
			       state.properties.empty() &&
			       std::all_of(state.providers.begin(), state.providers.end(), [&api](const void *provider) {
				       const char *name = api.OSSL_PROVIDER_get0_name(provider);
				       return name && std::strcmp(name, "default") == 0;
			       });
	return state;
}

namespace {

/*
 * Key algorithms the built-in default provider decodes on every OpenSSL 3: RSA, and EC
 * on the NIST curves that this libcrypto was built with. Their decoders and key
 * managers carry the same properties, so where one key of them decodes the others do:
 * one trial decode stands for all of them (each costs an OSSL_DECODER_CTX_new_for_pkey,
 * some 1.3 million instructions on 3.0).
 */
bool decodedByBuiltinDefault(const CaApi &api, const std::string &algorithm)
{
	/* Plain data: nothing to destroy at exit while another thread may still load. */
	struct Known {
		const char *id; /* the key's AlgorithmIdentifier, DER */
		std::size_t length;
		int curve; /* the named curve's NID, or 0 */
	};
	static const Known kKnown[] = {
		{ "\x30\x0d\x06\x09\x2a\x86\x48\x86\xf7\x0d\x01\x01\x01\x05\x00", 15, 0 },
		{ "\x30\x13\x06\x07\x2a\x86\x48\xce\x3d\x02\x01\x06\x08\x2a\x86\x48\xce\x3d\x03\x01\x07", 21,
		  NID_X9_62_prime256v1 },
		{ "\x30\x10\x06\x07\x2a\x86\x48\xce\x3d\x02\x01\x06\x05\x2b\x81\x04\x00\x22", 18, NID_secp384r1 },
		{ "\x30\x10\x06\x07\x2a\x86\x48\xce\x3d\x02\x01\x06\x05\x2b\x81\x04\x00\x23", 18, NID_secp521r1 },
	};
	for (const Known &known : kKnown) {
		if (algorithm.size() != known.length || std::memcmp(algorithm.data(), known.id, known.length) != 0)
			continue;
		if (!known.curve)
			return true;
		if (!api.EC_get_builtin_curves)
			return false;
		EC_builtin_curve curves[256];
		const std::size_t count = std::min<std::size_t>(api.EC_get_builtin_curves(curves, 256), 256);
		return std::any_of(curves, curves + count, [&](const EC_builtin_curve &c) { return c.nid == known.curve; });
	}
	return false;
}

} /* namespace */

bool CaIndex::keysDecode(const DecodingState &state, const std::vector<std::string> &decoded) const
{
	auto builtin = [&](const std::string &id) {
		return state.builtinDefault && propq_.empty() && decodedByBuiltinDefault(api_, id);
	};
	bool builtinDecoded = std::any_of(decoded.begin(), decoded.end(), builtin);
	bool ok = true;
	api_.ERR_set_mark();
	for (const KeyAlgorithm &algorithm : keyAlgorithms_) {
		const bool builtinKind = builtin(algorithm.id);
		if (std::find(decoded.begin(), decoded.end(), algorithm.id) != decoded.end() ||
		    (builtinDecoded && builtinKind))
			continue;
		X509 *x = parse(algorithm.position);
		ok = x && api_.X509_get0_pubkey(x);
		if (x)
			api_.X509_free(x);
		if (!ok)
			break;
		builtinDecoded = builtinDecoded || builtinKind;
	}
	api_.ERR_pop_to_mark();
	return ok;
}

bool CaIndex::comparesQuietly(std::vector<std::string> *decoded) const
{
	const int count = this->count();
	const unsigned long before = api_.ERR_peek_last_error();
	bool ok = true;
	api_.ERR_set_mark();
	for (int i = 0; ok && i + 1 < count; i++) {
		const int a = bySubject_[i], b = bySubject_[i + 1];
		if (entries_[a]->canon != entries_[b]->canon)
			continue;
		for (int position : { a, b }) {
			X509 *x = parse(position);
			ok = ok && x && api_.X509_check_purpose(x, -1, 0) == 1 && api_.X509_get0_pubkey(x);
			decoded->push_back(entries_[position]->keyAlgorithm);
			if (x)
				api_.X509_free(x);
		}
	}
	/* A fingerprint that could not be made (no SHA-1 under these properties) says so only there. */
	ok = ok && api_.ERR_peek_last_error() == before;
	api_.ERR_pop_to_mark();
	return ok;
}

bool CaIndex::keysDecodeNow() const
{
	const DecodingState now = decodingState(api_);
	if (now == decodedUnder_)
		return true;
	std::vector<std::string> decoded;
	return comparesQuietly(&decoded) && keysDecode(now, decoded);
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

/*
 * Appends the standard base64 of [p, end), '=' padding only at its end, to out; false
 * for anything else.
 */
bool decodeBase64(const char *p, const char *end, std::string *out) noexcept
{
	const std::size_t size = static_cast<std::size_t>(end - p);
	if (size == 0 || size % 4 != 0)
		return false;
	std::size_t padding = 0;
	while (padding < size && end[-1 - static_cast<std::ptrdiff_t>(padding)] == '=')
		padding++;
	if (padding > 2)
		return false;
	auto value = [](char c) { return kBase64.value[static_cast<unsigned char>(c)]; };
	const std::size_t whole = (size - padding) / 4 * 4; /* the unpadded groups */
	const std::size_t at = out->size();
	out->resize(at + whole / 4 * 3);
	char *o = &(*out)[at];
	for (std::size_t i = 0; i < whole; i += 4) {
		const int a = value(p[i]), b = value(p[i + 1]), c = value(p[i + 2]), d = value(p[i + 3]);
		if ((a | b | c | d) < 0)
			return false;
		const unsigned int bits = static_cast<unsigned int>(a << 18 | b << 12 | c << 6 | d);
		*o++ = static_cast<char>(bits >> 16);
		*o++ = static_cast<char>(bits >> 8 & 0xff);
		*o++ = static_cast<char>(bits & 0xff);
	}
	if (!padding)
		return true;
	/* The last group: two or three digits, whose left-over bits must be zero, as a strict decoder checks. */
	const int a = value(p[whole]), b = value(p[whole + 1]), c = padding == 1 ? value(p[whole + 2]) : 0;
	if ((a | b | c) < 0)
		return false;
	const unsigned int bits = static_cast<unsigned int>(a << 18 | b << 12 | c << 6);
	out->push_back(static_cast<char>(bits >> 16));
	if (padding == 1)
		out->push_back(static_cast<char>(bits >> 8 & 0xff));
	return (bits & (padding == 1 ? 0xffu : 0xffffu)) == 0;
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
	static const char kBegin[] = "-----BEGIN CERTIFICATE-----", kEnd[] = "-----END CERTIFICATE-----";
	auto is = [](const char *line, std::size_t length, const char *text, std::size_t textLength) {
		return length == textLength && std::memcmp(line, text, length) == 0;
	};
	if (std::memchr(content.data(), '\0', content.size()) || content.find('\r') != std::string::npos)
		return false;
	const char *at = content.data(), *const end = at + content.size();
	bool inside = false;
	std::string body;
	while (at < end) {
		const char *newline = static_cast<const char *>(std::memchr(at, '\n', static_cast<std::size_t>(end - at)));
		if (!newline)
			return false;
		const char *line = at;
		const std::size_t length = static_cast<std::size_t>(newline - at);
		at = newline + 1;
		if (!inside) {
			if (is(line, length, kBegin, sizeof kBegin - 1))
				inside = true;
			else if (length > 200 || (length > 0 && line[0] == '-'))
				return false;
			continue;
		}
		if (is(line, length, kEnd, sizeof kEnd - 1)) {
			std::string der;
			der.reserve(body.size() / 4 * 3);
			if (!decodeBase64(body.data(), body.data() + body.size(), &der))
				return false;
			ders->push_back(std::move(der));
			body.clear();
			inside = false;
			continue;
		}
		/* Its characters are checked as they are decoded. */
		if (length == 0 || length > 76)
			return false;
		body.append(line, length);
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
	auto index = std::make_shared<CaIndex>(api, stats, propq);
	api.ERR_set_mark();
	for (std::string &der : ders) {
		const unsigned char *bytes = reinterpret_cast<const unsigned char *>(der.data());
		const unsigned char *subject = nullptr;
		std::size_t subjectLength = 0;
		std::string keyAlgorithm;
		auto entry = std::make_unique<CaIndex::Entry>();
		/* A subject the canonical encoder follows is one d2i_X509_NAME decodes. */
		if (!checkCertificate(api, bytes, der.size(), &subject, &subjectLength, &keyAlgorithm) ||
		    !canonicalName(subject, subjectLength, &entry->canon))
			break;
		auto &algorithms = index->keyAlgorithms_;
		if (std::none_of(algorithms.begin(), algorithms.end(),
				 [&](const CaIndex::KeyAlgorithm &known) { return known.id == keyAlgorithm; }))
			algorithms.push_back({ keyAlgorithm, index->count() });
		entry->keyAlgorithm = std::move(keyAlgorithm);
		entry->subjectAt = static_cast<std::size_t>(subject - bytes);
		entry->subjectLength = subjectLength;
		entry->der = std::move(der);
		index->entries_.push_back(std::move(entry));
	}
	api.ERR_pop_to_mark();
	if (index->count() != static_cast<int>(ders.size()))
		return nullptr;

	const int count = index->count();
	auto canon = [&](int position) -> const std::string & { return index->entries_[position]->canon; };
	for (int i = 0; i < count; i++)
		index->bySubject_.push_back(i);
	std::stable_sort(index->bySubject_.begin(), index->bySubject_.end(),
			 [&](int a, int b) { return compareCanonical(canon(a), canon(b)) < 0; });
	index->subjectRank_.resize(static_cast<std::size_t>(count));
	for (int i = 0; i < count; i++) {
		const int position = index->bySubject_[i];
		if (i == 0 || canon(index->bySubject_[i - 1]) != canon(position))
			index->firstWithSubject_.push_back(position);
		index->subjectRank_[position] = static_cast<int>(index->firstWithSubject_.size()) - 1;
	}
	/* Decided now, as loading decides it: a key that does not decode loads eagerly. */
	std::vector<std::string> decoded;
	index->decodedUnder_ = decodingState(api);
	if (!index->comparesQuietly(&decoded) || !index->keysDecode(index->decodedUnder_, decoded))
		return nullptr;
	Stats::add(stats.caCertsIndexed, static_cast<uint64_t>(count));
	return index;
}

} /* namespace tlstune */
