/*
 * What an idle TLS connection keeps after a burst: this process reads BURST bytes on each
 * of N connections and keeps them all open; a forked peer makes the connections one after
 * another and sends each burst. Prints "KiB per connection X", this process's RSS growth
 * over the N connections; with --openssl-bytes, also "OpenSSL bytes per connection Y", the
 * growth of what OpenSSL has allocated and not freed (counted through
 * CRYPTO_set_mem_functions, which moves the heap's layout: the RSS is then not a plain
 * program's), the same question without the allocator's and the kernel's noise.
 * Usage: idle_memory --cert C --key K [--role client|server] [--connections N]
 *                    [--burst BYTES] [--release-buffers] [--openssl-bytes] [--connect-first]
 * --role: whether this process connects (the default) or accepts; the peer does the other.
 * --release-buffers: SSL_MODE_RELEASE_BUFFERS on this process's context (curl, python and
 * nginx set it).
 * --connect-first: this process makes every connection first, then reads each burst in
 * turn (a pool of clients that connect, then each take an answer); with --openssl-bytes
 * it prints "OpenSSL bytes per connection after the handshakes Z" first.
 */

#include <atomic>
#include <csignal>
#include <fstream>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/example.h"

using namespace example;

namespace {

/* OpenSSL's allocations, each with its length in front. */
std::atomic<long long> openSslBytes{0};
constexpr size_t kLengthPrefix = 16;

void *countedMalloc(size_t length, const char *, int)
{
	auto *block = static_cast<unsigned char *>(std::malloc(length + kLengthPrefix));
	if (!block)
		return nullptr;
	std::memcpy(block, &length, sizeof(length));
	openSslBytes += static_cast<long long>(length);
	return block + kLengthPrefix;
}

void countedFree(void *data, const char *, int)
{
	if (!data)
		return;
	unsigned char *block = static_cast<unsigned char *>(data) - kLengthPrefix;
	size_t length = 0;
	std::memcpy(&length, block, sizeof(length));
	openSslBytes -= static_cast<long long>(length);
	std::free(block);
}

void *countedRealloc(void *data, size_t length, const char *file, int line)
{
	void *moved = countedMalloc(length, file, line);
	if (!moved || !data)
		return moved;
	size_t old = 0;
	std::memcpy(&old, static_cast<unsigned char *>(data) - kLengthPrefix, sizeof(old));
	std::memcpy(moved, data, std::min(old, length));
	countedFree(data, file, line);
	return moved;
}

long rssKiB()
{
	std::ifstream status("/proc/self/status");
	for (std::string line; std::getline(status, line);) {
		if (line.rfind("VmRSS:", 0) == 0)
			return std::atol(line.c_str() + 6);
	}
	fail("no VmRSS in /proc/self/status");
}

/* One end of connection i: accepted from listener, or connected to port. */
SSL *open(SSL_CTX *ctx, bool accepting, int listener, int port)
{
	SSL *ssl = SSL_new(ctx);
	const int fd = accepting ? accept(listener, nullptr, nullptr) : connectTo("127.0.0.1", std::to_string(port));
	/* Without it each burst's last segment waited for a delayed acknowledgement: 40 ms a
	 * connection, 12 s a run of 300, with nothing measured in it. */
	const int on = 1;
	setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &on, sizeof on);
	SSL_set_fd(ssl, fd);
	if (fd < 0 || (accepting ? SSL_accept(ssl) : SSL_connect(ssl)) != 1)
		fail("the handshake");
	return ssl;
}

/* The peer: makes each connection, sends its burst, keeps it open until it is killed. */
[[noreturn]] void burst(SSL_CTX *ctx, bool accepting, int listener, int port, int connections, size_t size)
{
	std::vector<unsigned char> data(size, 'x');
	std::vector<SSL *> kept;
	for (int i = 0; i < connections; i++) {
		SSL *ssl = open(ctx, accepting, listener, port);
		/*
		 * Corked: the records arrive in full segments, several to a segment, whatever the
		 * reader's pace (a reader as fast as the writer found one record at each read, a
		 * test's read-ahead of two records never came: once in a CI run).
		 */
		const int on = 1, off = 0;
		setsockopt(SSL_get_fd(ssl), IPPROTO_TCP, TCP_CORK, &on, sizeof on);
		if (SSL_write(ssl, data.data(), static_cast<int>(size)) <= 0)
			fail("the peer's burst");
		setsockopt(SSL_get_fd(ssl), IPPROTO_TCP, TCP_CORK, &off, sizeof off);
		kept.push_back(ssl);
	}
	pause();
	_exit(0);
}

} /* namespace */

int main(int argc, char **argv)
{
	bool counting = false;
	for (int i = 1; i < argc; i++)
		counting = counting || std::string(argv[i]) == "--openssl-bytes";
	const bool counted = counting && CRYPTO_set_mem_functions(countedMalloc, countedRealloc, countedFree) == 1;
	const bool server = option(argc, argv, "--role", "client") == "server";
	const int connections = static_cast<int>(number(argc, argv, "--connections", 300));
	const size_t size = number(argc, argv, "--burst", 65536);
	bool release = false;
	for (int i = 1; i < argc; i++)
		release = release || std::string(argv[i]) == "--release-buffers";
	int port = 0;
	const int listener = listenOn(0, &port);
	SSL_CTX *serverCtx = serverContext(option(argc, argv, "--cert", ""), option(argc, argv, "--key", ""));
	SSL_CTX *clientCtx = SSL_CTX_new(TLS_client_method());
	const pid_t peer = fork();
	if (peer == 0)
		burst(server ? clientCtx : serverCtx, !server, listener, port, connections, size);

	SSL_CTX *ctx = server ? serverCtx : clientCtx;
	if (release)
		SSL_CTX_set_mode(ctx, SSL_MODE_RELEASE_BUFFERS);
	std::vector<char> buffer(16384);
	std::vector<SSL *> kept;
	const long before = rssKiB();
	const long long openSslBefore = openSslBytes;
	bool connectFirst = false;
	for (int i = 1; i < argc; i++)
		connectFirst = connectFirst || std::string(argv[i]) == "--connect-first";
	for (int i = 0; connectFirst && i < connections; i++)
		kept.push_back(open(ctx, server, listener, port));
	if (connectFirst && counted)
		std::printf("OpenSSL bytes per connection after the handshakes %lld\n",
			    (openSslBytes - openSslBefore) / connections);
	for (int i = 0; i < connections; i++) {
		SSL *ssl = connectFirst ? kept[static_cast<size_t>(i)] : open(ctx, server, listener, port);
		for (size_t got = 0; got < size;) {
			const int n = SSL_read(ssl, buffer.data(), static_cast<int>(buffer.size()));
			if (n <= 0)
				fail("SSL_read");
			got += static_cast<size_t>(n);
		}
		if (!connectFirst)
			kept.push_back(ssl);
	}
	const long after = rssKiB();
	std::printf("KiB per connection %.1f\n", static_cast<double>(after - before) / connections);
	if (counted)
		std::printf("OpenSSL bytes per connection %lld\n", (openSslBytes - openSslBefore) / connections);
	else if (counting)
		std::printf("OpenSSL bytes per connection not counted: it allocated before main\n");
	kill(peer, SIGTERM);
	waitpid(peer, nullptr, 0);
	for (SSL *ssl : kept) {
		close(SSL_get_fd(ssl));
		SSL_free(ssl);
	}
	SSL_CTX_free(serverCtx);
	SSL_CTX_free(clientCtx);
	return 0;
}
