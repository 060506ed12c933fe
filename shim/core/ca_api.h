#pragma once

#include <openssl/bio.h>
#include <openssl/err.h>
#include <openssl/pem.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>

#include "openssl_compat.h"

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

	/* Parsing a file, as the loader does. */
	decltype(&::BIO_new_file) BIO_new_file = nullptr;
	decltype(&::BIO_free) BIO_free = nullptr;
	decltype(&::PEM_X509_INFO_read_bio) PEM_X509_INFO_read_bio = nullptr;
	decltype(&::PEM_X509_INFO_read_bio_ex) PEM_X509_INFO_read_bio_ex = nullptr; /* 3.0+ */
	decltype(&::X509_INFO_free) X509_INFO_free = nullptr;
	decltype(&::ERR_set_mark) ERR_set_mark = nullptr;
	decltype(&::ERR_pop_to_mark) ERR_pop_to_mark = nullptr;
	decltype(&::X509_check_purpose) X509_check_purpose = nullptr;

	/* The stacks behind the sk_* macros, which call these. */
	decltype(&::OPENSSL_sk_num) OPENSSL_sk_num = nullptr;
	decltype(&::OPENSSL_sk_value) OPENSSL_sk_value = nullptr;
	decltype(&::OPENSSL_sk_push) OPENSSL_sk_push = nullptr;
	decltype(&::OPENSSL_sk_sort) OPENSSL_sk_sort = nullptr;
	decltype(&::OPENSSL_sk_free) OPENSSL_sk_free = nullptr;

	/* Filling a store. */
	decltype(&::X509_LOOKUP_get_store) X509_LOOKUP_get_store = nullptr;
	decltype(&::X509_STORE_new) X509_STORE_new = nullptr;
	decltype(&::X509_STORE_free) X509_STORE_free = nullptr;
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

	bool complete() const noexcept
	{
		return X509_load_cert_crl_file && BIO_new_file && BIO_free && PEM_X509_INFO_read_bio &&
		       X509_INFO_free && ERR_set_mark && ERR_pop_to_mark && X509_check_purpose &&
		       OPENSSL_sk_num &&
		       OPENSSL_sk_value && OPENSSL_sk_push && OPENSSL_sk_sort && OPENSSL_sk_free &&
		       X509_LOOKUP_get_store && X509_STORE_new && X509_STORE_free &&
		       X509_STORE_add_cert && X509_STORE_add_crl && X509_STORE_lock &&
		       X509_STORE_unlock && X509_STORE_get0_objects && X509_OBJECT_new &&
		       X509_OBJECT_free && X509_OBJECT_get_type && X509_OBJECT_get0_X509 &&
		       X509_OBJECT_get0_X509_CRL && X509_OBJECT_set1_X509 &&
		       X509_OBJECT_set1_X509_CRL && X509_OBJECT_retrieve_match;
	}
};

} /* namespace tlstune */
