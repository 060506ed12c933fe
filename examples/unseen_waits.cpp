/*
 * Programs that wait for their TLS socket where a preloaded library cannot see the wait,
 * or whose socket counts its readiness in bytes: each waits before it reads. (TLS over a
 * pty is readiness_cases' pty.)
 *
 * Usage: unseen_waits CASE [ARGS]
 *   ring PORT         against tls_server --burst 20: makes an io_uring instance first with
 *                     syscall(SYS_io_uring_setup), as libuv does, then waits for the socket
 *                     by IORING_OP_POLL_ADD before each line. Prints "lines 20", or "ring
 *                     poll timed out after N lines" and exits 3; "no ring" (exit 0) where
 *                     the kernel makes none.
 *   sent-away [own-bio] PORT
 *                     against tls_server --burst 20: a helper process forked at start is
 *                     sent a copy of the socket with SCM_RIGHTS after the handshake, and
 *                     before each line the program asks it to poll its copy. Prints
 *                     "lines 20", or "helper's poll timed out after N lines" and exits 3.
 *                     own-bio: the connection reads through a BIO of the program's own
 *                     (as curl's), and the copy is sent before the handshake.
 *   rcvlowat before|after [own-bio] PORT
 *                     against tls_server --burst 20: SO_RCVLOWAT of 100 bytes (a few
 *                     records) on the socket, set before the handshake or after it
 *                     (own-bio: the connection reads through a BIO of the program's own,
 *                     whose socket is learnt from its reads); reads
 *                     one line, then before each of the other 19 polls with a timeout of
 *                     0 (the kernel says ready only with 100 bytes queued). Prints "ready
 *                     R" (the polls that said ready) and "lines 20". An alarm of 30 s ends
 *                     a read that waits for ever ("stalled", exit 3).
 */

#include <cerrno>
#include <csignal>
#include <linux/io_uring.h>
#include <poll.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/descriptors.h"
#include "common/example.h"
#include "common/own_bio.h"
#include "common/waits.h"

using namespace example;

namespace {

/* An io_uring instance made and driven with raw system calls, as libuv does. */
class Ring {
public:
	bool make()
	{
		struct io_uring_params params = {};
		fd_ = static_cast<int>(syscall(SYS_io_uring_setup, 4, &params));
		if (fd_ < 0)
			return false;
		const size_t sqSize = params.sq_off.array + params.sq_entries * sizeof(unsigned);
		const size_t cqSize = params.cq_off.cqes + params.cq_entries * sizeof(struct io_uring_cqe);
		const bool single = params.features & IORING_FEAT_SINGLE_MMAP;
		const size_t size = single ? std::max(sqSize, cqSize) : sqSize;
		char *sq = map(size, IORING_OFF_SQ_RING);
		char *cq = single ? sq : map(cqSize, IORING_OFF_CQ_RING);
		sqes_ = reinterpret_cast<struct io_uring_sqe *>(
			map(params.sq_entries * sizeof(struct io_uring_sqe), IORING_OFF_SQES));
		sqTail_ = reinterpret_cast<unsigned *>(sq + params.sq_off.tail);
		sqMask_ = *reinterpret_cast<unsigned *>(sq + params.sq_off.ring_mask);
		sqArray_ = reinterpret_cast<unsigned *>(sq + params.sq_off.array);
		cqHead_ = reinterpret_cast<unsigned *>(cq + params.cq_off.head);
		cqTail_ = reinterpret_cast<unsigned *>(cq + params.cq_off.tail);
		return true;
	}

	/* POLL_ADD for POLLIN on fd; true when it completes within kPollMs. */
	bool waitReadable(int fd)
	{
		const unsigned tail = *sqTail_;
		const unsigned slot = tail & sqMask_;
		struct io_uring_sqe *sqe = &sqes_[slot];
		std::memset(sqe, 0, sizeof(*sqe));
		sqe->opcode = IORING_OP_POLL_ADD;
		sqe->fd = fd;
		sqe->poll32_events = POLLIN;
		sqArray_[slot] = slot;
		__atomic_store_n(sqTail_, tail + 1, __ATOMIC_RELEASE);
		if (syscall(SYS_io_uring_enter, fd_, 1, 0, 0, nullptr, 0) != 1)
			fail("io_uring_enter");
		/* The ring's own fd is readable once a completion is posted. */
		struct pollfd ring = { fd_, POLLIN, 0 };
		if (poll(&ring, 1, kPollMs) != 1)
			return false;
		const unsigned head = __atomic_load_n(cqHead_, __ATOMIC_ACQUIRE);
		if (head == __atomic_load_n(cqTail_, __ATOMIC_ACQUIRE))
			return false;
		__atomic_store_n(cqHead_, head + 1, __ATOMIC_RELEASE);
		return true;
	}

private:
	char *map(size_t size, off_t offset)
	{
		void *at = mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, fd_, offset);
		if (at == MAP_FAILED)
			fail("mmap of the ring");
		return static_cast<char *>(at);
	}

	int fd_ = -1;
	struct io_uring_sqe *sqes_ = nullptr;
	unsigned *sqTail_ = nullptr;
	unsigned sqMask_ = 0;
	unsigned *sqArray_ = nullptr;
	unsigned *cqHead_ = nullptr;
	unsigned *cqTail_ = nullptr;
};

/* Reads one record; fails on anything but data. */
std::string readLine(SSL *ssl)
{
	char buffer[256];
	const int n = SSL_read(ssl, buffer, sizeof(buffer));
	if (n <= 0)
		fail("SSL_read");
	return std::string(buffer, static_cast<size_t>(n));
}

int ring(const char *port)
{
	Ring ring;
	if (!ring.make()) {
		std::printf("no ring\n");
		return 0;
	}
	SSL_CTX *ctx = SSL_CTX_new(TLS_client_method());
	const int fd = connectTo("127.0.0.1", port);
	SSL *ssl = connectTls(ctx, fd);
	int lines = 0;
	for (; lines < 20; lines++) {
		if (SSL_pending(ssl) == 0 && !ring.waitReadable(fd)) {
			std::printf("ring poll timed out after %d lines\n", lines);
			return 3;
		}
		readLine(ssl);
	}
	std::printf("lines %d\n", lines);
	SSL_free(ssl);
	close(fd);
	SSL_CTX_free(ctx);
	return 0;
}

/* A connection that reads through a BIO of the program's own (as curl's); *method is its to free. */
SSL *connectThroughOwnBio(SSL_CTX *ctx, int fd, BIO_METHOD **method)
{
	*method = ownBioMethod(false, "own-bio");
	SSL *ssl = SSL_new(ctx);
	BIO *bio = ownBio(*method, fd);
	SSL_set_bio(ssl, bio, bio);
	if (SSL_connect(ssl) != 1)
		fail("SSL_connect");
	return ssl;
}

/* The helper: polls its copy of the socket each time it is asked, answers 'r' or 't'. */
[[noreturn]] void helper(int channel)
{
	const int copy = receiveDescriptor(channel);
	char ask;
	while (read(channel, &ask, 1) == 1) {
		struct pollfd pfd = { copy, POLLIN, 0 };
		const char answer = poll(&pfd, 1, kPollMs) == 1 ? 'r' : 't';
		if (write(channel, &answer, 1) != 1)
			break;
	}
	_exit(0);
}

int sentAway(const char *port, bool throughOwnBio)
{
	int pair[2];
	if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, pair) != 0)
		fail("socketpair");
	const pid_t child = fork();
	if (child == 0) {
		close(pair[0]);
		helper(pair[1]);
	}
	close(pair[1]);
	SSL_CTX *ctx = SSL_CTX_new(TLS_client_method());
	const int fd = connectTo("127.0.0.1", port);
	BIO_METHOD *method = nullptr;
	SSL *ssl;
	if (throughOwnBio) {
		sendDescriptor(pair[0], fd);
		ssl = connectThroughOwnBio(ctx, fd, &method);
	} else {
		ssl = connectTls(ctx, fd);
		sendDescriptor(pair[0], fd);
	}
	int lines = 0;
	int result = 0;
	for (; lines < 20; lines++) {
		char answer = 't';
		if (SSL_pending(ssl) == 0 &&
		    (write(pair[0], "w", 1) != 1 || read(pair[0], &answer, 1) != 1 || answer != 'r')) {
			std::printf("helper's poll timed out after %d lines\n", lines);
			result = 3;
			break;
		}
		readLine(ssl);
	}
	if (result == 0)
		std::printf("lines %d\n", lines);
	close(pair[0]);
	waitpid(child, nullptr, 0);
	SSL_free(ssl);
	BIO_meth_free(method);
	close(fd);
	SSL_CTX_free(ctx);
	return result;
}

void stalled(int)
{
	static const char line[] = "stalled\n";
	if (write(STDOUT_FILENO, line, sizeof(line) - 1) < 0) {
	}
	_exit(3);
}

int rcvlowat(const std::string &when, bool throughOwnBio, const char *port)
{
	signal(SIGALRM, stalled);
	alarm(30);
	const int lowWater = 100;
	SSL_CTX *ctx = SSL_CTX_new(TLS_client_method());
	const int fd = connectTo("127.0.0.1", port);
	if (when == "before" && setsockopt(fd, SOL_SOCKET, SO_RCVLOWAT, &lowWater, sizeof(lowWater)) != 0)
		fail("setsockopt");
	BIO_METHOD *method = nullptr;
	SSL *ssl;
	if (throughOwnBio)
		ssl = connectThroughOwnBio(ctx, fd, &method);
	else
		ssl = connectTls(ctx, fd);
	if (when == "after" && setsockopt(fd, SOL_SOCKET, SO_RCVLOWAT, &lowWater, sizeof(lowWater)) != 0)
		fail("setsockopt");
	/* The burst is one segment: once its first line is read, the rest is here. */
	readLine(ssl);
	int lines = 1, ready = 0;
	for (; lines < 20; lines++) {
		struct pollfd pfd = { fd, POLLIN, 0 };
		if (SSL_pending(ssl) > 0 || poll(&pfd, 1, 0) == 1)
			ready++;
		readLine(ssl);
	}
	std::printf("ready %d\nlines %d\n", ready, lines);
	SSL_free(ssl);
	BIO_meth_free(method);
	close(fd);
	SSL_CTX_free(ctx);
	return 0;
}

} /* namespace */

int main(int argc, char **argv)
{
	const std::string which = argc > 1 ? argv[1] : "";
	if (which == "ring" && argc > 2)
		return ring(argv[2]);
	if (which == "sent-away" && argc > 3 && std::string(argv[2]) == "own-bio")
		return sentAway(argv[3], true);
	if (which == "sent-away" && argc > 2)
		return sentAway(argv[2], false);
	if (which == "rcvlowat" && argc > 4 && std::string(argv[3]) == "own-bio")
		return rcvlowat(argv[2], true, argv[4]);
	if (which == "rcvlowat" && argc > 3)
		return rcvlowat(argv[2], false, argv[3]);
	std::fprintf(stderr, "usage: unseen_waits ring|sent-away|rcvlowat ...\n");
	return 2;
}
