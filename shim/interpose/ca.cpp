/*
 * CA files. Every loader programs call (SSL_CTX_set_default_verify_paths,
 * SSL_CTX_load_verify_locations/_file, X509_STORE_set_default_paths,
 * X509_STORE_load_locations/_file, the _ex forms) reads a PEM file through
 * X509_load_cert_crl_file(_ex), which libcrypto calls through its PLT: one interposition
 * serves them all, with OpenSSL itself resolving SSL_CERT_FILE and the default paths.
 * Directories (CApath) are looked up lazily by OpenSSL already and pass through.
 */

#include <cerrno>

#include "core/ca_load.h"
#include "interpose/export.h"
#include "runtime/runtime.h"

using namespace tlstune;

namespace {

/* libcrypto 3 implements X509_load_cert_crl_file through the _ex form: one load per call. */
thread_local int loading = 0;

template <typename Load>
int loaded(X509_LOOKUP *lookup, const char *file, int type, OSSL_LIB_CTX *libctx,
	   const char *propq, Load load)
{
	const Crypto &crypto = tlstune::crypto();
	/*
	 * Only PEM files parsed for the default library context: certificates parsed for
	 * another OSSL_LIB_CTX keep a pointer to it, which may be freed and its address reused.
	 */
	if (loading || !crypto.caching || type != X509_FILETYPE_PEM || !file || libctx)
		return load(crypto.api);

	loading++;
	const int savedErrno = errno;
	X509_STORE *store = crypto.api.X509_LOOKUP_get_store(lookup);
	int count = store ? loadCaFile(crypto.api, process().caCache, process().stats, store, file, propq)
			  : -1;
	errno = savedErrno;
	if (count < 0)
		count = load(crypto.api);
	loading--;
	return count;
}

} /* namespace */

TLSTUNE_EXPORT int X509_load_cert_crl_file(X509_LOOKUP *lookup, const char *file, int type)
{
	return loaded(lookup, file, type, nullptr, nullptr, [&](const CaApi &api) {
		return api.X509_load_cert_crl_file ? api.X509_load_cert_crl_file(lookup, file, type) : 0;
	});
}

TLSTUNE_EXPORT int X509_load_cert_crl_file_ex(X509_LOOKUP *lookup, const char *file, int type,
					      OSSL_LIB_CTX *libctx, const char *propq)
{
	return loaded(lookup, file, type, libctx, propq, [&](const CaApi &api) {
		return api.X509_load_cert_crl_file_ex
			? api.X509_load_cert_crl_file_ex(lookup, file, type, libctx, propq) : 0;
	});
}
