/*
 * libFuzzer target: the CA index's own reading of certificates and names (core/ca). Each
 * check there must accept only what OpenSSL's decoder takes, since what it accepts is
 * loaded without OpenSSL looking: a name it encodes must decode, with the canonical
 * encoding X509_NAME_hash hashes, and a certificate it passes must decode whole.
 */

#include <cstddef>
#include <cstdint>
#include <string>

#include <openssl/err.h>
#include <openssl/sha.h>
#include <openssl/x509.h>

#include "core/ca/index.h"
#include "core/ca/name.h"

using namespace tlstune;

namespace {

void require(bool condition)
{
	if (!condition)
		__builtin_trap();
}

CaApi decoderApi()
{
	CaApi api;
	api.ASN1_item_d2i = ::ASN1_item_d2i;
	api.ASN1_item_free = ::ASN1_item_free;
	api.ASN1_INTEGER_it = ::ASN1_INTEGER_it;
	api.ASN1_BIT_STRING_it = ::ASN1_BIT_STRING_it;
	api.ASN1_TIME_it = ::ASN1_TIME_it;
	api.X509_ALGOR_it = ::X509_ALGOR_it;
	api.X509_NAME_it = ::X509_NAME_it;
	api.X509_EXTENSIONS_it = ::X509_EXTENSIONS_it;
	return api;
}

unsigned long hashOf(const std::string &canon)
{
	unsigned char md[SHA_DIGEST_LENGTH];
	SHA1(reinterpret_cast<const unsigned char *>(canon.data()), canon.size(), md);
	return (static_cast<unsigned long>(md[0]) | static_cast<unsigned long>(md[1]) << 8 |
		static_cast<unsigned long>(md[2]) << 16 | static_cast<unsigned long>(md[3]) << 24) &
	       0xffffffffUL;
}

} /* namespace */

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static const CaApi api = decoderApi();
	std::string canon;
	if (canonicalName(data, size, &canon)) {
		const unsigned char *p = data;
		X509_NAME *name = d2i_X509_NAME(nullptr, &p, static_cast<long>(size));
		require(name && p == data + size);
		require(hashOf(canon) == X509_NAME_hash(name));
		X509_NAME_free(name);
	}
	const unsigned char *subject = nullptr;
	std::size_t subjectLength = 0;
	if (checkCertificate(api, data, size, &subject, &subjectLength) &&
	    canonicalName(subject, subjectLength, &canon)) {
		const unsigned char *p = data;
		X509 *x = d2i_X509(nullptr, &p, static_cast<long>(size));
		require(x && p == data + size);
		X509_free(x);
	}
	ERR_clear_error();
	return 0;
}
