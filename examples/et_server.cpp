/*
 * An edge-triggered TLS server in the manner of nginx: epoll with EPOLLET, readiness
 * tracked by the program itself (set by an event, cleared by WANT_READ or EAGAIN), and a
 * bounded buffer between the client and a slow consumer. It stops reading the client
 * while its buffer is full, leaving data unread on purpose, and resumes only when the
 * consumer drains it. Under read-ahead that data sits in OpenSSL, not the socket.
 *
 * Usage: et_server --cert C --key K --sink FIFO [--buffer BYTES]
 * Serves one client on 127.0.0.1 and writes what it sends to FIFO (opened non-blocking:
 * the reader must have it open). Prints "port N" once it listens, "stalled" the first time
 * its buffer is full and the consumer takes nothing, and at the end "received N sha256 H
 * idle_wakeups W" (wake-ups that moved nothing).
 */

#include <algorithm>
#include <cerrno>
#include <fcntl.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#include "common/example.h"

using namespace example;

namespace {

enum : uint64_t { kClient = 1, kSink = 2 };

void watch(int epfd, int fd, uint32_t events, uint64_t data)
{
	struct epoll_event event = {};
	event.events = events | EPOLLET;
	event.data.u64 = data;
	if (epoll_ctl(epfd, EPOLL_CTL_ADD, fd, &event) != 0)
		fail("epoll_ctl");
}

} /* namespace */

int main(int argc, char **argv)
{
	const std::string sinkPath = option(argc, argv, "--sink", "");
	const size_t capacity = number(argc, argv, "--buffer", 65536);
	if (sinkPath.empty())
		fail("usage: et_server --cert C --key K --sink FIFO [--buffer BYTES]");
	int sink = open(sinkPath.c_str(), O_WRONLY | O_NONBLOCK | O_CLOEXEC);
	if (sink < 0)
		fail("open the sink");

	SSL_CTX *ctx = serverContext(option(argc, argv, "--cert", ""), option(argc, argv, "--key", ""));
	int port = 0;
	int listener = listenOn(0, &port);
	std::printf("port %d\n", port);
	std::fflush(stdout);
	int fd = accept4(listener, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
	if (fd < 0)
		fail("accept");
	close(listener);

	SSL *ssl = SSL_new(ctx);
	SSL_set_fd(ssl, fd);
	SSL_set_accept_state(ssl);
	int epfd = epoll_create1(EPOLL_CLOEXEC);
	watch(epfd, fd, EPOLLIN | EPOLLOUT | EPOLLRDHUP, kClient);
	watch(epfd, sink, EPOLLOUT, kSink);

	std::vector<unsigned char> buffer(capacity);
	size_t used = 0;
	uint64_t received = 0, idleWakeups = 0;
	Sha256 digest;
	bool handshaken = false, clientReadable = true, clientWritable = true, sinkWritable = true;
	bool peerDone = false, announced = false, woke = false;
	while (!(peerDone && used == 0)) {
		bool moved = false;
		if (!handshaken && (clientReadable || clientWritable)) {
			int r = SSL_do_handshake(ssl);
			if (r == 1) {
				handshaken = moved = true;
			} else if (SSL_get_error(ssl, r) == SSL_ERROR_WANT_READ) {
				clientReadable = false;
			} else if (SSL_get_error(ssl, r) == SSL_ERROR_WANT_WRITE) {
				clientWritable = false;
			} else {
				fail("handshake");
			}
		}
		for (bool more = handshaken; more;) {
			more = false;
			if (clientReadable && !peerDone && used < capacity) {
				int n = SSL_read(ssl, buffer.data() + used, static_cast<int>(capacity - used));
				if (n > 0) {
					digest.update(buffer.data() + used, static_cast<size_t>(n));
					used += static_cast<size_t>(n);
					received += static_cast<uint64_t>(n);
					more = true;
				} else if (SSL_get_error(ssl, n) == SSL_ERROR_WANT_READ) {
					clientReadable = false;
				} else if (SSL_get_error(ssl, n) == SSL_ERROR_ZERO_RETURN) {
					peerDone = more = true;
				} else {
					fail("SSL_read");
				}
			}
			if (used > 0 && sinkWritable) {
				ssize_t n = write(sink, buffer.data(), used);
				if (n > 0) {
					std::memmove(buffer.data(), buffer.data() + n, used - static_cast<size_t>(n));
					used -= static_cast<size_t>(n);
					more = true;
				} else if (errno == EAGAIN) {
					sinkWritable = false;
				} else {
					fail("write to the sink");
				}
			}
			moved = moved || more;
		}
		idleWakeups += woke && !moved;
		if (used == capacity && !sinkWritable && !announced) {
			std::printf("stalled\n");
			std::fflush(stdout);
			announced = true;
		}
		if (peerDone && used == 0)
			break;

		struct epoll_event events[4];
		int n = epoll_wait(epfd, events, 4, -1);
		if (n < 0 && errno != EINTR)
			fail("epoll_wait");
		for (int i = 0; i < n; i++) {
			const uint32_t e = events[i].events;
			if (events[i].data.u64 == kSink) {
				sinkWritable = sinkWritable || (e & (EPOLLOUT | EPOLLERR));
			} else {
				clientReadable = clientReadable || (e & (EPOLLIN | EPOLLRDHUP | EPOLLERR | EPOLLHUP));
				clientWritable = clientWritable || (e & (EPOLLOUT | EPOLLERR | EPOLLHUP));
			}
		}
		woke = n > 0;
	}
	std::printf("received %llu sha256 %s idle_wakeups %llu\n",
		    static_cast<unsigned long long>(received), digest.hex().c_str(),
		    static_cast<unsigned long long>(idleWakeups));
	SSL_shutdown(ssl);
	SSL_free(ssl);
	close(fd);
	close(sink);
	close(epfd);
	SSL_CTX_free(ctx);
	return 0;
}
