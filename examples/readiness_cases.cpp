/*
 * Programs whose socket moves, is not a socket, is peeked at, or carries plaintext after
 * TLS: each polls before it reads, as programs did before read-ahead was common.
 *
 * Usage: readiness_cases CASE [ARGS]
 *   moved PORT        against tls_server --burst 20: reads one line, then moves the
 *                     connection to a dup of its fd (SSL_set_fd) and closes the old number;
 *                     polls the new one before each of the other 19 lines.
 *                     Prints "lines 20", or "poll timed out after N lines" and exits 3.
 *   duplicate HOW PORT
 *                     the same, but the connection keeps its fd and the program waits on a
 *                     duplicate: HOW is dup, dup-first (a dup made before the process's
 *                     first SSL), dup-first-late (the same after 100 dups of another file),
 *                     fcntl (F_DUPFD_CLOEXEC), dup2-select (dup2 to fd 100,
 *                     waited on with select) or scm-rights (a copy sent to itself over a
 *                     socketpair, as a process that hands connections to another would;
 *                     scm-rights-mmsg: received by recvmmsg; scm-rights-moved: the
 *                     connection moved to that copy by SSL_set_fd, the old number closed;
 *                     scm-rights-dup2: the copy dup2ed onto the connection's number, then
 *                     closed),
 *                     restore (the fd saved by dup, a pipe dup2ed over it, then the saved
 *                     copy dup2ed back and closed: the connection's own number is waited
 *                     on), close-first (dup, close of the old number, then SSL_set_fd
 *                     to the copy), original (SSL_set_fd to a dup after the first line,
 *                     the program waits on the number it made it from) or original-first
 *                     (that dup made before any OpenSSL call, read from the handshake on).
 *                     Prints the same; restore and close-first then print
 *                     whether the socket would reset at its close ("linger 0": no).
 *   pipes --cert C --key K
 *                     TLS over a pipe pair (SSL_set_rfd/SSL_set_wfd) with a forked server
 *                     that sends 5 lines at once, then waits for "bye". After the first
 *                     line, asks the read end for no bytes with recv and recvmsg ("recv of
 *                     no bytes -1 ENOTSOCK, recvmsg -1 ENOTSOCK"). Prints "lines 5" (or
 *                     "poll timed out ..." and exits 3) and the server's "server got bye".
 *   pty --cert C --key K
 *                     the same over a raw-mode pseudo-terminal (SSL_set_rfd and SSL_set_wfd
 *                     on the slave, the server on the master).
 *   openssl-view PORT against tls_server --burst 20: prints, after the first line read and
 *                     after the last, "lines N has_pending H pending P bio_read ..."
 *                     (SSL_has_pending, SSL_pending, and what BIO_number_read of the read
 *                     BIO counted after the first line: +0 where the first read took all).
 *   header-peek PORT  against tls_server --burst 20: a non-blocking loop that polls, peeks
 *                     at 5 bytes and calls SSL_read once they are a whole record header;
 *                     prints "lines 20" and "no spin" (or "spins": over 100 wake-ups whose
 *                     peek found less than a header)
 *   edge-peek PORT    the same in an edge-triggered epoll loop (EPOLLIN|EPOLLET, waits of
 *                     2 s): each event, a peek of 5 bytes, then SSL_read until WANT_READ
 *                     (the loop drains: an edge comes again only for new bytes). Prints the
 *                     same.
 *   peek PORT         against tls_server --burst 3 --hangup (records, close_notify and FIN
 *                     in one segment): reads one line, then asks the socket as connection
 *                     pools do whether the peer is still there: recv(MSG_PEEK|MSG_DONTWAIT)
 *                     and FIONREAD. Prints "peek R" and "fionread positive|zero".
 *   close-unread [free-first|forked|written-last|one-record|longjmp|throw|copy-last|free-copy|
 *                 copy-exit|abort|abort-handled|exec] --cert C --key K
 *                     a forked TCP server sends 20 lines at once, then waits for the
 *                     client's end with recv(); the client reads one line and closes the
 *                     socket with the other 19 unread, then frees the SSL (free-first:
 *                     frees it, then closes; forked: a forked child reads the 19 and
 *                     closes its copy last, so the end is a FIN; written-last: writes a
 *                     line just before the close; one-record: the 20 lines come in one
 *                     record, of which the client reads 10 bytes, so the kernel holds
 *                     nothing unread; longjmp and throw: once all 20 are sent, a message
 *                     callback leaves SSL_read at the first record header, by longjmp or
 *                     by an exception, then the client frees and closes; copy-last: a
 *                     copy of the socket is made and the socket's own number closed
 *                     first, then the copy; free-copy: the copy made, the SSL freed,
 *                     then both closed; abort, exec, copy-exit: the client is a forked
 *                     child that calls abort(), execs /bin/true, which inherits the
 *                     socket, or exits after closing the socket's number behind a copy;
 *                     abort-handled: a SIGABRT handler goes back with siglongjmp, and the
 *                     client reads the 19 lines, so the close is a FIN). The kernel
 *                     resets a connection closed with unread data. Prints "server saw
 *                     reset" or "server saw fin".
 *   cancel-half-record --cert C --key K
 *                     the same server; a thread reads in a loop, and is cancelled once it
 *                     waits for the rest of the record (its message callback saw the
 *                     record's header, then it sleeps). Prints "poll after the cancel R"
 *                     (a poll of the socket at once: 0, OpenSSL holds part of a record).
 *   eof-in-thread --cert C --key K
 *                     a forked server writes a line, then closes without close_notify
 *                     once the client's second thread, which read the line, is asleep in
 *                     its next SSL_read on the blocking socket. Prints "second read N
 *                     want-read yes|no errno E" (an end of stream: 0, no, 0).
 *   rest-of-record on|off --cert C --key K
 *                     the program sets read-ahead on the SSL itself (on or off), reads 100
 *                     bytes of a forked server's one record of 2,000, and polls its socket
 *                     at once: prints "pending 1900" and "poll after part of a record 0"
 *                     (the rest is OpenSSL's; the kernel has nothing).
 *   half-record --cert C --key K
 *                     a forked TCP server sends half of a record of 1,000 bytes, and the
 *                     rest only once it has read 2 bytes from the client. The client
 *                     (non-blocking) polls and reads until OpenSSL holds the half
 *                     (SSL_read: WANT_READ, SSL_has_pending: 1), writes
 *                     "a", polls again for 300 ms (nothing comes: the server waits for
 *                     "b"), writes "b", then reads the record. Prints "poll after a write
 *                     R" and "read 1000".
 *   nested [poll|select|early|copy|poll-copy|moved-inner] PORT
 *                     against tls_server --burst 20: the connection in an epoll set (level-
 *                     triggered), that set inside another; before each line the program
 *                     waits on the outer set, then on the inner one (timeout 0), then
 *                     reads. poll or select: waits on the set's own fd with that call
 *                     instead of an outer set; early: both sets, and both registrations,
 *                     made before the process's first SSL; copy and poll-copy: a dup of the
 *                     inner set's fd is what the outer set holds, or what poll waits on;
 *                     moved-inner: the inner set's own number is closed after a dup of it,
 *                     which the program waits on from then on.
 *                     Prints "lines 20", or "epoll timed out after N lines" and exits 3.
 *   blocking-peek PORT
 *                     against tls_server --burst 3 (no hangup): reads one line, then peeks
 *                     without MSG_DONTWAIT (an alarm of 30 s ends a peek that waits for
 *                     ever). Prints "blocking peek R".
 *   read-bio read-fully|read-once|buffer PORT
 *                     against tls_server --burst 20: the connection's BIO is the program's
 *                     own (reading all it is asked for, or once per call) or a buffer BIO
 *                     over a socket BIO; reads lines, polling before each. Prints "lines N".
 *   masked-wait ppoll|pselect|epoll_pwait PORT
 *                     against tls_server --burst 3: reads one line, blocks SIGUSR1 and
 *                     raises it, then waits with a mask that lets it in. Prints "ppoll R
 *                     handler ran|did not run in the wait".
 *   wait-arguments PORT
 *                     against tls_server --burst 3: reads one line, then waits on the
 *                     socket, whose next lines OpenSSL or the kernel holds, with arguments
 *                     the kernel judges: select with 5 s (prints whether the time left it
 *                     wrote back is below 5 s), select, pselect, ppoll and epoll_pwait2
 *                     with invalid timeouts, poll and ppoll with a pollfd array in a page
 *                     the process may not read. Prints one line each: the result and errno.
 *   stoptls [tcp] --cert C --key K
 *                     a forked server sends 2 lines, close_notify, then "PLAIN\n" without TLS
 *                     on the same socket (FTP's CCC): a UNIX socketpair, or with tcp a TCP
 *                     connection on 127.0.0.1. Reads the lines until SSL_read says
 *                     0, then polls and recv()s the plaintext. Prints "lines 2", then
 *                     "plain TEXT" or "plain none" (no byte within 2 s), and
 *                     "empty wakeups N": the polls that said readable with nothing to read.
 *   sniff --cert C --key K
 *                     a forked server peeks (recv(MSG_PEEK)) at a new connection's first 5
 *                     bytes before its handshake, as a server that takes TLS and plaintext
 *                     on one port does, then accepts TLS on that socket and reads the 20
 *                     lines the client sends in one burst, polling before each. The
 *                     client's SSL is made before the fork. Prints "sniffed tls" ("sniffed
 *                     other": byte 0 is not 22, a handshake record) and "lines N".
 *   ssl-bio PORT      against tls_server --burst 20: an SSL BIO (BIO_new_ssl) over a
 *                     socket BIO, reading through BIO_read, which OpenSSL serves by its
 *                     internal path; polls the socket before each line. Prints "lines 20",
 *                     or "poll timed out after N lines" and exits 3.
 *   drain PORT        against tls_server --burst 20: reads one line, sends close_notify
 *                     (SSL_shutdown), then drains the socket itself until the peer's FIN:
 *                     poll, then recv(MSG_DONTWAIT). Prints "fin" and "spins" when more
 *                     than 100 polls said readable with nothing to read, else "no spin",
 *                     and "drained N": the bytes the drain read (the rest of the burst).
 *   read-ahead-setting PORT
 *                     against tls_server --burst 20 --line-length 4000 (a burst of more
 *                     than a record, which fills a read-ahead buffer past its first
 *                     record): prints what SSL_get_read_ahead and
 *                     SSL_CTX_get_read_ahead answer before and after the handshake and a
 *                     read, and after the program sets them itself; and whether
 *                     SSL_get_mode, SSL_set_mode and SSL_clear_mode answer with
 *                     SSL_MODE_RELEASE_BUFFERS after the read, and after the program sets
 *                     and clears it; and in a message callback inside a read, which then
 *                     sets it, and inside one after the program cleared it.
 *   reconnect PORT PORT2
 *                     against two tls_server --burst 20 (the first is reset when the
 *                     program drops its unread lines, so the second serves): an epoll loop
 *                     (level-triggered, data 1) reads one line, then
 *                     reconnects on the same number and the same SSL: a new socket dup2ed
 *                     onto it (the old file, and its registration, are gone), SSL_clear,
 *                     SSL_set_fd, SSL_connect, EPOLL_CTL_ADD again (data 2); then reads
 *                     the new connection's 20 lines. Prints the events a wait of timeout 0
 *                     reports after the dup2 and after the handshake (an event of the old
 *                     registration fails), "lines 20" (or "epoll timed out after N lines"
 *                     and exits 3), then "spins" when more than 100 events said readable
 *                     with nothing to read, else "no spin".
 *   rearm PORT        against tls_server --burst 20: a thread-pool loop. The main thread
 *                     waits in epoll_wait (EPOLLIN|EPOLLET|EPOLLONESHOT, 2 s) and hands each
 *                     event to a worker; the worker reads one record and re-arms the
 *                     registration with EPOLL_CTL_MOD once the main thread is blocked in
 *                     the wait again (its /proc syscall file says so). The kernel re-polls
 *                     the file on MOD and wakes the main thread. Prints "lines 20" and
 *                     "timeouts N", the waits that timed out.
 *   waiters HOW PORT  against tls_server --burst 20 --connections 5: five rounds of a
 *                     connection that reads one line, then three threads blocked in
 *                     epoll_wait (4 events, 300 ms) on a set holding an idle pipe, and an
 *                     EPOLL_CTL_ADD of the connection (data 7) once all three are in the
 *                     wait: HOW level (the kernel wakes all three in turn, the file staying
 *                     ready) or oneshot (EPOLLONESHOT: one is told, two time out). Prints
 *                     per round "told N, timed out N, other N" (other: any other answer).
 *                     HOW level-first or oneshot-first: the first round's threads are in
 *                     their waits (3 s) before the process makes its first connection
 *   workers mod|deladd|newdata|output|held --cert C --key K [--workers N] [--connections N]
 *           [--edge 1] [--show-first-arm 1]
 *                     a thread pool on EPOLLONESHOT (with EPOLLET: --edge 1): 10 rounds of
 *                     N connections (4; at most 255; TCP on loopback to a forked server,
 *                     which sends each 32 records of 2,000 bytes in bursts of 8), N
 *                     workers (3) waiting on one set (maxevents 1); a worker
 *                     reads one record of the connection it was told of and re-arms it
 *                     (EPOLL_CTL_MOD, DEL and ADD, or MOD with data of a new generation;
 *                     output: every other re-arm asks for EPOLLOUT alone, as a server with
 *                     a write pending does, and the worker told of it arms EPOLLIN again;
 *                     held: as mod, but each connection's first record is read before its
 *                     first arm, with the server's whole first burst in its socket, so
 *                     that a read-ahead holds the rest while armed; its sockets stay open
 *                     to the end, each round's on new numbers). --show-first-arm 1
 *                     prints first "first arm's input with the kernel 1" (0: the set's
 *                     fdinfo shows the first connection's first arm without EPOLLIN).
 *                     The kernel tells one worker per arm: prints "bytes 2560000, twice 0"
 *                     (twice: a worker told of a connection another worker had at that
 *                     moment, or of an arm the connection no longer has) and "timeouts 0"
 */

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <csetjmp>
#include <csignal>
#include <cstdint>
#include <cstring>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pty.h>
#include <termios.h>
#include <condition_variable>
#include <fstream>
#include <mutex>
#include <stdexcept>
#include <sys/epoll.h>
#include <sys/syscall.h>
#include <thread>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/select.h>
#include <sys/socket.h>
#include <sys/eventfd.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/asleep.h"
#include "common/descriptors.h"
#include "common/example.h"
#include "common/own_bio.h"
#include "common/waits.h"

using namespace example;

namespace {

/* A client connection to PORT that has read its first line: read-ahead may hold the rest. */
struct FirstLineRead {
	explicit FirstLineRead(const char *port)
		: ctx(SSL_CTX_new(TLS_client_method())), fd(connectTo("127.0.0.1", port)), ssl(connectTls(ctx, fd))
	{
		if (!pollThenRead(ssl, fd, &line))
			fail("the first line never came");
	}
	~FirstLineRead()
	{
		SSL_free(ssl);
		close(fd);
		SSL_CTX_free(ctx);
	}
	FirstLineRead(const FirstLineRead &) = delete;
	FirstLineRead &operator=(const FirstLineRead &) = delete;

	SSL_CTX *ctx;
	int fd;
	SSL *ssl;
	std::string line;
};

/* A copy of fd as another process would get it: sent over a socketpair with SCM_RIGHTS, received. */
int passedThroughScmRights(int fd, bool byMany = false)
{
	int pair[2];
	if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, pair) != 0)
		fail("socketpair");
	sendDescriptor(pair[0], fd);
	const int received = receiveDescriptor(pair[1], byMany);
	close(pair[0]);
	close(pair[1]);
	return received;
}

/*
 * Reads one line, then waits on another fd for the other 19: how is "moved" (a dup the
 * connection moves to, the old number closed), or a duplicate the program waits on while
 * the connection keeps its fd: dup, fcntl or dup2-select.
 */
int anotherFd(const char *port, const std::string &how)
{
	int fd = connectTo("127.0.0.1", port);
	/* The copy OpenSSL reads, made before any OpenSSL call; the program waits on fd. */
	const int early = how == "original-first" ? dup(fd) : -1;
	SSL_CTX *ctx = SSL_CTX_new(TLS_client_method());
	int copyRead = early;
	/* Before the process's first SSL; late: after the 64 copies the shim once remembered. */
	if (how == "dup-first-late") {
		/* Kept open to the end: each is another number. */
		for (int i = 0; i < 100; i++) {
			if (dup(STDERR_FILENO) < 0)
				fail("dup");
		}
	}
	int watched = how == "dup-first" || how == "dup-first-late" ? dup(fd) : -1;
	SSL *ssl = connectTls(ctx, early >= 0 ? early : fd);
	std::string line;
	int lines = 0;
	if (!pollThenRead(ssl, fd, &line))
		fail("the first line never came");
	lines++;
	if (how == "dup-first" || how == "dup-first-late") {
		/* made above */
	} else if (how == "original-first") {
		watched = fd;
	} else if (how == "original") {
		/* OpenSSL reads a copy from now on; the program waits on the number it made it from. */
		copyRead = dup(fd);
		if (copyRead < 0 || SSL_set_fd(ssl, copyRead) != 1)
			fail("original");
		watched = fd;
	} else if (how == "moved" || how == "dup")
		watched = dup(fd);
	else if (how == "fcntl")
		watched = fcntl(fd, F_DUPFD_CLOEXEC, 0);
	else if (how == "dup2-select")
		watched = dup2(fd, 100);
	else if (how == "scm-rights" || how == "scm-rights-mmsg")
		watched = passedThroughScmRights(fd, how == "scm-rights-mmsg");
	else if (how == "scm-rights-moved") {
		watched = passedThroughScmRights(fd);
		if (watched < 0 || SSL_set_fd(ssl, watched) != 1)
			fail("scm-rights-moved");
		close(fd);
		fd = -1;
	} else if (how == "scm-rights-dup2") {
		/* The copy takes the connection's own number, which keeps the socket. */
		const int copy = passedThroughScmRights(fd);
		if (copy < 0 || dup2(copy, fd) != fd)
			fail("scm-rights-dup2");
		close(copy);
		watched = fd;
	} else if (how == "restore") {
		/* A shell's save and restore of a descriptor: the number is a pipe for a moment. */
		const int saved = dup(fd);
		int pipeFds[2];
		if (saved < 0 || pipe(pipeFds) != 0 || dup2(pipeFds[0], fd) != fd || dup2(saved, fd) != fd)
			fail("restore");
		close(saved);
		close(pipeFds[0]);
		close(pipeFds[1]);
		watched = fd;
	} else if (how == "close-first") {
		watched = dup(fd);
		close(fd);
		SSL_set_fd(ssl, watched);
		fd = -1;
	} else
		fail("HOW: dup, dup-first, dup-first-late, fcntl, dup2-select, scm-rights(-mmsg, -moved, -dup2), restore, "
		     "close-first, original or original-first");
	if (how == "moved") {
		SSL_set_fd(ssl, watched);
		close(fd);
		fd = -1;
	}
	for (; lines < 20; lines++) {
		if (!pollThenRead(ssl, watched, &line, how == "dup2-select")) {
			std::printf("poll timed out after %d lines\n", lines);
			return 3;
		}
	}
	std::printf("lines %d\n", lines);
	if (how == "restore" || how == "close-first") {
		/* An abortive close (SO_LINGER 0) resets the connection: the kernel's, with records unread. */
		struct linger setting = {};
		socklen_t length = sizeof(setting);
		getsockopt(watched, SOL_SOCKET, SO_LINGER, &setting, &length);
		std::printf("linger %d\n", setting.l_onoff);
	}
	SSL_free(ssl);
	if (watched != fd)
		close(watched);
	if (fd >= 0)
		close(fd);
	if (copyRead >= 0)
		close(copyRead);
	SSL_CTX_free(ctx);
	return 0;
}

/* The forked server's side of pipes and stoptls: runs, then exits the child. */
[[noreturn]] void serve(SSL_CTX *ctx, int rfd, int wfd, bool stoptls, int done)
{
	SSL *ssl = SSL_new(ctx);
	SSL_set_rfd(ssl, rfd);
	SSL_set_wfd(ssl, wfd);
	if (SSL_accept(ssl) != 1)
		fail("SSL_accept");
	const int lines = stoptls ? 2 : 5;
	for (int i = 0; i < lines; i++) {
		const std::string line = "line " + std::to_string(i) + "\n";
		if (SSL_write(ssl, line.data(), static_cast<int>(line.size())) <= 0)
			fail("SSL_write");
	}
	if (stoptls) {
		SSL_shutdown(ssl);
		if (write(wfd, "PLAIN\n", 6) != 6)
			fail("write");
		/* Everything is in the client's socket before it reads a byte. */
		if (write(done, "x", 1) != 1)
			fail("write");
		char byte;
		while (read(rfd, &byte, 1) > 0) {
		}
	} else {
		char buffer[16];
		int n = SSL_read(ssl, buffer, sizeof(buffer));
		std::printf("server got %.*s", n > 0 ? n : 0, buffer);
		std::fflush(stdout);
	}
	SSL_free(ssl);
	std::exit(0);
}

/* recv and recvmsg of no bytes, which only a socket answers: prints what each said. */
void askNoBytes(int fd)
{
	char byte;
	const ssize_t received = recv(fd, &byte, 0, MSG_DONTWAIT);
	const int receiveError = errno;
	msghdr message = {};
	const ssize_t messaged = recvmsg(fd, &message, MSG_DONTWAIT);
	std::printf("recv of no bytes %zd %s, recvmsg %zd %s\n", received, received < 0 ? strerrorname_np(receiveError) : "-",
		    messaged, messaged < 0 ? strerrorname_np(errno) : "-");
}

/* TLS over a pipe pair, or over a raw-mode pty: the server on the master, the client on the slave. */
int pipes(SSL_CTX *server, bool pty)
{
	int clientRead, clientWrite, serverRead, serverWrite;
	if (pty) {
		int master, slave;
		struct termios raw;
		if (openpty(&master, &slave, nullptr, nullptr, nullptr) != 0 || tcgetattr(slave, &raw) != 0)
			fail("openpty");
		cfmakeraw(&raw);
		if (tcsetattr(slave, TCSANOW, &raw) != 0)
			fail("tcsetattr");
		clientRead = clientWrite = slave;
		serverRead = serverWrite = master;
	} else {
		int toClient[2], toServer[2];
		if (pipe(toClient) != 0 || pipe(toServer) != 0)
			fail("pipe");
		clientRead = toClient[0];
		serverWrite = toClient[1];
		serverRead = toServer[0];
		clientWrite = toServer[1];
	}
	std::fflush(stdout);
	pid_t child = fork();
	if (child == 0) {
		close(clientRead);
		if (clientWrite != clientRead)
			close(clientWrite);
		serve(server, serverRead, serverWrite, false, -1);
	}
	close(serverRead);
	if (serverWrite != serverRead)
		close(serverWrite);
	SSL_CTX *ctx = SSL_CTX_new(TLS_client_method());
	SSL *ssl = SSL_new(ctx);
	SSL_set_rfd(ssl, clientRead);
	SSL_set_wfd(ssl, clientWrite);
	if (SSL_connect(ssl) != 1)
		fail("SSL_connect");
	std::string line;
	int lines = 0;
	for (; lines < 5; lines++) {
		if (!pollThenRead(ssl, clientRead, &line)) {
			std::printf("poll timed out after %d lines\n", lines);
			std::fflush(stdout);
			kill(child, SIGKILL);
			waitpid(child, nullptr, 0);
			return 3;
		}
		/* OpenSSL holds the other lines: an ask of no bytes is still no socket's. */
		if (lines == 0)
			askNoBytes(clientRead);
	}
	std::printf("lines %d\n", lines);
	std::fflush(stdout);
	if (SSL_write(ssl, "bye\n", 4) != 4)
		fail("SSL_write");
	int status = 0;
	waitpid(child, &status, 0);
	SSL_free(ssl);
	SSL_CTX_free(ctx);
	return WIFEXITED(status) ? WEXITSTATUS(status) : 1;
}

/* The client's end: its SSL, socket and context go, and the forked server's status is its own. */
int endWithServer(SSL *ssl, int fd, SSL_CTX *ctx, pid_t child)
{
	SSL_free(ssl);
	close(fd);
	SSL_CTX_free(ctx);
	int status = 0;
	waitpid(child, &status, 0);
	return WIFEXITED(status) ? WEXITSTATUS(status) : 1;
}

/* The server of half-record: the record's bytes come from a memory BIO, sent in two parts. */
[[noreturn]] void serveHalves(SSL_CTX *server, int listener)
{
	const int fd = accept(listener, nullptr, nullptr);
	SSL *ssl = SSL_new(server);
	SSL_set_fd(ssl, fd);
	if (fd < 0 || SSL_accept(ssl) != 1)
		_exit(2);
	BIO *record = BIO_new(BIO_s_mem());
	SSL_set0_wbio(ssl, record);
	const std::string data(1000, 'h');
	if (SSL_write(ssl, data.data(), static_cast<int>(data.size())) != static_cast<int>(data.size()))
		_exit(2);
	char *bytes = nullptr;
	const long length = BIO_get_mem_data(record, &bytes);
	const long half = length / 2;
	if (send(fd, bytes, static_cast<size_t>(half), 0) != half)
		_exit(2);
	char got[2];
	for (int n = 0; n < 2;) {
		const int r = SSL_read(ssl, got + n, 2 - n);
		if (r <= 0)
			_exit(2);
		n += r;
	}
	if (send(fd, bytes + half, static_cast<size_t>(length - half), 0) != length - half)
		_exit(2);
	char end;
	while (recv(fd, &end, 1, 0) > 0) {
	}
	_exit(0);
}

/* A forked serveHalves, and this process connected to it: the client's SSL; fd and child set. */
SSL *connectedToHalves(SSL_CTX *server, SSL_CTX *ctx, int *fd, pid_t *child)
{
	int port = 0;
	const int listener = listenOn(0, &port);
	std::fflush(stdout);
	*child = fork();
	if (*child == 0)
		serveHalves(server, listener);
	close(listener);
	*fd = connectTo("127.0.0.1", std::to_string(port));
	return connectTls(ctx, *fd);
}

int g_headerSeen[2]; /* a pipe: cancel-half-record's reader saw the big record's header */
/*
 * A message callback is set on the context before the connection and armed after its
 * handshake: OpenSSL 3.2 and later give a connection's record layer the callback when the
 * layer is made (at the handshake), and one set on the SSL later is never called.
 */
std::atomic<bool> g_headersWatched{ false };

/* The header of the half record (not of a session ticket, a few hundred bytes). */
void noteBigHeader(int writing, int, int contentType, const void *bytes, size_t length, SSL *, void *)
{
	const auto *header = static_cast<const unsigned char *>(bytes);
	if (g_headersWatched && !writing && contentType == SSL3_RT_HEADER && length == 5 &&
	    (header[3] << 8 | header[4]) > 900 && write(g_headerSeen[1], "h", 1) != 1)
		_exit(2);
}

std::atomic<pid_t> g_readerTid{ 0 };

/* cancel-half-record's reader: its thread id noted, it reads until it is cancelled. */
void *readForEver(void *ssl)
{
	g_readerTid = static_cast<pid_t>(syscall(SYS_gettid));
	char buffer[2000];
	while (SSL_read(static_cast<SSL *>(ssl), buffer, sizeof(buffer)) > 0) {
	}
	return nullptr;
}

/* cancel-half-record: a reader cancelled while it waits for the rest of the record. */
int cancelHalfRecord(SSL_CTX *server)
{
	if (pipe(g_headerSeen) != 0)
		fail("pipe");
	SSL_CTX *ctx = SSL_CTX_new(TLS_client_method());
	int fd = -1;
	pid_t child = -1;
	SSL_CTX_set_msg_callback(ctx, noteBigHeader);
	SSL *ssl = connectedToHalves(server, ctx, &fd, &child);
	g_headersWatched = true;
	pthread_t reader;
	if (pthread_create(&reader, nullptr, readForEver, ssl) != 0)
		fail("pthread_create");
	struct pollfd header = { g_headerSeen[0], POLLIN, 0 };
	char seen;
	if (poll(&header, 1, kPollMs) != 1 || read(g_headerSeen[0], &seen, 1) != 1)
		fail("the record's header was never shown");
	untilAsleep(g_readerTid);
	pthread_cancel(reader);
	pthread_join(reader, nullptr);
	/* Part of a record in OpenSSL, none in the socket: nothing to read yet. */
	struct pollfd pfd = { fd, POLLIN, 0 };
	std::printf("poll after the cancel %d\n", poll(&pfd, 1, 0));
	std::fflush(stdout);
	SSL_free(ssl);
	close(fd); /* the server, waiting for 2 bytes, ends */
	int status = 0;
	waitpid(child, &status, 0);
	SSL_CTX_free(ctx);
	return 0;
}

int halfRecord(SSL_CTX *server)
{
	SSL_CTX *ctx = SSL_CTX_new(TLS_client_method());
	int fd = -1;
	pid_t child = -1;
	SSL *ssl = connectedToHalves(server, ctx, &fd, &child);
	setNonBlocking(fd);
	struct pollfd pfd = { fd, POLLIN, 0 };
	char buffer[2000];
	/* Session tickets may come first: until OpenSSL holds part of the record. */
	for (;;) {
		if (poll(&pfd, 1, kPollMs) != 1 || SSL_read(ssl, buffer, sizeof(buffer)) > 0)
			fail("half a record: not WANT_READ");
		if (SSL_has_pending(ssl))
			break;
	}
	if (SSL_write(ssl, "a", 1) != 1)
		fail("SSL_write");
	std::printf("poll after a write %d\n", poll(&pfd, 1, 300));
	if (SSL_write(ssl, "b", 1) != 1)
		fail("SSL_write");
	int total = 0;
	while (total < 1000 && poll(&pfd, 1, kPollMs) == 1) {
		const int n = SSL_read(ssl, buffer, sizeof(buffer));
		if (n > 0)
			total += n;
		else if (SSL_get_error(ssl, n) != SSL_ERROR_WANT_READ)
			break;
	}
	std::printf("read %d\n", total);
	return endWithServer(ssl, fd, ctx, child);
}

/* The server of rest-of-record: one record of 2,000 bytes, then it waits for the client's end. */
[[noreturn]] void serveOneRecord(SSL_CTX *server, int listener)
{
	const int fd = accept(listener, nullptr, nullptr);
	SSL *ssl = SSL_new(server);
	SSL_set_fd(ssl, fd);
	const std::string data(2000, 'r');
	if (fd < 0 || SSL_accept(ssl) != 1 ||
	    SSL_write(ssl, data.data(), static_cast<int>(data.size())) != static_cast<int>(data.size()))
		_exit(2);
	char end;
	while (recv(fd, &end, 1, 0) > 0) {
	}
	_exit(0);
}

/*
 * rest-of-record: the program sets read-ahead itself (on: OpenSSL's own; off), reads 100
 * bytes of a 2,000-byte record, and polls: the rest is OpenSSL's, which the kernel does
 * not report.
 */
int restOfRecord(SSL_CTX *server, const std::string &readAhead)
{
	int port = 0;
	const int listener = listenOn(0, &port);
	std::fflush(stdout);
	const pid_t child = fork();
	if (child == 0)
		serveOneRecord(server, listener);
	close(listener);
	const int fd = connectTo("127.0.0.1", std::to_string(port));
	SSL_CTX *ctx = SSL_CTX_new(TLS_client_method());
	SSL *ssl = SSL_new(ctx);
	SSL_set_read_ahead(ssl, readAhead == "on" ? 1 : 0);
	SSL_set_fd(ssl, fd);
	char buffer[100];
	if (SSL_connect(ssl) != 1 || SSL_read(ssl, buffer, sizeof(buffer)) != sizeof(buffer))
		fail("rest-of-record: the first 100 bytes");
	struct pollfd pfd = { fd, POLLIN, 0 };
	std::printf("pending %d\npoll after part of a record %d\n", SSL_pending(ssl), poll(&pfd, 1, 0));
	std::fflush(stdout);
	return endWithServer(ssl, fd, ctx, child);
}

jmp_buf g_leaveRead;
/* close-unread abort-handled: where its SIGABRT handler goes back to. */
sigjmp_buf g_afterAbort;
/* What the server writes after the lines in close-unread longjmp and throw. */
constexpr int kLeaveBlock = 8192;

/* A message callback that leaves SSL_read at the first record header it is shown, once watched. */
void leaveAtFirstHeader(int writing, int, int contentType, const void *, size_t, SSL *ssl, void *)
{
	if (writing || contentType != SSL3_RT_HEADER || !g_headersWatched.exchange(false))
		return;
	if (SSL_get_app_data(ssl))
		throw std::runtime_error("left");
	longjmp(g_leaveRead, 1);
}

/* SSL_read left by its message callback (throw: by an exception, else by longjmp), the lines unread. */
void leaveRead(SSL *ssl, bool throwing)
{
	SSL_set_app_data(ssl, throwing ? ssl : nullptr);
	g_headersWatched = true;
	char buffer[64];
	if (throwing) {
		try {
			SSL_read(ssl, buffer, sizeof(buffer));
		} catch (const std::runtime_error &) {
		}
	} else if (setjmp(g_leaveRead) == 0)
		SSL_read(ssl, buffer, sizeof(buffer));
}

/*
 * close-unread abort-handled: abort(), whose SIGABRT handler goes back with siglongjmp;
 * then the other 19 lines. Prints "lines 20", or "poll timed out after N lines" and
 * answers false.
 */
bool readOnAfterAbort(SSL *ssl, int fd)
{
	struct sigaction back = {};
	back.sa_handler = [](int) { siglongjmp(g_afterAbort, 1); };
	sigaction(SIGABRT, &back, nullptr);
	if (sigsetjmp(g_afterAbort, 1) == 0)
		abort();
	/* Lines, not records: the server's writes may be merged (the shim in the server). */
	std::string line;
	for (size_t lines = 1; lines < 20; lines += std::count(line.begin(), line.end(), '\n')) {
		if (!pollThenRead(ssl, fd, &line)) {
			std::printf("poll timed out after %zu lines\n", lines);
			return false;
		}
	}
	std::printf("lines 20\n");
	return true;
}

/* close-unread's last line: how the server's read of the client's end ended, from its pipe. */
void printWhatTheServerSaw(int from)
{
	char seen[16] = {};
	if (read(from, seen, sizeof(seen) - 1) <= 0)
		fail("the server said nothing");
	std::printf("server saw %s\n", seen);
}

/*
 * A forked server on a port of its own (*port): it accepts one connection, completes the
 * handshake and runs serve(ssl, fd), then exits 0, or 2 where any of that failed. The
 * parent gets its pid.
 */
template <typename Serve> pid_t forkServer(SSL_CTX *server, int *port, Serve serve)
{
	const int listener = listenOn(0, port);
	std::fflush(stdout);
	const pid_t child = fork();
	if (child == 0) {
		const int fd = accept(listener, nullptr, nullptr);
		SSL *ssl = SSL_new(server);
		SSL_set_fd(ssl, fd);
		_exit(SSL_accept(ssl) == 1 && serve(ssl, fd) ? 0 : 2);
	}
	close(listener);
	return child;
}

/* eof-in-thread's reader: the first line, then its thread id, then the read that meets the end. */
void *readToTheEnd(void *ssl)
{
	char buffer[100];
	if (SSL_read(static_cast<SSL *>(ssl), buffer, sizeof(buffer)) <= 0)
		fail("SSL_read");
	g_readerTid = static_cast<pid_t>(syscall(SYS_gettid));
	errno = 0;
	const int n = SSL_read(static_cast<SSL *>(ssl), buffer, sizeof(buffer));
	const bool wantRead = SSL_get_error(static_cast<SSL *>(ssl), n) == SSL_ERROR_WANT_READ;
	std::printf("second read %d want-read %s errno %s\n", n, wantRead ? "yes" : "no",
		    errno ? strerrorname_np(errno) : "0");
	return nullptr;
}

/*
 * eof-in-thread: a forked server writes a line, then, once told, closes without
 * close_notify; a second thread of the client reads on a blocking socket, and is asleep
 * in its read when the end comes.
 */
int eofInThread(SSL_CTX *server)
{
	int go[2];
	if (pipe(go) != 0)
		fail("pipe");
	int port = 0;
	const pid_t child = forkServer(server, &port, [&](SSL *ssl, int fd) {
		char byte;
		if (SSL_write(ssl, "line\n", 5) != 5 || read(go[0], &byte, 1) != 1)
			return false;
		close(fd);
		return true;
	});
	SSL_CTX *ctx = SSL_CTX_new(TLS_client_method());
	const int fd = connectTo("127.0.0.1", std::to_string(port));
	SSL *ssl = connectTls(ctx, fd);
	pthread_t reader;
	if (pthread_create(&reader, nullptr, readToTheEnd, ssl) != 0)
		fail("pthread_create");
	for (int i = 0; i < 100000 && g_readerTid == 0; i++)
		sched_yield();
	untilAsleep(g_readerTid);
	if (write(go[1], "x", 1) != 1)
		fail("write");
	pthread_join(reader, nullptr);
	int status = 0;
	waitpid(child, &status, 0);
	SSL_free(ssl);
	close(fd);
	SSL_CTX_free(ctx);
	return WIFEXITED(status) && WEXITSTATUS(status) == 0 ? 0 : 1;
}

int closeUnread(SSL_CTX *server, const std::string &how)
{
	const bool freeFirst = how == "free-first" || how == "longjmp" || how == "throw";
	int result[2];
	if (pipe(result) != 0)
		fail("pipe");
	int port = 0;
	const pid_t child = forkServer(server, &port, [&](SSL *ssl, int fd) {
		std::string lines;
		for (int i = 0; i < 20; i++)
			lines += "line " + std::to_string(i) + "\n";
		/*
		 * One record per line, all in one segment (corked: else the client could read the
		 * first and close before the rest came, and the kernel would send a FIN, as it did
		 * once in a ThreadSanitizer build); one-record: all lines in one record.
		 */
		const int on = 1, off = 0;
		setsockopt(fd, IPPROTO_TCP, TCP_CORK, &on, sizeof(on));
		if (how == "one-record" && SSL_write(ssl, lines.data(), static_cast<int>(lines.size())) <= 0)
			return false;
		for (size_t at = how == "one-record" ? lines.size() : 0; at < lines.size();) {
			const size_t end = lines.find('\n', at) + 1;
			if (SSL_write(ssl, lines.data() + at, static_cast<int>(end - at)) <= 0)
				return false;
			at = end;
		}
		/* longjmp, throw: a block after the lines, which the client waits for. */
		const std::string block(kLeaveBlock, 'b');
		if ((how == "longjmp" || how == "throw") &&
		    SSL_write(ssl, block.data(), static_cast<int>(block.size())) <= 0)
			return false;
		setsockopt(fd, IPPROTO_TCP, TCP_CORK, &off, sizeof(off));
		/* Past what the client wrote last (written-last), to its end. */
		char byte;
		ssize_t n = 0;
		while ((n = recv(fd, &byte, 1, 0)) > 0) {
		}
		const char *seen = n == 0 ? "fin" : n < 0 && errno == ECONNRESET ? "reset" : "other";
		return write(result[1], seen, std::strlen(seen)) >= 0;
	});
	close(result[1]);
	/* abort, exec: the client's image ends with the socket (a hunt: a FIN). */
	const bool imageEnds = how == "abort" || how == "exec" || how == "copy-exit";
	const pid_t doomed = imageEnds ? fork() : -1;
	if (doomed > 0) {
		printWhatTheServerSaw(result[0]);
		int status = 0, doomedStatus = 0;
		waitpid(child, &status, 0);
		waitpid(doomed, &doomedStatus, 0);
		return WIFEXITED(status) && WEXITSTATUS(status) == 0 ? 0 : 1;
	}
	SSL_CTX *ctx = SSL_CTX_new(TLS_client_method());
	if (how == "longjmp" || how == "throw")
		SSL_CTX_set_msg_callback(ctx, leaveAtFirstHeader);
	const int fd = connectTo("127.0.0.1", std::to_string(port));
	SSL *ssl = connectTls(ctx, fd);
	std::string line;
	if (how == "longjmp" || how == "throw") {
		/* Every line and the block in the socket first: the call that leaves reads them ahead. */
		struct pollfd readable = { fd, POLLIN, 0 };
		int queued = 0;
		for (int i = 0; i < 1000 && queued < kLeaveBlock && poll(&readable, 1, kPollMs) == 1; i++) {
			if (ioctl(fd, FIONREAD, &queued) != 0)
				fail("FIONREAD");
			if (queued < kLeaveBlock)
				poll(nullptr, 0, 1); /* more is on its way: the peer's writes */
		}
		if (queued < kLeaveBlock)
			fail("the block never came");
		leaveRead(ssl, how == "throw");
	} else if (how == "one-record") {
		char part[10];
		struct pollfd readable = { fd, POLLIN, 0 };
		while (poll(&readable, 1, kPollMs) == 1 && SSL_read(ssl, part, sizeof(part)) <= 0) {
		}
	} else {
		for (int i = 0; i < 1 && pollThenRead(ssl, fd, &line);)
			i += line.find("line 0") == 0;
	}
	/* The program's last bytes, not yet acknowledged by the peer at the close. */
	if (how == "written-last" && SSL_write(ssl, "bye\n", 4) != 4)
		fail("SSL_write");
	pid_t reader = -1;
	if (how == "forked") {
		std::fflush(stdout);
		reader = fork();
		if (reader == 0) {
			/* Lines, not records: the server's writes may be merged (the shim in the server). */
			size_t lines = std::count(line.begin(), line.end(), '\n');
			while (lines < 20) {
				if (!pollThenRead(ssl, fd, &line))
					_exit(3);
				lines += std::count(line.begin(), line.end(), '\n');
			}
			close(fd);
			_exit(0);
		}
	}
	if (how == "abort") {
		const struct rlimit noCore = { 0, 0 };
		setrlimit(RLIMIT_CORE, &noCore);
		abort();
	}
	if (how == "copy-exit") {
		if (dup(fd) < 0)
			fail("dup");
		close(fd);
		exit(0);
	}
	if (how == "abort-handled" && !readOnAfterAbort(ssl, fd))
		return 3;
	if (how == "exec") {
		execl("/bin/true", "true", static_cast<char *>(nullptr));
		_exit(4);
	}
	if (freeFirst) {
		SSL_free(ssl);
		close(fd);
	} else if (how == "free-copy") {
		const int copy = dup(fd);
		SSL_free(ssl);
		close(fd);
		close(copy);
	} else if (how == "copy-last") {
		const int copy = dup(fd);
		close(fd);
		close(copy);
		SSL_free(ssl);
	} else {
		close(fd);
		SSL_free(ssl);
	}
	printWhatTheServerSaw(result[0]);
	int status = 0, readerStatus = 0;
	waitpid(child, &status, 0);
	if (reader > 0)
		waitpid(reader, &readerStatus, 0);
	SSL_CTX_free(ctx);
	return WIFEXITED(status) && WEXITSTATUS(status) == 0 && WIFEXITED(readerStatus) &&
			       WEXITSTATUS(readerStatus) == 0
		       ? 0
		       : 1;
}

/*
 * Against tls_server --burst 3 (the connection stays open): a blocking peek. An alarm
 * bounds it: a peek that waits for bytes the socket no longer has would wait for ever, and
 * SIGALRM's default action ends the process instead (exit status 142).
 */
int blockingPeek(const char *port)
{
	FirstLineRead client(port);
	alarm(30);
	char byte;
	const ssize_t n = recv(client.fd, &byte, 1, MSG_PEEK);
	alarm(0);
	std::printf("blocking peek %zd\n", n);
	return 0;
}

/*
 * The connection's BIO is the program's own (reading fully, or once per call) or a
 * buffer over a socket BIO; then lines are read, polling before each SSL_read.
 */
int readBio(const char *port, const std::string &how)
{
	SSL_CTX *ctx = SSL_CTX_new(TLS_client_method());
	const int fd = connectTo("127.0.0.1", port);
	SSL *ssl = SSL_new(ctx);
	BIO *bio;
	BIO_METHOD *method = nullptr;
	if (how == "buffer") {
		bio = BIO_push(BIO_new(BIO_f_buffer()), BIO_new_socket(fd, BIO_NOCLOSE));
	} else {
		method = ownBioMethod(how == "read-fully", how.c_str());
		bio = ownBio(method, fd);
	}
	SSL_set_bio(ssl, bio, bio);
	if (SSL_connect(ssl) != 1)
		fail("SSL_connect");
	int lines = 0;
	std::string line;
	while (lines < 20 && pollThenRead(ssl, fd, &line))
		lines++;
	std::printf("lines %d\n", lines);
	SSL_free(ssl);
	BIO_meth_free(method);
	close(fd);
	SSL_CTX_free(ctx);
	return 0;
}

volatile sig_atomic_t g_handled = 0;

void onUsr1(int)
{
	g_handled = g_handled + 1;
}

/*
 * A signal blocked and pending, then ppoll or pselect with a mask that lets it in, while
 * the rest of the burst waits: the kernel answers with the ready socket first, and the
 * signal stays pending (its handler does not run in the wait).
 */
int maskedWait(const char *port, const std::string &how)
{
	FirstLineRead client(port);
	signal(SIGUSR1, onUsr1);
	sigset_t blocked, during;
	sigemptyset(&blocked);
	sigaddset(&blocked, SIGUSR1);
	sigprocmask(SIG_BLOCK, &blocked, &during);
	sigdelset(&during, SIGUSR1);
	raise(SIGUSR1);
	const struct timespec wait = { 2, 0 };
	int ready;
	if (how == "epoll_pwait") {
		const int epfd = epoll_create1(EPOLL_CLOEXEC);
		struct epoll_event interest = {};
		interest.events = EPOLLIN;
		epoll_ctl(epfd, EPOLL_CTL_ADD, client.fd, &interest);
		struct epoll_event event;
		ready = epoll_pwait(epfd, &event, 1, 2000, &during);
		close(epfd);
	} else if (how == "pselect") {
		fd_set readable;
		FD_ZERO(&readable);
		FD_SET(client.fd, &readable);
		ready = pselect(client.fd + 1, &readable, nullptr, nullptr, &wait, &during);
	} else {
		struct pollfd watched = { client.fd, POLLIN, 0 };
		ready = ppoll(&watched, 1, &wait, &during);
	}
	const int error = errno;
	std::printf("%s %d%s%s handler %s in the wait\n", how.c_str(), ready, ready < 0 ? " " : "", ready < 0 ? std::strerror(error) : "",
		    g_handled ? "ran" : "did not run");
	return 0;
}

/* "NAME R" and, when R < 0, errno's name: what a wait answered. */
void printWait(const char *name, int ready, int error)
{
	std::printf("%s %d%s%s\n", name, ready, ready < 0 ? " " : "", ready < 0 ? strerrorname_np(error) : "");
}

/*
 * Waits on a connection with unread lines, with arguments the kernel refuses or writes
 * back: the answer must be the kernel's, whether OpenSSL or the socket holds the lines.
 */
int waitArguments(const char *port)
{
	FirstLineRead client(port);
	fd_set readable;
	auto onlyTheSocket = [&] {
		FD_ZERO(&readable);
		FD_SET(client.fd, &readable);
		return &readable;
	};

	struct timeval fiveSeconds = { 5, 0 };
	int ready = select(client.fd + 1, onlyTheSocket(), nullptr, nullptr, &fiveSeconds);
	const bool below = fiveSeconds.tv_sec == 4 && fiveSeconds.tv_usec > 0;
	std::printf("select %d time left %s\n", ready, below ? "below 5 s" : "not below 5 s");

	for (struct timeval invalid : { timeval{ -1, 0 }, timeval{ 0, -1 } }) {
		ready = select(client.fd + 1, onlyTheSocket(), nullptr, nullptr, &invalid);
		printWait("select invalid", ready, errno);
	}
	const struct timespec badNanoseconds = { 0, 1000000000 };
	ready = pselect(client.fd + 1, onlyTheSocket(), nullptr, nullptr, &badNanoseconds, nullptr);
	printWait("pselect invalid", ready, errno);
	struct pollfd watched = { client.fd, POLLIN, 0 };
	const struct timespec negative = { -1, 0 };
	ready = ppoll(&watched, 1, &negative, nullptr);
	printWait("ppoll invalid", ready, errno);
	const int epfd = epoll_create1(EPOLL_CLOEXEC);
	struct epoll_event interest = {};
	interest.events = EPOLLIN;
	epoll_ctl(epfd, EPOLL_CTL_ADD, client.fd, &interest);
	struct epoll_event event;
	ready = epoll_pwait2(epfd, &event, 1, &badNanoseconds, nullptr);
	/* A kernel before 5.11 has no epoll_pwait2: its ENOSYS is the answer both ways. */
	printWait("epoll_pwait2 invalid", ready, errno);
	close(epfd);

	void *page = mmap(nullptr, 4096, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (page == MAP_FAILED)
		fail("mmap");
	ready = poll(static_cast<struct pollfd *>(page), 1, 0);
	printWait("poll unreadable", ready, errno);
	const struct timespec zero = { 0, 0 };
	ready = ppoll(static_cast<struct pollfd *>(page), 1, &zero, nullptr);
	printWait("ppoll unreadable", ready, errno);
	munmap(page, 4096);

	/* A read set of nfds bits alone, (nfds + 7) / 8 bytes, ending where the process may not read. */
	char *pages = static_cast<char *>(mmap(nullptr, 8192, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
	if (pages == MAP_FAILED || mprotect(pages + 4096, 4096, PROT_NONE) != 0)
		fail("mmap");
	const std::size_t bytes = (static_cast<std::size_t>(client.fd) + 8) / 8;
	unsigned char *shortSet = reinterpret_cast<unsigned char *>(pages + 4096 - bytes);
	shortSet[client.fd / 8] = static_cast<unsigned char>(1u << (client.fd % 8));
	struct timeval second = { 1, 0 };
	ready = select(client.fd + 1, reinterpret_cast<fd_set *>(shortSet), nullptr, nullptr, &second);
	printWait("select short set", ready, errno);
	munmap(pages, 8192);

	ready = poll(&watched, 1, 5000);
	std::printf("poll %d\n", ready);
	return 0;
}

/*
 * A loop that reads a record once the socket shows its whole header: poll, then a peek
 * of 5 bytes, then SSL_read. Bounded: 10,000 wake-ups, 2 s a wait.
 */
/*
 * What OpenSSL itself shows of the bytes it read: after the first line of a burst, and
 * after the last, SSL_has_pending, SSL_pending and the read BIO's BIO_number_read.
 */
int opensslView(const char *port)
{
	SSL_CTX *ctx = SSL_CTX_new(TLS_client_method());
	int fd;
	SSL *ssl = connectSsl(ctx, port, &fd);
	char buffer[16384];
	int lines = 0;
	/*
	 * BIO_number_read counted from the first line on: the handshake's share varies from
	 * run to run (a session ticket's encrypted length moves by a cipher block).
	 */
	unsigned long first = 0;
	for (int round = 0; round < 100 && lines < 20; round++) {
		const int n = SSL_read(ssl, buffer, sizeof(buffer));
		if (n <= 0)
			break;
		lines += static_cast<int>(std::count(buffer, buffer + n, '\n'));
		const unsigned long counted = BIO_number_read(SSL_get_rbio(ssl));
		if (round == 0)
			first = counted;
		if (round == 0)
			std::printf("lines %d has_pending %d pending %d bio_read counted\n", lines, SSL_has_pending(ssl),
				    SSL_pending(ssl));
		else if (lines == 20)
			std::printf("lines %d has_pending %d pending %d bio_read +%lu\n", lines, SSL_has_pending(ssl),
				    SSL_pending(ssl), counted - first);
	}
	SSL_free(ssl);
	close(fd);
	SSL_CTX_free(ctx);
	return 0;
}

int headerPeek(const char *port)
{
	SSL_CTX *ctx = SSL_CTX_new(TLS_client_method());
	const int fd = connectTo("127.0.0.1", port);
	SSL *ssl = connectTls(ctx, fd);
	setNonBlocking(fd);
	int lines = 0;
	long headerless = 0;
	for (int round = 0; round < 10000 && lines < 20; round++) {
		struct pollfd readable = { fd, POLLIN, 0 };
		if (poll(&readable, 1, 2000) <= 0)
			break;
		unsigned char header[5];
		if (recv(fd, header, sizeof(header), MSG_PEEK) < static_cast<ssize_t>(sizeof(header))) {
			headerless++;
			continue;
		}
		char buffer[16384];
		const int n = SSL_read(ssl, buffer, sizeof(buffer));
		lines += n > 0 ? static_cast<int>(std::count(buffer, buffer + n, '\n')) : 0;
	}
	std::printf("lines %d\n%s\n", lines, headerless > 100 ? "spins" : "no spin");
	SSL_free(ssl);
	close(fd);
	SSL_CTX_free(ctx);
	return 0;
}

/*
 * The same read in an edge-triggered epoll loop: each event, a peek of 5 bytes, then
 * SSL_read until WANT_READ (an edge comes again only for new bytes, so the loop drains).
 * Bounded: 10,000 wake-ups, 2 s a wait.
 */
int edgePeek(const char *port)
{
	SSL_CTX *ctx = SSL_CTX_new(TLS_client_method());
	const int fd = connectTo("127.0.0.1", port);
	SSL *ssl = connectTls(ctx, fd);
	setNonBlocking(fd);
	const int epfd = epoll_create1(EPOLL_CLOEXEC);
	struct epoll_event interest = {};
	interest.events = EPOLLIN | EPOLLET;
	interest.data.fd = fd;
	if (epfd < 0 || epoll_ctl(epfd, EPOLL_CTL_ADD, fd, &interest) != 0)
		fail("epoll");
	int lines = 0;
	long headerless = 0;
	bool ended = false;
	for (int round = 0; round < 10000 && lines < 20 && !ended; round++) {
		struct epoll_event event;
		if (epoll_wait(epfd, &event, 1, kPollMs) != 1)
			break;
		unsigned char header[5];
		if (recv(fd, header, sizeof(header), MSG_PEEK) < static_cast<ssize_t>(sizeof(header))) {
			headerless++;
			continue;
		}
		for (;;) {
			char buffer[16384];
			const int n = SSL_read(ssl, buffer, sizeof(buffer));
			if (n <= 0) {
				ended = SSL_get_error(ssl, n) != SSL_ERROR_WANT_READ;
				break;
			}
			lines += static_cast<int>(std::count(buffer, buffer + n, '\n'));
		}
	}
	std::printf("lines %d\n%s\n", lines, headerless > 100 ? "spins" : "no spin");
	close(epfd);
	SSL_free(ssl);
	close(fd);
	SSL_CTX_free(ctx);
	return 0;
}

int peek(const char *port)
{
	FirstLineRead client(port);
	/* The server's last records, close_notify and FIN are all here now (one segment). */
	char byte;
	ssize_t n = recv(client.fd, &byte, 1, MSG_PEEK | MSG_DONTWAIT);
	std::printf("peek %zd\n", n);
	int queued = 0;
	ioctl(client.fd, FIONREAD, &queued);
	std::printf("fionread %s\n", queued > 0 ? "positive" : "zero");
	return 0;
}

/* A connected TCP pair on 127.0.0.1: fds[0] the client's, fds[1] the server's. */
void tcpPair(int fds[2])
{
	int port = 0;
	const int listener = listenOn(0, &port);
	fds[0] = connectTo("127.0.0.1", std::to_string(port).c_str());
	fds[1] = accept(listener, nullptr, nullptr);
	if (fds[1] < 0)
		fail("accept");
	close(listener);
}

int stoptls(SSL_CTX *server, bool tcp)
{
	int fds[2], done[2];
	if (tcp)
		tcpPair(fds);
	else if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds) != 0)
		fail("socketpair");
	if (pipe(done) != 0)
		fail("pipe");
	std::fflush(stdout);
	pid_t child = fork();
	if (child == 0) {
		close(fds[0]);
		close(done[0]);
		serve(server, fds[1], fds[1], true, done[1]);
	}
	close(fds[1]);
	close(done[1]);
	SSL_CTX *ctx = SSL_CTX_new(TLS_client_method());
	SSL *ssl = connectTls(ctx, fds[0]);
	char byte;
	if (read(done[0], &byte, 1) != 1)
		fail("the server did not finish");

	std::string line;
	int lines = 0;
	for (;;) {
		struct pollfd pfd = { fds[0], POLLIN, 0 };
		if (SSL_pending(ssl) == 0 && poll(&pfd, 1, kPollMs) != 1)
			fail("no close_notify");
		char buffer[256];
		int n = SSL_read(ssl, buffer, sizeof(buffer));
		if (n > 0) {
			lines++;
			continue;
		}
		if (SSL_get_error(ssl, n) == SSL_ERROR_ZERO_RETURN)
			break;
		fail("SSL_read");
	}
	std::printf("lines %d\n", lines);

	/* Now the plaintext, as the program would read it without TLS. */
	std::string plain;
	int emptyWakeups = 0;
	for (int round = 0; round < 1000 && plain.find('\n') == std::string::npos; round++) {
		struct pollfd pfd = { fds[0], POLLIN, 0 };
		if (poll(&pfd, 1, kPollMs) != 1)
			break;
		char buffer[64];
		ssize_t n = recv(fds[0], buffer, sizeof(buffer), MSG_DONTWAIT);
		if (n > 0)
			plain.append(buffer, static_cast<size_t>(n));
		else
			emptyWakeups++;
	}
	std::printf("plain %s\n", plain.empty() ? "none" : plain.substr(0, plain.find('\n')).c_str());
	std::printf("empty wakeups %d\n", emptyWakeups);
	SSL_free(ssl);
	close(fds[0]);
	waitpid(child, nullptr, 0);
	SSL_CTX_free(ctx);
	return 0;
}

/*
 * sniff's server, in a forked child: it peeks at the client's first 5 bytes to tell a TLS
 * handshake (a record of type 22) from plaintext, as servers that take both on one port
 * do, then makes its connection on that socket and reads 20 lines, polling before each.
 */
[[noreturn]] void serveSniffed(SSL_CTX *server, int listener)
{
	const int fd = accept(listener, nullptr, nullptr);
	if (fd < 0)
		_exit(2);
	unsigned char first[5] = {};
	ssize_t seen = 0;
	for (int round = 0; round < 1000 && seen < static_cast<ssize_t>(sizeof(first)); round++) {
		struct pollfd readable = { fd, POLLIN, 0 };
		if (poll(&readable, 1, kPollMs) != 1)
			break;
		seen = recv(fd, first, sizeof(first), MSG_PEEK | MSG_DONTWAIT);
		if (seen == 0)
			break;
	}
	std::printf("sniffed %s\n", seen == static_cast<ssize_t>(sizeof(first)) && first[0] == 0x16 ? "tls" : "other");
	SSL *ssl = SSL_new(server);
	SSL_set_fd(ssl, fd);
	if (SSL_accept(ssl) != 1)
		_exit(2);
	std::string line;
	size_t lines = 0;
	while (lines < 20 && pollThenRead(ssl, fd, &line))
		lines += std::count(line.begin(), line.end(), '\n');
	std::printf("lines %zu\n", lines);
	std::fflush(stdout);
	SSL_shutdown(ssl);
	SSL_free(ssl);
	close(fd);
	_exit(0);
}

/*
 * A client sends 20 lines in one burst (one segment: TCP_CORK) to sniff's server, then
 * waits for its end. The client's SSL is made before the fork: the server's process has
 * a connection already, as one that serves others has, when it peeks.
 */
int sniff(SSL_CTX *server)
{
	int port = 0;
	const int listener = listenOn(0, &port);
	SSL_CTX *ctx = SSL_CTX_new(TLS_client_method());
	SSL *ssl = SSL_new(ctx);
	std::fflush(stdout);
	const pid_t child = fork();
	if (child == 0)
		serveSniffed(server, listener);
	close(listener);
	const int fd = connectTo("127.0.0.1", std::to_string(port));
	SSL_set_fd(ssl, fd);
	if (SSL_connect(ssl) != 1)
		fail("SSL_connect");
	int cork = 1;
	setsockopt(fd, IPPROTO_TCP, TCP_CORK, &cork, sizeof(cork));
	writeLines(ssl, 0, 20);
	cork = 0;
	setsockopt(fd, IPPROTO_TCP, TCP_CORK, &cork, sizeof(cork));
	/* Until the server's close_notify or end: it has read every line. */
	char byte;
	while (SSL_read(ssl, &byte, 1) > 0) {
	}
	return endWithServer(ssl, fd, ctx, child);
}

} /* namespace */

/* BIO_new_ssl over a socket BIO: the program sees a BIO, OpenSSL reads by its own path. */
int sslBio(const char *port)
{
	SSL_CTX *ctx = SSL_CTX_new(TLS_client_method());
	const int fd = connectTo("127.0.0.1", port);
	BIO *ssl = BIO_new_ssl(ctx, 1);
	BIO_push(ssl, BIO_new_socket(fd, BIO_CLOSE));
	if (BIO_do_handshake(ssl) != 1)
		fail("BIO_do_handshake");
	SSL *connection = nullptr;
	BIO_get_ssl(ssl, &connection);
	int lines = 0;
	for (; lines < 20; lines++) {
		if (BIO_pending(ssl) == 0) {
			struct pollfd pfd = { fd, POLLIN, 0 };
			if (poll(&pfd, 1, kPollMs) != 1) {
				std::printf("poll timed out after %d lines\n", lines);
				return 3;
			}
		}
		char buffer[256];
		if (BIO_read(ssl, buffer, sizeof(buffer)) <= 0)
			fail("BIO_read");
	}
	std::printf("lines %d\n", lines);
	BIO_free_all(ssl);
	SSL_CTX_free(ctx);
	return 0;
}

int drain(const char *port)
{
	FirstLineRead client(port);
	const int fd = client.fd;
	SSL_shutdown(client.ssl);
	int empty = 0;
	bool fin = false;
	long drained = 0;
	/* Bounded: a spinning loop ends after a million wake-ups, a stalled one at the poll's timeout. */
	for (int i = 0; i < 1000000 && !fin; i++) {
		struct pollfd pfd = { fd, POLLIN, 0 };
		if (poll(&pfd, 1, 10 * kPollMs) != 1)
			break;
		char buffer[65536];
		const ssize_t n = recv(fd, buffer, sizeof(buffer), MSG_DONTWAIT);
		fin = n == 0;
		empty += n < 0 && errno == EAGAIN;
		drained += n > 0 ? n : 0;
	}
	std::printf("%s\n%s\ndrained %ld\n", fin ? "fin" : "no fin", empty > 100 ? "spins" : "no spin", drained);
	return 0;
}

/* What a message callback inside SSL_read does with the mode: asks it, or sets SSL_MODE_RELEASE_BUFFERS. */
bool callbackSetsRelease = false;
int releaseSeenInside = -2; /* -2: not listening, -1: listening */

void modeInsideARead(int, int, int, const void *, size_t, SSL *ssl, void *)
{
	if (releaseSeenInside != -1)
		return;
	releaseSeenInside = (callbackSetsRelease ? SSL_set_mode(ssl, SSL_MODE_RELEASE_BUFFERS) : SSL_get_mode(ssl)) &
			    SSL_MODE_RELEASE_BUFFERS ? 1 : 0;
}

/*
 * Reads with modeInsideARead listening until a record's message reaches it (the first
 * read may finish a record an earlier read began); what it saw. The callback is set
 * before the handshake: from OpenSSL 3.2 a record layer made without one tells none.
 */
int modeSeenInsideARead(SSL *ssl, int fd, bool sets)
{
	callbackSetsRelease = sets;
	releaseSeenInside = -1;
	for (int reads = 0; releaseSeenInside < 0; reads++) {
		struct pollfd pfd = { fd, POLLIN, 0 };
		char buffer[16384];
		if (reads == 100 || (SSL_pending(ssl) == 0 && poll(&pfd, 1, kPollMs) != 1) ||
		    SSL_read(ssl, buffer, sizeof(buffer)) <= 0)
			fail("no record came");
	}
	const int seen = releaseSeenInside;
	releaseSeenInside = -2;
	return seen;
}

int readAheadSetting(const char *port)
{
	SSL_CTX *ctx = SSL_CTX_new(TLS_client_method());
	std::printf("context %ld\n", static_cast<long>(SSL_CTX_get_read_ahead(ctx)));
	const int fd = connectTo("127.0.0.1", port);
	SSL *ssl = SSL_new(ctx);
	SSL_set_fd(ssl, fd);
	SSL_set_msg_callback(ssl, modeInsideARead);
	std::printf("new %d\n", SSL_get_read_ahead(ssl));
	if (SSL_connect(ssl) != 1)
		fail("SSL_connect");
	std::string line;
	if (!pollThenRead(ssl, fd, &line))
		fail("the first line never came");
	std::printf("after a read %d, context %ld\n", SSL_get_read_ahead(ssl),
		    static_cast<long>(SSL_CTX_get_read_ahead(ctx)));
	const auto released = [ssl](long mode) { return (mode & SSL_MODE_RELEASE_BUFFERS) != 0; };
	std::printf("release buffers %d\n", released(SSL_get_mode(ssl)));
	const bool other = released(SSL_set_mode(ssl, SSL_MODE_AUTO_RETRY));
	std::printf("set %d, then %d\n", other, released(SSL_set_mode(ssl, SSL_MODE_RELEASE_BUFFERS)));
	const bool cleared = released(SSL_clear_mode(ssl, SSL_MODE_RELEASE_BUFFERS));
	std::printf("cleared %d, then %d\n", cleared, released(SSL_get_mode(ssl)));
	std::printf("inside a read %d\n", modeSeenInsideARead(ssl, fd, false));
	const int setInside = modeSeenInsideARead(ssl, fd, true);
	std::printf("set inside a read %d, after it %d\n", setInside, released(SSL_get_mode(ssl)));
	SSL_clear_mode(ssl, SSL_MODE_RELEASE_BUFFERS);
	std::printf("inside a read after the program cleared it %d\n", modeSeenInsideARead(ssl, fd, false));
	SSL_set_read_ahead(ssl, 1);
	std::printf("set by the program %d\n", SSL_get_read_ahead(ssl));
	SSL_set_read_ahead(ssl, 0);
	std::printf("cleared by the program %d\n", SSL_get_read_ahead(ssl));
	SSL_CTX_set_read_ahead(ctx, 1);
	std::printf("context set by the program %ld\n", static_cast<long>(SSL_CTX_get_read_ahead(ctx)));
	SSL_free(ssl);
	close(fd);
	SSL_CTX_free(ctx);
	return 0;
}

/*
 * One epoll event for registration data (any other is an error), or false at the timeout;
 * counts the events after which SSL_read found nothing.
 */
bool epollThenRead(int epfd, SSL *ssl, uint64_t data, std::string *line, int *empty)
{
	for (int i = 0; i < 1000000; i++) {
		if (SSL_pending(ssl) == 0) {
			struct epoll_event event;
			if (epoll_wait(epfd, &event, 1, kPollMs) != 1)
				return false;
			if (event.data.u64 != data)
				fail("an event for a registration that is gone");
		}
		char buffer[256];
		const int n = SSL_read(ssl, buffer, sizeof(buffer));
		if (n > 0) {
			line->assign(buffer, static_cast<size_t>(n));
			return true;
		}
		if (SSL_get_error(ssl, n) != SSL_ERROR_WANT_READ)
			fail("SSL_read");
		++*empty;
	}
	return false;
}

bool watch(int epfd, int fd, uint64_t data)
{
	struct epoll_event interest = {};
	interest.events = EPOLLIN;
	interest.data.u64 = data;
	return fcntl(fd, F_SETFL, O_NONBLOCK) == 0 && epoll_ctl(epfd, EPOLL_CTL_ADD, fd, &interest) == 0;
}

/* Waits up to kPollMs for the epoll set's own fd by poll or select, or in the set outer. */
bool setReady(int set, int outer, const std::string &how)
{
	if (how == "poll") {
		struct pollfd wanted = { set, POLLIN, 0 };
		return poll(&wanted, 1, kPollMs) == 1 && (wanted.revents & POLLIN);
	}
	if (how == "select") {
		fd_set readable;
		FD_ZERO(&readable);
		FD_SET(set, &readable);
		struct timeval timeout = { kPollMs / 1000, (kPollMs % 1000) * 1000 };
		return select(set + 1, &readable, nullptr, nullptr, &timeout) == 1 && FD_ISSET(set, &readable);
	}
	struct epoll_event event;
	return epoll_wait(outer, &event, 1, kPollMs) == 1 && event.data.u64 == 8;
}

int nested(const char *port, const std::string &how)
{
	SSL_CTX *ctx = SSL_CTX_new(TLS_client_method());
	const int fd = connectTo("127.0.0.1", port);
	const bool early = how == "early";
	SSL *ssl = early ? nullptr : connectTls(ctx, fd);
	const int inner = epoll_create1(0), outer = epoll_create1(0);
	struct epoll_event interest = {};
	interest.events = EPOLLIN;
	interest.data.u64 = 7;
	if (epoll_ctl(inner, EPOLL_CTL_ADD, fd, &interest) != 0)
		fail("epoll_ctl inner");
	/* A copy of the set's fd is the same set, as the kernel sees it. */
	const bool copy = how == "copy" || how == "poll-copy";
	const int shown = copy ? dup(inner) : inner;
	const std::string wait = how == "poll-copy" ? "poll" : how;
	interest.data.u64 = 8;
	if (shown < 0 || epoll_ctl(outer, EPOLL_CTL_ADD, shown, &interest) != 0)
		fail("epoll_ctl outer");
	/* moved-inner: the inner set's number closed, a copy keeps it: the outer registration stays. */
	int innerNow = inner;
	if (how == "moved-inner") {
		innerNow = dup(inner);
		close(inner);
	}
	if (early)
		ssl = connectTls(ctx, fd); /* blocking, then as the others */
	if (fcntl(fd, F_SETFL, O_NONBLOCK) != 0)
		fail("O_NONBLOCK");
	int lines = 0;
	for (; lines < 20; lines++) {
		if (SSL_pending(ssl) == 0) {
			struct epoll_event event;
			if (!setReady(shown, outer, wait) || epoll_wait(innerNow, &event, 1, 0) != 1 ||
			    event.data.u64 != 7) {
				std::printf("epoll timed out after %d lines\n", lines);
				return 3;
			}
		}
		char buffer[256];
		const int n = SSL_read(ssl, buffer, sizeof(buffer));
		if (n <= 0 && SSL_get_error(ssl, n) == SSL_ERROR_WANT_READ) {
			lines--; /* a record that was not a line: the session tickets */
			continue;
		}
		if (n <= 0)
			fail("SSL_read");
	}
	std::printf("lines %d\n", lines);
	SSL_free(ssl);
	close(fd);
	close(innerNow);
	if (copy)
		close(shown);
	close(outer);
	SSL_CTX_free(ctx);
	return 0;
}

int reconnect(const char *port, const char *secondPort)
{
	SSL_CTX *ctx = SSL_CTX_new(TLS_client_method());
	const int fd = connectTo("127.0.0.1", port);
	SSL *ssl = connectTls(ctx, fd);
	const int epfd = epoll_create1(0);
	if (!watch(epfd, fd, 1))
		fail("epoll_ctl");
	std::string line;
	int empty = 0;
	if (!epollThenRead(epfd, ssl, 1, &line, &empty))
		fail("the first line never came");

	const int fresh = connectTo("127.0.0.1", secondPort);
	if (dup2(fresh, fd) != fd)
		fail("dup2");
	close(fresh);
	struct epoll_event event;
	std::printf("events after the dup2 %d\n", epoll_wait(epfd, &event, 1, 0));
	SSL_clear(ssl);
	SSL_set_fd(ssl, fd);
	if (SSL_connect(ssl) != 1)
		fail("SSL_connect again");
	std::printf("events after the handshake %d\n", epoll_wait(epfd, &event, 1, 0));
	if (!watch(epfd, fd, 2))
		fail("epoll_ctl again");
	int lines = 0;
	for (; lines < 20; lines++) {
		if (!epollThenRead(epfd, ssl, 2, &line, &empty)) {
			std::printf("epoll timed out after %d lines\n", lines);
			return 3;
		}
	}
	std::printf("lines %d\n%s\n", lines, empty > 100 ? "spins" : "no spin");
	SSL_free(ssl);
	close(fd);
	close(epfd);
	SSL_CTX_free(ctx);
	return 0;
}

/* Whether thread tid is blocked in an epoll wait now (its /proc syscall file names it). */
bool blockedInEpollWait(pid_t tid)
{
	std::ifstream in("/proc/self/task/" + std::to_string(tid) + "/syscall");
	long number = -1;
	in >> number;
	return number == SYS_epoll_wait || number == SYS_epoll_pwait
#ifdef SYS_epoll_pwait2
	       || number == SYS_epoll_pwait2
#endif
		;
}

/* A pipe whose read end is in epfd, for EPOLLIN with data 1. */
void addPipe(int epfd, int (&ends)[2])
{
	struct epoll_event event = {};
	event.events = EPOLLIN;
	event.data.u64 = 1;
	if (pipe(ends) != 0 || epoll_ctl(epfd, EPOLL_CTL_ADD, ends[0], &event) != 0)
		fail("pipe");
}

int rearm(const char *port)
{
	SSL_CTX *ctx = SSL_CTX_new(TLS_client_method());
	const int fd = connectTo("127.0.0.1", port);
	SSL *ssl = connectTls(ctx, fd);
	const int epfd = epoll_create1(0);
	struct epoll_event interest = {};
	interest.events = EPOLLIN | EPOLLET | EPOLLONESHOT;
	if (fcntl(fd, F_SETFL, O_NONBLOCK) != 0 || epoll_ctl(epfd, EPOLL_CTL_ADD, fd, &interest) != 0)
		fail("epoll_ctl");
	/* The worker's "all read", so that the last wait ends at once. */
	int done[2];
	addPipe(epfd, done);
	const pid_t mainThread = static_cast<pid_t>(syscall(SYS_gettid));
	std::mutex mutex;
	std::condition_variable handed;
	int events = 0, lines = 0;
	bool stop = false;
	std::thread worker([&] {
		std::unique_lock<std::mutex> lock(mutex);
		for (int served = 0;; served++) {
			handed.wait(lock, [&] { return events > served || stop; });
			if (stop)
				return;
			char buffer[256];
			if (SSL_read(ssl, buffer, sizeof(buffer)) > 0)
				lines++;
			if (lines == 20) {
				if (write(done[1], "x", 1) != 1)
					fail("write");
				return;
			}
			lock.unlock();
			/* Bounded: the main thread is back in its wait within a few scheduling rounds. */
			for (int i = 0; i < 100000 && !blockedInEpollWait(mainThread); i++)
				sched_yield();
			if (epoll_ctl(epfd, EPOLL_CTL_MOD, fd, &interest) != 0)
				fail("EPOLL_CTL_MOD");
			lock.lock();
		}
	});
	int timeouts = 0;
	for (int waits = 0; waits < 60; waits++) {
		struct epoll_event event;
		const int ready = epoll_wait(epfd, &event, 1, kPollMs);
		if (ready == 1 && event.data.u64 == 1)
			break;
		if (ready == 0) {
			timeouts++;
			/* As such loops do after a quiet while: re-arm, in case an event was missed. */
			epoll_ctl(epfd, EPOLL_CTL_MOD, fd, &interest);
			continue;
		}
		std::lock_guard<std::mutex> lock(mutex);
		events++;
		handed.notify_one();
	}
	{
		std::lock_guard<std::mutex> lock(mutex);
		stop = true;
		handed.notify_one();
	}
	worker.join();
	close(done[0]);
	close(done[1]);
	std::printf("lines %d\ntimeouts %d\n", lines, timeouts);
	SSL_free(ssl);
	close(fd);
	close(epfd);
	SSL_CTX_free(ctx);
	return 0;
}

int waiters(const std::string &how, const char *port)
{
	SSL_CTX *ctx = SSL_CTX_new(TLS_client_method());
	constexpr int kWaiters = 3;
	const bool first = how.size() > 6 && how.compare(how.size() - 6, 6, "-first") == 0;
	for (int round = 0; round < 5; round++) {
		/* HOW-first: the first round's threads wait before the process has any connection. */
		const bool early = first && round == 0;
		int fd = -1, got = 0;
		SSL *ssl = nullptr;
		char buffer[256];
		auto connectAndRead = [&] {
			fd = connectTo("127.0.0.1", port);
			ssl = connectTls(ctx, fd);
			got = SSL_read(ssl, buffer, 12); /* "line 000000\n" */
			if (got <= 0)
				fail("SSL_read");
		};
		if (!early)
			connectAndRead();
		const int epfd = epoll_create1(0);
		int idle[2];
		addPipe(epfd, idle);
		std::atomic<pid_t> tids[kWaiters] = {};
		std::string answers[kWaiters];
		std::vector<std::thread> threads;
		for (int i = 0; i < kWaiters; i++)
			threads.emplace_back([&, i] {
				tids[i] = static_cast<pid_t>(syscall(SYS_gettid));
				struct epoll_event events[4];
				/* Long enough for the first round's handshake, made while they wait. */
				const int ready = epoll_wait(epfd, events, 4, early ? 3000 : 300);
				answers[i] = ready == 0 ? "timed out"
					     : ready == 1 && events[0].data.u64 == 7 && (events[0].events & EPOLLIN) ? "told"
					     : "other";
			});
		/* Bounded: the threads are in their waits within a few scheduling rounds. */
		for (int i = 0; i < kWaiters; i++)
			for (int tries = 0; tries < 100000 && (tids[i] == 0 || !blockedInEpollWait(tids[i])); tries++)
				sched_yield();
		if (early)
			connectAndRead();
		struct epoll_event interest = {};
		interest.events = how.rfind("oneshot", 0) == 0 ? EPOLLIN | EPOLLONESHOT : EPOLLIN;
		interest.data.u64 = 7;
		if (epoll_ctl(epfd, EPOLL_CTL_ADD, fd, &interest) != 0)
			fail("EPOLL_CTL_ADD");
		for (std::thread &thread : threads)
			thread.join();
		std::printf("told %ld, timed out %ld, other %ld\n", std::count(answers, answers + kWaiters, "told"),
			    std::count(answers, answers + kWaiters, "timed out"),
			    std::count(answers, answers + kWaiters, "other"));
		/* Every line read: a close with data unread would reset the server's connection. */
		while (got < 20 * 12) {
			const int n = SSL_read(ssl, buffer, sizeof(buffer));
			if (n <= 0)
				break;
			got += n;
		}
		SSL_free(ssl);
		close(fd);
		close(idle[0]);
		close(idle[1]);
		close(epfd);
	}
	SSL_CTX_free(ctx);
	return 0;
}

/* workers' server, in a forked child: bursts of records on each connection, then the end. */
[[noreturn]] void sendBursts(SSL_CTX *server, const std::vector<int> &sockets, int bursts, int perBurst, int firstSent)
{
	std::vector<SSL *> ssls;
	for (int fd : sockets) {
		SSL *ssl = SSL_new(server);
		SSL_set_fd(ssl, fd);
		if (SSL_accept(ssl) != 1)
			_exit(2);
		ssls.push_back(ssl);
	}
	std::vector<char> record(2000, 'r');
	for (int burst = 0; burst < bursts; burst++) {
		for (SSL *ssl : ssls) {
			for (int i = 0; i < perBurst; i++) {
				if (SSL_write(ssl, record.data(), static_cast<int>(record.size())) <= 0)
					_exit(3);
			}
		}
		/*
		 * On loopback, a write that returned is in the client's socket (a wait first:
		 * tlstune's record merging sends what it held before a wait): tell it so.
		 */
		if (burst == 0 && firstSent >= 0) {
			struct pollfd writable = { sockets[0], POLLOUT, 0 };
			if (poll(&writable, 1, 0) < 0 || write(firstSent, "s", 1) != 1)
				_exit(4);
		}
	}
	/* Until the client has read everything and closes. */
	char byte;
	for (SSL *ssl : ssls)
		SSL_read(ssl, &byte, 1);
	_exit(0);
}

/*
 * One record: what OpenSSL has decrypted of it is the program's to take (SSL_pending), not
 * the kernel's to report (a peer's writes may be merged into records larger than this
 * buffer).
 */
long readRecord(SSL *ssl)
{
	char buffer[4096];
	long got = 0;
	for (int n; (n = SSL_read(ssl, buffer, sizeof(buffer))) > 0;) {
		got += n;
		if (SSL_pending(ssl) == 0)
			break;
	}
	return got;
}

/* Whether the set's kernel arm of fd asks for input (its fdinfo line "tfd: FD events: HEX"). */
int armedForInput(int epfd, int fd)
{
	std::FILE *info = std::fopen(("/proc/self/fdinfo/" + std::to_string(epfd)).c_str(), "r");
	if (!info)
		fail("fdinfo");
	int armed = -1;
	char line[256];
	while (std::fgets(line, sizeof(line), info)) {
		int tfd;
		unsigned events;
		if (std::sscanf(line, "tfd: %d events: %x", &tfd, &events) == 2 && tfd == fd)
			armed = (events & EPOLLIN) != 0;
	}
	std::fclose(info);
	return armed;
}

int workers(SSL_CTX *server, const std::string &how, int kWorkers, int kConnections, uint32_t edge,
	    bool showFirstArm)
{
	constexpr int kBursts = 4, kPerBurst = 8, kRounds = 10;
	const long kBytes = 2000L * kConnections * kBursts * kPerBurst;
	SSL_CTX *ctx = SSL_CTX_new(TLS_client_method());
	long bytes = 0, twice = 0, timeouts = 0;
	for (int round = 0; round < kRounds; round++) {
		/* TCP on loopback: the shim reads no UNIX socket ahead (core/read/read_tuning.cpp). */
		std::vector<int> mine, theirs;
		int port = 0;
		const int listening = listenOn(0, &port);
		for (int i = 0; i < kConnections; i++) {
			mine.push_back(connectTo("127.0.0.1", std::to_string(port)));
			const int accepted = accept(listening, nullptr, nullptr);
			if (accepted < 0)
				fail("accept");
			theirs.push_back(accepted);
		}
		close(listening);
		int firstSent[2] = { -1, -1 };
		if (how == "held" && pipe(firstSent) != 0)
			fail("pipe");
		std::fflush(stdout);
		const pid_t child = fork();
		if (child == 0) {
			for (int fd : mine)
				close(fd);
			sendBursts(server, theirs, kBursts, kPerBurst, firstSent[1]);
		}
		for (int fd : theirs)
			close(fd);
		std::vector<SSL *> ssls;
		for (int fd : mine) {
			SSL *ssl = SSL_new(ctx);
			SSL_set_fd(ssl, fd);
			if (SSL_connect(ssl) != 1)
				fail("SSL_connect");
			setNonBlocking(fd);
			ssls.push_back(ssl);
		}
		std::atomic<long> read{0}, doubled{0}, waitedOut{0};
		/*
		 * held: each connection's first record is read before its first arm, the whole
		 * first burst being in its socket, so that the shim's read-ahead holds the rest
		 * in OpenSSL while the connection is armed (without it, the kernel holds them).
		 */
		if (how == "held") {
			char sent;
			if (::read(firstSent[0], &sent, 1) != 1)
				fail("the server's first burst");
			close(firstSent[0]);
			close(firstSent[1]);
			for (SSL *ssl : ssls)
				read += readRecord(ssl);
		}
		const int epfd = epoll_create1(0);
		const int done = eventfd(0, 0);
		struct epoll_event interest = {};
		interest.events = EPOLLIN;
		interest.data.u64 = kConnections;
		if (epoll_ctl(epfd, EPOLL_CTL_ADD, done, &interest) != 0)
			fail("EPOLL_CTL_ADD");
		/* The data of each connection's arm: its index, and with newdata a generation above it. */
		std::vector<std::atomic<uint64_t>> armedData(kConnections);
		std::vector<std::atomic<bool>> forOutput(kConnections);
		auto arm = [&](int i, int op, uint32_t interest = EPOLLIN) {
			struct epoll_event event = {};
			event.events = interest | EPOLLONESHOT | edge;
			forOutput[i] = interest == EPOLLOUT;
			event.data.u64 = static_cast<uint64_t>(i);
			if (how == "newdata")
				event.data.u64 |= (armedData[i].load() + (uint64_t{1} << 8)) & ~uint64_t{0xff};
			armedData[i] = event.data.u64; /* before the arm: the worker told of it compares */
			if (epoll_ctl(epfd, op, mine[i], &event) != 0)
				fail("epoll_ctl");
		};
		for (int i = 0; i < kConnections; i++)
			arm(i, EPOLL_CTL_ADD);
		if (showFirstArm && round == 0)
			std::printf("first arm's input with the kernel %d\n", armedForInput(epfd, mine[0]));
		std::vector<std::atomic<bool>> busy(kConnections);
		std::vector<std::thread> pool;
		for (int w = 0; w < kWorkers; w++)
			pool.emplace_back([&] {
				for (;;) {
					struct epoll_event event;
					const int ready = epoll_wait(epfd, &event, 1, 2000);
					if (ready == 0)
						waitedOut++;
					if (ready <= 0 || (event.data.u64 & 0xff) >= static_cast<uint64_t>(kConnections))
						return;
					const int i = static_cast<int>(event.data.u64 & 0xff);
					if (event.data.u64 != armedData[i]) {
						doubled++; /* an arm the connection no longer has: its arm stands */
						continue;
					}
					bool idle = false;
					if (!busy[i].compare_exchange_strong(idle, true)) {
						doubled++; /* the other worker re-arms it */
						continue;
					}
					if (forOutput[i]) {
						busy[i] = false;
						arm(i, EPOLL_CTL_MOD);
						continue;
					}
					const long got = readRecord(ssls[i]);
					if (got > 0 && (read += got) == kBytes) {
						const uint64_t one = 1;
						if (write(done, &one, sizeof(one)) != sizeof(one))
							fail("eventfd");
					}
					busy[i] = false;
					if (how == "deladd") {
						if (epoll_ctl(epfd, EPOLL_CTL_DEL, mine[i], nullptr) != 0)
							fail("EPOLL_CTL_DEL");
						arm(i, EPOLL_CTL_ADD);
					} else if (how == "output") {
						static thread_local unsigned turn = 0;
						arm(i, EPOLL_CTL_MOD, turn++ % 2 ? EPOLLOUT : EPOLLIN);
					} else {
						arm(i, EPOLL_CTL_MOD);
					}
				}
			});
		for (std::thread &thread : pool)
			thread.join();
		bytes += read;
		twice += doubled;
		timeouts += waitedOut;
		for (size_t i = 0; i < ssls.size(); i++) {
			SSL_free(ssls[i]);
			if (how == "held")
				shutdown(mine[i], SHUT_RDWR);
			else
				close(mine[i]);
		}
		waitpid(child, nullptr, 0);
		close(done);
		close(epfd);
	}
	std::printf("bytes %ld, twice %ld\ntimeouts %ld\n", bytes, twice, timeouts);
	SSL_CTX_free(ctx);
	return 0;
}

int main(int argc, char **argv)
{
	const std::string which = argc > 1 ? argv[1] : "";
	if ((which == "moved" || which == "peek") && argc > 2)
		return which == "moved" ? anotherFd(argv[2], which) : peek(argv[2]);
	if (which == "ssl-bio" && argc > 2)
		return sslBio(argv[2]);
	if (which == "drain" && argc > 2)
		return drain(argv[2]);
	if (which == "read-ahead-setting" && argc > 2)
		return readAheadSetting(argv[2]);
	if (which == "nested" && argc > 3)
		return nested(argv[3], argv[2]);
	if (which == "nested" && argc > 2)
		return nested(argv[2], "epoll");
	if (which == "read-bio" && argc > 3)
		return readBio(argv[3], argv[2]);
	if (which == "masked-wait" && argc > 3)
		return maskedWait(argv[3], argv[2]);
	if (which == "wait-arguments" && argc > 2)
		return waitArguments(argv[2]);
	if (which == "header-peek" && argc > 2)
		return headerPeek(argv[2]);
	if (which == "openssl-view" && argc > 2)
		return opensslView(argv[2]);
	if (which == "edge-peek" && argc > 2)
		return edgePeek(argv[2]);
	if (which == "blocking-peek" && argc > 2)
		return blockingPeek(argv[2]);
	if (which == "rearm" && argc > 2)
		return rearm(argv[2]);
	if (which == "waiters" && argc > 3)
		return waiters(argv[2], argv[3]);
	if (which == "reconnect" && argc > 3)
		return reconnect(argv[2], argv[3]);
	if (which == "duplicate" && argc > 3)
		return anotherFd(argv[3], argv[2]);
	if (which == "rest-of-record" && argc > 2) {
		SSL_CTX *server = serverContext(option(argc, argv, "--cert", ""), option(argc, argv, "--key", ""));
		const int status = restOfRecord(server, argv[2]);
		SSL_CTX_free(server);
		return status;
	}
	if (which == "pipes" || which == "pty" || which == "stoptls" || which == "close-unread" ||
	    which == "half-record" || which == "cancel-half-record" || which == "workers" || which == "sniff" ||
	    which == "eof-in-thread") {
		SSL_CTX *server = serverContext(option(argc, argv, "--cert", ""), option(argc, argv, "--key", ""));
		int status = which == "pipes" || which == "pty" ? pipes(server, which == "pty")
			     : which == "workers"                  ? workers(server, argc > 2 ? argv[2] : "",
										 static_cast<int>(number(argc, argv, "--workers", 3)),
										 static_cast<int>(number(argc, argv, "--connections", 4)),
										 number(argc, argv, "--edge", 0) ? uint32_t{EPOLLET} : 0,
										 number(argc, argv, "--show-first-arm", 0) != 0)
			     : which == "stoptls"                  ? stoptls(server, argc > 2 && std::string(argv[2]) == "tcp")
			     : which == "sniff"                    ? sniff(server)
			     : which == "half-record"              ? halfRecord(server)
			     : which == "cancel-half-record"       ? cancelHalfRecord(server)
			     : which == "eof-in-thread"            ? eofInThread(server)
								   : closeUnread(server, argc > 2 ? argv[2] : "");
		SSL_CTX_free(server);
		return status;
	}
	fail("usage: readiness_cases moved|peek PORT | duplicate HOW PORT | pipes|stoptls --cert C --key K");
}
