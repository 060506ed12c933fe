/*
 * Downloads everything a TLS server sends, with blocking SSL_read calls of 16 KiB, and
 * prints "received N sha256 H". The plain client whose read syscalls the shim changes.
 * Usage: bulk_download HOST PORT [--no-read-ahead]
 * --no-read-ahead: the program turns read-ahead off on its context, as some do on purpose.
 */

#include <unistd.h>

#include "common/example.h"

using namespace example;

int main(int argc, char **argv)
{
	if (argc < 3)
		fail("usage: bulk_download HOST PORT");

	SSL_CTX *ctx = SSL_CTX_new(TLS_client_method());
	if (argc > 3 && std::string(argv[3]) == "--no-read-ahead")
		SSL_CTX_set_read_ahead(ctx, 0);
	SSL *ssl = SSL_new(ctx);
	int fd = connectTo(argv[1], argv[2]);
	SSL_set_fd(ssl, fd);
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
	if (SSL_get_error(ssl, 0) != SSL_ERROR_ZERO_RETURN)
		fail("the connection ended without close_notify");

	std::printf("received %llu sha256 %s\n", total, digest.hex().c_str());
	SSL_shutdown(ssl);
	SSL_free(ssl);
	close(fd);
	SSL_CTX_free(ctx);
	return 0;
}
