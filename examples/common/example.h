#pragma once
/*
 * What the example programs share: argument parsing, sockets, the data pattern and its
 * digest. The examples are ordinary OpenSSL programs; they know nothing of tlstune.
 */

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include <unistd.h>

#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/ssl.h>

namespace example {

[[noreturn]] inline void fail(const char *what)
{
	std::fprintf(stderr, "error: %s\n", what);
	ERR_print_errors_fp(stderr);
	std::exit(2);
}

/* "--name value" from argv, or fallback. */
inline std::string option(int argc, char **argv, const char *name, const char *fallback)
{
	for (int i = 1; i + 1 < argc; i++) {
		if (std::strcmp(argv[i], name) == 0)
			return argv[i + 1];
	}
	return fallback;
}

inline uint64_t number(int argc, char **argv, const char *name, uint64_t fallback)
{
	std::string text = option(argc, argv, name, "");
	return text.empty() ? fallback : std::strtoull(text.c_str(), nullptr, 10);
}

/*
 * The bytes a server sends and a test expects: splitmix64 from a seed, so a lost,
 * duplicated or reordered byte changes the digest.
 */
class Pattern {
public:
	explicit Pattern(uint64_t seed) : state_(seed) {}
	void fill(unsigned char *out, size_t n)
	{
		for (size_t i = 0; i < n; i++) {
			if (used_ == 8) {
				uint64_t z = (state_ += 0x9e3779b97f4a7c15ull);
				z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
				z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
				word_ = z ^ (z >> 31);
				used_ = 0;
			}
			out[i] = static_cast<unsigned char>(word_ >> (8 * used_++));
		}
	}

private:
	uint64_t state_;
	uint64_t word_ = 0;
	unsigned used_ = 8;
};

class Sha256 {
public:
	Sha256() : ctx_(EVP_MD_CTX_new()) { EVP_DigestInit_ex(ctx_, EVP_sha256(), nullptr); }
	~Sha256() { EVP_MD_CTX_free(ctx_); }
	Sha256(const Sha256 &) = delete;
	Sha256 &operator=(const Sha256 &) = delete;

	void update(const void *data, size_t n) { EVP_DigestUpdate(ctx_, data, n); }
	std::string hex()
	{
		unsigned char digest[EVP_MAX_MD_SIZE];
		unsigned int length = 0;
		EVP_DigestFinal_ex(ctx_, digest, &length);
		std::string out;
		char byte[3];
		for (unsigned int i = 0; i < length; i++) {
			std::snprintf(byte, sizeof(byte), "%02x", digest[i]);
			out += byte;
		}
		return out;
	}

private:
	EVP_MD_CTX *ctx_;
};

/* A TCP connection to 127.0.0.1:port (or the host given); receiveBuffer: SO_RCVBUF, set first. */
int connectTo(const std::string &host, const std::string &port, int receiveBuffer = 0);
/* Listens on 127.0.0.1:port (0: any free port); returns the fd and the port chosen. */
int listenOn(int port, int *chosen);
void setNonBlocking(int fd);

/*
 * A server in a forked child on a free port of 127.0.0.1 (*port): serve(listener) runs
 * there and must not return. Returns the child's pid; the parent keeps no listener.
 */
template <typename Serve>
pid_t forkServer(int *port, Serve serve)
{
	const int listener = listenOn(0, port);
	std::fflush(stdout);
	const pid_t child = fork();
	if (child == 0)
		serve(listener);
	close(listener);
	return child;
}

/* A TLS client connection to 127.0.0.1:port over ctx, handshake done; its socket in *fd. */
inline SSL *connectSsl(SSL_CTX *ctx, const char *port, int *fd)
{
	*fd = connectTo("127.0.0.1", port);
	SSL *ssl = SSL_new(ctx);
	SSL_set_fd(ssl, *fd);
	if (SSL_connect(ssl) != 1)
		fail("SSL_connect");
	return ssl;
}

/* Lines "line N\n" for N from first, one SSL_write each. */
inline void writeLines(SSL *ssl, int first, int count)
{
	for (int i = first; i < first + count; i++) {
		const std::string line = "line " + std::to_string(i) + "\n";
		if (SSL_write(ssl, line.data(), static_cast<int>(line.size())) <= 0)
			fail("SSL_write");
	}
}

/* A server context with the certificate chain and key in these files; exits when it cannot. */
inline SSL_CTX *serverContext(const std::string &cert, const std::string &key)
{
	SSL_CTX *ctx = SSL_CTX_new(TLS_server_method());
	if (!ctx || SSL_CTX_use_certificate_chain_file(ctx, cert.c_str()) != 1 ||
	    SSL_CTX_use_PrivateKey_file(ctx, key.c_str(), SSL_FILETYPE_PEM) != 1)
		fail("cannot load the certificate and key");
	return ctx;
}

/* Runs work(t) for every t below count, each on a thread of its own, all at once; the sum. */
inline uint64_t sumOverThreads(uint64_t count, const std::function<uint64_t(uint64_t)> &work)
{
	std::vector<uint64_t> results(count, 0);
	std::vector<std::thread> threads;
	for (uint64_t t = 0; t < count; t++)
		threads.emplace_back([&, t] { results[t] = work(t); });
	uint64_t sum = 0;
	for (uint64_t t = 0; t < count; t++) {
		threads[t].join();
		sum += results[t];
	}
	return sum;
}

} /* namespace example */
