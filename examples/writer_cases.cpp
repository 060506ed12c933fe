/*
 * Writers the coalescer must leave exactly as they are (issue 11). Each case prints what
 * the program sees; tests compare it with and without tlstune.
 * Usage: writer_cases PORT CASE, against tls_server --sink (--hold where a stalled peer
 * is needed; --connections 2 for reuse). TLS 1.2: a 1.3 server's unread session tickets
 * would make close() reset the connection. CASE:
 *   blocked-shutdown  a thread blocks in SSL_write on a blocking socket the peer stopped
 *                     reading; main calls shutdown(fd, SHUT_RDWR): the writer gets EPIPE
 *   blocked-exit      ... main calls exit(0)
 *   blocked-fork      ... main forks a child that exits; then shutdown as above
 *   blocked-alarm     ... a SIGALRM handler on main calls exit(0)
 *   full-close        non-blocking socket, peer stalled: write until WANT_WRITE, print
 *                     what SSL_write accepted ("accepted N sha256 H"), close(fd),
 *                     SSL_free, print "returned", then wait for a line on stdin
 *   full-free         ... SSL_free, print "returned", wait for stdin, close(fd)
 *   full-exit         ... print, then exit(0)
 *   full-emfile       ... dup until EMFILE, then as full-close
 *   full-close-all    ... as full-close, then close every number from 3 to the fd limit
 *   echo-close        against tls_server --echo, which blocks writing back what it reads:
 *                     non-blocking, write until WANT_WRITE, never read, close(fd),
 *                     SSL_free, print "returned", then wait for a line on stdin (python's
 *                     test_ssl test_nonblocking_send; the server's write must fail then)
 *   sigwait           SIGUSR1 blocked in every thread of the program; ten short writes,
 *                     then the process sends itself SIGUSR1 and takes it with sigwait
 *   pselect           the same, then pselect unblocks SIGUSR1 for its wait: EINTR at once
 *   sigpipe           SIGPIPE at its default; writes 100 lines to a peer that resets the
 *                     connection, waits for the reset, and goes on writing after errors
 *                     (up to 1000 writes)
 *   sigpipe-paced     the same without the wait: a line every 20 us (a busy wait, no
 *                     system call), so that the reset meets the writes wherever they
 *                     are, also bytes gathered while an earlier send met it (up to
 *                     20,000 writes, 0.4 s)
 *   read-after-reset  50 short lines, then "written", against tls_server --hold
 *                     --reset-after 1 (told to read on once the lines are written); once the
 *                     socket is closed (TCP_INFO's state, which leaves the reset's error
 *                     where it is), SSL_read: prints its SSL_get_error class and errno
 *   sigpipe-alternate the same from two buffers in turn: a write after a failed one is no
 *                     retry of it, which OpenSSL fails without a system call ("bad write
 *                     retry" in 1.1.1 and 3.0). Prints the first failure's SSL_get_error class and errno, the
 *                     second's class, and "survived"
 *   reuse             SSL_shutdown, close(fd), a new connection on the same fd number,
 *                     SSL_clear, SSL_connect and ten more lines on the same SSL
 *   msg-callback      a message callback on the context counts the application data
 *                     records it sees written, and the calls from threads other than
 *                     main; 20 times: 100 short lines, then a 2 ms sleep
 *   msg-callback-late ten short lines, then a message callback on the connection, ten more:
 *                     prints "application records N" (what the callback saw written)
 *   quiet-shutdown    ten short lines, SSL_set_shutdown(SENT | RECEIVED), SSL_shutdown
 *                     (prints "SSL_shutdown R"), SSL_free, close
 *   unshare-files     ten short lines on a connection, unshare(CLONE_FILES) (prints what it
 *                     returned), close_notify, SSL_free and close; a second connection, which
 *                     takes the same fd number (prints whether it did), ten short lines, a
 *                     5 ms sleep, close_notify (against --connections 2)
 *   raw-write, raw-writev, raw-send, raw-sendto, raw-sendmsg, raw-sendmmsg, raw-syscall,
 *   raw-sendfile, raw-splice
 *                     ten short lines, then "PLAIN\n" written on the socket by write, writev,
 *                     send, sendto, sendmsg, sendmmsg, syscall(SYS_write), sendfile (from a
 *                     memfd) or splice (from a pipe), then SSL_free and close
 *   nproc-thread, nproc-fork
 *                     a connection, then the process becomes a user of its own (a uid from
 *                     its pid: it must be root) with a task limit (RLIMIT_NPROC) of 2: ten
 *                     short lines, then a thread (pthread_create) or a child (fork) that
 *                     writes ten more; prints "thread R" (what pthread_create returned) or
 *                     "fork ok", then close_notify
 *   reset-connect-state, reset-accept-state, reset-set-method, reset-set-session,
 *   reset-copy-session
 *                     ten short lines, then SSL_set_connect_state, SSL_set_accept_state,
 *                     SSL_set_ssl_method(TLS_method()), SSL_set_session(NULL) or
 *                     SSL_copy_session_id from a new SSL (prints the call and what it
 *                     returned, 1 for the first two), close, SSL_free
 *   set-shutdown-raw, renegotiate-raw, renegotiate-abbreviated-raw
 *                     ten short lines, SSL_set_shutdown(SENT | RECEIVED), SSL_renegotiate
 *                     or SSL_renegotiate_abbreviated (prints what it returned), then
 *                     "PLAIN\n" written on the socket itself, SSL_free, close
 *   wbio-hook         ten short lines, SSL_set_rfd of the fd it writes to (OpenSSL makes
 *                     its write BIO the read BIO: prints "read BIO is the write BIO: yes"),
 *                     then SSL_get_wbio and a BIO_set_callback_ex on it counting writes,
 *                     twenty lines more and close_notify: prints what the callback saw
 *   set-mode          20 times: 100 short lines, a 2 ms sleep, then SSL_set_mode,
 *                     SSL_set_max_send_fragment (SSL_ctrl), SSL_set_options,
 *                     SSL_clear_options and SSL_set_block_padding on the connection;
 *                     prints "options changed N" (rounds whose setters all worked)
 *   closefrom         20 short lines, closefrom(3) (glibc makes the close_range system
 *                     call itself), then a socketpair that takes the freed numbers: prints
 *                     "socketpair got N bytes" (what arrived on it) and "closed"
 *   raw-close         the same, the socket closed by syscall(SYS_close, fd)
 *   mid-flush         30 connections in turn (tls_server --connections 30): 20 short
 *                     lines, a 100 us pause (the shim's thread may be encrypting them
 *                     then), then a way out: close and a socketpair on the number,
 *                     shutdown(SHUT_WR), or dup2 of a file over the number, in turn.
 *                     Prints "bytes into other files N"
 *   timer-close       PORT is four ports, comma-separated (four tls_server --sink): a
 *                     thread per port writes 3000 short lines on its own connection, then
 *                     close_notify, while a 50 us timer's SIGALRM handler calls
 *                     close_range(900, 999, 0) on numbers that are not open. Prints
 *                     "threads done"
 *   fclose            20 short lines, then the socket closed by fclose(fdopen(fd)) (glibc
 *                     closes the stream's fd itself): prints "closed"
 *   freopen           the same by freopen("/dev/null", "w", fdopen(fd)): prints "closed"
 *   daemon            20 short lines, daemon(1, 1), then 20 more from the child
 *   shut-write        SIGPIPE ignored; 5 short lines, shutdown(fd, SHUT_WR), then 3 more:
 *                     prints each write's result, SSL_get_error and errno
 *   vfork-shut        shut-write with the shutdown made by a vfork child (its _exit after)
 *   clone-vm-shut     the same, the child made by clone(CLONE_VM | CLONE_VFORK)
 *   clone-files-close the same, the child made with CLONE_FILES too, and closing the socket
 *                     (the parent's fd too); then a socketpair takes the number: prints the
 *                     bytes it got
 *   shut-rest         20 connections in turn (tls_server --connections 20): one short
 *                     line (the connection's first write goes straight out), close_notify,
 *                     shutdown(fd, SHUT_WR), then read to the server's end: prints "rounds
 *                     20 bytes N" (the close_notify and end each connection got back)
 *   shut-both         the same with SHUT_RDWR, the 3 writes once the kernel has reset the
 *                     connection (the server's close_notify met a socket shut for reading)
 *   longjmp-wait      300 rounds of 20 short lines, then a wait (select, poll, ppoll and
 *                     epoll_wait in turn) on an idle pipe that a SIGALRM handler (a one-shot
 *                     timer of 30 us) leaves by siglongjmp; then close_notify. Prints
 *                     "rounds 300"
 *   clone             20 short lines, then a child made by clone() (a copy of the process,
 *                     without fork's handlers) writes 20 more and exits; the parent waits
 *                     for it and leaves
 *   raw-fork          the same, the child made by syscall(SYS_fork)
 *   clone3            the same, the child made by syscall(SYS_clone3) (no CLONE_VM)
 *   clone-vm          one line, then a child made by clone(CLONE_VM) (it shares the
 *                     parent's memory and runs beside it) writes 20 and returns 20 from its
 *                     function; the parent waits for it, prints "child status S", writes
 *                     20 more and leaves
 *   spawn             20 short lines, then posix_spawn of a shell that writes "raw" to the
 *                     inherited socket itself; the parent waits for it and closes: the
 *                     peer gets the 20 lines, then bytes that are no record
 *   popen             the same, the shell started by popen
 *   system            the same, the shell started by system
 *   vfork             the same, the shell started by vfork and execl
 *   sent-away         a child forked first waits on a socketpair; 20 short lines, then the
 *                     socket goes to the child with SCM_RIGHTS, which writes "raw" to it
 *                     and exits; the parent waits for it and closes
 *   clone-vfork       20 short lines; then a child made by clone(CLONE_VFORK) without
 *                     CLONE_VM waits for a byte on a pipe, which another thread writes
 *                     after 20 short lines of its own (the parent stays in clone until the
 *                     child ends); prints "child ended"
 *   write-ex2         20 times: 50 short lines by SSL_write, then one by SSL_write_ex2
 *                     (OpenSSL 3.3+; prints "no SSL_write_ex2" where libssl lacks it)
 *   uncork-kill       TCP_CORK on, 20 short lines, TCP_CORK off, then SIGKILL: the kernel
 *                     sends what it was given when the process dies, nothing else
 *   nodelay-kill      20 short lines, TCP_NODELAY on, then SIGKILL
 *   dup-uncork-kill   uncork-kill with the cork set and cleared through a dup of the socket,
 *                     which is in an epoll set
 *   pending-handler   20,000 short lines while a 50 us timer's SIGALRM handler asks
 *                     SSL_pending and SSL_has_pending of the connection; prints "asked"
 *                     once the handler ran
 */

#include <csignal>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <dlfcn.h>
#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <setjmp.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/epoll.h>
#include <sys/time.h>
#include <spawn.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/sendfile.h>
#include <sys/uio.h>
#include <sys/select.h>
#include <sys/stat.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <thread>
#include <vector>
#include <sys/syscall.h>
#include <linux/sched.h>
#include <time.h>
#include <unistd.h>

#include "common/descriptors.h"
#include "common/example.h"

using namespace example;

namespace {

SSL_CTX *client()
{
	SSL_CTX *ctx = SSL_CTX_new(TLS_client_method());
	SSL_CTX_set_max_proto_version(ctx, TLS1_2_VERSION);
	return ctx;
}

/* close_notify, then the SSL, its socket and the context go. */
void endConnection(SSL *ssl, int fd, SSL_CTX *ctx)
{
	SSL_shutdown(ssl);
	SSL_free(ssl);
	close(fd);
	SSL_CTX_free(ctx);
}

/* A broken connection's end: no close_notify, whose write would meet SIGPIPE. */
void freeConnection(SSL *ssl, int fd, SSL_CTX *ctx)
{
	SSL_free(ssl);
	close(fd);
	SSL_CTX_free(ctx);
}

/* The kernel's send buffer is full: the peer stopped reading (bounded: 60 s). */
void waitUntilFull(int fd)
{
	for (int i = 0; i < 6000; i++) {
		struct pollfd writable = { fd, POLLOUT, 0 };
		if (poll(&writable, 1, 0) == 0)
			return;
		poll(nullptr, 0, 10);
	}
	fail("the socket never filled up");
}

/* Writes 16 KiB records until the connection fails; returns how it failed. */
std::string writeUntilError(SSL *ssl)
{
	const std::string record(16 * 1024, 'w');
	for (;;) {
		const int n = SSL_write(ssl, record.data(), static_cast<int>(record.size()));
		if (n <= 0) {
			const int error = SSL_get_error(ssl, n);
			return "writer: SSL_get_error " + std::to_string(error) + " errno " +
			       std::to_string(errno);
		}
	}
}

void onAlarm(int)
{
	std::exit(0);
}

int blockedWriter(const char *port, const std::string &how)
{
	std::signal(SIGPIPE, SIG_IGN);
	SSL_CTX *ctx = client();
	int fd = -1;
	SSL *ssl = connectSsl(ctx, port, &fd);
	std::string outcome;
	std::thread writer([&] { outcome = writeUntilError(ssl); });
	waitUntilFull(fd);
	if (how == "blocked-exit") {
		std::puts("exiting");
		std::fflush(stdout);
		std::exit(0);
	}
	if (how == "blocked-alarm") {
		std::signal(SIGALRM, onAlarm);
		std::puts("exiting");
		std::fflush(stdout);
		raise(SIGALRM);
		fail("the handler returned");
	}
	if (how == "blocked-fork") {
		const pid_t child = fork();
		if (child == 0)
			_exit(0);
		int status = -1;
		waitpid(child, &status, 0);
		std::printf("child status %d\n", status);
	}
	std::printf("shutdown %d\n", shutdown(fd, SHUT_RDWR));
	writer.join();
	std::puts(outcome.c_str());
	SSL_free(ssl);
	close(fd);
	SSL_CTX_free(ctx);
	return 0;
}

int fullSocket(const char *port, const std::string &how)
{
	SSL_CTX *ctx = client();
	int fd = -1;
	SSL *ssl = connectSsl(ctx, port, &fd);
	setNonBlocking(fd);
	Sha256 digest;
	uint64_t accepted = 0;
	const std::string record(1000, 'f');
	/* Bounded: a socket takes a few MiB at most. */
	for (int i = 0; i < 100000; i++) {
		const int n = SSL_write(ssl, record.data(), static_cast<int>(record.size()));
		if (n <= 0) {
			if (SSL_get_error(ssl, n) != SSL_ERROR_WANT_WRITE)
				fail("SSL_write");
			break;
		}
		digest.update(record.data(), record.size());
		accepted += record.size();
	}
	std::printf("accepted %llu sha256 %s\n", static_cast<unsigned long long>(accepted),
		    digest.hex().c_str());
	std::fflush(stdout);
	if (how == "full-exit")
		std::exit(0);
	if (how == "full-emfile") {
		/* No descriptor to spare at the close (bounded by the lowered limit). */
		struct rlimit files = { 256, 256 };
		getrlimit(RLIMIT_NOFILE, &files);
		files.rlim_cur = files.rlim_cur > 256 ? 256 : files.rlim_cur;
		setrlimit(RLIMIT_NOFILE, &files);
		while (dup(0) >= 0) {
		}
	}
	if (how == "full-close" || how == "echo-close" || how == "full-emfile" || how == "full-close-all") {
		close(fd);
		SSL_free(ssl);
		if (how == "full-close-all") {
			/* What a daemon does before it execs: every number up to the limit. */
			struct rlimit files = {};
			getrlimit(RLIMIT_NOFILE, &files);
			for (rlim_t number = 3; number < files.rlim_cur && number < 4096; number++)
				close(static_cast<int>(number));
		}
	} else {
		SSL_free(ssl);
	}
	std::puts("returned");
	std::fflush(stdout);
	char line[16];
	if (!std::fgets(line, sizeof(line), stdin))
		std::puts("stdin closed");
	if (how == "full-free")
		close(fd);
	SSL_CTX_free(ctx);
	return 0;
}

void onUsr1(int)
{
}

int sigwaitCase(const char *port, bool pselectWait)
{
	sigset_t usr1;
	sigemptyset(&usr1);
	sigaddset(&usr1, SIGUSR1);
	pthread_sigmask(SIG_BLOCK, &usr1, nullptr);
	SSL_CTX *ctx = client();
	int fd = -1;
	SSL *ssl = connectSsl(ctx, port, &fd);
	writeLines(ssl, 0, 10);
	if (pselectWait)
		std::signal(SIGUSR1, onUsr1);
	kill(getpid(), SIGUSR1);
	if (pselectWait) {
		sigset_t unblocked;
		sigemptyset(&unblocked);
		/* Pending since the kill: the wait ends at once unless another thread took it. */
		struct timespec limit = { 10, 0 };
		const int result = pselect(0, nullptr, nullptr, nullptr, &limit, &unblocked);
		std::printf("pselect %d errno %s\n", result, errno == EINTR ? "EINTR" : "other");
	} else {
		int taken = 0;
		sigwait(&usr1, &taken);
		std::printf("sigwait took signal %d\n", taken);
	}
	endConnection(ssl, fd, ctx);
	return 0;
}

int sigpipeCase(const char *port)
{
	SSL_CTX *ctx = client();
	int fd = -1;
	SSL *ssl = connectSsl(ctx, port, &fd);
	int failures = 0;
	for (int i = 0; i < 1000; i++) {
		const std::string line = "line " + std::to_string(i) + "\n";
		const int n = SSL_write(ssl, line.data(), static_cast<int>(line.size()));
		if (n <= 0)
			failures++;
		/*
		 * The first 100 lines are more than the peer reads before its reset: wait for
		 * that to arrive (it makes the socket readable), so that the writes after it
		 * meet it however fast they go (merged into few records, they took no time).
		 */
		if (i == 99) {
			struct pollfd peer = { fd, POLLIN, 0 };
			poll(&peer, 1, 10000);
		}
	}
	std::printf("survived %d failed writes\n", failures);
	return 0;
}

/*
 * A line every 20 us, timed by the clock alone: no call the shim would count as a wait.
 * alternate: from two buffers in turn (else one, whose address never changes).
 */
int sigpipePaced(const char *port, bool alternate)
{
	SSL_CTX *ctx = client();
	int fd = -1;
	SSL *ssl = connectSsl(ctx, port, &fd);
	int failures = 0;
	char buffers[2][32];
	for (int i = 0; i < 20000; i++) {
		char *line = buffers[alternate ? i % 2 : 0];
		const int length = std::snprintf(line, sizeof(buffers[0]), "line %d\n", i);
		const int n = SSL_write(ssl, line, length);
		if (n <= 0 && alternate && failures < 2) {
			const int error = SSL_get_error(ssl, n);
			if (failures == 0)
				std::printf("first failure %d errno %s\n", error, strerrorname_np(errno));
			else
				std::printf("second failure %d\n", error);
		}
		if (n <= 0)
			failures++;
		struct timespec start, now;
		clock_gettime(CLOCK_MONOTONIC, &start);
		do
			clock_gettime(CLOCK_MONOTONIC, &now);
		while ((now.tv_sec - start.tv_sec) * 1000000000L + (now.tv_nsec - start.tv_nsec) < 20000);
	}
	if (alternate)
		std::printf("survived\n");
	else
		std::printf("survived %d failed writes\n", failures);
	freeConnection(ssl, fd, ctx);
	return 0;
}

int readAfterReset(const char *port)
{
	SSL_CTX *ctx = client();
	int fd = -1;
	SSL *ssl = connectSsl(ctx, port, &fd);
	writeLines(ssl, 0, 50);
	std::printf("written\n");
	std::fflush(stdout);
	/* A wait no one could take for a read (a poll would flush what is held): bounded. */
	struct tcp_info info = {};
	for (long spins = 0; spins < 100000000L; spins++) {
		socklen_t length = sizeof(info);
		if (getsockopt(fd, IPPROTO_TCP, TCP_INFO, &info, &length) != 0 || info.tcpi_state == TCP_CLOSE)
			break;
	}
	char byte;
	const int n = SSL_read(ssl, &byte, 1);
	std::printf("read %d errno %s\n", SSL_get_error(ssl, n), n < 0 ? strerrorname_np(errno) : "-");
	freeConnection(ssl, fd, ctx);
	return 0;
}

int closefromCase(const char *port, bool raw)
{
	SSL_CTX *ctx = client();
	int fd = -1;
	SSL *ssl = connectSsl(ctx, port, &fd);
	writeLines(ssl, 0, 20);
	if (raw)
		syscall(SYS_close, fd);
	else
		closefrom(3);
	int pair[2];
	if (socketpair(AF_UNIX, SOCK_STREAM, 0, pair) != 0)
		fail("socketpair");
	/* Anything sent into the old numbers now arrives on the pair; a short wait for it. */
	struct pollfd other[2] = { { pair[0], POLLIN, 0 }, { pair[1], POLLIN, 0 } };
	poll(other, 2, 500);
	size_t got = 0;
	char buffer[65536];
	for (int end : { pair[0], pair[1] }) {
		ssize_t n;
		while ((n = recv(end, buffer, sizeof(buffer), MSG_DONTWAIT)) > 0)
			got += static_cast<size_t>(n);
	}
	std::printf("socketpair got %zu bytes\nclosed\n", got);
	SSL_free(ssl);
	SSL_CTX_free(ctx);
	return 0;
}

/* What arrived on a socketpair's ends, or was written into a file, after a short wait. */
size_t bytesAt(int first, int second)
{
	struct stat file = {};
	if (fstat(first, &file) == 0 && S_ISREG(file.st_mode))
		return static_cast<size_t>(file.st_size);
	struct pollfd ends[2] = { { first, POLLIN, 0 }, { second, POLLIN, 0 } };
	poll(ends, 2, 20);
	size_t got = 0;
	char buffer[65536];
	for (int end : { first, second }) {
		ssize_t n;
		while ((n = recv(end, buffer, sizeof(buffer), MSG_DONTWAIT)) > 0)
			got += static_cast<size_t>(n);
	}
	return got;
}

/*
 * A hunt: the shim's thread was encrypting the held lines when the way out only tried
 * its locks; the record then went after the close, into the file that took the number
 * (or after the FIN, lost), in 7 to 17 runs of 30.
 */
int midFlushCase(const char *port)
{
	SSL_CTX *ctx = client();
	size_t elsewhere = 0;
	for (int round = 0; round < 30; round++) {
		int fd = -1;
		SSL *ssl = connectSsl(ctx, port, &fd);
		writeLines(ssl, 0, 20);
		const struct timespec pause = { 0, 100 * 1000 };
		nanosleep(&pause, nullptr);
		if (round % 3 == 0) {
			close(fd);
			int pair[2];
			if (socketpair(AF_UNIX, SOCK_STREAM, 0, pair) != 0)
				fail("socketpair");
			SSL_free(ssl);
			elsewhere += bytesAt(pair[0], pair[1]);
			close(pair[0]);
			close(pair[1]);
		} else if (round % 3 == 1) {
			shutdown(fd, SHUT_WR);
			SSL_free(ssl);
			close(fd);
		} else {
			FILE *file = tmpfile();
			if (!file || dup2(fileno(file), fd) != fd)
				fail("tmpfile or dup2");
			fclose(file);
			SSL_free(ssl);
			elsewhere += bytesAt(fd, -1);
			close(fd);
		}
	}
	std::printf("bytes into other files %zu\n", elsewhere);
	SSL_CTX_free(ctx);
	return 0;
}

/* A server's way of ending a connection (lighttpd): its writes have all gone out. */
int shutAtRest(const char *port)
{
	SSL_CTX *ctx = client();
	size_t back = 0;
	int round = 0;
	for (; round < 20; round++) {
		int fd = -1;
		SSL *ssl = connectSsl(ctx, port, &fd);
		writeLines(ssl, 0, 1);
		SSL_shutdown(ssl);
		if (shutdown(fd, SHUT_WR) != 0)
			fail("shutdown");
		/* The server closes once it has read the client's end (bounded: tls_server's). */
		char buffer[4096];
		ssize_t n;
		while ((n = read(fd, buffer, sizeof(buffer))) > 0)
			back += static_cast<size_t>(n);
		SSL_free(ssl);
		close(fd);
	}
	std::printf("rounds %d bytes %zu\n", round, back);
	SSL_CTX_free(ctx);
	return 0;
}

std::vector<std::string> portList(const char *ports)
{
	std::vector<std::string> each;
	for (const char *at = ports; *at;) {
		const char *comma = std::strchr(at, ',');
		each.emplace_back(at, comma ? static_cast<size_t>(comma - at) : std::strlen(at));
		at = comma ? comma + 1 : at + std::strlen(at);
	}
	return each;
}

/* A SIGALRM timer every 50 us whose handler (SA_RESTART) is handler. */
void everyFiftyMicroseconds(void (*handler)(int))
{
	struct sigaction action = {};
	action.sa_handler = handler;
	action.sa_flags = SA_RESTART;
	sigaction(SIGALRM, &action, nullptr);
	const struct itimerval every = { { 0, 50 }, { 0, 50 } };
	setitimer(ITIMER_REAL, &every, nullptr);
}

void closeUnopened(int)
{
	const int saved = errno;
	close_range(900, 999, 0);
	errno = saved;
}

/*
 * A hunt: the handler's close waited for locks that the threads it interrupted held (200
 * to 600 ms a call), or for itself, and the process hung in a third of the runs.
 */
int timerCloseCase(const char *ports)
{
	const std::vector<std::string> each = portList(ports);
	SSL_CTX *ctx = client();
	everyFiftyMicroseconds(closeUnopened);
	std::vector<std::thread> writers;
	for (const std::string &port : each)
		writers.emplace_back([ctx, port] {
			int fd = -1;
			SSL *ssl = connectSsl(ctx, port.c_str(), &fd);
			writeLines(ssl, 0, 3000);
			SSL_shutdown(ssl);
			SSL_free(ssl);
			close(fd);
		});
	for (std::thread &writer : writers)
		writer.join();
	const struct itimerval off = {};
	setitimer(ITIMER_REAL, &off, nullptr);
	std::printf("threads done\n");
	SSL_CTX_free(ctx);
	return 0;
}

int fcloseCase(const char *port, bool reopen)
{
	SSL_CTX *ctx = client();
	int fd = -1;
	SSL *ssl = connectSsl(ctx, port, &fd);
	writeLines(ssl, 0, 20);
	FILE *stream = fdopen(fd, "r+");
	if (!stream || (reopen ? !(stream = freopen("/dev/null", "w", stream)) : fclose(stream) != 0))
		fail("fclose");
	if (reopen)
		fclose(stream);
	std::printf("closed\n");
	SSL_free(ssl);
	SSL_CTX_free(ctx);
	return 0;
}

int daemonCase(const char *port)
{
	SSL_CTX *ctx = client();
	int fd = -1;
	SSL *ssl = connectSsl(ctx, port, &fd);
	writeLines(ssl, 0, 20);
	if (daemon(1, 1) != 0)
		fail("daemon");
	writeLines(ssl, 20, 20);
	endConnection(ssl, fd, ctx);
	return 0;
}

/* The socket a child borrowing this memory shuts down or closes (vfork-shut, clone-vm-shut, clone-files-close). */
int childsSocket = -1;

[[noreturn]] int shutInChild(void *)
{
	_exit(shutdown(childsSocket, SHUT_WR) == 0 ? 0 : 1);
}

[[noreturn]] int closeInChild(void *)
{
	_exit(close(childsSocket) == 0 ? 0 : 1);
}

/* The shutdown (or close) by a child in this memory, which ends before the parent goes on. */
void byChild(int fd, const std::string &how)
{
	childsSocket = fd;
	pid_t child = -1;
	if (how == "vfork-shut") {
		child = vfork();
		if (child == 0)
			shutInChild(nullptr);
	} else {
		static char stack[256 * 1024];
		const bool closes = how == "clone-files-close";
		child = clone(closes ? closeInChild : shutInChild, stack + sizeof(stack),
			      CLONE_VM | CLONE_VFORK | (closes ? CLONE_FILES : 0) | SIGCHLD, nullptr);
	}
	int status = 0;
	if (child < 0 || waitpid(child, &status, 0) != child || status != 0)
		fail("the child");
}

int shutWrite(const char *port, const std::string &how)
{
	signal(SIGPIPE, SIG_IGN);
	SSL_CTX *ctx = client();
	int fd = -1;
	SSL *ssl = connectSsl(ctx, port, &fd);
	writeLines(ssl, 0, 5);
	const bool both = how == "shut-both";
	if (how == "shut-write" || both) {
		if (shutdown(fd, both ? SHUT_RDWR : SHUT_WR) != 0)
			fail("shutdown");
	} else {
		byChild(fd, how);
	}
	/*
	 * SHUT_RDWR: the server's close_notify meets a socket shut for reading, and the kernel
	 * resets the connection (bounded: 10 s, a millisecond apart).
	 */
	for (int i = 0; both && i < 10000; i++) {
		/* POLLHUP is there at once (both sides shut): only POLLERR ends the wait. */
		struct pollfd error = { fd, 0, 0 };
		if (poll(&error, 1, 0) == 1 && (error.revents & POLLERR))
			break;
		const struct timespec pause = { 0, 1000 * 1000 };
		nanosleep(&pause, nullptr);
	}
	for (int i = 0; i < 3; i++) {
		errno = 0;
		const int n = SSL_write(ssl, "line\n", 5);
		const int error = SSL_get_error(ssl, n);
		std::printf("write %d error %d errno %d\n", n, error, errno);
	}
	if (how == "clone-files-close") {
		/* The lowest free number is the socket's again: what reaches it was the parent's. */
		int pair[2];
		if (socketpair(AF_UNIX, SOCK_STREAM, 0, pair) != 0)
			fail("socketpair");
		SSL_free(ssl);
		close(pair[0]);
		char got[4096];
		const ssize_t n = recv(pair[1], got, sizeof(got), MSG_DONTWAIT);
		std::printf("the next socket on the number got %zd bytes\n", n < 0 ? 0 : n);
		close(pair[1]);
		SSL_CTX_free(ctx);
		return 0;
	}
	SSL_free(ssl);
	close(fd);
	SSL_CTX_free(ctx);
	return 0;
}

sigjmp_buf leaveWait;

void jumpOut(int)
{
	siglongjmp(leaveWait, 1);
}

int longjmpWait(const char *port)
{
	SSL_CTX *ctx = client();
	int fd = -1;
	SSL *ssl = connectSsl(ctx, port, &fd);
	int idle[2];
	const int set = epoll_create1(EPOLL_CLOEXEC);
	if (pipe(idle) != 0 || set < 0)
		fail("pipe");
	struct epoll_event interest = {};
	interest.events = EPOLLIN;
	epoll_ctl(set, EPOLL_CTL_ADD, idle[0], &interest);
	signal(SIGALRM, jumpOut);
	volatile int round = 0;
	for (; round < 300; round++) {
		writeLines(ssl, round * 20, 20);
		if (sigsetjmp(leaveWait, 1))
			continue;
		const struct itimerval once = { { 0, 0 }, { 0, 30 } };
		setitimer(ITIMER_REAL, &once, nullptr);
		struct pollfd both[2] = { { idle[0], POLLIN, 0 }, { fd, POLLIN, 0 } };
		fd_set readable;
		FD_ZERO(&readable);
		FD_SET(idle[0], &readable);
		struct epoll_event event;
		switch (round % 4) {
		case 0:
			select(idle[0] + 1, &readable, nullptr, nullptr, nullptr);
			break;
		case 1:
			poll(both, 2, -1);
			break;
		case 2:
			ppoll(both, 2, nullptr, nullptr);
			break;
		default:
			epoll_wait(set, &event, 1, -1);
		}
	}
	std::printf("rounds %d\n", round);
	endConnection(ssl, fd, ctx);
	return 0;
}

/* clone and raw-fork: the child goes on with the connection, the parent leaves it alone. */
SSL *childSsl = nullptr;
int childFd = -1;

[[noreturn]] int writeOnInChild(void *)
{
	writeLines(childSsl, 20, 20);
	std::exit(0);
}

int returnTwenty(void *)
{
	writeLines(childSsl, 20, 20);
	return 20;
}

int copiedProcess(const char *port, const std::string &how)
{
	SSL_CTX *ctx = client();
	childSsl = connectSsl(ctx, port, &childFd);
	/* clone-vm: one line, which goes out at once: the child's are the first held. */
	writeLines(childSsl, 0, how == "clone-vm" ? 1 : 20);
	pid_t child = -1;
	static char stack[256 * 1024];
	if (how == "clone") {
		child = clone(writeOnInChild, stack + sizeof(stack), SIGCHLD, nullptr);
	} else if (how == "clone-vm") {
		child = clone(returnTwenty, stack + sizeof(stack), CLONE_VM | SIGCHLD, nullptr);
		int status = 0;
		if (child < 0 || waitpid(child, &status, 0) != child)
			fail("the child");
		std::printf("child status %d\n", WIFEXITED(status) ? WEXITSTATUS(status) : -1);
		writeLines(childSsl, 40, 20);
		endConnection(childSsl, childFd, ctx);
		return 0;
	} else if (how == "clone3") {
		struct clone_args arguments = {};
		arguments.exit_signal = SIGCHLD;
		child = static_cast<pid_t>(syscall(SYS_clone3, &arguments, sizeof(arguments)));
		if (child == 0)
			writeOnInChild(nullptr);
	} else {
		child = static_cast<pid_t>(syscall(SYS_fork));
		if (child == 0)
			writeOnInChild(nullptr);
	}
	int status = 0;
	if (child < 0 || waitpid(child, &status, 0) != child || !WIFEXITED(status) || WEXITSTATUS(status) != 0)
		fail("the child");
	return 0;
}

/* clone-vfork: the child waits for a byte another thread of the parent writes after its lines. */
int vforkPipe[2];

[[noreturn]] int waitForTheByte(void *)
{
	/* Its copy of the writing end closed: a parent that dies ends the read too. */
	close(vforkPipe[1]);
	char byte;
	_exit(read(vforkPipe[0], &byte, 1) == 1 ? 0 : 1);
}

int cloneVfork(const char *port)
{
	SSL_CTX *ctx = client();
	int fd = -1;
	SSL *ssl = connectSsl(ctx, port, &fd);
	writeLines(ssl, 0, 20);
	if (pipe(vforkPipe) != 0)
		fail("pipe");
	alarm(30); /* a deadlock ends the case */
	std::thread writer([ssl] {
		writeLines(ssl, 20, 20);
		if (write(vforkPipe[1], "x", 1) != 1)
			fail("write");
	});
	static char stack[256 * 1024];
	const pid_t child = clone(waitForTheByte, stack + sizeof(stack), CLONE_VFORK | SIGCHLD, nullptr);
	int status = 0;
	if (child < 0 || waitpid(child, &status, 0) != child || !WIFEXITED(status) || WEXITSTATUS(status) != 0)
		fail("the child");
	writer.join();
	alarm(0);
	std::printf("child ended\n");
	endConnection(ssl, fd, ctx);
	return 0;
}

/* spawn, popen and system: a program started on the inherited socket writes to it at once. */
int spawned(const char *port, const std::string &how)
{
	SSL_CTX *ctx = client();
	int fd = -1;
	SSL *ssl = connectSsl(ctx, port, &fd);
	writeLines(ssl, 0, 20);
	if (how == "spawn") {
		posix_spawn_file_actions_t actions;
		posix_spawn_file_actions_init(&actions);
		posix_spawn_file_actions_adddup2(&actions, fd, 3);
		const char *argv[] = { "sh", "-c", "printf raw >&3", nullptr };
		pid_t child = -1;
		int status = 0;
		if (posix_spawn(&child, "/bin/sh", &actions, nullptr, const_cast<char **>(argv), environ) != 0 ||
		    waitpid(child, &status, 0) != child)
			fail("posix_spawn");
		posix_spawn_file_actions_destroy(&actions);
	} else if (how == "vfork") {
		fcntl(fd, F_SETFD, 0);
		const std::string command = "printf raw >&" + std::to_string(fd);
		int status = 0;
		const pid_t child = vfork();
		if (child == 0) {
			execl("/bin/sh", "sh", "-c", command.c_str(), static_cast<char *>(nullptr));
			_exit(127);
		}
		if (child < 0 || waitpid(child, &status, 0) != child || status != 0)
			fail("vfork");
	} else {
		fcntl(fd, F_SETFD, 0);
		const std::string command = "printf raw >&" + std::to_string(fd);
		if (how == "system") {
			if (system(command.c_str()) != 0)
				fail("system");
		} else {
			FILE *shell = popen(command.c_str(), "r");
			if (!shell || pclose(shell) != 0)
				fail("popen");
		}
	}
	close(fd);
	SSL_free(ssl);
	SSL_CTX_free(ctx);
	return 0;
}

/* The socket handed to another process, which writes to it at once. */
int sentAway(const char *port)
{
	int pair[2];
	if (socketpair(AF_UNIX, SOCK_STREAM, 0, pair) != 0)
		fail("socketpair");
	const pid_t child = fork();
	if (child < 0)
		fail("fork");
	if (child == 0) {
		close(pair[0]);
		const int socket = receiveDescriptor(pair[1]);
		_exit(write(socket, "raw", 3) == 3 ? 0 : 3);
	}
	close(pair[1]);
	SSL_CTX *ctx = client();
	int fd = -1;
	SSL *ssl = connectSsl(ctx, port, &fd);
	writeLines(ssl, 0, 20);
	sendDescriptor(pair[0], fd);
	int status = -1;
	if (waitpid(child, &status, 0) != child || status != 0)
		fail("the child");
	close(fd);
	SSL_free(ssl);
	SSL_CTX_free(ctx);
	return 0;
}

int reuseCase(const char *port)
{
	SSL_CTX *ctx = client();
	int fd = -1;
	SSL *ssl = connectSsl(ctx, port, &fd);
	writeLines(ssl, 0, 10);
	SSL_shutdown(ssl);
	close(fd);
	const int again = connectTo("127.0.0.1", port);
	std::printf("same fd number: %s\n", again == fd ? "yes" : "no");
	SSL_clear(ssl);
	if (SSL_connect(ssl) != 1)
		fail("SSL_connect after SSL_clear");
	writeLines(ssl, 10, 10);
	endConnection(ssl, again, ctx);
	std::puts("reused");
	return 0;
}

std::thread::id mainThread;
int recordsWritten = 0;
int otherThreadCalls = 0;

void countRecords(int writeP, int, int contentType, const void *header, size_t length, SSL *, void *)
{
	if (std::this_thread::get_id() != mainThread)
		otherThreadCalls++;
	const auto *bytes = static_cast<const unsigned char *>(header);
	if (writeP && contentType == SSL3_RT_HEADER && length >= 1 && bytes[0] == SSL3_RT_APPLICATION_DATA)
		recordsWritten++;
}

int msgCallbackCase(const char *port)
{
	mainThread = std::this_thread::get_id();
	SSL_CTX *ctx = client();
	SSL_CTX_set_msg_callback(ctx, countRecords);
	int fd = -1;
	SSL *ssl = connectSsl(ctx, port, &fd);
	for (int round = 0; round < 20; round++) {
		writeLines(ssl, round * 100, 100);
		/* A pause where the shim sees nothing: a thread of its own could encrypt now. */
		usleep(2000);
	}
	endConnection(ssl, fd, ctx);
	std::printf("application records %d, calls from other threads %d\n", recordsWritten, otherThreadCalls);
	return 0;
}

/* The callback set on the connection after 10 short lines: it sees only the 10 after it. */
int lateMsgCallbackCase(const char *port)
{
	mainThread = std::this_thread::get_id();
	SSL_CTX *ctx = client();
	int fd = -1;
	SSL *ssl = connectSsl(ctx, port, &fd);
	writeLines(ssl, 0, 10);
	SSL_set_msg_callback(ssl, countRecords);
	writeLines(ssl, 10, 10);
	endConnection(ssl, fd, ctx);
	std::printf("application records %d\n", recordsWritten);
	return 0;
}

/* SSL_set_shutdown(SENT | RECEIVED) after short lines: SSL_shutdown sends nothing and succeeds. */
int quietShutdownCase(const char *port)
{
	SSL_CTX *ctx = client();
	int fd = -1;
	SSL *ssl = connectSsl(ctx, port, &fd);
	writeLines(ssl, 0, 10);
	SSL_set_shutdown(ssl, SSL_SENT_SHUTDOWN | SSL_RECEIVED_SHUTDOWN);
	std::printf("SSL_shutdown %d\n", SSL_shutdown(ssl));
	SSL_free(ssl);
	close(fd);
	SSL_CTX_free(ctx);
	return 0;
}

/* A connection, unshare(CLONE_FILES), a second connection on the first one's number. */
int unshareFilesCase(const char *port)
{
	SSL_CTX *ctx = client();
	int fd = -1;
	SSL *ssl = connectSsl(ctx, port, &fd);
	writeLines(ssl, 0, 10);
	std::printf("unshare %d\n", unshare(CLONE_FILES));
	endConnection(ssl, fd, ctx);
	ctx = client();
	int again = -1;
	ssl = connectSsl(ctx, port, &again);
	std::printf("same fd number: %s\n", again == fd ? "yes" : "no");
	writeLines(ssl, 10, 10);
	/* Past the delay: a thread of the shim's would have sent the lines by now. */
	struct timespec pause = { 0, 5000000 };
	nanosleep(&pause, nullptr);
	endConnection(ssl, again, ctx);
	return 0;
}

/* Six bytes on fd by the program itself, the way how says. */
void writeRaw(int fd, const std::string &how)
{
	static char plain[] = "PLAIN\n";
	struct iovec part = { plain, 6 };
	struct msghdr message = {};
	message.msg_iov = &part;
	message.msg_iovlen = 1;
	long written = -1;
	if (how == "write") {
		written = write(fd, plain, 6);
	} else if (how == "writev") {
		written = writev(fd, &part, 1);
	} else if (how == "send") {
		written = send(fd, plain, 6, 0);
	} else if (how == "sendto") {
		written = sendto(fd, plain, 6, 0, nullptr, 0);
	} else if (how == "sendmsg") {
		written = sendmsg(fd, &message, 0);
	} else if (how == "sendmmsg") {
		struct mmsghdr messages = {};
		messages.msg_hdr = message;
		written = sendmmsg(fd, &messages, 1, 0) == 1 ? messages.msg_len : -1;
	} else if (how == "syscall") {
		written = syscall(SYS_write, fd, plain, 6);
	} else if (how == "sendfile") {
		const int file = memfd_create("plain", 0);
		if (file < 0 || write(file, plain, 6) != 6)
			fail("memfd");
		off_t from = 0;
		written = sendfile(fd, file, &from, 6);
		close(file);
	} else if (how == "splice") {
		int pipeFds[2];
		if (pipe(pipeFds) != 0 || write(pipeFds[1], plain, 6) != 6)
			fail("pipe");
		written = splice(pipeFds[0], nullptr, fd, nullptr, 6, 0);
		close(pipeFds[0]);
		close(pipeFds[1]);
	} else {
		fail("unknown raw write");
	}
	if (written != 6)
		fail("raw write");
}

/* Ten short lines, then six bytes of the program's own on the socket, then SSL_free and close. */
int rawWriteCase(const char *port, const std::string &how)
{
	SSL_CTX *ctx = client();
	int fd = -1;
	SSL *ssl = connectSsl(ctx, port, &fd);
	writeLines(ssl, 0, 10);
	writeRaw(fd, how);
	freeConnection(ssl, fd, ctx);
	return 0;
}

/* Ten short lines as a user with room for two tasks, then a thread or a child that writes ten more. */
int taskLimitCase(const char *port, bool byFork)
{
	SSL_CTX *ctx = client();
	int fd = -1;
	SSL *ssl = connectSsl(ctx, port, &fd);
	/* A uid nobody else has, not even this case run beside it in another tree. */
	const uid_t user = 100000 + static_cast<uid_t>(getpid() % 50000);
	const struct rlimit two = { 2, 2 };
	if (setrlimit(RLIMIT_NPROC, &two) != 0 || setresgid(user, user, user) != 0 ||
	    setresuid(user, user, user) != 0)
		fail("become a user with a task limit");
	writeLines(ssl, 0, 10);
	if (!byFork) {
		pthread_t thread;
		const int made = pthread_create(
			&thread, nullptr,
			[](void *connection) -> void * {
				writeLines(static_cast<SSL *>(connection), 10, 10);
				return nullptr;
			},
			ssl);
		std::printf("thread %d\n", made);
		if (made == 0)
			pthread_join(thread, nullptr);
		endConnection(ssl, fd, ctx);
		return 0;
	}
	const pid_t child = fork();
	if (child < 0) {
		std::printf("fork errno %d\n", errno);
		endConnection(ssl, fd, ctx);
		return 0;
	}
	if (child == 0) {
		writeLines(ssl, 10, 10);
		endConnection(ssl, fd, ctx);
		_exit(0);
	}
	int status = 0;
	waitpid(child, &status, 0);
	std::printf("fork %s\n", WIFEXITED(status) && WEXITSTATUS(status) == 0 ? "ok" : "child failed");
	/* The child said close_notify: the parent's copy of the connection only goes. */
	freeConnection(ssl, fd, ctx);
	return 0;
}

/* Ten short lines, then a call that clears the connection's ciphers, then close and SSL_free. */
int resetCase(const char *port, const std::string &call)
{
	SSL_CTX *ctx = client();
	int fd = -1;
	SSL *ssl = connectSsl(ctx, port, &fd);
	writeLines(ssl, 0, 10);
	int result = 1;
	if (call == "connect-state") {
		SSL_set_connect_state(ssl);
	} else if (call == "accept-state") {
		SSL_set_accept_state(ssl);
	} else if (call == "set-method") {
		result = SSL_set_ssl_method(ssl, TLS_method());
	} else if (call == "set-session") {
		result = SSL_set_session(ssl, nullptr);
	} else if (call == "copy-session") {
		SSL *fresh = SSL_new(ctx);
		result = SSL_copy_session_id(ssl, fresh);
		SSL_free(fresh);
	} else {
		fail("unknown call");
	}
	std::printf("%s %d\n", call.c_str(), result);
	close(fd);
	SSL_free(ssl);
	SSL_CTX_free(ctx);
	return 0;
}

/*
 * Ten short lines, then a call that sends what is held first (SSL_set_shutdown,
 * SSL_renegotiate, SSL_renegotiate_abbreviated), then "PLAIN" written on the socket
 * itself: the peer gets the ten lines, then bytes that are no record.
 */
int rawAfterCase(const char *port, const std::string &call)
{
	SSL_CTX *ctx = client();
	int fd = -1;
	SSL *ssl = connectSsl(ctx, port, &fd);
	writeLines(ssl, 0, 10);
	if (call == "set-shutdown")
		SSL_set_shutdown(ssl, SSL_SENT_SHUTDOWN | SSL_RECEIVED_SHUTDOWN);
	else if (call == "renegotiate")
		std::printf("SSL_renegotiate %d\n", SSL_renegotiate(ssl));
	else
		std::printf("SSL_renegotiate_abbreviated %d\n", SSL_renegotiate_abbreviated(ssl));
	if (write(fd, "PLAIN\n", 6) != 6)
		fail("write");
	SSL_free(ssl);
	close(fd);
	SSL_CTX_free(ctx);
	return 0;
}

long hookedWrites = 0, hookedBytes = 0;

long countWrites(BIO *, int operation, const char *, size_t, int, long, int result, size_t *processed)
{
	if (operation == (BIO_CB_WRITE | BIO_CB_RETURN) && result > 0 && processed) {
		hookedWrites++;
		hookedBytes += static_cast<long>(*processed);
	}
	return result;
}

/* The program hooks its socket BIO after ten short lines, then writes twenty more. */
int wbioHookCase(const char *port)
{
	SSL_CTX *ctx = client();
	int fd = -1;
	SSL *ssl = connectSsl(ctx, port, &fd);
	writeLines(ssl, 0, 10);
	if (SSL_set_rfd(ssl, fd) != 1)
		fail("SSL_set_rfd");
	BIO *wbio = SSL_get_wbio(ssl);
	std::printf("read BIO is the write BIO: %s\n", SSL_get_rbio(ssl) == wbio ? "yes" : "no");
	std::printf("write BIO is a socket BIO: %s\n", BIO_method_type(wbio) == BIO_TYPE_SOCKET ? "yes" : "no");
	BIO_set_callback_ex(wbio, countWrites);
	writeLines(ssl, 10, 20);
	SSL_shutdown(ssl);
	BIO_set_callback_ex(wbio, nullptr);
	std::printf("the callback saw %ld writes of %ld bytes\n", hookedWrites, hookedBytes);
	SSL_free(ssl);
	close(fd);
	SSL_CTX_free(ctx);
	return 0;
}

/* Changes what an encryption uses, after a pause in which the shim's thread may encrypt. */
int setModeCase(const char *port)
{
	SSL_CTX *ctx = client();
	int fd = -1;
	SSL *ssl = connectSsl(ctx, port, &fd);
	int changed = 0;
	for (int round = 0; round < 20; round++) {
		writeLines(ssl, round * 100, 100);
		usleep(2000);
		const bool mode = SSL_set_mode(ssl, SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER) &
				  SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER;
		const bool fragment = SSL_set_max_send_fragment(ssl, round % 2 ? 16384 : 4096) == 1;
		const bool set = SSL_set_options(ssl, SSL_OP_NO_RENEGOTIATION) & SSL_OP_NO_RENEGOTIATION;
		const bool cleared = !(SSL_clear_options(ssl, SSL_OP_NO_RENEGOTIATION) & SSL_OP_NO_RENEGOTIATION);
		const bool padding = SSL_set_block_padding(ssl, round % 2 ? 0 : 256) == 1;
		changed += mode && fragment && set && cleared && padding;
	}
	endConnection(ssl, fd, ctx);
	std::printf("options changed %d\n", changed);
	return 0;
}

/* A program that writes through both: its lines must reach the peer in its order. */
int writeEx2Case(const char *port)
{
	using WriteEx2 = int (*)(SSL *, const void *, size_t, uint64_t, size_t *);
	const auto writeEx2 = reinterpret_cast<WriteEx2>(dlsym(RTLD_DEFAULT, "SSL_write_ex2"));
	if (!writeEx2) {
		std::printf("no SSL_write_ex2\n");
		return 0;
	}
	SSL_CTX *ctx = client();
	int fd = -1;
	SSL *ssl = connectSsl(ctx, port, &fd);
	for (int round = 0; round < 20; round++) {
		writeLines(ssl, round * 51, 50);
		const std::string line = "line " + std::to_string(round * 51 + 50) + " (SSL_write_ex2)\n";
		size_t written = 0;
		if (writeEx2(ssl, line.data(), line.size(), 0, &written) != 1 || written != line.size())
			fail("SSL_write_ex2");
	}
	endConnection(ssl, fd, ctx);
	return 0;
}

} /* namespace */

SSL *askedSsl = nullptr;
volatile sig_atomic_t handlerRuns = 0;
volatile int pendingSeen = 0;

/* OpenSSL's queries read its state: a handler may make them (a progress meter). */
void askPending(int)
{
	const int savedErrno = errno;
	pendingSeen += SSL_pending(askedSsl) + SSL_has_pending(askedSsl);
	handlerRuns = handlerRuns + 1;
	errno = savedErrno;
}

int pendingInHandler(const char *port)
{
	SSL_CTX *ctx = client();
	int fd = -1;
	askedSsl = connectSsl(ctx, port, &fd);
	everyFiftyMicroseconds(askPending);
	writeLines(askedSsl, 0, 20000);
	const struct itimerval stop = {};
	setitimer(ITIMER_REAL, &stop, nullptr);
	std::printf("%s\n", handlerRuns > 0 ? "asked" : "the timer never fired");
	endConnection(askedSsl, fd, ctx);
	return 0;
}

/* What a program that gathers its bytes itself hands the kernel (lighttpd corks a response). */
int gatheredThenKilled(const char *port, bool cork, bool throughCopy)
{
	SSL_CTX *ctx = client();
	int fd = -1;
	SSL *ssl = connectSsl(ctx, port, &fd);
	/* A socket in an epoll set: its copy is then a number the shim knows too (the set's). */
	const int set = throughCopy ? epoll_create1(0) : -1;
	struct epoll_event event = {};
	event.events = EPOLLIN;
	if (throughCopy && epoll_ctl(set, EPOLL_CTL_ADD, fd, &event) != 0)
		fail("epoll_ctl");
	const int copy = throughCopy ? dup(fd) : fd;
	const int on = 1, off = 0;
	if (cork && setsockopt(copy, IPPROTO_TCP, TCP_CORK, &on, sizeof(on)) != 0)
		fail("TCP_CORK");
	writeLines(ssl, 0, 20);
	if (setsockopt(copy, IPPROTO_TCP, cork ? TCP_CORK : TCP_NODELAY, cork ? &off : &on, sizeof(on)) != 0)
		fail("setsockopt");
	raise(SIGKILL);
	return 1;
}

int main(int argc, char **argv)
{
	if (argc < 3)
		fail("usage: writer_cases PORT CASE");
	const std::string how = argv[2];
	if (how.rfind("blocked-", 0) == 0)
		return blockedWriter(argv[1], how);
	if (how.rfind("full-", 0) == 0 || how == "echo-close")
		return fullSocket(argv[1], how);
	if (how == "sigwait" || how == "pselect")
		return sigwaitCase(argv[1], how == "pselect");
	if (how == "sigpipe")
		return sigpipeCase(argv[1]);
	if (how == "read-after-reset")
		return readAfterReset(argv[1]);
	if (how == "sigpipe-paced" || how == "sigpipe-alternate")
		return sigpipePaced(argv[1], how == "sigpipe-alternate");
	if (how == "reuse")
		return reuseCase(argv[1]);
	if (how == "longjmp-wait")
		return longjmpWait(argv[1]);
	if (how == "shut-write" || how == "shut-both" || how == "vfork-shut" || how == "clone-vm-shut" ||
	    how == "clone-files-close")
		return shutWrite(argv[1], how);
	if (how == "clone" || how == "raw-fork" || how == "clone3" || how == "clone-vm")
		return copiedProcess(argv[1], how);
	if (how == "spawn" || how == "popen" || how == "system" || how == "vfork")
		return spawned(argv[1], how);
	if (how == "clone-vfork")
		return cloneVfork(argv[1]);
	if (how == "sent-away")
		return sentAway(argv[1]);
	if (how == "daemon")
		return daemonCase(argv[1]);
	if (how == "closefrom" || how == "raw-close")
		return closefromCase(argv[1], how == "raw-close");
	if (how == "fclose" || how == "freopen")
		return fcloseCase(argv[1], how == "freopen");
	if (how == "mid-flush")
		return midFlushCase(argv[1]);
	if (how == "shut-rest")
		return shutAtRest(argv[1]);
	if (how == "timer-close")
		return timerCloseCase(argv[1]);
	if (how == "msg-callback")
		return msgCallbackCase(argv[1]);
	if (how == "msg-callback-late")
		return lateMsgCallbackCase(argv[1]);
	if (how == "quiet-shutdown")
		return quietShutdownCase(argv[1]);
	if (how == "unshare-files")
		return unshareFilesCase(argv[1]);
	if (how.rfind("raw-", 0) == 0)
		return rawWriteCase(argv[1], how.substr(4));
	if (how == "nproc-thread" || how == "nproc-fork")
		return taskLimitCase(argv[1], how == "nproc-fork");
	if (how.rfind("reset-", 0) == 0)
		return resetCase(argv[1], how.substr(6));
	if (how == "set-shutdown-raw" || how == "renegotiate-raw" || how == "renegotiate-abbreviated-raw")
		return rawAfterCase(argv[1], how.substr(0, how.size() - 4));
	if (how == "wbio-hook")
		return wbioHookCase(argv[1]);
	if (how == "set-mode")
		return setModeCase(argv[1]);
	if (how == "write-ex2")
		return writeEx2Case(argv[1]);
	if (how == "pending-handler")
		return pendingInHandler(argv[1]);
	if (how == "uncork-kill" || how == "nodelay-kill" || how == "dup-uncork-kill")
		return gatheredThenKilled(argv[1], how != "nodelay-kill", how == "dup-uncork-kill");
	fail("unknown case");
}
