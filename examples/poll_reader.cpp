/*
 * A client written the way many programs were before read-ahead was common: it waits for
 * its socket to be readable before every SSL_read unless SSL_pending() says bytes are
 * already decrypted. SSL_pending() ignores records OpenSSL has read but not decrypted,
 * so with read-ahead and no help the wait never ends (the seed's curl IMAPS stall).
 *
 * Usage: poll_reader HOST PORT --lines N [--wait poll|select|epoll] [--stall-ms MS]
 * Prints "lines N" and exits 0 once N lines arrived; when one wait sees nothing for
 * MS milliseconds while the server has gone quiet, prints "stalled ..." and exits 3.
 */

#include <cerrno>
#include <poll.h>
#include <sys/epoll.h>
#include <sys/select.h>
#include <unistd.h>

#include "common/example.h"

using namespace example;

namespace {

/* Waits until fd is readable (or writable); false on timeout. */
bool waitFor(const std::string &how, int fd, bool forWrite, int timeoutMs)
{
	if (how == "select") {
		fd_set set;
		FD_ZERO(&set);
		FD_SET(fd, &set);
		struct timeval tv = { timeoutMs / 1000, (timeoutMs % 1000) * 1000 };
		int n = select(fd + 1, forWrite ? nullptr : &set, forWrite ? &set : nullptr, nullptr, &tv);
		if (n < 0 && errno != EINTR)
			fail("select");
		return n > 0;
	}
	if (how == "epoll") {
		static int epfd = -1;
		static bool registeredForWrite = false;
		struct epoll_event event = {};
		event.events = forWrite ? EPOLLOUT : EPOLLIN;
		event.data.u64 = 0x5eed0000u + static_cast<unsigned>(fd);
		if (epfd < 0) {
			epfd = epoll_create1(EPOLL_CLOEXEC);
			epoll_ctl(epfd, EPOLL_CTL_ADD, fd, &event);
		} else if (registeredForWrite != forWrite) {
			epoll_ctl(epfd, EPOLL_CTL_MOD, fd, &event);
		}
		registeredForWrite = forWrite;
		struct epoll_event out[4];
		int n = epoll_wait(epfd, out, 4, timeoutMs);
		if (n < 0 && errno != EINTR)
			fail("epoll_wait");
		if (n > 0 && out[0].data.u64 != event.data.u64)
			fail("epoll_wait returned data that was never registered");
		return n > 0;
	}
	struct pollfd pfd = { fd, static_cast<short>(forWrite ? POLLOUT : POLLIN), 0 };
	int n = poll(&pfd, 1, timeoutMs);
	if (n < 0 && errno != EINTR)
		fail("poll");
	return n > 0;
}

} /* namespace */

int main(int argc, char **argv)
{
	if (argc < 3)
		fail("usage: poll_reader HOST PORT --lines N [--wait poll|select|epoll]");
	const uint64_t wanted = number(argc, argv, "--lines", 1);
	const std::string how = option(argc, argv, "--wait", "poll");
	const int stallMs = static_cast<int>(number(argc, argv, "--stall-ms", 3000));

	SSL_CTX *ctx = SSL_CTX_new(TLS_client_method());
	SSL *ssl = SSL_new(ctx);
	int fd = connectTo(argv[1], argv[2]);
	setNonBlocking(fd);
	SSL_set_fd(ssl, fd);

	for (int r; (r = SSL_connect(ssl)) != 1;) {
		int error = SSL_get_error(ssl, r);
		if (error != SSL_ERROR_WANT_READ && error != SSL_ERROR_WANT_WRITE)
			fail("handshake");
		waitFor(how, fd, error == SSL_ERROR_WANT_WRITE, stallMs);
	}

	uint64_t lines = 0;
	char buffer[64];
	while (lines < wanted) {
		if (SSL_pending(ssl) == 0 && !waitFor(how, fd, false, stallMs)) {
			std::printf("stalled: %s waited %d ms after %llu lines; OpenSSL holds data: %s\n",
				    how.c_str(), stallMs, static_cast<unsigned long long>(lines),
				    SSL_has_pending(ssl) ? "yes" : "no");
			return 3;
		}
		int n = SSL_read(ssl, buffer, sizeof(buffer));
		if (n <= 0) {
			int error = SSL_get_error(ssl, n);
			if (error == SSL_ERROR_WANT_READ || error == SSL_ERROR_WANT_WRITE)
				continue;
			fail("SSL_read");
		}
		for (int i = 0; i < n; i++)
			lines += buffer[i] == '\n';
	}
	std::printf("lines %llu\n", static_cast<unsigned long long>(lines));
	SSL_shutdown(ssl);
	SSL_free(ssl);
	close(fd);
	SSL_CTX_free(ctx);
	return 0;
}
