/*
 * A shared library that uses TLS from its constructor, before the program's main() runs
 * and before a preloaded library's own constructor may have: its exchange() loads the CA
 * file named by SSL_CERT_FILE, verifies the server, writes 100 short lines, one
 * SSL_write each, reads the echo back and prints what came back. The program
 * (constructor_client) calls it again from main().
 */

#include <cstdio>
#include <cstdlib>
#include <unistd.h>

#include "common/example.h"

using namespace example;

int exchange(const char *when)
{
	const char *port = std::getenv("EXCHANGE_PORT");
	if (!port)
		return 1;
	SSL_CTX *ctx = SSL_CTX_new(TLS_client_method());
	SSL_CTX_set_default_verify_paths(ctx);
	SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER, nullptr);
	SSL *ssl = SSL_new(ctx);
	const int fd = connectTo("127.0.0.1", port);
	SSL_set_fd(ssl, fd);
	SSL_set1_host(ssl, "localhost");
	const bool connected = SSL_connect(ssl) == 1;

	Sha256 sent, echoed;
	size_t wanted = 0, received = 0;
	for (int i = 0; connected && i < 100; i++) {
		char line[32];
		std::snprintf(line, sizeof(line), "%s line %05d\n", when, i);
		const int n = static_cast<int>(std::strlen(line));
		if (SSL_write(ssl, line, n) != n)
			break;
		sent.update(line, static_cast<size_t>(n));
		wanted += static_cast<size_t>(n);
	}
	char buffer[4096];
	while (connected && received < wanted) {
		const int n = SSL_read(ssl, buffer, sizeof(buffer));
		if (n <= 0)
			break;
		echoed.update(buffer, static_cast<size_t>(n));
		received += static_cast<size_t>(n);
	}
	std::printf("%s: verify %ld, sent %zu, echoed %zu, same bytes %s\n", when,
		    SSL_get_verify_result(ssl), wanted, received,
		    received == wanted && sent.hex() == echoed.hex() ? "yes" : "no");
	std::fflush(stdout);
	if (connected)
		SSL_shutdown(ssl);
	SSL_free(ssl);
	close(fd);
	SSL_CTX_free(ctx);
	return connected && received == wanted ? 0 : 1;
}

__attribute__((constructor)) static void beforeMain()
{
	exchange("constructor");
}
