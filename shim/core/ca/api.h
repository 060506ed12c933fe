#pragma once

#include <openssl/bio.h>
#include <openssl/conf.h>
#include <openssl/ec.h>
#include <openssl/err.h>
#include <openssl/pem.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>

#include "core/openssl_compat.h"

namespace tlstune {

/*
 * The libcrypto functions the CA cache calls, found at run time like OpenSslApi (the
 * program may load libcrypto alone, or RTLD_LOCAL). A null entry is one this libcrypto
 * lacks; complete() says whether the cache can work at all.
 */
struct CaApi {
	/* The interposed loaders: what the program's call is passed on to. */
	decltype(&::X509_load_cert_crl_file) X509_load_cert_crl_file = nullptr;
	decltype(&::X509_load_cert_crl_file_ex) X509_load_cert_crl_file_ex = nullptr; /* 3.0+ */

	/* The error queue around what the index parses, and the purpose check's derived fields. */
	decltype(&::ERR_set_mark) ERR_set_mark = nullptr;
	decltype(&::ERR_pop_to_mark) ERR_pop_to_mark = nullptr;
	decltype(&::ERR_peek_last_error) ERR_peek_last_error = nullptr;
	decltype(&::X509_check_purpose) X509_check_purpose = nullptr;
	decltype(&::X509_get0_pubkey) X509_get0_pubkey = nullptr;
	/*
	 * What decides whether a key decodes (3.0+; DecodingState), in forms of their own:
	 * the 1.1.1 leg's headers declare none of them.
	 */
	using ProviderDoAll = int (*)(void *libctx, int (*each)(void *provider, void *arg), void *arg);
	ProviderDoAll OSSL_PROVIDER_do_all = nullptr;
	using ProviderName = const char *(*)(const void *provider);
	ProviderName OSSL_PROVIDER_get0_name = nullptr;
	/* The curves this libcrypto was built with: the default provider decodes keys on them. */
	decltype(&::EC_get_builtin_curves) EC_get_builtin_curves = nullptr;
	using FipsEnabled = int (*)(void *libctx);
	FipsEnabled EVP_default_properties_is_fips_enabled = nullptr;
	using DefaultProperties = char *(*)(void *libctx); /* 3.2+ */
	DefaultProperties EVP_get1_default_properties = nullptr;
	decltype(&::CRYPTO_free) CRYPTO_free = nullptr;
	decltype(&::OpenSSL_version_num) OpenSSL_version_num = nullptr;

	/* The stacks behind the sk_* macros, which call these. */
	decltype(&::OPENSSL_sk_num) OPENSSL_sk_num = nullptr;
	decltype(&::OPENSSL_sk_value) OPENSSL_sk_value = nullptr;
	decltype(&::OPENSSL_sk_push) OPENSSL_sk_push = nullptr;
	decltype(&::OPENSSL_sk_sort) OPENSSL_sk_sort = nullptr;

	/* A store's objects. */
	decltype(&::X509_LOOKUP_get_store) X509_LOOKUP_get_store = nullptr;
	decltype(&::X509_STORE_add_cert) X509_STORE_add_cert = nullptr;
	decltype(&::X509_STORE_add_crl) X509_STORE_add_crl = nullptr;
	decltype(&::X509_STORE_lock) X509_STORE_lock = nullptr;
	decltype(&::X509_STORE_unlock) X509_STORE_unlock = nullptr;
	decltype(&::X509_STORE_get0_objects) X509_STORE_get0_objects = nullptr;
	decltype(&::X509_OBJECT_new) X509_OBJECT_new = nullptr;
	decltype(&::X509_OBJECT_free) X509_OBJECT_free = nullptr;
	decltype(&::X509_OBJECT_get_type) X509_OBJECT_get_type = nullptr;
	decltype(&::X509_OBJECT_get0_X509) X509_OBJECT_get0_X509 = nullptr;
	decltype(&::X509_OBJECT_get0_X509_CRL) X509_OBJECT_get0_X509_CRL = nullptr;
	decltype(&::X509_OBJECT_set1_X509) X509_OBJECT_set1_X509 = nullptr;
	decltype(&::X509_OBJECT_set1_X509_CRL) X509_OBJECT_set1_X509_CRL = nullptr;
	decltype(&::X509_OBJECT_retrieve_match) X509_OBJECT_retrieve_match = nullptr;

	/*
	 * The store is one stack of objects that every lookup sorts (1.1.1 to 3.0, read in
	 * their x509_lu.c): fillStore may then batch its lookups. Later versions changed the
	 * store (3.5 keeps load order; newer ones a table per name), so there the fill adds
	 * each object with X509_STORE_add_cert/_crl, as the loader does.
	 */
	bool storeSortsOnLookup() const noexcept
	{
		const unsigned long version = OpenSSL_version_num() >> 12; /* 0xMNNFF */
		return version == 0x10101 || version == 0x30000;
	}

	/* Lazy loading (TLSTUNE_CA_LAZY): indexing a file, parsing one certificate, the store's state. */
	decltype(&::d2i_X509) d2i_X509 = nullptr;
	/* 3.0: a certificate for a property query, as the loader makes one. */
	using NewX509Ex = X509 *(*)(void *libctx, const char *propq);
	NewX509Ex X509_new_ex = nullptr;
	decltype(&::X509_free) X509_free = nullptr;
	decltype(&::d2i_X509_NAME) d2i_X509_NAME = nullptr;
	decltype(&::X509_NAME_free) X509_NAME_free = nullptr;
	decltype(&::X509_NAME_cmp) X509_NAME_cmp = nullptr;
	/* 1.1.1's headers declare the name without const; only called on 3.0 and later. */
	using NameDer = int (*)(const X509_NAME *name, const unsigned char **der, size_t *length);
	NameDer X509_NAME_get0_der = nullptr;
	decltype(&::ASN1_item_d2i) ASN1_item_d2i = nullptr;
	decltype(&::ASN1_item_free) ASN1_item_free = nullptr;
	/*
	 * 3.0's form, a function returning the item; 1.1.1's headers declare the items as data,
	 * and its libcrypto exports them so: only called where lazy loading runs, on 3.0.
	 */
	using AsnItem = const ASN1_ITEM *(*)(void);
	AsnItem ASN1_INTEGER_it = nullptr;
	AsnItem ASN1_BIT_STRING_it = nullptr;
	AsnItem ASN1_TIME_it = nullptr;
	AsnItem X509_ALGOR_it = nullptr;
	AsnItem X509_NAME_it = nullptr;
	AsnItem X509_EXTENSIONS_it = nullptr;
	decltype(&::X509_get_subject_name) X509_get_subject_name = nullptr;
	decltype(&::X509_get_issuer_name) X509_get_issuer_name = nullptr;
	decltype(&::OPENSSL_sk_delete_ptr) OPENSSL_sk_delete_ptr = nullptr;
	decltype(&::CRYPTO_get_ex_new_index) CRYPTO_get_ex_new_index = nullptr;
	decltype(&::X509_STORE_get_ex_data) X509_STORE_get_ex_data = nullptr;
	decltype(&::X509_STORE_set_ex_data) X509_STORE_set_ex_data = nullptr;
	decltype(&::X509_STORE_CTX_get0_store) X509_STORE_CTX_get0_store = nullptr;
	decltype(&::X509_STORE_get_check_issued) X509_STORE_get_check_issued = nullptr;
	/* The store readers lazy loading runs before: what the program's call is passed on to. */
	decltype(&::X509_STORE_CTX_get1_issuer) X509_STORE_CTX_get1_issuer = nullptr;
	decltype(&::X509_STORE_CTX_get1_certs) X509_STORE_CTX_get1_certs = nullptr;
	decltype(&::X509_STORE_CTX_get1_crls) X509_STORE_CTX_get1_crls = nullptr;
	decltype(&::X509_STORE_CTX_get_by_subject) X509_STORE_CTX_get_by_subject = nullptr;
	decltype(&::X509_STORE_CTX_get_obj_by_subject) X509_STORE_CTX_get_obj_by_subject = nullptr;
	decltype(&::X509_STORE_get1_all_certs) X509_STORE_get1_all_certs = nullptr;
	/* 3.3+, which the headers of the 3.0 and 1.1.1 builds do not declare. */
	using Get1Objects = STACK_OF(X509_OBJECT) *(*)(X509_STORE *store);
	Get1Objects X509_STORE_get1_objects = nullptr;

	/* Lazy loading on 3.5, which follows the store's stack as it is (store_model.h). */
	decltype(&::OPENSSL_sk_insert) OPENSSL_sk_insert = nullptr;
	decltype(&::OPENSSL_sk_pop) OPENSSL_sk_pop = nullptr;
	decltype(&::OPENSSL_sk_is_sorted) OPENSSL_sk_is_sorted = nullptr;
	decltype(&::X509_CRL_get_issuer) X509_CRL_get_issuer = nullptr;

	/*
	 * Lazy loading follows how 3.0's and 3.5's x509_lu.c, x509_vfy.c and by_dir.c read a
	 * store (read, and tested by the differential suite on both); on any other version
	 * files load eagerly.
	 */
	bool lazyKnown() const noexcept
	{
		return OpenSSL_version_num() >> 20 == 0x300 || storeKeepsAddOrder();
	}

	/*
	 * 3.5's store: X509_STORE_add_cert appends without sorting, and its duplicate check
	 * searches an unsorted stack in order; only lookups by subject (and
	 * X509_STORE_get1_all_certs) sort it. Lazy loading there models the whole stack.
	 */
	bool storeKeepsAddOrder() const noexcept { return OpenSSL_version_num() >> 20 == 0x305; }

	bool hasOrderedLazy() const noexcept
	{
		return OPENSSL_sk_insert && OPENSSL_sk_pop && OPENSSL_sk_is_sorted && X509_CRL_get_issuer;
	}

	bool hasLazy() const noexcept
	{
		return d2i_X509 && X509_new_ex && X509_free && X509_get0_pubkey && OSSL_PROVIDER_do_all &&
		       d2i_X509_NAME && X509_NAME_free && X509_NAME_cmp && X509_NAME_get0_der && ASN1_item_d2i &&
		       ASN1_item_free && ASN1_INTEGER_it && ASN1_BIT_STRING_it && ASN1_TIME_it &&
		       X509_ALGOR_it && X509_NAME_it && X509_EXTENSIONS_it && X509_get_subject_name &&
		       X509_get_issuer_name && OPENSSL_sk_delete_ptr && CRYPTO_get_ex_new_index &&
		       X509_STORE_get_ex_data && X509_STORE_set_ex_data && X509_STORE_CTX_get0_store && X509_STORE_get_check_issued &&
		       X509_STORE_CTX_get1_issuer && X509_STORE_CTX_get1_certs &&
		       X509_STORE_CTX_get1_crls && X509_STORE_CTX_get_by_subject &&
		       X509_STORE_CTX_get_obj_by_subject && X509_STORE_get1_all_certs;
	}

	bool complete() const noexcept
	{
		return X509_load_cert_crl_file && ERR_set_mark && ERR_pop_to_mark && ERR_peek_last_error &&
		       X509_check_purpose && OpenSSL_version_num && OPENSSL_sk_num && OPENSSL_sk_value &&
		       OPENSSL_sk_push && OPENSSL_sk_sort && X509_LOOKUP_get_store && X509_STORE_add_cert &&
		       X509_STORE_add_crl && X509_STORE_lock && X509_STORE_unlock &&
		       X509_STORE_get0_objects && X509_OBJECT_new && X509_OBJECT_free &&
		       X509_OBJECT_get_type && X509_OBJECT_get0_X509 && X509_OBJECT_get0_X509_CRL &&
		       X509_OBJECT_set1_X509 && X509_OBJECT_set1_X509_CRL && X509_OBJECT_retrieve_match;
	}
};

/*
 * The calls that change which providers, properties or library context decode a key
 * (interpose/decoding.cpp): what the program's call is passed on to. Resolved apart from
 * CaApi, whose first use sets the CA cache up: a program changing providers before it
 * loads any CA file must not make the cache take its ex_data slot.
 */
struct DecodingChangeApi {
	decltype(&::OSSL_PROVIDER_load) OSSL_PROVIDER_load = nullptr;
	decltype(&::OSSL_PROVIDER_try_load) OSSL_PROVIDER_try_load = nullptr;
	/* 3.2+: OSSL_PROVIDER_load, _load_ex and _try_load end here, through libcrypto's PLT. */
	decltype(&::OSSL_PROVIDER_try_load_ex) OSSL_PROVIDER_try_load_ex = nullptr;
	decltype(&::OSSL_PROVIDER_unload) OSSL_PROVIDER_unload = nullptr;
	decltype(&::EVP_set_default_properties) EVP_set_default_properties = nullptr;
	decltype(&::EVP_default_properties_enable_fips) EVP_default_properties_enable_fips = nullptr;
	decltype(&::OSSL_LIB_CTX_set0_default) OSSL_LIB_CTX_set0_default = nullptr;
	/* Every configuration load (OSSL_LIB_CTX_load_config, OPENSSL_init's) comes here, through libcrypto's PLT. */
	decltype(&::CONF_modules_load) CONF_modules_load = nullptr;
};

} /* namespace tlstune */
