/*
 * Writers that leave, confine themselves or run out of descriptors right after short
 * writes (issue 22). Without tlstune the kernel owns every byte SSL_write accepted the
 * moment it returns; with it, what the shim holds must reach the kernel before any of
 * these can lose it. Each prints what the program sees; tests compare it with and
 * without tlstune, and what the server received.
 * Usage: leaving_writers PORT CASE, against tls_server --tls 1.2 --sink. CASE:
 *   seccomp-strict  seccomp's strict mode (read, write, exit and sigreturn only), then
 *                   three short lines, then the exit system call
 *   seccomp-strict-later
 *                   three short lines, then the same (strict mode turns the TSC off: a
 *                   clock read in a write faults)
 *   seccomp-filter  ten short lines, a filter that refuses sendto, sendmsg, getsockopt,
 *                   clone and clone3 (EPERM), ten more, close_notify and exit
 *   seccomp-inherited
 *                   a filter that refuses sendto and sendmsg, then an exec of this program,
 *                   which connects under it (as under systemd's SystemCallFilter=): twenty
 *                   short lines, close_notify
 *   emfile-close    twenty short lines, dup until EMFILE, then SSL_free and close
 *   close-all       twenty short lines, close and SSL_free, then close every number up to
 *                   the descriptor limit (what a daemon does before it execs)
 *   term-after-wait [US]
 *                   twenty short lines, a poll on stdin, then SIGTERM at its default
 *                   action, raised by the process itself; with US, the poll comes after
 *                   a busy loop of US microseconds (the shim's thread may be sending then)
 *   alarm-exit      writes 100-byte lines until a SIGALRM handler (after 20 ms) prints
 *                   "accepted N" (what SSL_write had accepted) and calls _exit(0)
 *   alarm-leave close|shutdown US
 *                   writes 100-byte lines until a SIGALRM handler (after US microseconds)
 *                   closes the socket or shuts it down (SIGPIPE ignored); the loop ends at
 *                   the first failed write and prints "accepted N"
 *   unshare-user    twenty short lines, unshare(CLONE_NEWUSER) (one thread only, the kernel
 *                   says), twenty more, close_notify; prints what unshare returned
 *   exit-while-writing exit|_exit|exec|abort
 *                   a child's thread writes 100-byte lines while its main thread, once 100
 *                   are accepted, leaves by exit, _exit, an exec of /bin/true or abort(); the
 *                   parent prints "accepted N" (what SSL_write had accepted, in shared
 *                   memory) once the child is gone, and ends with 0 where the child ended
 *                   the way it was told (abort: SIGABRT)
 *   close-while-writing close|close-range|shutdown|vfork-shutdown
 *                   a thread writes 100-byte lines while main, once 100 are accepted,
 *                   takes the socket from under it (the program's own race): close,
 *                   close_range over it, or shutdown(SHUT_WR) with SIGPIPE ignored, made
 *                   by main or by a vfork child; the writer stops at its first failed
 *                   write; prints "accepted N"
 */

#include <chrono>
#include <csignal>
#include <cstddef>
#include <sched.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <poll.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <thread>
#include <vector>

#include "common/example.h"

using namespace example;

namespace {

/* A seccomp filter that refuses calls (EPERM) and allows everything else. */
void refuse(std::initializer_list<unsigned> calls)
{
	std::vector<struct sock_filter> program = {
		BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)) };
	unsigned left = static_cast<unsigned>(calls.size());
	for (const unsigned call : calls) {
		/* A match jumps past the checks left and the ALLOW, to the refusal. */
		program.push_back(BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, call, static_cast<unsigned char>(left), 0));
		left--;
	}
	program.push_back(BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW));
	program.push_back(BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | EPERM));
	struct sock_fprog filter = { static_cast<unsigned short>(program.size()), program.data() };
	if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0 || prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &filter) != 0)
		fail("seccomp filter");
}

/* Refuses the calls a preload shim would make for held bytes. */
void refuseSendsAndThreads()
{
	refuse({ SYS_sendto, SYS_sendmsg, SYS_getsockopt, SYS_clone, SYS_clone3 });
}

/* before short lines, then between(), then after more, close_notify and the close. */
template <typename Between>
int writesAround(const char *port, int before, Between between, int after)
{
	SSL_CTX *ctx = SSL_CTX_new(TLS_client_method());
	int fd = -1;
	SSL *ssl = connectSsl(ctx, port, &fd);
	writeLines(ssl, 0, before);
	between();
	writeLines(ssl, before, after);
	SSL_shutdown(ssl);
	SSL_free(ssl);
	close(fd);
	SSL_CTX_free(ctx);
	return 0;
}

int seccompCase(const char *port, bool strict, int linesBefore = 0)
{
	if (!strict)
		return writesAround(port, 10, refuseSendsAndThreads, 10);
	SSL_CTX *ctx = SSL_CTX_new(TLS_client_method());
	int fd = -1;
	SSL *ssl = connectSsl(ctx, port, &fd);
	writeLines(ssl, 0, linesBefore);
	if (prctl(PR_SET_SECCOMP, SECCOMP_MODE_STRICT, 0, 0, 0) != 0)
		fail("seccomp strict");
	writeLines(ssl, linesBefore, 3);
	/* exit_group is not allowed: the thread's own exit ends the process. */
	syscall(SYS_exit, 0);
	return 0;
}

/* Started under a filter its own image never saw installed: the shim's thread starts, its sends fail. */
int inheritedSeccompCase(const char *port)
{
	refuse({ SYS_sendto, SYS_sendmsg });
	execl("/proc/self/exe", "leaving_writers", port, "seccomp-inherited-run", static_cast<char *>(nullptr));
	fail("exec");
}

int unshareCase(const char *port)
{
	return writesAround(port, 20, [] {
		const int result = unshare(CLONE_NEWUSER);
		std::printf("unshare %d%s\n", result, result == 0 ? "" : errno == EINVAL ? " EINVAL" : " other");
	}, 20);
}

int descriptorsCase(const char *port, bool exhaust)
{
	SSL_CTX *ctx = SSL_CTX_new(TLS_client_method());
	int fd = -1;
	SSL *ssl = connectSsl(ctx, port, &fd);
	writeLines(ssl, 0, 20);
	struct rlimit files = {};
	getrlimit(RLIMIT_NOFILE, &files);
	const int limit = files.rlim_cur > 4096 ? 4096 : static_cast<int>(files.rlim_cur);
	if (exhaust) {
		/* Bounded by the lowered limit: a few thousand numbers at most. */
		files.rlim_cur = static_cast<rlim_t>(limit);
		setrlimit(RLIMIT_NOFILE, &files);
		int taken = 0;
		while (dup(0) >= 0)
			taken++;
		std::printf("dup failed with %s\n", errno == EMFILE ? "EMFILE" : "another error");
		SSL_free(ssl);
		close(fd);
	} else {
		close(fd);
		SSL_free(ssl);
		for (int number = 3; number < limit; number++)
			close(number);
	}
	std::printf("closed\n");
	std::fflush(stdout);
	SSL_CTX_free(ctx);
	return 0;
}

volatile sig_atomic_t g_accepted = 0;

void onAlarm(int)
{
	char text[32];
	int length = 0;
	char digits[16];
	int count = 0;
	for (long value = g_accepted; count == 0 || value > 0; value /= 10)
		digits[count++] = static_cast<char>('0' + value % 10);
	for (const char *p = "accepted "; *p; p++)
		text[length++] = *p;
	while (count > 0)
		text[length++] = digits[--count];
	text[length++] = '\n';
	if (write(1, text, static_cast<size_t>(length)) < 0) {
	}
	_exit(0);
}

int alarmCase(const char *port)
{
	SSL_CTX *ctx = SSL_CTX_new(TLS_client_method());
	int fd = -1;
	SSL *ssl = connectSsl(ctx, port, &fd);
	signal(SIGALRM, onAlarm);
	struct itimerval after = { { 0, 0 }, { 0, 20000 } };
	setitimer(ITIMER_REAL, &after, nullptr);
	const std::string line = std::string(99, 'a') + "\n";
	/* Bounded: the alarm ends it long before (a million lines is 100 MB). */
	for (int i = 0; i < 1000000; i++) {
		if (SSL_write(ssl, line.data(), static_cast<int>(line.size())) <= 0)
			fail("SSL_write");
		g_accepted = g_accepted + 100;
	}
	fail("no alarm");
}

volatile sig_atomic_t g_leavingFd = -1;
volatile sig_atomic_t g_shutsDown = 0;

/* Async-signal-safe, and the program's to call: the socket leaves under its own writes. */
void onAlarmLeave(int)
{
	if (g_shutsDown)
		shutdown(g_leavingFd, SHUT_WR);
	else
		close(g_leavingFd);
}

int alarmLeaveCase(const char *port, const std::string &way, long micros)
{
	signal(SIGPIPE, SIG_IGN);
	SSL_CTX *ctx = SSL_CTX_new(TLS_client_method());
	int fd = -1;
	SSL *ssl = connectSsl(ctx, port, &fd);
	g_leavingFd = fd;
	g_shutsDown = way == "shutdown";
	signal(SIGALRM, onAlarmLeave);
	struct itimerval after = { { 0, 0 }, { 0, micros } };
	setitimer(ITIMER_REAL, &after, nullptr);
	const std::string line = std::string(99, 'a') + "\n";
	long accepted = 0;
	/* Bounded: the first write after the alarm fails (a million lines is 100 MB). */
	for (int i = 0; i < 1000000; i++) {
		if (SSL_write(ssl, line.data(), static_cast<int>(line.size())) <= 0)
			break;
		accepted += 100;
	}
	std::printf("accepted %ld\n", accepted);
	SSL_free(ssl);
	if (g_shutsDown)
		close(fd);
	SSL_CTX_free(ctx);
	return 0;
}

int exitWhileWritingCase(const char *port, const std::string &way)
{
	/* Shared with the parent, which reads it once the child is gone. */
	auto *accepted = static_cast<std::atomic<long> *>(
		mmap(nullptr, sizeof(std::atomic<long>), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0));
	if (accepted == MAP_FAILED)
		fail("mmap");
	new (accepted) std::atomic<long>(0);
	const pid_t child = fork();
	if (child < 0)
		fail("fork");
	if (child == 0) {
		SSL_CTX *ctx = SSL_CTX_new(TLS_client_method());
		int fd = -1;
		SSL *ssl = connectSsl(ctx, port, &fd);
		std::thread([ssl, accepted] {
			const std::string line = std::string(99, 'w') + "\n";
			/* Bounded: the process ends long before (a million lines is 100 MB). */
			for (int i = 0; i < 1000000; i++) {
				if (SSL_write(ssl, line.data(), static_cast<int>(line.size())) <= 0)
					return;
				accepted->fetch_add(100);
			}
		}).detach();
		/* No sleep: it leaves while the writer is in full flow. */
		while (accepted->load() < 100 * 100)
			sched_yield();
		if (way == "exec")
			execl("/bin/true", "true", static_cast<char *>(nullptr));
		if (way == "exit")
			exit(0);
		if (way == "abort") {
			const struct rlimit noCore = { 0, 0 };
			setrlimit(RLIMIT_CORE, &noCore);
			std::abort();
		}
		_exit(0);
	}
	int status = 0;
	if (waitpid(child, &status, 0) != child)
		fail("waitpid");
	std::printf("accepted %ld\n", accepted->load());
	/* The way out it was told to take: 0. */
	if (way == "abort" && WIFSIGNALED(status) && WTERMSIG(status) == SIGABRT)
		return 0;
	return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

int closeWhileWritingCase(const char *port, const std::string &way)
{
	signal(SIGPIPE, SIG_IGN);
	SSL_CTX *ctx = SSL_CTX_new(TLS_client_method());
	int fd = -1;
	SSL *ssl = connectSsl(ctx, port, &fd);
	std::atomic<long> accepted{0};
	std::thread writer([ssl, &accepted] {
		const std::string line = std::string(99, 'w') + "\n";
		/* Bounded: the close comes after the hundredth line. */
		for (int i = 0; i < 1000000; i++) {
			if (SSL_write(ssl, line.data(), static_cast<int>(line.size())) <= 0)
				return;
			accepted.fetch_add(100);
		}
	});
	/* No sleep: the close lands while the writer is in full flow. */
	while (accepted.load() < 100 * 100)
		sched_yield();
	if (way == "shutdown") {
		shutdown(fd, SHUT_WR);
	} else if (way == "vfork-shutdown") {
		const pid_t child = vfork();
		if (child == 0)
			_exit(shutdown(fd, SHUT_WR) == 0 ? 0 : 1);
		int status = 0;
		if (child < 0 || waitpid(child, &status, 0) != child || status != 0)
			fail("the vfork child's shutdown");
	} else if (way == "close-range")
		close_range(static_cast<unsigned>(fd), static_cast<unsigned>(fd) + 10, 0);
	else
		close(fd);
	writer.join();
	ERR_clear_error();
	SSL_free(ssl);
	SSL_CTX_free(ctx);
	std::printf("accepted %ld\n", accepted.load());
	return 0;
}

int termCase(const char *port, long spinMicros)
{
	SSL_CTX *ctx = SSL_CTX_new(TLS_client_method());
	int fd = -1;
	SSL *ssl = connectSsl(ctx, port, &fd);
	writeLines(ssl, 0, 20);
	/* Busy, not asleep: a sleep is a pause the shim hands what is held over after. */
	const auto spinEnd = std::chrono::steady_clock::now() + std::chrono::microseconds(spinMicros);
	while (std::chrono::steady_clock::now() < spinEnd) {
	}
	struct pollfd input = { 0, POLLIN, 0 };
	poll(&input, 1, 0);
	signal(SIGTERM, SIG_DFL);
	raise(SIGTERM);
	return 3; /* not reached */
}

} /* namespace */

int main(int argc, char **argv)
{
	if (argc < 3)
		fail("usage: leaving_writers PORT CASE");
	const std::string how = argv[2];
	if (how == "seccomp-strict" || how == "seccomp-filter")
		return seccompCase(argv[1], how == "seccomp-strict");
	if (how == "seccomp-inherited")
		return inheritedSeccompCase(argv[1]);
	if (how == "seccomp-inherited-run")
		return writesAround(argv[1], 10, [] {}, 10);
	if (how == "seccomp-strict-later")
		return seccompCase(argv[1], true, 3);
	if (how == "emfile-close" || how == "close-all")
		return descriptorsCase(argv[1], how == "emfile-close");
	if (how == "unshare-user")
		return unshareCase(argv[1]);
	if (how == "term-after-wait")
		return termCase(argv[1], argc > 3 ? std::atol(argv[3]) : 0);
	if (how == "alarm-exit")
		return alarmCase(argv[1]);
	if (how == "alarm-leave" && argc > 4)
		return alarmLeaveCase(argv[1], argv[3], std::atol(argv[4]));
	if (how == "close-while-writing" && argc > 3)
		return closeWhileWritingCase(argv[1], argv[3]);
	if (how == "exit-while-writing" && argc > 3)
		return exitWhileWritingCase(argv[1], argv[3]);
	fail("unknown case");
}
