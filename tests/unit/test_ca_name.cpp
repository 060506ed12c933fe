/*
 * The CA index compares subjects by the canonical encoding it makes itself (core/ca/name.h).
 * OpenSSL's X509_NAME_hash is the SHA-1 of its own canonical encoding and X509_NAME_cmp
 * orders by it, so both check the index's encoding byte for byte.
 */
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include <openssl/pem.h>
#include <openssl/sha.h>
#include <openssl/x509.h>

#include "core/ca/name.h"
#include "linked_ca.h"
#include "process.h"

using namespace tlstune;
using testsupport::canonicalHash;

namespace {

std::string derOf(X509_NAME *name)
{
	unsigned char *der = nullptr;
	const int n = i2d_X509_NAME(name, &der);
	std::string bytes(reinterpret_cast<char *>(der), static_cast<std::size_t>(n > 0 ? n : 0));
	OPENSSL_free(der);
	return bytes;
}

bool canonical(const std::string &der, std::string *canon)
{
	return canonicalName(reinterpret_cast<const unsigned char *>(der.data()), der.size(), canon);
}


/* A name of one attribute per RDN, each value given its own string type. */
X509_NAME *nameOf(std::initializer_list<std::pair<int, std::pair<int, std::string>>> rdns)
{
	X509_NAME *name = X509_NAME_new();
	for (const auto &rdn : rdns) {
		const std::string &value = rdn.second.second;
		X509_NAME_add_entry_by_NID(name, rdn.first, rdn.second.first,
					   reinterpret_cast<const unsigned char *>(value.data()),
					   static_cast<int>(value.size()), -1, 0);
	}
	return name;
}

/* The decoded name, as a certificate's subject is: its canonical encoding made by OpenSSL. */
X509_NAME *decoded(const std::string &der)
{
	const unsigned char *p = reinterpret_cast<const unsigned char *>(der.data());
	return d2i_X509_NAME(nullptr, &p, static_cast<long>(der.size()));
}

std::vector<std::string> bundleSubjects()
{
	std::vector<std::string> ders;
	const std::string bundle = testsupport::readFile("/etc/ssl/certs/ca-certificates.crt");
	BIO *in = BIO_new_mem_buf(bundle.data(), static_cast<int>(bundle.size()));
	while (X509 *x = PEM_read_bio_X509(in, nullptr, nullptr, nullptr)) {
		ders.push_back(derOf(X509_get_subject_name(x)));
		ders.push_back(derOf(X509_get_issuer_name(x)));
		X509_free(x);
	}
	BIO_free(in);
	return ders;
}

} /* namespace */

TEST(CanonicalName, IsOpenSSLsEncodingForEverySubjectOfTheSystemBundle)
{
	const std::vector<std::string> ders = bundleSubjects();
	ASSERT_GT(ders.size(), 100u);
	for (const std::string &der : ders) {
		std::string canon;
		ASSERT_TRUE(canonical(der, &canon)) << "Debian's bundle indexes whole";
		X509_NAME *name = decoded(der);
		ASSERT_NE(name, nullptr);
		EXPECT_EQ(canonicalHash(canon), X509_NAME_hash(name));
		X509_NAME_free(name);
	}
}

TEST(CanonicalName, FoldsAsOpenSSLDoes)
{
	const int utf8 = V_ASN1_UTF8STRING, printable = V_ASN1_PRINTABLESTRING, t61 = V_ASN1_T61STRING,
		  ia5 = V_ASN1_IA5STRING, numeric = V_ASN1_NUMERICSTRING;
	X509_NAME *names[] = {
		nameOf({ { NID_commonName, { utf8, "Root CA" } } }),
		nameOf({ { NID_commonName, { printable, "  ROOT   ca " } } }),
		nameOf({ { NID_commonName, { utf8, "\troot\n\v\f\rca\t" } } }),
		nameOf({ { NID_commonName, { t61, "caf\xe9" } } }),
		nameOf({ { NID_commonName, { utf8, "CAF\xc3\xa9" } } }),
		nameOf({ { NID_commonName, { utf8, "\xc3\x89t\xc3\xa9 \xf0\x9f\x94\x92" } } }),
		nameOf({ { NID_commonName, { ia5, "x@Example.ORG" } } }),
		nameOf({ { NID_serialNumber, { numeric, "12 34" } } }),
		nameOf({ { NID_countryName, { printable, "DE" } }, { NID_organizationName, { utf8, "A  B" } },
			 { NID_commonName, { printable, "" } } }),
		nameOf({ { NID_countryName, { printable, "de" } }, { NID_organizationName, { t61, "a b" } },
			 { NID_commonName, { utf8, "   " } } }),
		X509_NAME_new(),
	};
	std::vector<std::pair<std::string, X509_NAME *>> canons;
	for (X509_NAME *built : names) {
		X509_NAME *name = decoded(derOf(built));
		ASSERT_NE(name, nullptr);
		std::string canon;
		ASSERT_TRUE(canonical(derOf(name), &canon));
		EXPECT_EQ(canonicalHash(canon), X509_NAME_hash(name)) << derOf(name).size();
		canons.emplace_back(canon, name);
	}
	/* X509_NAME_cmp's order is the encodings' by length, then bytes (1.1.1 returns the difference: its sign). */
	for (const auto &a : canons) {
		for (const auto &b : canons) {
			const int order = a.first.size() != b.first.size()
				? (a.first.size() < b.first.size() ? -1 : 1)
				: (a.first < b.first ? -1 : a.first > b.first);
			const int cmp = X509_NAME_cmp(a.second, b.second);
			EXPECT_EQ(order, (cmp > 0) - (cmp < 0));
		}
	}
	EXPECT_EQ(X509_NAME_cmp(canons[0].second, canons[1].second), 0) << "the folding is tested";
	EXPECT_EQ(X509_NAME_cmp(canons[3].second, canons[4].second), 0) << "T61's bytes are code points";
	for (auto &entry : canons)
		X509_NAME_free(entry.second);
	for (X509_NAME *built : names)
		X509_NAME_free(built);
}

TEST(CanonicalName, RefusesWhatItDoesNotFollow)
{
	X509_NAME *bmp = nameOf({ { NID_commonName, { V_ASN1_BMPSTRING, std::string("\0a", 2) } } });
	X509_NAME *multi = nameOf({ { NID_commonName, { V_ASN1_UTF8STRING, "a" } } });
	X509_NAME_add_entry_by_NID(multi, NID_organizationName, V_ASN1_UTF8STRING,
				   reinterpret_cast<const unsigned char *>("b"), 1, -1, -1);
	const std::string refused[] = {
		derOf(bmp),
		derOf(multi),
		/* UTF-8 that is not: a lone continuation byte, an overlong '/', a surrogate. */
		std::string("\x30\x0c\x31\x0a\x30\x08\x06\x03\x55\x04\x03\x0c\x01\x80", 14),
		std::string("\x30\x0d\x31\x0b\x30\x09\x06\x03\x55\x04\x03\x0c\x02\xc0\xaf", 15),
		std::string("\x30\x0e\x31\x0c\x30\x0a\x06\x03\x55\x04\x03\x0c\x03\xed\xa0\x80", 16),
		/* An object identifier with a padded subidentifier, and an empty RDN. */
		std::string("\x30\x0c\x31\x0a\x30\x08\x06\x03\x80\x04\x03\x0c\x01\x61", 14),
		std::string("\x30\x02\x31\x00", 4),
		std::string("\x30\x0c\x31\x0a\x30\x08\x06\x03\x55\x04\x03\x0c\x01", 13),
	};
	for (const std::string &der : refused) {
		std::string canon;
		EXPECT_FALSE(canonical(der, &canon)) << der.size();
	}
#if OPENSSL_VERSION_NUMBER >= 0x30000000L
	/* What it refuses for bad bytes, OpenSSL refuses too (the index runs on 3.0 and later). */
	for (std::size_t i = 2; i < 6; i++) {
		X509_NAME *name = decoded(refused[i]);
		EXPECT_EQ(name, nullptr) << i;
		X509_NAME_free(name);
	}
#endif
	X509_NAME_free(bmp);
	X509_NAME_free(multi);
}
