#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <random>
#include <sstream>
#include <thread>

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
#include <vector>

#include <openssl/err.h>
#include <openssl/pem.h>
#if OPENSSL_VERSION_NUMBER >= 0x30000000L
#include <openssl/provider.h>
#endif
#include <openssl/sha.h>
#include <openssl/x509.h>

#include "core/ca/cache.h"
#include "core/ca/index.h"
#include "core/ca/lazy.h"
#include "core/ca/parsed_ahead.h"
#include "linked_ca.h"
#include "pki.h"
#include "process.h"

using namespace tlstune;
using testsupport::linkedApi;
using namespace std::chrono;

namespace {

steady_clock::time_point g_now;
steady_clock::time_point fakeClock() { return g_now; }

/* The cache tests need an index, not a parse: an empty one stands for any. */
CaApi g_noApi;
Stats g_noStats;

class Cache : public ::testing::Test {
protected:
	void SetUp() override { g_now = steady_clock::time_point(hours(1000)); }

	CaLookup find(const std::string &content = "certificates")
	{
		return cache_.find(content, "", [this](const std::string &) {
			indexes_++;
			return std::make_shared<const CaIndex>(g_noApi, g_noStats);
		}).lookup;
	}

	CaCache cache_{ hours(24), CaCache::kCapacity, fakeClock };
	int indexes_ = 0;
};

} /* namespace */

TEST_F(Cache, IndexesOnceWhileTheBytesStayTheSame)
{
	EXPECT_EQ(find(), CaLookup::Miss);
	EXPECT_EQ(find(), CaLookup::Hit);
	EXPECT_EQ(find(), CaLookup::Hit);
	EXPECT_EQ(indexes_, 1);
	auto index = [](const std::string &) { return std::make_shared<const CaIndex>(g_noApi, g_noStats); };
	EXPECT_EQ(cache_.find("certificates", "provider!=fips", index).lookup, CaLookup::Miss)
		<< "a property query is a key of its own";
	EXPECT_EQ(cache_.find("certificates", "provider!=fips", index).lookup, CaLookup::Hit);
}

TEST_F(Cache, AnyChangedByteIndexesAgain)
{
	RecordProperty("fault", "a same-size rewrite that moves no timestamp (mmap MAP_SHARED, tmpfs)");
	EXPECT_EQ(find("certificates"), CaLookup::Miss);
	EXPECT_EQ(find("certificateS"), CaLookup::Miss) << "same size, one byte changed";
	EXPECT_EQ(find("certificates"), CaLookup::Hit);
	EXPECT_EQ(find("certificateS"), CaLookup::Hit);
	EXPECT_EQ(indexes_, 2);
}

TEST_F(Cache, EntriesOutliveTheTtlByNotOneSecond)
{
	EXPECT_EQ(find(), CaLookup::Miss);
	g_now += hours(24) - seconds(1);
	EXPECT_EQ(find(), CaLookup::Hit);
	g_now += seconds(1);
	EXPECT_EQ(find(), CaLookup::Reload);
	EXPECT_EQ(indexes_, 2);
}

TEST_F(Cache, TtlZeroIndexesEveryTime)
{
	CaCache always(seconds(0), CaCache::kCapacity, fakeClock);
	int indexes = 0;
	auto index = [&](const std::string &) {
		indexes++;
		return std::make_shared<const CaIndex>(g_noApi, g_noStats);
	};
	EXPECT_EQ(always.find("certificates", "", index).lookup, CaLookup::Miss);
	EXPECT_EQ(always.find("certificates", "", index).lookup, CaLookup::Reload);
	EXPECT_EQ(indexes, 2);
}

TEST_F(Cache, WhatCannotBeIndexedIsRememberedAndNeverServed)
{
	int attempts = 0;
	auto refuse = [&](const std::string &) {
		attempts++;
		return std::shared_ptr<const CaIndex>();
	};
	const CaCache::Found failed = cache_.find("a key", "", refuse);
	EXPECT_EQ(failed.lookup, CaLookup::Uncached);
	EXPECT_EQ(failed.index, nullptr);
	EXPECT_EQ(cache_.find("a key", "", refuse).lookup, CaLookup::Uncached);
	EXPECT_EQ(attempts, 1) << "the same bytes are not scanned again";
}

TEST_F(Cache, HoldsAtMostItsCapacityLeastRecentlyLoadedFirstOut)
{
	RecordProperty("fault", "a context per fresh temporary copy of a bundle: entries kept for ever");
	for (int i = 0; i < 100; i++)
		EXPECT_EQ(find("file " + std::to_string(i)), CaLookup::Miss);
	EXPECT_EQ(cache_.size(), CaCache::kCapacity);
	EXPECT_EQ(find("file 99"), CaLookup::Hit);
	EXPECT_EQ(find("file 0"), CaLookup::Miss) << "dropped long ago";
	/* file 92 is now the least recently loaded: file 99 was loaded again. */
	EXPECT_EQ(find("file 100"), CaLookup::Miss);
	EXPECT_EQ(find("file 99"), CaLookup::Hit);
	EXPECT_EQ(find("file 92"), CaLookup::Miss);
	EXPECT_EQ(cache_.size(), CaCache::kCapacity);
}

TEST_F(Cache, ThreadsAskingAtOnceShareOneIndex)
{
	std::atomic<int> indexes{0};
	std::vector<const CaIndex *> seen(8);
	std::vector<std::thread> threads;
	for (size_t t = 0; t < seen.size(); t++) {
		threads.emplace_back([&, t] {
			seen[t] = cache_.find("certificates", "", [&](const std::string &) {
				indexes++;
				return std::make_shared<const CaIndex>(g_noApi, g_noStats);
			}).index.get();
		});
	}
	for (std::thread &thread : threads)
		thread.join();
	EXPECT_EQ(indexes.load(), 1);
	for (const CaIndex *index : seen)
		EXPECT_EQ(index, seen[0]);
}

/*
 * A file is compared with the entry of its size as it is read: the same bytes are a hit,
 * any other (one byte, one more, one fewer than fstat said) are indexed as themselves.
 */
TEST_F(Cache, AnOpenFileIsComparedAsItIsRead)
{
	testsupport::TempDir dir;
	std::string indexed;
	auto findFile = [&](const std::string &bytes, std::size_t claimed = std::string::npos) {
		testsupport::writeFile(dir.file("ca.pem"), bytes);
		std::size_t size = 0;
		const int fd = openCaFile(dir.file("ca.pem").c_str(), &size);
		EXPECT_GE(fd, 0);
		const CaLookup lookup = cache_.find(fd, claimed == std::string::npos ? size : claimed, "",
			[&](const std::string &content) {
				indexed = content;
				return std::make_shared<const CaIndex>(g_noApi, g_noStats);
			}).lookup;
		close(fd);
		return lookup;
	};
	std::string bundle(100 * 1024 + 7, 'a');
	for (std::size_t i = 0; i < bundle.size(); i++)
		bundle[i] = static_cast<char>('a' + i * 7 % 26);
	EXPECT_EQ(findFile(bundle), CaLookup::Miss);
	EXPECT_EQ(indexed, bundle);
	indexed.clear();
	EXPECT_EQ(findFile(bundle), CaLookup::Hit);
	EXPECT_EQ(indexed, "") << "a hit indexes nothing";
	std::string changed = bundle;
	changed[80 * 1024] ^= 1;
	EXPECT_EQ(findFile(changed), CaLookup::Miss) << "one byte, past the first pieces";
	EXPECT_EQ(indexed, changed);
	/* A file that grew or shrank since its fstat, read against the entry of that size. */
	EXPECT_EQ(findFile(bundle + "z", bundle.size()), CaLookup::Miss);
	EXPECT_EQ(indexed, bundle + "z");
	EXPECT_EQ(findFile(bundle.substr(1), bundle.size()), CaLookup::Miss);
	EXPECT_EQ(indexed, bundle.substr(1));
	EXPECT_EQ(findFile(bundle), CaLookup::Hit);
	EXPECT_EQ(cache_.size(), 4u);
}

namespace {

/* What loadCaFile makes of path: its bytes, or false where OpenSSL loads the file itself. */
bool readCaFile(const char *path, std::string *content)
{
	std::size_t size = 0;
	const int fd = openCaFile(path, &size);
	if (fd < 0)
		return false;
	CaCache cache(hours(24));
	const CaLookup lookup = cache.find(fd, size, "", [&](const std::string &bytes) {
		*content = bytes;
		return std::make_shared<const CaIndex>(g_noApi, g_noStats);
	}).lookup;
	close(fd);
	return lookup != CaLookup::Unread;
}

} /* namespace */

TEST(ReadCaFile, ReadsOnlyReadableRegularFilesAndOpensNothingElse)
{
	RecordProperty("fault", "a FIFO as the CA file: a probe open releases its writer");
	testsupport::TempDir dir;
	std::string content;
	EXPECT_FALSE(readCaFile(dir.file("missing").c_str(), &content));
	EXPECT_FALSE(readCaFile(dir.path().c_str(), &content));
	ASSERT_EQ(mkfifo(dir.file("fifo").c_str(), 0600), 0);
	/*
	 * A writer waiting to open the FIFO: an open by the reader would release it. Opened
	 * non-blocking, it fails with ENXIO while no reader has the FIFO open.
	 */
	EXPECT_FALSE(readCaFile(dir.file("fifo").c_str(), &content));
	errno = 0;
	EXPECT_EQ(open(dir.file("fifo").c_str(), O_WRONLY | O_NONBLOCK), -1);
	EXPECT_EQ(errno, ENXIO) << "nobody opened the FIFO for reading";
	testsupport::writeFile(dir.file("empty.pem"), "");
	EXPECT_FALSE(readCaFile(dir.file("empty.pem").c_str(), &content));
	std::string big(300 * 1024, 'x');
	testsupport::writeFile(dir.file("ca.pem"), big);
	EXPECT_TRUE(readCaFile(dir.file("ca.pem").c_str(), &content));
	EXPECT_EQ(content, big);
}

namespace {

/* Lazy loading, and so the index, is for OpenSSL 3.0 only. */
#define SKIP_BEFORE_OPENSSL_3()                                                    \
	do {                                                                       \
		if (OPENSSL_VERSION_NUMBER < 0x30000000L)                          \
			GTEST_SKIP() << "the CA index is for OpenSSL 3.0 (lazy loading)"; \
	} while (0)

/* x is named cn by itself, valid for a day from now, with key's public half: its name, to free. */
X509_NAME *nameItSelfSigned(X509 *x, const char *cn, EVP_PKEY *key)
{
	X509_NAME *name = X509_NAME_new();
	X509_NAME_add_entry_by_txt(name, "CN", MBSTRING_ASC, reinterpret_cast<const unsigned char *>(cn),
				   -1, -1, 0);
	X509_set_subject_name(x, name);
	X509_set_issuer_name(x, name);
	X509_gmtime_adj(X509_getm_notBefore(x), 0);
	X509_gmtime_adj(X509_getm_notAfter(x), 86400);
	X509_set_pubkey(x, key);
	return name;
}

/* What write puts into a memory BIO, as a string (PEM). */
template <typename Write>
std::string pemOf(Write write)
{
	BIO *out = BIO_new(BIO_s_mem());
	write(out);
	char *data = nullptr;
	const long n = BIO_get_mem_data(out, &data);
	std::string pem(data, static_cast<size_t>(n));
	BIO_free(out);
	return pem;
}

X509 *readCertificate(const std::string &path)
{
	BIO *in = BIO_new_file(path.c_str(), "r");
	X509 *certificate = PEM_read_bio_X509(in, nullptr, nullptr, nullptr);
	BIO_free(in);
	return certificate;
}

/* A CRL issued by ca1, in PEM. */
std::string crlOfCa1()
{
	const testsupport::Pki &pki = testsupport::pki();
	BIO *in = BIO_new_file((pki.dir + "/ca1.key").c_str(), "r");
	EVP_PKEY *key = PEM_read_bio_PrivateKey(in, nullptr, nullptr, nullptr);
	BIO_free(in);
	X509 *ca = readCertificate(pki.ca1);
	X509_CRL *crl = X509_CRL_new();
	X509_CRL_set_version(crl, 1);
	X509_CRL_set_issuer_name(crl, X509_get_subject_name(ca));
	ASN1_TIME *now = ASN1_TIME_set(nullptr, time(nullptr));
	ASN1_TIME *later = ASN1_TIME_set(nullptr, time(nullptr) + 86400);
	X509_CRL_set1_lastUpdate(crl, now);
	X509_CRL_set1_nextUpdate(crl, later);
	X509_CRL_sign(crl, key, EVP_sha256());
	const std::string pem = pemOf([&](BIO *out) { PEM_write_bio_X509_CRL(out, crl); });
	ASN1_TIME_free(now);
	ASN1_TIME_free(later);
	X509_CRL_free(crl);
	X509_free(ca);
	EVP_PKEY_free(key);
	return pem;
}

/* An error of the program's own on the queue, as ERR_raise (3.0) puts it. */
void pushUserError(int reason)
{
#if OPENSSL_VERSION_NUMBER >= 0x30000000L
	ERR_raise(ERR_LIB_USER, reason);
#else
	ERR_PUT_error(ERR_LIB_USER, 0, reason, __FILE__, __LINE__);
#endif
}

/* A self-signed certificate named cn whose basicConstraints extension does not decode. */
std::string invalidExtensionCertificate(const char *cn)
{
#if OPENSSL_VERSION_NUMBER >= 0x30000000L
	EVP_PKEY *key = EVP_EC_gen("P-256");
#else
	EVP_PKEY *key = EVP_PKEY_new();
	EC_KEY *ec = EC_KEY_new_by_curve_name(NID_X9_62_prime256v1);
	EC_KEY_generate_key(ec);
	EVP_PKEY_assign_EC_KEY(key, ec);
#endif
	X509 *x = X509_new();
	X509_NAME *name = nameItSelfSigned(x, cn, key);
	ASN1_OCTET_STRING *garbage = ASN1_OCTET_STRING_new();
	ASN1_OCTET_STRING_set(garbage, reinterpret_cast<const unsigned char *>("\x01\x02"), 2);
	X509_EXTENSION *extension = X509_EXTENSION_create_by_NID(nullptr, NID_basic_constraints, 0, garbage);
	X509_add_ext(x, extension, -1);
	X509_sign(x, key, EVP_sha256());
	const std::string pem = pemOf([&](BIO *out) { PEM_write_bio_X509(out, x); });
	X509_EXTENSION_free(extension);
	ASN1_OCTET_STRING_free(garbage);
	X509_NAME_free(name);
	X509_free(x);
	EVP_PKEY_free(key);
	return pem;
}

/* Objects of a store in order: type and DER, what enumerating it shows. */
std::vector<std::string> contents(X509_STORE *store)
{
	std::vector<std::string> out;
	STACK_OF(X509_OBJECT) *objects = X509_STORE_get0_objects(store);
	for (int i = 0; i < sk_X509_OBJECT_num(objects); i++) {
		X509_OBJECT *object = sk_X509_OBJECT_value(objects, i);
		unsigned char *der = nullptr;
		const bool isCertificate = X509_OBJECT_get_type(object) == X509_LU_X509;
		const int n = isCertificate ? i2d_X509(X509_OBJECT_get0_X509(object), &der)
					    : i2d_X509_CRL(X509_OBJECT_get0_X509_CRL(object), &der);
		char subject[256] = "";
		X509_NAME_oneline(isCertificate ? X509_get_subject_name(X509_OBJECT_get0_X509(object))
					       : X509_CRL_get_issuer(X509_OBJECT_get0_X509_CRL(object)),
				  subject, sizeof(subject));
		unsigned char digest[SHA256_DIGEST_LENGTH];
		SHA256(der, static_cast<size_t>(n), digest);
		char prefix[9];
		std::snprintf(prefix, sizeof(prefix), "%02x%02x%02x%02x", digest[0], digest[1], digest[2],
			      digest[3]);
		out.push_back(std::string(isCertificate ? "cert " : "crl ") + prefix + " " + subject);
		OPENSSL_free(der);
	}
	return out;
}

} /* namespace */

TEST(CaIndex, IndexesTheSystemBundleAndParsesOnDemand)
{
	SKIP_BEFORE_OPENSSL_3();
	const CaApi api = linkedApi();
	Stats stats;
	const std::string bundle = testsupport::readFile("/etc/ssl/certs/ca-certificates.crt");
	const std::shared_ptr<CaIndex> index = indexFile(api, stats, bundle);
	ASSERT_NE(index, nullptr);
	/* As many as the file's PEM blocks: 144 in Debian 12's bundle, 148 in Debian 13's. */
	int blocks = 0;
	for (std::string::size_type at = 0; (at = bundle.find("-----BEGIN CERTIFICATE-----", at)) != std::string::npos; at++)
		blocks++;
	EXPECT_EQ(index->count(), blocks);
	EXPECT_EQ(stats.caCertsParsed.load(), 0u) << "indexing counts no parse";
	/* Every certificate is found by its subject, and parses to the file's certificate. */
	BIO *in = BIO_new_mem_buf(bundle.data(), static_cast<int>(bundle.size()));
	for (int position = 0; position < index->count(); position++) {
		X509 *expected = PEM_read_bio_X509(in, nullptr, nullptr, nullptr);
		ASSERT_NE(expected, nullptr);
		const std::vector<int> found = index->withSubject(X509_get_subject_name(expected));
		EXPECT_NE(std::find(found.begin(), found.end(), position), found.end()) << position;
		X509 *parsed = index->certificate(position);
		EXPECT_EQ(X509_cmp(parsed, expected), 0) << position;
		X509 *again = index->certificate(position);
		EXPECT_NE(again, parsed) << "every caller gets an object of its own";
		EXPECT_EQ(X509_cmp(again, expected), 0) << position;
		X509_free(again);
		X509_free(parsed);
		X509_free(expected);
	}
	BIO_free(in);
	EXPECT_EQ(stats.caCertsParsed.load(), 2u * static_cast<uint64_t>(blocks));
	EXPECT_EQ(stats.caCertsIndexed.load(), static_cast<uint64_t>(blocks));
}

TEST(CaIndex, FindsASubjectByANameItsEncoderDoesNotFollow)
{
	SKIP_BEFORE_OPENSSL_3();
	const CaApi api = linkedApi();
	Stats stats;
	const std::string pem = testsupport::readFile(testsupport::pki().ca1);
	const std::shared_ptr<CaIndex> index = indexFile(api, stats, pem);
	ASSERT_NE(index, nullptr);
	BIO *in = BIO_new_mem_buf(pem.data(), static_cast<int>(pem.size()));
	X509 *ca = PEM_read_bio_X509(in, nullptr, nullptr, nullptr);
	BIO_free(in);
	ASSERT_NE(ca, nullptr);
	/* The same name in BMPStrings: canonically equal, so X509_NAME_cmp finds it. */
	const X509_NAME *subject = X509_get_subject_name(ca);
	X509_NAME *bmp = X509_NAME_new();
	for (int i = 0; i < X509_NAME_entry_count(subject); i++) {
		const X509_NAME_ENTRY *entry = X509_NAME_get_entry(subject, i);
		const ASN1_STRING *text = X509_NAME_ENTRY_get_data(entry);
		std::string utf16;
		for (int k = 0; k < ASN1_STRING_length(text); k++)
			utf16 += std::string(1, '\0') + static_cast<char>(ASN1_STRING_get0_data(text)[k]);
		X509_NAME_add_entry_by_OBJ(bmp, X509_NAME_ENTRY_get_object(entry), V_ASN1_BMPSTRING,
					   reinterpret_cast<const unsigned char *>(utf16.data()),
					   static_cast<int>(utf16.size()), -1, 0);
	}
	ASSERT_EQ(X509_NAME_cmp(bmp, subject), 0);
	EXPECT_EQ(index->withSubject(bmp), std::vector<int>{ 0 });
	EXPECT_EQ(index->withSubject(subject), std::vector<int>{ 0 });
	X509_NAME_free(bmp);
	X509_free(ca);
}

namespace {

/* The certificate's block with two bytes after its DER: 3.5's reader reports them. */
std::string withTrailingBytes(const std::string &pem)
{
	BIO *in = BIO_new_mem_buf(pem.data(), static_cast<int>(pem.size()));
	X509 *x = PEM_read_bio_X509(in, nullptr, nullptr, nullptr);
	BIO_free(in);
	unsigned char *der = nullptr;
	const int n = i2d_X509(x, &der);
	std::string bytes(reinterpret_cast<char *>(der), static_cast<size_t>(n));
	bytes += std::string(2, '\0');
	OPENSSL_free(der);
	X509_free(x);
	return pemOf([&](BIO *out) {
		PEM_write_bio(out, "CERTIFICATE", "", reinterpret_cast<const unsigned char *>(bytes.data()),
			      static_cast<long>(bytes.size()));
	});
}

} /* namespace */

TEST(CaIndex, WhatItIsUnsureOfLoadsEagerly)
{
	SKIP_BEFORE_OPENSSL_3();
	const testsupport::Pki &pki = testsupport::pki();
	const std::string ca = testsupport::readFile(pki.ca1);
	auto replaced = [](std::string text, const std::string &from, const std::string &to) {
		text.replace(text.find(from), from.size(), to);
		return text;
	};
	const std::string cases[] = {
		"",
		ca + crlOfCa1(),
		replaced(ca, "\n", "\r\n"),
		replaced(replaced(ca, "BEGIN CERTIFICATE", "BEGIN TRUSTED CERTIFICATE"), "END CERTIFICATE",
			 "END TRUSTED CERTIFICATE"),
		replaced(ca, "-----\n", "-----\nProc-Type: 4,ENCRYPTED\n\n"),
		replaced(ca, "\n", "\n" + std::string(300, '#') + "\n"),
		replaced(ca, "\n", "\nA*AA\n"),
		ca.substr(0, ca.size() - 10),
		testsupport::readFile(pki.server.key),
		invalidExtensionCertificate("twin") + invalidExtensionCertificate("twin"),
		withTrailingBytes(ca),
	};
	const CaApi api = linkedApi();
	Stats stats;
	for (const std::string &content : cases) {
		pushUserError(42);
		EXPECT_EQ(indexFile(api, stats, content), nullptr) << content;
		EXPECT_EQ(ERR_GET_REASON(ERR_get_error()), 42);
		EXPECT_EQ(ERR_get_error(), 0u);
	}
	EXPECT_NE(indexFile(api, stats, "a comment\n" + ca + "\n" + ca), nullptr)
		<< "short text between blocks is what PEM readers skip";
	/* One with an invalid extension alone: nothing compares it at load time. */
	EXPECT_NE(indexFile(api, stats, invalidExtensionCertificate("alone")), nullptr);
}

#if OPENSSL_VERSION_NUMBER >= 0x30000000L
namespace {

/* A self-signed CA certificate named cn with key, in PEM. */
std::string selfSigned(const char *cn, EVP_PKEY *key, long serial)
{
	X509 *x = X509_new();
	X509_set_version(x, 2);
	ASN1_INTEGER_set(X509_get_serialNumber(x), serial);
	X509_NAME *name = nameItSelfSigned(x, cn, key);
	X509_sign(x, key, EVP_sha256());
	const std::string pem = pemOf([&](BIO *out) { PEM_write_bio_X509(out, x); });
	X509_NAME_free(name);
	X509_free(x);
	return pem;
}

/* A CRL issued in the name cn (signed by key: the store does not check), numbered. */
X509_CRL *crlNamed(const char *cn, EVP_PKEY *key, long number)
{
	X509_CRL *crl = X509_CRL_new();
	X509_CRL_set_version(crl, 1);
	X509_NAME *name = X509_NAME_new();
	X509_NAME_add_entry_by_txt(name, "CN", MBSTRING_ASC, reinterpret_cast<const unsigned char *>(cn),
				   -1, -1, 0);
	X509_CRL_set_issuer_name(crl, name);
	ASN1_TIME *at = ASN1_TIME_set(nullptr, time(nullptr) - number);
	X509_CRL_set1_lastUpdate(crl, at);
	X509_CRL_sign(crl, key, EVP_sha256());
	ASN1_TIME_free(at);
	X509_NAME_free(name);
	/* Decoded, as from a file: X509_CRL_match compares the digest decoding computes. */
	unsigned char *der = nullptr;
	const int n = i2d_X509_CRL(crl, &der);
	X509_CRL_free(crl);
	const unsigned char *p = der;
	crl = d2i_X509_CRL(nullptr, &p, n);
	OPENSSL_free(der);
	return crl;
}

/* The store's certificates with like's subject, as chain building is given them. */
std::vector<std::string> certificatesNamed(X509_STORE *store, X509 *like)
{
	X509_STORE_CTX *ctx = X509_STORE_CTX_new();
	X509_STORE_CTX_init(ctx, store, nullptr, nullptr);
	STACK_OF(X509) *found = X509_STORE_CTX_get1_certs(ctx, X509_get_subject_name(like));
	std::vector<std::string> out;
	for (int i = 0; found && i < sk_X509_num(found); i++) {
		unsigned char *der = nullptr;
		const int n = i2d_X509(sk_X509_value(found, i), &der);
		out.emplace_back(reinterpret_cast<char *>(der), static_cast<size_t>(n));
		OPENSSL_free(der);
	}
	sk_X509_pop_free(found, X509_free);
	X509_STORE_CTX_free(ctx);
	return out;
}

} /* namespace */

/*
 * The built-in default provider decodes RSA keys and EC keys on the NIST curves alike:
 * where the first key of those kinds decodes, the others are not decoded again to tell
 * whether they would (a key that does not decode stays undecoded lazily as eagerly).
 * Its EC key's point made invalid, a P-256 certificate's key does not decode.
 */
TEST(CaIndex, OneKeyOfTheBuiltinDefaultProvidersKindsDecodedStandsForAll)
{
	const CaApi api = linkedApi();
	if (!decodingState(api).builtinDefault)
		GTEST_SKIP() << "the built-in default provider is not all there is here";
	EVP_PKEY *key = EVP_EC_gen("P-256");
	std::string broken = selfSigned("broken", key, 1);
	EVP_PKEY_free(key);
	{
		BIO *in = BIO_new_mem_buf(broken.data(), static_cast<int>(broken.size()));
		X509 *x = PEM_read_bio_X509(in, nullptr, nullptr, nullptr);
		BIO_free(in);
		ASSERT_NE(x, nullptr);
		unsigned char *der = nullptr;
		const int length = i2d_X509(x, &der);
		const ASN1_BIT_STRING *point = X509_get0_pubkey_bitstr(x);
		std::string bytes(reinterpret_cast<char *>(der), static_cast<size_t>(length));
		const std::string::size_type at =
			bytes.find(std::string(reinterpret_cast<const char *>(point->data), static_cast<size_t>(point->length)));
		ASSERT_NE(at, std::string::npos);
		bytes[at] = 0x08; /* no point format (0x06 and 0x07 are the hybrid forms) */
		const unsigned char *p = reinterpret_cast<const unsigned char *>(bytes.data());
		X509 *changed = d2i_X509(nullptr, &p, static_cast<long>(bytes.size()));
		ASSERT_NE(changed, nullptr);
		EXPECT_EQ(X509_get0_pubkey(changed), nullptr);
		ERR_clear_error();
		broken = pemOf([&](BIO *out) { PEM_write_bio_X509(out, changed); });
		X509_free(changed);
		OPENSSL_free(der);
		X509_free(x);
	}
	EVP_PKEY *rsaKey = EVP_RSA_gen(2048);
	const std::string rsa = selfSigned("rsa", rsaKey, 2);
	EVP_PKEY_free(rsaKey);
	Stats stats;
	EXPECT_NE(indexFile(api, stats, rsa + broken), nullptr) << "the RSA key stands for the EC one";
	EXPECT_EQ(indexFile(api, stats, broken + rsa), nullptr) << "the first of them is decoded";
}

/*
 * What a store has not taken yet is parsed ahead of a change in what decodes, and taken
 * with its key as it decoded before the change; a file added after it is parsed when
 * taken, under the state of that moment. The change here: the thread's default library
 * context switched to one of the "base" provider alone, which decodes no key.
 */
TEST(ParsedAhead, KeepsKeysDecodedAsBeforeAChange)
{
	SKIP_BEFORE_OPENSSL_3();
	const CaApi api = linkedApi();
	Stats stats;
	std::string pems;
	for (const char *cn : { "A", "A", "B" }) {
		EVP_PKEY *key = EVP_EC_gen("P-256");
		pems += selfSigned(cn, key, static_cast<long>(pems.size()) + 1);
		EVP_PKEY_free(key);
	}
	const std::shared_ptr<const CaIndex> index = indexFile(api, stats, pems);
	const std::shared_ptr<const CaIndex> later = indexFile(api, stats, pems);
	ASSERT_NE(index, nullptr);
	ASSERT_NE(later, nullptr);
	auto ahead = std::make_shared<ParsedAhead>(api);
	ahead->add(index);
	ParsedAhead::enlist(ahead);
	EXPECT_TRUE(ParsedAhead::anyEnlisted());

	X509 *first = ahead->take(*index, 0);
	ASSERT_NE(first, nullptr);
	EXPECT_NE(X509_get0_pubkey(first), nullptr);
	EXPECT_EQ(stats.caCertsParsed.load(), 1u);
	ParsedAhead::parseAllStores();
	EXPECT_EQ(stats.caCertsParsed.load(), 3u) << "the two not taken";
	ParsedAhead::parseAllStores();
	EXPECT_EQ(stats.caCertsParsed.load(), 3u) << "parsed once";
	ahead->add(later);

	OSSL_LIB_CTX *baseOnly = OSSL_LIB_CTX_new();
	OSSL_PROVIDER *base = OSSL_PROVIDER_load(baseOnly, "base");
	OSSL_LIB_CTX *previous = OSSL_LIB_CTX_set0_default(baseOnly);
	X509 *second = ahead->take(*index, 1);
	X509 *third = ahead->take(*index, 2);
	X509 *afterwards = ahead->take(*later, 0);
	OSSL_LIB_CTX_set0_default(previous);
	ERR_clear_error();
	ASSERT_NE(second, nullptr);
	ASSERT_NE(third, nullptr);
	ASSERT_NE(afterwards, nullptr);
	EXPECT_NE(X509_get0_pubkey(second), nullptr);
	EXPECT_NE(X509_get0_pubkey(third), nullptr);
	EXPECT_EQ(X509_get0_pubkey(afterwards), nullptr) << "parsed under base alone";
	EXPECT_EQ(stats.caCertsParsed.load(), 4u);
	for (X509 *x : { first, second, third, afterwards })
		X509_free(x);
	OSSL_PROVIDER_unload(base);
	OSSL_LIB_CTX_free(baseOnly);

	/* A store freed since is not reached; what it had parsed went with it. */
	std::weak_ptr<ParsedAhead> gone = ahead;
	ahead.reset();
	EXPECT_TRUE(gone.expired());
	ParsedAhead::parseAllStores();
	EXPECT_EQ(stats.caCertsParsed.load(), 4u);
}

/*
 * A change on one thread while others fill their stores: each certificate is handed out
 * once and whole, parsed ahead or by the take (for the thread sanitizer tree).
 */
TEST(ParsedAhead, TakesWhileAnotherThreadParsesAheadHandEachCertificateOut)
{
	SKIP_BEFORE_OPENSSL_3();
	const CaApi api = linkedApi();
	Stats stats;
	std::string pems;
	constexpr int kCertificates = 24;
	for (int i = 0; i < kCertificates; i++) {
		EVP_PKEY *key = EVP_EC_gen("P-256");
		pems += selfSigned(("T" + std::to_string(i % 8)).c_str(), key, i + 1);
		EVP_PKEY_free(key);
	}
	const std::shared_ptr<const CaIndex> index = indexFile(api, stats, pems);
	ASSERT_NE(index, nullptr);
	auto ahead = std::make_shared<ParsedAhead>(api);
	ahead->add(index);
	ParsedAhead::enlist(ahead);
	std::vector<X509 *> taken(kCertificates, nullptr);
	std::vector<std::thread> threads;
	for (int t = 0; t < 2; t++)
		threads.emplace_back([&, t] {
			for (int position = t; position < kCertificates; position += 2)
				taken[static_cast<size_t>(position)] = ahead->take(*index, position);
		});
	threads.emplace_back([] { ParsedAhead::parseAllStores(); });
	for (std::thread &thread : threads)
		thread.join();
	for (int position = 0; position < kCertificates; position++) {
		X509 *x = taken[static_cast<size_t>(position)];
		ASSERT_NE(x, nullptr) << position;
		const std::string &der = index->der(position);
		const unsigned char *p = reinterpret_cast<const unsigned char *>(der.data());
		X509 *expected = d2i_X509(nullptr, &p, static_cast<long>(der.size()));
		EXPECT_EQ(X509_cmp(x, expected), 0) << position;
		X509_free(expected);
		X509_free(x);
	}
	EXPECT_LE(stats.caCertsParsed.load(), 2u * kCertificates);
}

/*
 * Sequences of loads, adds (certificates and CRLs), lookups and listings over twins (same
 * subject, other key) and repeats, fixed and random: a store given its files through LazyStores, driven as the interposed
 * calls drive it, answers every step as a store loaded eagerly (each certificate added in
 * file order, as X509_load_cert_crl_file does). On 3.5 this checks the store model; on
 * 3.0 the sorted-stack path.
 */
TEST(LazyStores, LoadsAddsLookupsAndListingsAnswerAsEagerLoading)
{
	SKIP_BEFORE_OPENSSL_3();
	const CaApi api = linkedApi();
	LazyStores lazy;
	if (!lazy.init(api)) {
		/* Where it runs, an API the test did not link would skip it silently. */
		const unsigned long series = OpenSSL_version_num() >> 20;
		ASSERT_TRUE(series != 0x300 && series != 0x305) << "lazy stores refused their API on 3.0 or 3.5";
		GTEST_SKIP() << "lazy loading is for OpenSSL 3.0 and 3.5";
	}
	Stats stats;
	/*
	 * Subjects A (three keys), B (two), C, D, then an A and a C whose basicConstraints do
	 * not decode: comparing one with a same-subject certificate puts an error on the queue.
	 */
	std::vector<std::string> pems;
	const std::vector<std::pair<const char *, int>> subjects = { { "A", 3 }, { "B", 2 }, { "C", 1 }, { "D", 1 } };
	for (const auto &[cn, keys] : subjects) {
		for (int k = 0; k < keys; k++) {
			EVP_PKEY *key = EVP_EC_gen("P-256");
			pems.push_back(selfSigned(cn, key, static_cast<long>(pems.size()) + 1));
			EVP_PKEY_free(key);
		}
	}
	pems.push_back(invalidExtensionCertificate("A"));
	pems.push_back(invalidExtensionCertificate("C"));
	/* Objects of their own for each store: the extensions' check is cached in the object. */
	auto parsed = [](const std::string &pem) {
		BIO *in = BIO_new_mem_buf(pem.data(), static_cast<int>(pem.size()));
		X509 *x = PEM_read_bio_X509(in, nullptr, nullptr, nullptr);
		BIO_free(in);
		return x;
	};
	std::vector<X509 *> pool, eagerPool;
	for (const std::string &pem : pems) {
		pool.push_back(parsed(pem));
		eagerPool.push_back(parsed(pem));
	}
	/* The reasons on the error queue, which each step empties. */
	auto drained = [] {
		std::vector<unsigned long> reasons;
		while (unsigned long e = ERR_get_error())
			reasons.push_back(e);
		return reasons;
	};
	/* CRLs in the names A (two) and B, which the duplicate check meets among certificates. */
	EVP_PKEY *crlKey = EVP_EC_gen("P-256");
	const std::vector<X509_CRL *> crls = { crlNamed("A", crlKey, 10), crlNamed("A", crlKey, 20),
					       crlNamed("B", crlKey, 10) };
	EVP_PKEY_free(crlKey);
	/*
	 * Each script a line of steps: "load 0 3 3" (a file of those certificates), "add 2",
	 * "crl 1", "lookup 4" (the certificates with that one's subject), "list". The fixed
	 * ones first: what 3.5's duplicate check makes of the store's order.
	 */
	std::vector<std::string> scripts = {
		"add 0 load 7 lookup 0 list",         /* the invalid A compared at load, not at lookup */
		"load 0 load 7 list",                 /* the same with the A from an earlier file */
		"load 3 8 add 5 list",                /* an add compares the invalid C */
		"load 0 3 1 1 list",                  /* twins apart: a repeat of the second stays */
		"add 1 load 0 3 1 add 1 list",        /* the program's twin before and after */
		"load 5 3 0 lookup 3 load 6 1 0 list", /* a second file after a lookup sorted */
		"crl 0 load 5 crl 1 crl 1 list",      /* CRLs apart: a lazy certificate between */
		"load 0 crl 0 add 3 crl 0 lookup 0 crl 1 list",
	};
	std::mt19937 random(13);
	auto pick = [&](size_t n) { return std::to_string(random() % n); };
	for (int sequence = 0; sequence < 600; sequence++) {
		std::string script;
		for (size_t step = 0, steps = 2 + random() % 10; step < steps; step++) {
			switch (random() % 5) {
			case 0:
				script += "load";
				for (size_t c = 0, n = 1 + random() % 6; c < n; c++)
					script += " " + pick(pool.size());
				script += " ";
				break;
			case 1:
				script += "add " + pick(pool.size()) + " ";
				break;
			case 2:
				script += "lookup " + pick(pool.size()) + " ";
				break;
			case 3:
				script += "crl " + pick(crls.size()) + " ";
				break;
			default:
				script += "list ";
			}
		}
		scripts.push_back(script + "list");
	}
	for (const std::string &script : scripts) {
		if (HasFailure())
			break;
		X509_STORE *eager = X509_STORE_new();
		X509_STORE *store = X509_STORE_new();
		std::istringstream steps(script);
		std::string word;
		steps >> word;
		while (steps) {
			const std::string what = word;
			std::vector<size_t> numbers;
			while (steps >> word && std::isdigit(static_cast<unsigned char>(word[0])))
				numbers.push_back(std::stoul(word));
			/* As the interposed X509_STORE_add_cert and _crl do. */
			auto lazyAdd = [&](X509 *x, X509_CRL *crl) {
				auto real = [&] { return x ? X509_STORE_add_cert(store, x) : X509_STORE_add_crl(store, crl); };
				int result = -1;
				if (lazy.pending(store) && lazy.addsItself()) {
					result = lazy.add(store, x, crl);
				} else if (lazy.pending(store)) {
					if (x)
						lazy.beforeRead(store, X509_get_subject_name(x));
					const int before = lazy.objectCount(store);
					result = real();
					lazy.afterAdd(store, before);
				}
				return result < 0 ? real() : result;
			};
			ERR_clear_error();
			if (what == "load") {
				std::string text;
				for (size_t c : numbers)
					text += pems[c];
				/* What X509_load_cert_crl_file does with the file: each one parsed, added, counted. */
				int loaded = 0;
				for (size_t c : numbers) {
					X509 *x = parsed(pems[c]);
					loaded += X509_STORE_add_cert(eager, x);
					X509_free(x);
				}
				const std::vector<unsigned long> expected = drained();
				std::shared_ptr<const CaIndex> index = indexFile(api, stats, text);
				int result = 0;
				if (index) {
					result = lazy.attach(store, index);
				} else {
					/* Refused (twins, one invalid): OpenSSL loads it, through the interposed adds. */
					for (size_t c : numbers) {
						X509 *x = parsed(pems[c]);
						result += lazyAdd(x, nullptr);
						X509_free(x);
					}
				}
				EXPECT_EQ(result, loaded) << script;
				EXPECT_EQ(drained(), expected) << script << ": the load's errors";
			} else if (what == "add" || what == "crl") {
				const bool cert = what == "add";
				const size_t c = numbers.at(0);
				X509_CRL *crl = cert ? nullptr : crls[c];
				const int expected = cert ? X509_STORE_add_cert(eager, eagerPool[c]) : X509_STORE_add_crl(eager, crl);
				const std::vector<unsigned long> expectedErrors = drained();
				EXPECT_EQ(lazyAdd(cert ? pool[c] : nullptr, crl), expected) << script;
				EXPECT_EQ(drained(), expectedErrors) << script << ": the add's errors";
			} else if (what == "lookup") {
				X509 *like = pool[numbers.at(0)];
				const bool pending = lazy.pending(store);
				if (pending)
					lazy.beforeRead(store, X509_get_subject_name(like));
				const std::vector<std::string> found = certificatesNamed(store, like);
				if (pending)
					lazy.afterLookup(store);
				const std::vector<unsigned long> errors = drained();
				EXPECT_EQ(found, certificatesNamed(eager, like)) << script;
				EXPECT_EQ(errors, drained()) << script << ": the lookup's errors";
			} else {
				if (lazy.pending(store))
					lazy.beforeEnumeration(store);
				const std::vector<std::string> listed = contents(store);
				const std::vector<unsigned long> errors = drained();
				EXPECT_EQ(listed, contents(eager)) << script;
				EXPECT_EQ(errors, drained()) << script << ": the listing's errors";
			}
		}
		X509_STORE_free(store);
		X509_STORE_free(eager);
	}
	for (X509 *x : pool)
		X509_free(x);
	for (X509 *x : eagerPool)
		X509_free(x);
	for (X509_CRL *crl : crls)
		X509_CRL_free(crl);
}
#endif
