/*
 * What an idle TLS client connection keeps after a burst: a forked server accepts N
 * connections one after another and sends each BURST bytes, then keeps it open; the client
 * reads each burst and keeps its connection. Prints "KiB per connection X", the client's
 * RSS growth over the N connections.
 * Usage: idle_memory --cert C --key K [--connections N] [--burst BYTES] [--release-buffers]
 * --release-buffers: SSL_MODE_RELEASE_BUFFERS on the client's context, as nginx sets.
 */

#include <csignal>
#include <fstream>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/example.h"

using namespace example;

namespace {

long rssKiB()
{
	std::ifstream status("/proc/self/status");
	for (std::string line; std::getline(status, line);) {
		if (line.rfind("VmRSS:", 0) == 0)
			return std::atol(line.c_str() + 6);
	}
	fail("no VmRSS in /proc/self/status");
}

[[noreturn]] void serve(SSL_CTX *ctx, int listener, int connections, size_t burst)
{
	std::vector<unsigned char> data(burst, 'x');
	std::vector<SSL *> kept;
	for (int i = 0; i < connections; i++) {
		const int fd = accept(listener, nullptr, nullptr);
		SSL *ssl = SSL_new(ctx);
		SSL_set_fd(ssl, fd);
		if (fd < 0 || SSL_accept(ssl) != 1 || SSL_write(ssl, data.data(), static_cast<int>(burst)) <= 0)
			fail("the server's side");
		kept.push_back(ssl);
	}
	/* Keeps every connection open until the client is done. */
	pause();
	_exit(0);
}

} /* namespace */

int main(int argc, char **argv)
{
	const int connections = static_cast<int>(number(argc, argv, "--connections", 300));
	const size_t burst = number(argc, argv, "--burst", 65536);
	bool release = false;
	for (int i = 1; i < argc; i++)
		release = release || std::string(argv[i]) == "--release-buffers";
	int port = 0;
	const int listener = listenOn(0, &port);
	const pid_t child = fork();
	if (child == 0)
		serve(serverContext(option(argc, argv, "--cert", ""), option(argc, argv, "--key", "")), listener,
		      connections, burst);
	close(listener);

	SSL_CTX *ctx = SSL_CTX_new(TLS_client_method());
	if (release)
		SSL_CTX_set_mode(ctx, SSL_MODE_RELEASE_BUFFERS);
	std::vector<char> buffer(16384);
	std::vector<SSL *> kept;
	const long before = rssKiB();
	for (int i = 0; i < connections; i++) {
		SSL *ssl = SSL_new(ctx);
		SSL_set_fd(ssl, connectTo("127.0.0.1", std::to_string(port)));
		if (SSL_connect(ssl) != 1)
			fail("SSL_connect");
		for (size_t got = 0; got < burst;) {
			const int n = SSL_read(ssl, buffer.data(), static_cast<int>(buffer.size()));
			if (n <= 0)
				fail("SSL_read");
			got += static_cast<size_t>(n);
		}
		kept.push_back(ssl);
	}
	const long after = rssKiB();
	std::printf("KiB per connection %.1f\n", static_cast<double>(after - before) / connections);
	kill(child, SIGTERM);
	waitpid(child, nullptr, 0);
	return 0;
}
