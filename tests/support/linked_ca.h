#pragma once
/*
 * For the CA tests and the CA fuzz target: the shim's CA calls bound to the libcrypto the
 * test links, and X509_NAME_hash's value for a canonical encoding (core/ca/name.h).
 */

#include <string>

#include <openssl/err.h>
#include <openssl/sha.h>
#include <openssl/x509.h>
#if OPENSSL_VERSION_NUMBER >= 0x30000000L
#include <openssl/evp.h>
#include <openssl/provider.h>
#endif

#include "core/ca/api.h"

namespace testsupport {

/* The cache's libcrypto calls, bound to the libcrypto this test links. */
inline tlstune::CaApi linkedApi()
{
	tlstune::CaApi api;
	api.X509_load_cert_crl_file = ::X509_load_cert_crl_file;
	api.ERR_set_mark = ::ERR_set_mark;
	api.ERR_pop_to_mark = ::ERR_pop_to_mark;
	api.ERR_peek_last_error = ::ERR_peek_last_error;
	api.X509_check_purpose = ::X509_check_purpose;
	api.X509_get0_pubkey = ::X509_get0_pubkey;
	api.CRYPTO_free = ::CRYPTO_free;
#if OPENSSL_VERSION_NUMBER >= 0x30000000L
	api.OSSL_PROVIDER_do_all = reinterpret_cast<tlstune::CaApi::ProviderDoAll>(::OSSL_PROVIDER_do_all);
	api.OSSL_PROVIDER_get0_name = reinterpret_cast<tlstune::CaApi::ProviderName>(::OSSL_PROVIDER_get0_name);
	api.EVP_default_properties_is_fips_enabled =
		reinterpret_cast<tlstune::CaApi::FipsEnabled>(::EVP_default_properties_is_fips_enabled);
#endif
	api.EC_get_builtin_curves = ::EC_get_builtin_curves;
	api.OpenSSL_version_num = ::OpenSSL_version_num;
	api.OPENSSL_sk_num = ::OPENSSL_sk_num;
	api.OPENSSL_sk_value = ::OPENSSL_sk_value;
	api.OPENSSL_sk_push = ::OPENSSL_sk_push;
	api.OPENSSL_sk_sort = ::OPENSSL_sk_sort;
	api.X509_LOOKUP_get_store = ::X509_LOOKUP_get_store;
	api.X509_STORE_add_cert = ::X509_STORE_add_cert;
	api.X509_STORE_add_crl = ::X509_STORE_add_crl;
	api.X509_STORE_lock = ::X509_STORE_lock;
	api.X509_STORE_unlock = ::X509_STORE_unlock;
	api.X509_STORE_get0_objects = ::X509_STORE_get0_objects;
	api.X509_OBJECT_new = ::X509_OBJECT_new;
	api.X509_OBJECT_free = ::X509_OBJECT_free;
	api.X509_OBJECT_get_type = ::X509_OBJECT_get_type;
	api.X509_OBJECT_get0_X509 = ::X509_OBJECT_get0_X509;
	api.X509_OBJECT_get0_X509_CRL = ::X509_OBJECT_get0_X509_CRL;
	api.X509_OBJECT_set1_X509 = ::X509_OBJECT_set1_X509;
	api.X509_OBJECT_set1_X509_CRL = ::X509_OBJECT_set1_X509_CRL;
	api.X509_OBJECT_retrieve_match = ::X509_OBJECT_retrieve_match;
	api.d2i_X509 = ::d2i_X509;
#if OPENSSL_VERSION_NUMBER >= 0x30000000L
	api.X509_new_ex = reinterpret_cast<tlstune::CaApi::NewX509Ex>(::X509_new_ex);
#endif
	api.X509_free = ::X509_free;
	api.d2i_X509_NAME = ::d2i_X509_NAME;
	api.X509_NAME_free = ::X509_NAME_free;
	api.X509_NAME_cmp = ::X509_NAME_cmp;
	api.X509_NAME_get0_der = reinterpret_cast<tlstune::CaApi::NameDer>(::X509_NAME_get0_der);
	api.ASN1_item_d2i = ::ASN1_item_d2i;
	api.ASN1_item_free = ::ASN1_item_free;
#if OPENSSL_VERSION_NUMBER >= 0x30000000L
	/* 1.1.1 has these as data, not functions: its CaIndex tests skip (lazy loading is 3.0's). */
	api.ASN1_INTEGER_it = ::ASN1_INTEGER_it;
	api.ASN1_BIT_STRING_it = ::ASN1_BIT_STRING_it;
	api.ASN1_TIME_it = ::ASN1_TIME_it;
	api.X509_ALGOR_it = ::X509_ALGOR_it;
	api.X509_NAME_it = ::X509_NAME_it;
	api.X509_EXTENSIONS_it = ::X509_EXTENSIONS_it;
	api.X509_STORE_get1_all_certs = ::X509_STORE_get1_all_certs;
#endif
	api.X509_get_subject_name = ::X509_get_subject_name;
	api.X509_get_issuer_name = ::X509_get_issuer_name;
	api.OPENSSL_sk_delete_ptr = ::OPENSSL_sk_delete_ptr;
	api.CRYPTO_get_ex_new_index = ::CRYPTO_get_ex_new_index;
	api.X509_STORE_get_ex_data = ::X509_STORE_get_ex_data;
	api.X509_STORE_set_ex_data = ::X509_STORE_set_ex_data;
	api.X509_STORE_CTX_get0_store = ::X509_STORE_CTX_get0_store;
	api.X509_STORE_get_check_issued = ::X509_STORE_get_check_issued;
	api.X509_STORE_CTX_get1_issuer = ::X509_STORE_CTX_get1_issuer;
	api.X509_STORE_CTX_get1_certs = ::X509_STORE_CTX_get1_certs;
	api.X509_STORE_CTX_get1_crls = ::X509_STORE_CTX_get1_crls;
	api.X509_STORE_CTX_get_by_subject = ::X509_STORE_CTX_get_by_subject;
	api.X509_STORE_CTX_get_obj_by_subject = ::X509_STORE_CTX_get_obj_by_subject;
	api.OPENSSL_sk_insert = ::OPENSSL_sk_insert;
	api.OPENSSL_sk_pop = ::OPENSSL_sk_pop;
	api.OPENSSL_sk_is_sorted = ::OPENSSL_sk_is_sorted;
	api.X509_CRL_get_issuer = ::X509_CRL_get_issuer;
	return api;
}

/* X509_NAME_hash of a name whose canonical encoding is canon: its SHA-1's first four bytes, little-endian. */
inline unsigned long canonicalHash(const std::string &canon)
{
	unsigned char md[SHA_DIGEST_LENGTH];
	SHA1(reinterpret_cast<const unsigned char *>(canon.data()), canon.size(), md);
	return (static_cast<unsigned long>(md[0]) | static_cast<unsigned long>(md[1]) << 8 |
		static_cast<unsigned long>(md[2]) << 16 | static_cast<unsigned long>(md[3]) << 24) &
	       0xffffffffUL;
}

} /* namespace testsupport */
