#pragma once
/* A client that waits for its socket before each read, as programs did before read-ahead was common. */

#include <poll.h>
#include <string>
#include <sys/select.h>

#include "example.h"

namespace example {

/* How long a wait for bytes that are there may take before a case calls it a stall. */
constexpr int kPollMs = 2000;

inline SSL *connectTls(SSL_CTX *ctx, int fd)
{
	SSL *ssl = SSL_new(ctx);
	SSL_set_fd(ssl, fd);
	if (SSL_connect(ssl) != 1)
		fail("SSL_connect");
	return ssl;
}

/* Polls fd (or selects: fd below FD_SETSIZE), then reads one record; false when the wait times out. */
inline bool pollThenRead(SSL *ssl, int fd, std::string *line, bool select = false)
{
	if (SSL_pending(ssl) == 0 && select) {
		fd_set readable;
		FD_ZERO(&readable);
		FD_SET(fd, &readable);
		struct timeval limit = { kPollMs / 1000, 0 };
		if (::select(fd + 1, &readable, nullptr, nullptr, &limit) != 1)
			return false;
	} else if (SSL_pending(ssl) == 0) {
		struct pollfd pfd = { fd, POLLIN, 0 };
		if (poll(&pfd, 1, kPollMs) != 1)
			return false;
	}
	char buffer[256];
	int n = SSL_read(ssl, buffer, sizeof(buffer));
	if (n <= 0)
		fail("SSL_read");
	line->assign(buffer, static_cast<size_t>(n));
	return true;
}

/*
 * Reads lines until there are 20, polling before each; prints "lines 20", or "poll timed
 * out after N lines" and answers false.
 */
inline bool pollThenReadTo20(SSL *ssl, int fd, int lines)
{
	std::string line;
	for (; lines < 20; lines++) {
		if (!pollThenRead(ssl, fd, &line)) {
			std::printf("poll timed out after %d lines\n", lines);
			return false;
		}
	}
	std::printf("lines %d\n", lines);
	return true;
}

} /* namespace example */
