/*
 * A client that waits for its TLS socket through liburing, which makes its ring with its
 * own system calls (past libc), before each read.
 *
 * Usage: liburing_waits PORT
 *   against tls_server --burst 20: makes a ring with io_uring_queue_init first, then waits
 *   by a POLL_ADD before each line. Prints "lines 20", or "ring poll timed out after N
 *   lines" and exits 3; "no ring" (exit 0) where the kernel makes none.
 */

#include <liburing.h>
#include <poll.h>
#include <unistd.h>

#include "common/example.h"
#include "common/waits.h"

using namespace example;

namespace {

/* A POLL_ADD for POLLIN on fd; true when it completes within kPollMs. */
bool waitReadable(struct io_uring *ring, int fd)
{
	struct io_uring_sqe *sqe = io_uring_get_sqe(ring);
	if (!sqe)
		fail("io_uring_get_sqe");
	io_uring_prep_poll_add(sqe, fd, POLLIN);
	if (io_uring_submit(ring) != 1)
		fail("io_uring_submit");
	struct __kernel_timespec limit = { kPollMs / 1000, 0 };
	struct io_uring_cqe *cqe = nullptr;
	if (io_uring_wait_cqe_timeout(ring, &cqe, &limit) != 0)
		return false;
	io_uring_cqe_seen(ring, cqe);
	return true;
}

} /* namespace */

int main(int argc, char **argv)
{
	if (argc < 2) {
		std::fprintf(stderr, "usage: liburing_waits PORT\n");
		return 2;
	}
	struct io_uring ring;
	if (io_uring_queue_init(4, &ring, 0) != 0) {
		std::printf("no ring\n");
		return 0;
	}
	SSL_CTX *ctx = SSL_CTX_new(TLS_client_method());
	const int fd = connectTo("127.0.0.1", argv[1]);
	SSL *ssl = connectTls(ctx, fd);
	int lines = 0;
	for (; lines < 20; lines++) {
		if (SSL_pending(ssl) == 0 && !waitReadable(&ring, fd)) {
			std::printf("ring poll timed out after %d lines\n", lines);
			return 3;
		}
		char buffer[256];
		if (SSL_read(ssl, buffer, sizeof(buffer)) <= 0)
			fail("SSL_read");
	}
	std::printf("lines %d\n", lines);
	SSL_free(ssl);
	close(fd);
	SSL_CTX_free(ctx);
	io_uring_queue_exit(&ring);
	return 0;
}
