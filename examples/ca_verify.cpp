/*
 * Verifies leaf certificates against a store loaded from a CA file and prints everything a
 * program could see, so that eager and lazy loading (issue 13) and no shim at all can be
 * compared line by line.
 *   --ca PATH           the CA file, loaded with X509_STORE_load_file
 *   --add PATH          a certificate the program adds with X509_STORE_add_cert (repeatable)
 *   --add-before        add them before loading the file (default: after)
 *   --capath DIR        a hashed directory (openssl rehash) looked up too, added before
 *                       the file is loaded (X509_STORE_load_path)
 *   --untrusted PATH    certificates sent along with each leaf
 *   --leaf PATH         a leaf to verify (repeatable; one store for all, as a context)
 *   --partial           X509_V_FLAG_PARTIAL_CHAIN
 *   --no-trusted-first  clear X509_V_FLAG_TRUSTED_FIRST
 *   --enumerate-first   list the store before verifying too
 *   --then-ca PATH      after the leaves are verified, load this file too, list the
 *                       store and verify them again
 *   --threads T         first, T threads verify every leaf 200 times at once against the
 *                       same store; prints "threads ok N" when each result was the first's
 * Prints "load R", each queued error, per leaf "verify CODE TEXT depth D" and the chain (a
 * line per certificate: digest prefix and subject), then the store's objects in order.
 */

#include <thread>
#include <vector>

#include <openssl/pem.h>
#include <openssl/x509v3.h>

#include "common/example.h"

using namespace example;

namespace {

std::vector<std::string> options(int argc, char **argv, const char *name)
{
	std::vector<std::string> values;
	for (int i = 1; i + 1 < argc; i++) {
		if (std::string(argv[i]) == name)
			values.push_back(argv[i + 1]);
	}
	return values;
}

bool flag(int argc, char **argv, const char *name)
{
	for (int i = 1; i < argc; i++) {
		if (std::string(argv[i]) == name)
			return true;
	}
	return false;
}

std::vector<X509 *> readCertificates(const std::string &path)
{
	std::vector<X509 *> out;
	BIO *in = BIO_new_file(path.c_str(), "r");
	if (!in)
		fail("cannot open a certificate file");
	while (X509 *x = PEM_read_bio_X509(in, nullptr, nullptr, nullptr))
		out.push_back(x);
	ERR_clear_error();
	BIO_free(in);
	return out;
}

void printErrors()
{
	while (unsigned long code = ERR_get_error())
		std::printf("error %s\n", ERR_error_string(code, nullptr));
}

/* "3f2a9c01 /CN=Twin Root": which certificate, not just which subject. */
std::string describe(X509 *x)
{
	unsigned char *der = nullptr;
	const int n = i2d_X509(x, &der);
	Sha256 digest;
	digest.update(der, static_cast<size_t>(n));
	OPENSSL_free(der);
	char subject[256] = "";
	X509_NAME_oneline(X509_get_subject_name(x), subject, sizeof(subject));
	return digest.hex().substr(0, 8) + " " + subject;
}

void printObjects(X509_STORE *store)
{
	STACK_OF(X509_OBJECT) *objects = X509_STORE_get0_objects(store);
	std::printf("objects %d\n", sk_X509_OBJECT_num(objects));
	for (int i = 0; i < sk_X509_OBJECT_num(objects); i++) {
		X509_OBJECT *object = sk_X509_OBJECT_value(objects, i);
		if (X509_OBJECT_get_type(object) == X509_LU_X509)
			std::printf("  cert %s\n", describe(X509_OBJECT_get0_X509(object)).c_str());
		else
			std::printf("  crl\n");
	}
}

void addCertificates(X509_STORE *store, const std::vector<std::string> &paths)
{
	for (const std::string &path : paths) {
		for (X509 *x : readCertificates(path)) {
			std::printf("add %d\n", X509_STORE_add_cert(store, x));
			X509_free(x);
		}
	}
	printErrors();
}

} /* namespace */

int main(int argc, char **argv)
{
	const std::string ca = option(argc, argv, "--ca", "");
	const std::vector<std::string> added = options(argc, argv, "--add");
	const std::string untrustedPath = option(argc, argv, "--untrusted", "");

	X509_STORE *store = X509_STORE_new();
	const std::string capath = option(argc, argv, "--capath", "");
	if (!capath.empty())
#if OPENSSL_VERSION_NUMBER >= 0x30000000L
		std::printf("load path %d\n", X509_STORE_load_path(store, capath.c_str()));
#else
		std::printf("load path %d\n", X509_STORE_load_locations(store, nullptr, capath.c_str()));
#endif
	if (flag(argc, argv, "--add-before"))
		addCertificates(store, added);
#if OPENSSL_VERSION_NUMBER >= 0x30000000L
	std::printf("load %d\n", X509_STORE_load_file(store, ca.c_str()));
#else
	std::printf("load %d\n", X509_STORE_load_locations(store, ca.c_str(), nullptr));
#endif
	printErrors();
	if (!flag(argc, argv, "--add-before"))
		addCertificates(store, added);
	if (flag(argc, argv, "--enumerate-first"))
		printObjects(store);

	STACK_OF(X509) *untrusted = sk_X509_new_null();
	if (!untrustedPath.empty()) {
		for (X509 *x : readCertificates(untrustedPath))
			sk_X509_push(untrusted, x);
	}
	const bool partial = flag(argc, argv, "--partial");
	const bool trustedFirst = !flag(argc, argv, "--no-trusted-first");
	auto verify = [&](X509 *leaf, X509_STORE_CTX *ctx) {
		X509_STORE_CTX_init(ctx, store, leaf, untrusted);
		X509_VERIFY_PARAM *param = X509_STORE_CTX_get0_param(ctx);
		if (partial)
			X509_VERIFY_PARAM_set_flags(param, X509_V_FLAG_PARTIAL_CHAIN);
		if (!trustedFirst)
			X509_VERIFY_PARAM_clear_flags(param, X509_V_FLAG_TRUSTED_FIRST);
		return X509_verify_cert(ctx);
	};
	std::vector<X509 *> leaves;
	for (const std::string &path : options(argc, argv, "--leaf"))
		leaves.push_back(readCertificates(path).at(0));
	const uint64_t threads = number(argc, argv, "--threads", 0);
	if (threads) {
		/*
		 * The threads start on a store nothing has read yet, so with lazy loading they
		 * race to fill it; every result must equal the first thread's first.
		 */
		std::vector<std::vector<int>> results(threads);
		std::vector<std::thread> workers;
		for (uint64_t t = 0; t < threads; t++) {
			workers.emplace_back([&, t] {
				for (int round = 0; round < 200; round++) {
					for (X509 *leaf : leaves) {
						X509_STORE_CTX *ctx = X509_STORE_CTX_new();
						const int ok = verify(leaf, ctx);
						results[t].push_back(ok * 1000 + X509_STORE_CTX_get_error(ctx));
						X509_STORE_CTX_free(ctx);
					}
				}
				ERR_clear_error();
			});
		}
		for (std::thread &worker : workers)
			worker.join();
		uint64_t same = 0;
		for (const std::vector<int> &each : results) {
			for (size_t i = 0; i < each.size(); i++)
				same += each[i] == results[0][i % leaves.size()];
		}
		std::printf("threads %s %llu\n", same == threads * 200 * leaves.size() ? "ok" : "differ",
			    static_cast<unsigned long long>(same));
	}
	auto verifyLeaves = [&] {
		for (X509 *leaf : leaves) {
			X509_STORE_CTX *ctx = X509_STORE_CTX_new();
			const int ok = verify(leaf, ctx);
			const int code = X509_STORE_CTX_get_error(ctx);
			std::printf("verify %d %d %s depth %d\n", ok, code, X509_verify_cert_error_string(code),
				    X509_STORE_CTX_get_error_depth(ctx));
			STACK_OF(X509) *chain = X509_STORE_CTX_get0_chain(ctx);
			for (int i = 0; i < sk_X509_num(chain); i++)
				std::printf("  chain %s\n", describe(sk_X509_value(chain, i)).c_str());
			printErrors();
			X509_STORE_CTX_free(ctx);
		}
	};
	verifyLeaves();
	const std::string then = option(argc, argv, "--then-ca", "");
	if (!then.empty()) {
#if OPENSSL_VERSION_NUMBER >= 0x30000000L
		std::printf("load %d\n", X509_STORE_load_file(store, then.c_str()));
#else
		std::printf("load %d\n", X509_STORE_load_locations(store, then.c_str(), nullptr));
#endif
		printErrors();
		printObjects(store);
		verifyLeaves();
	}
	for (X509 *leaf : leaves)
		X509_free(leaf);
	printObjects(store);
	sk_X509_pop_free(untrusted, X509_free);
	X509_STORE_free(store);
	return 0;
}
