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
#include <openssl/x509.h>

#include "core/ca/index.h"
#include "core/ca/name.h"
#include "linked_ca.h"

using namespace tlstune;

namespace {

void require(bool condition)
{
	if (!condition)
		__builtin_trap();
}

} /* namespace */

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static const CaApi api = testsupport::linkedApi();
	std::string canon;
	if (canonicalName(data, size, &canon)) {
		const unsigned char *p = data;
		X509_NAME *name = d2i_X509_NAME(nullptr, &p, static_cast<long>(size));
		require(name && p == data + size);
		require(testsupport::canonicalHash(canon) == X509_NAME_hash(name));
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
