/*
 * DTLS over connected UDP sockets on 127.0.0.1, the client's socket given to OpenSSL by
 * SSL_set_fd (a socket BIO, as OpenSSL 3.0 makes it): a server thread counts the datagrams
 * that carry the client's messages. Each SSL_write is one record and one datagram, and a
 * receiver that takes a datagram for a message relies on it.
 *
 * Usage: dtls_datagrams --cert FILE --key FILE [--messages N]
 * The client writes N messages of 100 bytes (default 30) in a burst, then close_notify.
 * Prints "datagrams D messages M bytes B" (the server's count) and exits 0.
 */

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <thread>

#include "common/example.h"

using namespace example;

namespace {

constexpr int kMessage = 100;

/* A UDP socket bound to a free port of 127.0.0.1; its address in *address. */
int boundUdp(struct sockaddr_in *address)
{
	const int fd = socket(AF_INET, SOCK_DGRAM, 0);
	*address = {};
	address->sin_family = AF_INET;
	address->sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	socklen_t length = sizeof(*address);
	if (fd < 0 || bind(fd, reinterpret_cast<struct sockaddr *>(address), sizeof(*address)) != 0 ||
	    getsockname(fd, reinterpret_cast<struct sockaddr *>(address), &length) != 0)
		fail("a UDP socket");
	return fd;
}

void connectUdp(int fd, const struct sockaddr_in &peer)
{
	if (connect(fd, reinterpret_cast<const struct sockaddr *>(&peer), sizeof(peer)) != 0)
		fail("connect (UDP)");
}

SSL_CTX *dtlsContext(const SSL_METHOD *method)
{
	SSL_CTX *ctx = SSL_CTX_new(method);
	if (!ctx)
		fail("SSL_CTX_new (DTLS)");
	return ctx;
}

/*
 * Reads until close_notify, counting the datagrams: a datagram is peeked at only when
 * OpenSSL holds nothing of one already (several records in one datagram are read in turn).
 */
void serve(SSL *ssl, int fd, int *datagrams, int *messages, long *bytes)
{
	if (SSL_accept(ssl) != 1)
		fail("SSL_accept (DTLS)");
	char buffer[65536];
	for (;;) {
		if (!SSL_has_pending(ssl)) {
			struct pollfd readable = { fd, POLLIN, 0 };
			if (poll(&readable, 1, 10000) != 1)
				fail("no datagram in 10 s");
			(*datagrams)++;
		}
		const int n = SSL_read(ssl, buffer, sizeof(buffer));
		if (n <= 0)
			return;
		(*messages)++;
		*bytes += n;
	}
}

} /* namespace */

int main(int argc, char **argv)
{
	const std::string cert = option(argc, argv, "--cert", "");
	const std::string key = option(argc, argv, "--key", "");
	const int count = static_cast<int>(number(argc, argv, "--messages", 30));
	struct sockaddr_in clientAddress, serverAddress;
	const int clientFd = boundUdp(&clientAddress);
	const int serverFd = boundUdp(&serverAddress);
	connectUdp(clientFd, serverAddress);
	connectUdp(serverFd, clientAddress);

	SSL_CTX *serverCtx = dtlsContext(DTLS_server_method());
	if (SSL_CTX_use_certificate_chain_file(serverCtx, cert.c_str()) != 1 ||
	    SSL_CTX_use_PrivateKey_file(serverCtx, key.c_str(), SSL_FILETYPE_PEM) != 1)
		fail("cannot load the certificate and key");
	SSL *server = SSL_new(serverCtx);
	SSL_set_fd(server, serverFd);
	int datagrams = 0, messages = 0;
	long bytes = 0;
	std::thread serving([&] { serve(server, serverFd, &datagrams, &messages, &bytes); });

	SSL_CTX *clientCtx = dtlsContext(DTLS_client_method());
	SSL *client = SSL_new(clientCtx);
	SSL_set_fd(client, clientFd);
	if (SSL_connect(client) != 1)
		fail("SSL_connect (DTLS)");
	char message[kMessage];
	for (int i = 0; i < count; i++) {
		std::memset(message, 'a' + i % 26, sizeof(message));
		if (SSL_write(client, message, sizeof(message)) != kMessage)
			fail("SSL_write (DTLS)");
	}
	SSL_shutdown(client);
	serving.join();
	std::printf("datagrams %d messages %d bytes %ld\n", datagrams, messages, bytes);
	SSL_free(client);
	SSL_free(server);
	SSL_CTX_free(clientCtx);
	SSL_CTX_free(serverCtx);
	close(clientFd);
	close(serverFd);
	return 0;
}
