#pragma once

#include <openssl/opensslv.h>
#include <openssl/pem.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>
#include <openssl/x509_vfy.h>
#if OPENSSL_VERSION_NUMBER >= 0x30000000L
#include <openssl/provider.h>
#endif

/*
 * OpenSSL 1.1.1's headers lack the 3.0 functions the shim interposes or calls when present.
 * Their 3.0 declarations, so the shim builds against 1.1.1 too: it never links them, and
 * finds at run time that a 1.1.1 libssl has none (the entries stay null).
 */
#if OPENSSL_VERSION_NUMBER < 0x30000000L
extern "C" {
typedef struct ossl_lib_ctx_st OSSL_LIB_CTX;
SSL_CTX *SSL_CTX_new_ex(OSSL_LIB_CTX *libctx, const char *propq, const SSL_METHOD *meth);
int X509_load_cert_crl_file_ex(X509_LOOKUP *ctx, const char *file, int type,
			       OSSL_LIB_CTX *libctx, const char *propq);
STACK_OF(X509) *X509_STORE_get1_all_certs(X509_STORE *st);
typedef struct ossl_provider_st OSSL_PROVIDER;
OSSL_PROVIDER *OSSL_PROVIDER_load(OSSL_LIB_CTX *libctx, const char *name);
OSSL_PROVIDER *OSSL_PROVIDER_try_load(OSSL_LIB_CTX *libctx, const char *name, int retain_fallbacks);
int OSSL_PROVIDER_unload(OSSL_PROVIDER *prov);
int EVP_set_default_properties(OSSL_LIB_CTX *libctx, const char *propq);
int EVP_default_properties_enable_fips(OSSL_LIB_CTX *libctx, int enable);
OSSL_LIB_CTX *OSSL_LIB_CTX_set0_default(OSSL_LIB_CTX *libctx);
typedef struct ossl_param_st OSSL_PARAM;
}
#endif
#if OPENSSL_VERSION_NUMBER < 0x30200000L
extern "C" {
/* 3.2's: every provider load of 3.2 and later ends here, through libcrypto's PLT. */
OSSL_PROVIDER *OSSL_PROVIDER_try_load_ex(OSSL_LIB_CTX *libctx, const char *name, OSSL_PARAM *params,
					 int retain_fallbacks);
}
#endif
