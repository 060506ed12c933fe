/*
 * An edge-triggered TLS client whose handshake takes the server's first record with it.
 * Both ends live in this process over a socketpair; the server side runs on memory BIOs,
 * so the order of arrivals is exact:
 *   1. the server's last handshake flight (TLS 1.2: ChangeCipherSpec, Finished) arrives
 *      and the client is woken for it (an edge);
 *   2. before the client reads, the server's greeting arrives (a second edge, pending);
 *   3. the client's SSL_connect reads. Without read-ahead it takes the handshake records
 *      only, the greeting stays in the socket and the pending edge is delivered; with
 *      read-ahead it takes the greeting too, the socket is empty, and the kernel drops
 *      the pending edge when it delivers.
 * Then the client waits for the greeting as an edge-triggered program does.
 * Usage: et_handshake --cert C --key K
 * Prints "greeting TEXT" and exits 0, or "no event for the greeting" and exits 3.
 */

#include <cerrno>
#include <poll.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#include "common/example.h"

using namespace example;

namespace {

const char kGreeting[] = "* OK ready\r\n";

/* The server's side of the wire: what its memory BIOs hold goes through `wire`. */
struct Server {
	SSL *ssl;
	BIO *in, *out;
	int wire;

	/* Feeds the server what the client sent; polls first, as any program would. */
	void take()
	{
		struct pollfd pfd = { wire, POLLIN, 0 };
		if (poll(&pfd, 1, 10000) != 1)
			fail("the client sent nothing");
		char buffer[16384];
		for (ssize_t n; (n = recv(wire, buffer, sizeof(buffer), MSG_DONTWAIT)) > 0;)
			BIO_write(in, buffer, static_cast<int>(n));
	}
	/* Sends everything the server has written so far, in one send. */
	void give()
	{
		char buffer[65536];
		int n = BIO_read(out, buffer, sizeof(buffer));
		if (n > 0 && send(wire, buffer, static_cast<size_t>(n), 0) != n)
			fail("send");
	}
};

int waitForEdge(int epfd)
{
	struct epoll_event event;
	return epoll_wait(epfd, &event, 1, 0);
}

} /* namespace */

int main(int argc, char **argv)
{
	int fds[2];
	if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds) != 0)
		fail("socketpair");
	setNonBlocking(fds[0]);

	SSL_CTX *serverCtx = serverContext(option(argc, argv, "--cert", ""), option(argc, argv, "--key", ""));
	SSL_CTX_set_max_proto_version(serverCtx, TLS1_2_VERSION);
	Server server = { SSL_new(serverCtx), BIO_new(BIO_s_mem()), BIO_new(BIO_s_mem()), fds[1] };
	SSL_set_bio(server.ssl, server.in, server.out);
	SSL_set_accept_state(server.ssl);

	SSL_CTX *clientCtx = SSL_CTX_new(TLS_client_method());
	SSL *client = SSL_new(clientCtx);
	SSL_set_fd(client, fds[0]);
	SSL_set_connect_state(client);
	int epfd = epoll_create1(EPOLL_CLOEXEC);
	struct epoll_event event = {};
	event.events = EPOLLIN | EPOLLET;
	if (epoll_ctl(epfd, EPOLL_CTL_ADD, fds[0], &event) != 0)
		fail("epoll_ctl");

	/* ClientHello; the server's first flight; the client's key exchange and Finished. */
	if (SSL_connect(client) == 1)
		fail("handshake done too early");
	server.take();
	SSL_do_handshake(server.ssl);
	server.give();
	if (waitForEdge(epfd) != 1)
		fail("no event for the server's first flight");
	if (SSL_connect(client) == 1)
		fail("handshake done too early");
	server.take();
	if (SSL_do_handshake(server.ssl) != 1)
		fail("server handshake");

	server.give(); /* 1 */
	if (waitForEdge(epfd) != 1)
		fail("no event for the server's Finished");
	if (SSL_write(server.ssl, kGreeting, sizeof(kGreeting) - 1) <= 0)
		fail("server write");
	server.give(); /* 2 */
	if (SSL_connect(client) != 1) /* 3 */
		fail("client handshake");

	int status = 0;
	if (waitForEdge(epfd) != 1) {
		std::printf("no event for the greeting\n");
		status = 3;
	} else {
		char line[64];
		int n = SSL_read(client, line, sizeof(line) - 1);
		if (n <= 0)
			fail("SSL_read");
		line[n] = '\0';
		std::printf("greeting %s", line);
	}
	SSL_free(client);
	SSL_free(server.ssl);
	SSL_CTX_free(clientCtx);
	SSL_CTX_free(serverCtx);
	close(epfd);
	close(fds[0]);
	close(fds[1]);
	return status;
}
