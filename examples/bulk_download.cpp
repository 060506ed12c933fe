/*
 * Downloads everything a TLS server sends, with blocking SSL_read calls of 16 KiB, and
 * prints "received N sha256 H". The plain client whose read syscalls the shim changes.
 * Usage: bulk_download HOST PORT [--no-read-ahead] [--release-buffers] [--own-bio CHUNK] [--seed S]
 * --no-read-ahead: the program turns read-ahead off on its context, as some do on purpose.
 * --release-buffers: SSL_MODE_RELEASE_BUFFERS on its context, as nginx sets.
 * --own-bio CHUNK: the SSL reads through a BIO of the program's own that asks the kernel
 *   for at most CHUNK bytes per read (apache's asks 8,000, curl's what OpenSSL asks).
 * A connection that ends without close_notify (a reset) prints how it ended, as OpenSSL
 * (SSL_get_error, the error queue) and errno tell it, and whether what arrived is the
 * start of the pattern of seed S (tls_server --send's); exit 3.
 */

#include <cerrno>
#include <unistd.h>

#include "common/example.h"
#include "common/own_bio.h"

using namespace example;

namespace {

size_t chunk = 0;

int readChunk(BIO *bio, char *data, int length)
{
	const size_t ask = std::min(static_cast<size_t>(length), chunk);
	return static_cast<int>(recv(ownBioFd(bio), data, ask, 0));
}

} /* namespace */

int main(int argc, char **argv)
{
	if (argc < 3)
		fail("usage: bulk_download HOST PORT");

	SSL_CTX *ctx = SSL_CTX_new(TLS_client_method());
	for (int i = 3; i < argc; i++) {
		if (std::string(argv[i]) == "--no-read-ahead")
			SSL_CTX_set_read_ahead(ctx, 0);
		if (std::string(argv[i]) == "--release-buffers")
			SSL_CTX_set_mode(ctx, SSL_MODE_RELEASE_BUFFERS);
	}
	SSL *ssl = SSL_new(ctx);
	int fd = connectTo(argv[1], argv[2]);
	chunk = static_cast<size_t>(number(argc, argv, "--own-bio", 0));
	BIO_METHOD *method = nullptr;
	if (chunk > 0) {
		method = ownBioMethod(false, "chunked");
		BIO_meth_set_read(method, readChunk);
		BIO *bio = ownBio(method, fd);
		SSL_set_bio(ssl, bio, bio);
	} else {
		SSL_set_fd(ssl, fd);
	}
	if (SSL_connect(ssl) != 1)
		fail("handshake");

	Sha256 digest;
	unsigned long long total = 0;
	unsigned char buffer[16384];
	size_t n = 0;
	while (SSL_read_ex(ssl, buffer, sizeof(buffer), &n)) {
		digest.update(buffer, n);
		total += n;
	}
	const int error = SSL_get_error(ssl, 0);
	int status = 0;
	if (error != SSL_ERROR_ZERO_RETURN) {
		const int saved = errno;
		Pattern pattern(number(argc, argv, "--seed", 1));
		Sha256 expected;
		for (unsigned long long done = 0; done < total;) {
			const size_t chunk = static_cast<size_t>(std::min<unsigned long long>(sizeof(buffer), total - done));
			pattern.fill(buffer, chunk);
			expected.update(buffer, chunk);
			done += chunk;
		}
		std::string queue;
		while (const unsigned long code = ERR_get_error()) {
			char text[256];
			ERR_error_string_n(code, text, sizeof(text));
			queue += std::string(queue.empty() ? "" : "; ") + text;
		}
		std::printf("ended without close_notify: SSL_get_error %d, errno %s, error queue [%s]; "
			    "what arrived is the pattern's start: %s\n", error, saved ? strerror(saved) : "0",
			    queue.c_str(), expected.hex() == digest.hex() ? "yes" : "no");
		status = 3;
	} else {
		std::printf("received %llu sha256 %s\n", total, digest.hex().c_str());
		SSL_shutdown(ssl);
	}
	SSL_free(ssl);
	BIO_meth_free(method);
	close(fd);
	SSL_CTX_free(ctx);
	return status;
}
