/*
 * A client written the way many programs were before read-ahead was common: it waits for
 * its socket to be readable before every SSL_read unless SSL_pending() says bytes are
 * already decrypted. SSL_pending() ignores records OpenSSL has read but not decrypted,
 * so with read-ahead and no help the wait never ends (the seed's curl IMAPS stall).
 *
 * With --hangup-check it also does what stunnel does to spot a peer that went away: a
 * socket that polls POLLRDHUP with FIONREAD 0 is closed. With read-ahead the kernel's
 * queue is empty while OpenSSL still holds the peer's last records.
 *
 * With --reuse-check it reads one line (the rest stays in OpenSSL), closes its socket without
 * freeing the SSL, gets the same fd number for a new, empty socket and polls it: a reused
 * number must not inherit the old connection's readiness ("reuse ok", or exit 5).
 *
 * With --interrupt, once the lines are in it waits once more with no timeout, for data the
 * server never sends, while a timer signal (no SA_RESTART) fires every 10 ms: the wait must
 * end as the real one does, in -1 and EINTR ("interrupted: -1 EINTR").
 *
 * With --fork-after N it forks once N lines are in: the child reads the rest (which
 * read-ahead may already hold in OpenSSL's buffers) and the parent exits with its status.
 *
 * With --high-fd N the socket is moved to fd N first (raising RLIMIT_NOFILE as needed), to
 * run above FD_SETSIZE (select's sets are allocated for it).
 *
 * With --wait-on-copy HOW it waits, once connected, on a copy of the socket made by dup,
 * syscall-dup (syscall(SYS_dup)), syscall-fcntl (F_DUPFD_CLOEXEC), pidfd (pidfd_getfd of its
 * own pid, through syscall()) or pidfd-libc (glibc's pidfd_getfd); the syscall-* waits are
 * made through syscall() instead of libc's wrappers.
 *
 * Usage: poll_reader HOST PORT --lines N [--wait poll|poll_chk|ppoll|ppoll_chk|select|pselect|
 *                    epoll|epoll_pwait|syscall-poll|syscall-select|syscall-epoll|
 *                    select-dtablesize]
 *                    [--wait-on-copy dup|syscall-dup|syscall-fcntl|pidfd|pidfd-libc]
 *                    [--stall-ms MS] [--hangup-check] [--reuse-check] [--interrupt]
 *                    [--high-fd N] [--fork-after N]
 * Prints "lines N" and exits 0 once N lines arrived; when one wait sees nothing for
 * MS milliseconds while the server has gone quiet, prints "stalled ..." and exits 3;
 * when the hangup check closes early, prints "hung up ..." and exits 4.
 */

#include <cerrno>
#include <sys/mman.h>
/* glibc 2.36's header lacks its extern "C" block. */
extern "C" {
#include <sys/pidfd.h>
}
#include <fcntl.h>
#include <sys/syscall.h>
#include <algorithm>
#include <vector>
#include <csignal>
#include <cstring>
#include <poll.h>
#include <sys/resource.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/epoll.h>
#include <sys/select.h>
#include <unistd.h>

#include "common/example.h"

using namespace example;

namespace {

/* What the last wait returned, and its errno: --interrupt prints them. */
int g_lastWait = 0;
int g_lastErrno = 0;

bool failed(int n, const char *what)
{
	g_lastWait = n;
	g_lastErrno = n < 0 ? errno : 0;
	if (n < 0 && errno != EINTR)
		fail(what);
	return n > 0;
}

/*
 * Waits until fd is readable (or writable); false on timeout. *hangup: POLLRDHUP seen.
 * A negative timeoutMs waits without one.
 */
bool waitFor(const std::string &how, int fd, bool forWrite, int timeoutMs, bool *hangup)
{
	*hangup = false;
	const bool forever = timeoutMs < 0;
	if (how == "select-dtablesize") {
		/*
		 * select(getdtablesize(), ...) on a plain fd_set at the end of a page, the next
		 * page unmapped: the kernel reads no further than its table holds fds.
		 */
		static char *page = nullptr;
		if (!page) {
			page = static_cast<char *>(mmap(nullptr, 8192, PROT_READ | PROT_WRITE,
							MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
			if (page == MAP_FAILED || munmap(page + 4096, 4096) != 0)
				fail("mmap");
		}
		fd_set *set = reinterpret_cast<fd_set *>(page + 4096 - sizeof(fd_set));
		FD_ZERO(set);
		FD_SET(fd, set);
		struct timeval tv = { timeoutMs / 1000, (timeoutMs % 1000) * 1000 };
		return failed(select(getdtablesize(), forWrite ? nullptr : set, forWrite ? set : nullptr, nullptr,
				     forever ? nullptr : &tv),
			      "select");
	}
	if (how == "select" || how == "pselect" || how == "syscall-select") {
		/* Sized for fd, as programs with fds above FD_SETSIZE allocate their sets. */
		const size_t bits = 8 * sizeof(unsigned long);
		std::vector<unsigned long> words(std::max(sizeof(fd_set) / sizeof(unsigned long), fd / bits + 1));
		words[fd / bits] |= 1UL << (fd % bits);
		fd_set *set = reinterpret_cast<fd_set *>(words.data());
		fd_set *readable = forWrite ? nullptr : set, *writable = forWrite ? set : nullptr;
		if (how == "select" || how == "syscall-select") {
			struct timeval tv = { timeoutMs / 1000, (timeoutMs % 1000) * 1000 };
			struct timeval *timeout = forever ? nullptr : &tv;
			return failed(how == "select" ? select(fd + 1, readable, writable, nullptr, timeout)
						      : static_cast<int>(syscall(SYS_select, fd + 1, readable, writable,
										 nullptr, timeout)),
				      "select");
		}
		struct timespec ts = { timeoutMs / 1000, (timeoutMs % 1000) * 1000000L };
		return failed(pselect(fd + 1, readable, writable, nullptr, forever ? nullptr : &ts, nullptr),
			      "pselect");
	}
	if (how == "epoll" || how == "epoll_pwait" || how == "syscall-epoll") {
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
		int n = how == "epoll"	       ? epoll_wait(epfd, out, 4, timeoutMs)
			: how == "epoll_pwait" ? epoll_pwait(epfd, out, 4, timeoutMs, nullptr)
					       : static_cast<int>(syscall(SYS_epoll_wait, epfd, out, 4, timeoutMs));
		if (n > 0 && out[0].data.u64 != event.data.u64)
			fail("epoll returned data that was never registered");
		return failed(n, "epoll");
	}
	struct pollfd pfd = { fd, static_cast<short>(forWrite ? POLLOUT : POLLIN | POLLRDHUP), 0 };
	struct timespec ts = { timeoutMs / 1000, (timeoutMs % 1000) * 1000000L };
	int n;
	/* The _chk forms are what _FORTIFY_SOURCE makes of calls whose nfds is not a constant. */
	if (how == "ppoll")
		n = ppoll(&pfd, 1, forever ? nullptr : &ts, nullptr);
	else if (how == "ppoll_chk")
		n = __ppoll_chk(&pfd, 1, forever ? nullptr : &ts, nullptr, sizeof(pfd));
	else if (how == "poll_chk")
		n = __poll_chk(&pfd, 1, timeoutMs, sizeof(pfd));
	else if (how == "syscall-poll")
		n = static_cast<int>(syscall(SYS_poll, &pfd, 1, timeoutMs));
	else
		n = poll(&pfd, 1, timeoutMs);
	*hangup = n > 0 && (pfd.revents & POLLRDHUP);
	return failed(n, "poll");
}

void onTimer(int) {}

/* Waits for data that never comes while SIGALRM fires every 10 ms; prints how it ended. */
int waitInterrupted(const std::string &how, int fd)
{
	struct sigaction action = {};
	action.sa_handler = onTimer; /* no SA_RESTART: the wait must return EINTR */
	sigaction(SIGALRM, &action, nullptr);
	const struct itimerval every10ms = { { 0, 10000 }, { 0, 10000 } };
	setitimer(ITIMER_REAL, &every10ms, nullptr);
	bool hangup = false;
	waitFor(how, fd, false, -1, &hangup);
	const struct itimerval off = {};
	setitimer(ITIMER_REAL, &off, nullptr);
	std::printf("interrupted: %d %s\n", g_lastWait,
		    g_lastErrno == EINTR ? "EINTR" : g_lastErrno ? strerror(g_lastErrno) : "no error");
	return g_lastWait == -1 && g_lastErrno == EINTR ? 0 : 6;
}

/* Moves fd to number target, raising the soft RLIMIT_NOFILE to reach it. */
int moveTo(int fd, int target)
{
	struct rlimit limit;
	if (getrlimit(RLIMIT_NOFILE, &limit) != 0)
		fail("getrlimit");
	if (limit.rlim_cur <= static_cast<rlim_t>(target)) {
		limit.rlim_cur = static_cast<rlim_t>(target) + 1;
		if (setrlimit(RLIMIT_NOFILE, &limit) != 0)
			fail("setrlimit");
	}
	if (dup2(fd, target) != target)
		fail("dup2");
	close(fd);
	return target;
}

/* The fd to wait on: fd itself, or a copy made as `how` says. */
int copyOf(int fd, const std::string &how)
{
	int copy = fd;
	if (how == "dup")
		copy = dup(fd);
	else if (how == "syscall-dup")
		copy = static_cast<int>(syscall(SYS_dup, fd));
	else if (how == "syscall-fcntl")
		copy = static_cast<int>(syscall(SYS_fcntl, fd, F_DUPFD_CLOEXEC, 100));
	else if (how == "pidfd") {
		const int self = static_cast<int>(syscall(SYS_pidfd_open, getpid(), 0));
		copy = self < 0 ? -1 : static_cast<int>(syscall(SYS_pidfd_getfd, self, fd, 0));
	} else if (how == "pidfd-libc") {
		const int self = pidfd_open(getpid(), 0);
		copy = self < 0 ? -1 : pidfd_getfd(self, fd, 0);
	} else if (!how.empty())
		fail("unknown --wait-on-copy");
	if (copy < 0)
		fail("the copy");
	return copy;
}

} /* namespace */

int main(int argc, char **argv)
{
	if (argc < 3)
		fail("usage: poll_reader HOST PORT --lines N [--wait poll|select|epoll]");
	const uint64_t wanted = number(argc, argv, "--lines", 1);
	const std::string how = option(argc, argv, "--wait", "poll");
	const int stallMs = static_cast<int>(number(argc, argv, "--stall-ms", 3000));
	const int highFd = static_cast<int>(number(argc, argv, "--high-fd", 0));
	uint64_t forkAfter = number(argc, argv, "--fork-after", 0);
	bool hangupCheck = false, reuseCheck = false, interrupt = false;
	for (int i = 1; i < argc; i++) {
		hangupCheck = hangupCheck || std::string(argv[i]) == "--hangup-check";
		reuseCheck = reuseCheck || std::string(argv[i]) == "--reuse-check";
		interrupt = interrupt || std::string(argv[i]) == "--interrupt";
	}
	bool hangup = false;

	SSL_CTX *ctx = SSL_CTX_new(TLS_client_method());
	SSL *ssl = SSL_new(ctx);
	int fd = connectTo(argv[1], argv[2]);
	if (highFd > 0)
		fd = moveTo(fd, highFd);
	setNonBlocking(fd);
	SSL_set_fd(ssl, fd);

	for (int r; (r = SSL_connect(ssl)) != 1;) {
		int error = SSL_get_error(ssl, r);
		if (error != SSL_ERROR_WANT_READ && error != SSL_ERROR_WANT_WRITE)
			fail("handshake");
		waitFor(how, fd, error == SSL_ERROR_WANT_WRITE, stallMs, &hangup);
	}

	const int waited = copyOf(fd, option(argc, argv, "--wait-on-copy", ""));
	uint64_t lines = 0;
	int status = 0;
	char buffer[64];
	while (lines < wanted && status == 0) {
		if (SSL_pending(ssl) == 0 && !waitFor(how, waited, false, stallMs, &hangup)) {
			std::printf("stalled: %s waited %d ms after %llu lines; OpenSSL holds data: %s\n",
				    how.c_str(), stallMs, static_cast<unsigned long long>(lines),
				    SSL_has_pending(ssl) ? "yes" : "no");
			status = 3;
			break;
		}
		int queued = 0;
		if (hangupCheck && hangup && SSL_pending(ssl) == 0 &&
		    ioctl(fd, FIONREAD, &queued) == 0 && queued == 0) {
			std::printf("hung up: POLLRDHUP and nothing queued after %llu lines; "
				    "OpenSSL holds data: %s\n",
				    static_cast<unsigned long long>(lines), SSL_has_pending(ssl) ? "yes" : "no");
			status = 4;
			break;
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
		if (forkAfter && lines >= forkAfter) {
			forkAfter = 0;
			const pid_t child = fork();
			if (child < 0)
				fail("fork");
			int childStatus = 0;
			if (child > 0 && waitpid(child, &childStatus, 0) == child)
				std::exit(WIFEXITED(childStatus) ? WEXITSTATUS(childStatus) : 1);
		}
	}
	if (reuseCheck && status == 0) {
		/* One more line, so that OpenSSL holds the rest, then the socket goes away. */
		while (SSL_read(ssl, buffer, sizeof(buffer)) <= 0 && waitFor(how, fd, false, stallMs, &hangup)) {
		}
		int pair[2];
		close(fd);
		if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, pair) != 0)
			fail("socketpair");
		if (pair[0] != fd && dup2(pair[0], fd) != fd) /* make it the same number */
			fail("dup2");
		struct pollfd pfd = { fd, POLLIN, 0 };
		int n = poll(&pfd, 1, 0);
		std::printf("%s\n", n == 0 ? "reuse ok" : "the reused fd was reported readable");
		SSL_free(ssl);
		SSL_CTX_free(ctx);
		return n == 0 ? 0 : 5;
	}
	if (status == 0) {
		std::printf("lines %llu\n", static_cast<unsigned long long>(lines));
		if (interrupt)
			status = waitInterrupted(how, fd);
	}
	if (status == 0)
		SSL_shutdown(ssl);
	SSL_free(ssl);
	close(fd);
	SSL_CTX_free(ctx);
	return status;
}
