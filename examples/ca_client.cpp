/*
 * Loads CA certificates into new contexts the way programs do and reports exactly what
 * OpenSSL answered, so a test can compare runs with and without the shim line by line.
 *   --loader NAME   ctx-locations, ctx-file, ctx-default, store-file, store-locations,
 *                   store-default (the SSL_CTX_* and X509_STORE_* loaders)
 *   --ca PATH       the file the loader is given (the default loaders take none)
 *   --contexts N    contexts to make, one after another (default 1)
 *   --port P        then connect each to 127.0.0.1:P, verify the peer as --host
 *                   (default localhost), print the verify result and read what the
 *                   server sends until it closes
 *   --request PATH  first send an HTTP/1.0 GET for PATH (a web server answers and closes)
 *   --drop-after N  after the Nth context, become uid and gid 65534 (nobody), as a
 *                   daemon that drops privileges after reading its configuration
 *   --quiet         print only "contexts N seconds S" at the end, timing the N contexts
 *                   after one untimed first (for the benchmark: the steady state); a
 *                   load that fails or a peer that does not verify ends it with status 2,
 *                   so that a benchmark never times failures
 * Per context it prints "load R", then one line per queued error
 * ("error LIB:REASON:FUNC:FILE:LINE:DATA"), "objects N order H" (the store's objects, H a
 * digest of their order) and, with --port, "verify CODE TEXT".
 *   --stress --threads T   T threads each make --contexts contexts and handshake each over
 *                   memory BIOs with a server using --server-cert/--server-key; prints
 *                   "stress ok N handshakes" when every one verified.
 */

#include <chrono>
#include <unistd.h>

#include <openssl/x509v3.h>

#include "common/example.h"

using namespace example;

namespace {

/* The loader each name stands for: returns what the program would see. */
int load(SSL_CTX *ctx, const std::string &loader, const std::string &ca)
{
	X509_STORE *store = SSL_CTX_get_cert_store(ctx);
	const char *path = ca.empty() ? nullptr : ca.c_str();
	if (loader == "ctx-locations")
		return SSL_CTX_load_verify_locations(ctx, path, nullptr);
	if (loader == "ctx-file")
#if OPENSSL_VERSION_NUMBER >= 0x30000000L
		return SSL_CTX_load_verify_file(ctx, path);
#else
		return SSL_CTX_load_verify_locations(ctx, path, nullptr); /* what 3.0's calls */
#endif
	if (loader == "ctx-default")
		return SSL_CTX_set_default_verify_paths(ctx);
	if (loader == "store-file")
#if OPENSSL_VERSION_NUMBER >= 0x30000000L
		return X509_STORE_load_file(store, path);
#else
		return X509_STORE_load_locations(store, path, nullptr);
#endif
	if (loader == "store-locations")
		return X509_STORE_load_locations(store, path, nullptr);
	if (loader == "store-default")
		return X509_STORE_set_default_paths(store);
	fail("unknown --loader");
}

const char *orEmpty(const char *text) { return text ? text : ""; }

void printErrors()
{
	const char *file = nullptr, *func = nullptr, *data = nullptr;
	int line = 0, flags = 0;
#if OPENSSL_VERSION_NUMBER >= 0x30000000L
	while (unsigned long code = ERR_get_error_all(&file, &line, &func, &data, &flags)) {
#else
	while (unsigned long code = ERR_get_error_line_data(&file, &line, &data, &flags)) {
		func = ERR_func_error_string(code);
#endif
		std::printf("error %s:%s:%s:%s:%d:%s\n", orEmpty(ERR_lib_error_string(code)),
			    orEmpty(ERR_reason_error_string(code)), orEmpty(func), orEmpty(file), line,
			    (flags & ERR_TXT_STRING) && data ? data : "");
	}
}

/* Count and order of the store's objects: what a program enumerating it sees. */
void printObjects(SSL_CTX *ctx)
{
	STACK_OF(X509_OBJECT) *objects = X509_STORE_get0_objects(SSL_CTX_get_cert_store(ctx));
	Sha256 order;
	for (int i = 0; i < sk_X509_OBJECT_num(objects); i++) {
		X509_OBJECT *object = sk_X509_OBJECT_value(objects, i);
		unsigned char *der = nullptr;
		int n = X509_OBJECT_get_type(object) == X509_LU_X509
			? i2d_X509(X509_OBJECT_get0_X509(object), &der)
			: i2d_X509_CRL(X509_OBJECT_get0_X509_CRL(object), &der);
		if (n > 0)
			order.update(der, static_cast<size_t>(n));
		OPENSSL_free(der);
	}
	std::printf("objects %d order %.16s\n", sk_X509_OBJECT_num(objects), order.hex().c_str());
}

std::string verifyPeer(SSL_CTX *ctx, const std::string &port, const std::string &host,
		       const std::string &request)
{
	SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER, nullptr);
	SSL *ssl = SSL_new(ctx);
	int fd = connectTo("127.0.0.1", port);
	SSL_set_fd(ssl, fd);
	SSL_set_tlsext_host_name(ssl, host.c_str());
	SSL_set1_host(ssl, host.c_str());
	const int connected = SSL_connect(ssl);
	const long result = SSL_get_verify_result(ssl);
	if (connected == 1 && !request.empty()) {
		const std::string get = "GET " + request + " HTTP/1.0\r\nHost: " + host + "\r\n\r\n";
		SSL_write(ssl, get.data(), static_cast<int>(get.size()));
	}
	/* Everything the server sends (tls_server --send N), then close_notify both ways. */
	char buffer[4096];
	while (connected == 1 && SSL_read(ssl, buffer, sizeof(buffer)) > 0) {
	}
	if (connected == 1)
		SSL_shutdown(ssl);
	ERR_clear_error();
	SSL_free(ssl);
	close(fd);
	return "verify " + std::to_string(result) + " " + X509_verify_cert_error_string(result) +
	       " handshake " + (connected == 1 ? "ok" : "failed") + "\n";
}

/* One client handshake against server over a pair of memory BIOs; true when verified. */
bool handshakeInMemory(SSL_CTX *client, SSL_CTX *server)
{
	SSL *c = SSL_new(client), *s = SSL_new(server);
	BIO *cb = nullptr, *sb = nullptr;
	BIO_new_bio_pair(&cb, 0, &sb, 0);
	SSL_set_bio(c, cb, cb);
	SSL_set_bio(s, sb, sb);
	SSL_set_connect_state(c);
	SSL_set_accept_state(s);
	SSL_set1_host(c, "localhost");
	int cr = 0, sr = 0;
	for (int round = 0; round < 100 && (cr != 1 || sr != 1); round++) {
		if (cr != 1)
			cr = SSL_do_handshake(c);
		if (sr != 1)
			sr = SSL_do_handshake(s);
		if ((cr <= 0 && SSL_get_error(c, cr) != SSL_ERROR_WANT_READ) ||
		    (sr <= 0 && SSL_get_error(s, sr) != SSL_ERROR_WANT_READ))
			break;
	}
	const bool ok = cr == 1 && sr == 1 && SSL_get_verify_result(c) == X509_V_OK;
	SSL_free(c);
	SSL_free(s);
	ERR_clear_error();
	return ok;
}

int stress(int argc, char **argv, const std::string &loader, const std::string &ca, uint64_t contexts)
{
	SSL_CTX *server = serverContext(option(argc, argv, "--server-cert", ""),
					option(argc, argv, "--server-key", ""));
	const uint64_t threads = number(argc, argv, "--threads", 8);
	const uint64_t total = sumOverThreads(threads, [&](uint64_t) {
		uint64_t verified = 0;
		for (uint64_t i = 0; i < contexts; i++) {
			SSL_CTX *client = SSL_CTX_new(TLS_client_method());
			SSL_CTX_set_verify(client, SSL_VERIFY_PEER, nullptr);
			verified += load(client, loader, ca) == 1 && handshakeInMemory(client, server);
			ERR_clear_error();
			SSL_CTX_free(client);
		}
		return verified;
	});
	SSL_CTX_free(server);
	if (total != threads * contexts) {
		std::printf("stress failed %llu of %llu handshakes verified\n",
			    static_cast<unsigned long long>(total),
			    static_cast<unsigned long long>(threads * contexts));
		return 1;
	}
	std::printf("stress ok %llu handshakes\n", static_cast<unsigned long long>(total));
	return 0;
}

} /* namespace */

int main(int argc, char **argv)
{
	const std::string loader = option(argc, argv, "--loader", "ctx-locations");
	const std::string ca = option(argc, argv, "--ca", "");
	const std::string port = option(argc, argv, "--port", "");
	const std::string host = option(argc, argv, "--host", "localhost");
	const uint64_t contexts = number(argc, argv, "--contexts", 1);
	for (int i = 1; i < argc; i++) {
		if (std::string(argv[i]) == "--stress")
			return stress(argc, argv, loader, ca, contexts);
	}

	const std::string request = option(argc, argv, "--request", "");
	const uint64_t dropAfter = number(argc, argv, "--drop-after", 0);
	bool quiet = false;
	for (int i = 1; i < argc; i++)
		quiet = quiet || std::string(argv[i]) == "--quiet";
	auto start = std::chrono::steady_clock::now();
	for (uint64_t i = quiet ? 0 : 1; i <= contexts; i++) {
		if (quiet && i == 1)
			start = std::chrono::steady_clock::now();
		SSL_CTX *ctx = SSL_CTX_new(TLS_client_method());
		const int loaded = load(ctx, loader, ca);
		const std::string verified = port.empty() ? "" : verifyPeer(ctx, port, host, request);
		if (quiet) {
			if (loaded != 1)
				fail("--quiet: a load failed");
			if (!verified.empty() && verified.rfind("verify 0 ok handshake ok", 0) != 0)
				fail(("--quiet: " + verified).c_str());
			ERR_clear_error();
		} else {
			std::printf("load %d\n", loaded);
			printErrors();
			printObjects(ctx);
			std::printf("%s", verified.c_str());
		}
		SSL_CTX_free(ctx);
		if (dropAfter && i == dropAfter && (setresgid(65534, 65534, 65534) != 0 || setresuid(65534, 65534, 65534) != 0))
			fail("--drop-after: cannot become nobody");
	}
	const std::chrono::duration<double> elapsed = std::chrono::steady_clock::now() - start;
	if (quiet)
		std::printf("contexts %llu seconds %.6f\n", static_cast<unsigned long long>(contexts),
			    elapsed.count());
	return 0;
}
