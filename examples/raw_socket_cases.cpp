/*
 * Programs that touch their TLS socket, or another fd, themselves around OpenSSL calls.
 *
 * Usage: raw_socket_cases CASE [ARGS]
 *   empty-recv PORT   against tls_server --burst 20: reads one line, then asks the socket
 *                     for 0 bytes, recv(MSG_DONTWAIT), then recv blocking (the kernel answers
 *                     0 at once while it has bytes), then peeks with MSG_TRUNC and no
 *                     buffer (a count: TCP copies nothing), the same three asks by
 *                     recvfrom with room for a source address (a blocking peek, not a
 *                     count), then polls before each other line. Prints "empty recv R R",
 *                     "counted without a buffer some" (or what the peek returned),
 *                     "recvfrom R length L, peek some length L, count some length L", a
 *                     recvmsg of no bytes with room for one ("recvmsg R name length L"),
 *                     peeks at the error queue, without waiting and blocking ("error queue
 *                     peeks R E R E"), reads it ("error queue read R E"), a blocking
 *                     recvmsg of no bytes with room for control messages ("recvmsg with
 *                     room for control R control length L"), recvmmsg of two messages of
 *                     no bytes ("recvmmsg of no bytes R lengths L L"), then "lines 20" or
 *                     "poll timed out after N lines" (exit 3).
 *   callback-read PORT
 *                     against tls_server --burst 20: a message callback reads one byte of
 *                     a non-blocking pipe of the program's inside every OpenSSL call. After
 *                     the first line the program polls the pipe and the socket together.
 *                     Prints "pipe R socket R" (the revents) and "lines 20" or "poll timed
 *                     out after N lines" (exit 3).
 *   bio-pair PORT     against tls_server --burst 20: the connection reads a BIO pair, and the
 *                     program moves bytes from the socket into it, as many as the pair's read
 *                     request asks (what OpenSSL wants next), blocking. Prints "first request
 *                     R" (after the handshake: 5, a record's header, without read-ahead) and
 *                     "lines 20".
 *   lingering-close --cert C --key K
 *                     a forked server reads one of 20 pipelined requests (all sent before its
 *                     first read), writes 200 KiB to
 *                     a client that reads nothing yet (its receive buffer is 32 KiB), sends
 *                     close_notify, frees its SSL, shuts its writing side, drains the socket
 *                     until a poll of 1 s finds nothing (the lingering close of Apache), and
 *                     closes. Then the client reads. Prints "client got N of 204800, then
 *                     close_notify|reset|...".
 *   proc-list-reuse   an epoll set made before the first connection, its registration's
 *                     number freed, then the connection and another EPOLL_CTL_ADD: prints
 *                     "epoll_ctl 0"
 *   close-int-max     an SSL made, a socket registered in an epoll set, then close(INT_MAX):
 *                     prints "close -1 EBADF"
 *   sendmsg-refused   an SSL made, then sendmsg with a message pointer the process may not
 *                     read, and with a control header shorter than itself: prints what
 *                     each returned ("bad pointer -1 EFAULT", "short header -1 EINVAL")
 *   failed-closes PORT
 *                     against tls_server --burst 20: reads one line (read-ahead holds the
 *                     rest), then makes closes of the socket that fail and close nothing:
 *                     dup2 from a bad fd, dup3 onto itself, close_range with a bad flag;
 *                     prints each result and whether the socket's close would now be
 *                     abortive ("dup2 -1 EBADF linger 0", ...), then "lines 20"
 *   raw-ppoll         an SSL made, then syscall(SYS_ppoll) with a 1 ms timeout on an idle
 *                     pipe, and with a signal mask size the kernel refuses: prints "ppoll 0
 *                     time left 0.000000000" (the kernel writes the time left back) and
 *                     "bad mask size -1 EINVAL"
 *   after-notify reset|waitall --cert C --key K
 *                     a forked server writes a record, close_notify and "HELLO" as plaintext,
 *                     all in the client's socket before its first SSL_read (which reads
 *                     "HELLO" ahead into the shim's queue). Then the client reads the
 *                     socket itself. reset: the server closes with SO_LINGER 0 (a reset)
 *                     and the client reads into memory it may not write, asks for 0 bytes,
 *                     peeks, reads, then reads twice more ("unwritable -1 EFAULT", "empty
 *                     0", "peek 5 HELLO", "read 5 HELLO", "then -1 ECONNRESET", "then 0":
 *                     the reset comes after the bytes, once). waitall: the server
 *                     writes "WORLD" and "AGAIN" as the client asks, which peeks 7 bytes
 *                     with MSG_PEEK|MSG_WAITALL, reads 7 with readv into parts of 3, 0 and
 *                     4 (the kernel's read takes what it holds behind), then 6 with recvmsg
 *                     and MSG_WAITALL (it waits for "AGAIN"): "peek 7 HELLOWO",
 *                     "readv 7 HELLOWO", "waitall 6 RLDAGA".
 *   reconnecting-threads --cert C --key K
 *                     four client threads make 100 connections each to a forked server
 *                     (a thread per connection, which writes 3 lines): connect, handshake,
 *                     read the lines, SSL_free, close; a number one thread closes is
 *                     taken at once by another's next socket. A 10 s receive timeout
 *                     makes a stall an error. Prints "connections 400 failed 0".
 *   unix-close --cert C --key K
 *                     over a UNIX socketpair: a forked server reads 10 bytes of the three
 *                     full records the client writes, then closes its socket unread; the
 *                     client then reads. Prints what that SSL_read returned, its
 *                     SSL_get_error and errno (a reset, ECONNRESET, while the kernel holds
 *                     the records), or dies by SIGPIPE (exit 141).
 */

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <climits>
#include <csignal>
#include <cstring>
#include <fcntl.h>
#include <linux/close_range.h>
#include <poll.h>
#include <sys/epoll.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <thread>
#include <unistd.h>
#include <vector>

#include "common/example.h"
#include "common/waits.h"

using namespace example;

namespace {

/* Connected to tls_server --burst 20 at port, the first line read: OpenSSL holds the rest. */
SSL *afterFirstLine(SSL_CTX *ctx, const char *port, int *fd)
{
	*fd = connectTo("127.0.0.1", port);
	SSL *ssl = connectTls(ctx, *fd);
	std::string line;
	if (!pollThenRead(ssl, *fd, &line))
		fail("the first line never came");
	return ssl;
}

int emptyRecv(const char *port)
{
	SSL_CTX *ctx = SSL_CTX_new(TLS_client_method());
	int fd = -1;
	SSL *ssl = afterFirstLine(ctx, port, &fd);
	char byte;
	const ssize_t quick = recv(fd, &byte, 0, MSG_DONTWAIT);
	alarm(30); /* a blocking recv that waits for ever ends the case */
	const ssize_t blocking = recv(fd, &byte, 0, 0);
	alarm(0);
	std::printf("empty recv %zd %zd\n", quick, blocking);
	/* TCP with MSG_TRUNC copies nothing: a peek that only counts may pass no buffer. */
	const ssize_t counted = recv(fd, nullptr, 4096, MSG_PEEK | MSG_TRUNC | MSG_DONTWAIT);
	std::printf("counted without a buffer %s\n", counted > 0 ? "some" : std::to_string(counted).c_str());
	/* TCP has no source address: the kernel writes the length, 0, of the one it has. */
	sockaddr_storage from;
	socklen_t emptyLength = sizeof(from), peekLength = sizeof(from), countLength = sizeof(from);
	const ssize_t empty = recvfrom(fd, &byte, 0, MSG_DONTWAIT, reinterpret_cast<sockaddr *>(&from), &emptyLength);
	char peeked[16];
	alarm(30);
	const ssize_t peek = recvfrom(fd, peeked, sizeof(peeked), MSG_PEEK, reinterpret_cast<sockaddr *>(&from), &peekLength);
	alarm(0);
	const ssize_t count = recvfrom(fd, nullptr, 4096, MSG_PEEK | MSG_TRUNC | MSG_DONTWAIT,
				       reinterpret_cast<sockaddr *>(&from), &countLength);
	std::printf("recvfrom %zd length %u, peek %s length %u, count %s length %u\n", empty, emptyLength,
		    peek > 0 ? "some" : std::to_string(peek).c_str(), peekLength,
		    count > 0 ? "some" : std::to_string(count).c_str(), countLength);
	msghdr message = {};
	message.msg_name = &from;
	message.msg_namelen = sizeof(from);
	const ssize_t none = recvmsg(fd, &message, MSG_DONTWAIT);
	std::printf("recvmsg %zd name length %u\n", none, message.msg_namelen);
	/* The error queue is empty whatever the socket holds: EAGAIN at once, blocking too. */
	const ssize_t quickError = recv(fd, peeked, sizeof(peeked), MSG_PEEK | MSG_ERRQUEUE | MSG_DONTWAIT);
	const int quickErrno = errno;
	alarm(30);
	const ssize_t blockingError = recv(fd, peeked, sizeof(peeked), MSG_PEEK | MSG_ERRQUEUE);
	alarm(0);
	std::printf("error queue peeks %zd %s %zd %s\n", quickError, quickError < 0 ? strerrorname_np(quickErrno) : "-",
		    blockingError, blockingError < 0 ? strerrorname_np(errno) : "-");
	/* Reading the error queue takes none of the socket's bytes: the poll below still sees them. */
	const ssize_t queueRead = recv(fd, peeked, sizeof(peeked), MSG_ERRQUEUE | MSG_DONTWAIT);
	std::printf("error queue read %zd %s\n", queueRead, queueRead < 0 ? strerrorname_np(errno) : "-");
	/* No bytes, room for control messages: answered at once, as without them. */
	char control[256];
	msghdr withControl = {};
	withControl.msg_control = control;
	withControl.msg_controllen = sizeof(control);
	alarm(30);
	const ssize_t controlled = recvmsg(fd, &withControl, 0);
	alarm(0);
	std::printf("recvmsg with room for control %zd control length %zu\n", controlled,
		    static_cast<size_t>(withControl.msg_controllen));
	/* Two messages of no bytes at once, blocking: each answered at once. */
	mmsghdr two[2] = {};
	alarm(30);
	const int both = recvmmsg(fd, two, 2, 0, nullptr);
	alarm(0);
	std::printf("recvmmsg of no bytes %d lengths %u %u\n", both, two[0].msg_len, two[1].msg_len);
	if (!pollThenReadTo20(ssl, fd, 1))
		return 3;
	SSL_free(ssl);
	close(fd);
	SSL_CTX_free(ctx);
	return 0;
}

int control = -1;

void readControl(int, int, int, const void *, size_t, SSL *, void *)
{
	char byte;
	if (read(control, &byte, 1) < 0) {
		/* empty: EAGAIN */
	}
}

int callbackRead(const char *port)
{
	int pipeFds[2];
	if (pipe(pipeFds) != 0 || fcntl(pipeFds[0], F_SETFL, O_NONBLOCK) != 0 || write(pipeFds[1], "abc", 3) != 3)
		fail("pipe");
	control = pipeFds[0];
	SSL_CTX *ctx = SSL_CTX_new(TLS_client_method());
	SSL_CTX_set_msg_callback(ctx, readControl);
	const int fd = connectTo("127.0.0.1", port);
	SSL *ssl = connectTls(ctx, fd);
	std::string line;
	if (!pollThenRead(ssl, fd, &line))
		fail("the first line never came");
	struct pollfd both[2] = { { control, POLLIN, 0 }, { fd, POLLIN, 0 } };
	if (SSL_pending(ssl) == 0 && poll(both, 2, kPollMs) < 0)
		fail("poll");
	std::printf("pipe %d socket %d\n", both[0].revents, SSL_pending(ssl) > 0 ? POLLIN : both[1].revents);
	const int result = pollThenReadTo20(ssl, fd, 1) ? 0 : 3;
	SSL_free(ssl);
	close(fd);
	SSL_CTX_free(ctx);
	return result;
}

/* Moves what the pair has for the socket to it, and, when OpenSSL wants to read, what it asks for. */
bool pump(SSL *ssl, BIO *network, int fd, int result, size_t *firstRequest)
{
	char buffer[20000];
	for (int n; (n = BIO_read(network, buffer, sizeof(buffer))) > 0;) {
		for (int at = 0; at < n;) {
			const ssize_t sent = write(fd, buffer + at, static_cast<size_t>(n - at));
			if (sent <= 0)
				return false;
			at += static_cast<int>(sent);
		}
	}
	if (SSL_get_error(ssl, result) != SSL_ERROR_WANT_READ)
		return false;
	const size_t request = std::min(BIO_ctrl_get_read_request(network), sizeof(buffer));
	if (firstRequest && !*firstRequest)
		*firstRequest = request;
	const ssize_t got = read(fd, buffer, request);
	return got > 0 && BIO_write(network, buffer, static_cast<int>(got)) == got;
}

int bioPair(const char *port)
{
	SSL_CTX *ctx = SSL_CTX_new(TLS_client_method());
	const int fd = connectTo("127.0.0.1", port);
	SSL *ssl = SSL_new(ctx);
	BIO *internal = nullptr, *network = nullptr;
	if (!ssl || BIO_new_bio_pair(&internal, 0, &network, 0) != 1)
		fail("a BIO pair");
	SSL_set_bio(ssl, internal, internal);
	int result;
	while ((result = SSL_connect(ssl)) != 1) {
		if (!pump(ssl, network, fd, result, nullptr))
			fail("the handshake");
	}
	size_t firstRequest = 0;
	std::string text;
	char buffer[4096];
	for (int lines = 0; lines < 20;) {
		result = SSL_read(ssl, buffer, sizeof(buffer));
		if (result > 0) {
			text.append(buffer, static_cast<size_t>(result));
			for (size_t at; (at = text.find('\n')) != std::string::npos; lines++)
				text.erase(0, at + 1);
		} else if (!pump(ssl, network, fd, result, &firstRequest)) {
			fail("reading the lines");
		}
	}
	std::printf("first request %zu\nlines 20\n", firstRequest);
	SSL_free(ssl);
	BIO_free(network);
	close(fd);
	SSL_CTX_free(ctx);
	return 0;
}

constexpr int kResponse = 200 * 1024;

/*
 * The server side of lingering-close; sent is readable once the client's requests are in
 * this socket, done is written once the socket is closed.
 */
[[noreturn]] void lingeringServer(SSL_CTX *server, int listener, int sent, int done)
{
	const int fd = accept(listener, nullptr, nullptr);
	const int sendBuffer = 1 << 20;
	setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &sendBuffer, sizeof(sendBuffer));
	SSL *ssl = SSL_new(server);
	SSL_set_fd(ssl, fd);
	char request[16];
	char byte;
	/* Every request is in the socket before the first read: read-ahead takes them all. */
	if (SSL_accept(ssl) != 1 || read(sent, &byte, 1) != 1 || SSL_read(ssl, request, 12) != 12)
		fail("the server's first request");
	std::vector<char> response(kResponse, 'x');
	for (int at = 0; at < kResponse;) {
		const int n = SSL_write(ssl, response.data() + at, kResponse - at);
		if (n <= 0)
			fail("the server's response");
		at += n;
	}
	SSL_shutdown(ssl);
	SSL_free(ssl);
	shutdown(fd, SHUT_WR);
	for (int i = 0; i < 100; i++) {
		struct pollfd pfd = { fd, POLLIN, 0 };
		char buffer[4096];
		if (poll(&pfd, 1, 1000) <= 0 || recv(fd, buffer, sizeof(buffer), 0) <= 0)
			break;
	}
	close(fd);
	if (write(done, "x", 1) != 1)
		fail("write");
	_exit(0);
}

int lingeringClose(SSL_CTX *server)
{
	int closed[2], sent[2];
	if (pipe(closed) != 0 || pipe(sent) != 0)
		fail("pipe");
	int port = 0;
	const pid_t child =
		forkServer(&port, [&](int listener) { lingeringServer(server, listener, sent[0], closed[1]); });
	close(closed[1]);
	close(sent[0]);
	SSL_CTX *ctx = SSL_CTX_new(TLS_client_method());
	const int connection = connectTo("127.0.0.1", std::to_string(port), 32 * 1024);
	SSL *ssl = connectTls(ctx, connection);
	for (int i = 0; i < 20; i++) {
		char request[16];
		std::snprintf(request, sizeof(request), "request %03d\n", i);
		if (SSL_write(ssl, request, 12) != 12)
			fail("SSL_write");
	}
	/* A wait sends what the writes left held (on loopback the server's socket has it then). */
	struct pollfd none = { connection, 0, 0 };
	poll(&none, 1, 0);
	if (write(sent[1], "x", 1) != 1)
		fail("write");
	char byte;
	if (read(closed[0], &byte, 1) != 1)
		fail("the server never closed");
	long got = 0;
	char buffer[16384];
	int n;
	while ((n = SSL_read(ssl, buffer, sizeof(buffer))) > 0)
		got += n;
	const int error = SSL_get_error(ssl, n);
	std::printf("client got %ld of %d, then %s\n", got, kResponse,
		    error == SSL_ERROR_ZERO_RETURN		 ? "close_notify"
		    : error == SSL_ERROR_SYSCALL && errno == ECONNRESET ? "reset"
									 : "something else");
	waitpid(child, nullptr, 0);
	SSL_free(ssl);
	close(connection);
	SSL_CTX_free(ctx);
	return 0;
}

/* One byte from the other process's pipe, or the case fails. */
void awaitSignal(int fd)
{
	char byte;
	if (read(fd, &byte, 1) != 1)
		fail("the other side ended");
}

void signalOther(int fd)
{
	if (write(fd, "x", 1) != 1)
		fail("write");
}

/* after-notify's server: a record, close_notify and HELLO, then what the case asks. */
[[noreturn]] void afterNotifyServer(SSL_CTX *server, int listener, bool reset, int go, int done)
{
	const int fd = accept(listener, nullptr, nullptr);
	SSL *ssl = SSL_new(server);
	SSL_set_fd(ssl, fd);
	if (SSL_accept(ssl) != 1 || SSL_write(ssl, "REC1", 4) != 4 || SSL_shutdown(ssl) < 0 ||
	    write(fd, "HELLO", 5) != 5)
		fail("the server's first bytes");
	signalOther(done);
	awaitSignal(go);
	if (reset) {
		const struct linger abortive = { 1, 0 };
		setsockopt(fd, SOL_SOCKET, SO_LINGER, &abortive, sizeof(abortive));
		close(fd);
		signalOther(done);
	} else {
		if (write(fd, "WORLD", 5) != 5)
			fail("write");
		awaitSignal(go);
		if (write(fd, "AGAIN", 5) != 5)
			fail("write");
		awaitSignal(go);
	}
	_exit(0);
}

void printRead(const char *what, ssize_t n, const char *bytes)
{
	if (n < 0)
		std::printf("%s -1 %s\n", what, strerrorname_np(errno));
	else
		std::printf("%s %zd %.*s\n", what, n, static_cast<int>(n), bytes);
}

int afterNotify(SSL_CTX *server, bool reset)
{
	int go[2], done[2];
	if (pipe(go) != 0 || pipe(done) != 0)
		fail("pipe");
	int port = 0;
	const pid_t child =
		forkServer(&port, [&](int listener) { afterNotifyServer(server, listener, reset, go[0], done[1]); });
	SSL_CTX *ctx = SSL_CTX_new(TLS_client_method());
	const int fd = connectTo("127.0.0.1", std::to_string(port));
	SSL *ssl = connectTls(ctx, fd);
	awaitSignal(done[0]); /* all of it is in this socket: the first read takes it */
	char buffer[64];
	if (SSL_read(ssl, buffer, sizeof(buffer)) != 4 || SSL_read(ssl, buffer, sizeof(buffer)) != 0)
		fail("the record, then close_notify");
	signalOther(go[1]);
	if (reset) {
		awaitSignal(done[0]);
		void *readOnly = mmap(nullptr, 4096, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
		if (readOnly == MAP_FAILED)
			fail("mmap");
		printRead("unwritable", read(fd, readOnly, 16), buffer);
		printRead("empty", recv(fd, buffer, 0, 0), buffer);
		printRead("peek", recv(fd, buffer, sizeof(buffer), MSG_PEEK | MSG_DONTWAIT), buffer);
		printRead("read", recv(fd, buffer, sizeof(buffer), 0), buffer);
		printRead("then", recv(fd, buffer, sizeof(buffer), 0), buffer);
		printRead("then", recv(fd, buffer, sizeof(buffer), 0), buffer);
	} else {
		alarm(30); /* a wait that never ends fails the case */
		printRead("peek", recv(fd, buffer, 7, MSG_PEEK | MSG_WAITALL), buffer);
		struct iovec parts[3] = { { buffer, 3 }, { buffer + 3, 0 }, { buffer + 3, 4 } };
		printRead("readv", readv(fd, parts, 3), buffer);
		signalOther(go[1]);
		struct iovec whole = { buffer, 6 };
		struct msghdr message = {};
		message.msg_iov = &whole;
		message.msg_iovlen = 1;
		printRead("waitall", recvmsg(fd, &message, MSG_WAITALL), buffer);
		alarm(0);
		signalOther(go[1]);
	}
	waitpid(child, nullptr, 0);
	SSL_free(ssl);
	close(fd);
	SSL_CTX_free(ctx);
	return 0;
}

/* reconnecting-threads' server: a thread per connection, 3 lines each, until the listener closes. */
[[noreturn]] void linesServer(SSL_CTX *server, int listener)
{
	for (;;) {
		const int fd = accept(listener, nullptr, nullptr);
		if (fd < 0)
			_exit(0);
		std::thread([server, fd] {
			SSL *ssl = SSL_new(server);
			SSL_set_fd(ssl, fd);
			if (SSL_accept(ssl) == 1) {
				for (int i = 0; i < 3; i++)
					SSL_write(ssl, "a line\n", 7);
				char byte;
				SSL_read(ssl, &byte, 1); /* until the client closes */
			}
			SSL_free(ssl);
			close(fd);
		}).detach();
	}
}

/* One client's connection: true when its 3 lines came. */
bool threeLines(SSL_CTX *ctx, int port)
{
	const int fd = connectTo("127.0.0.1", std::to_string(port));
	const struct timeval limit = { 10, 0 };
	setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &limit, sizeof(limit));
	SSL *ssl = SSL_new(ctx);
	SSL_set_fd(ssl, fd);
	int got = 0;
	if (SSL_connect(ssl) == 1) {
		char buffer[64];
		int n;
		while (got < 21 && (n = SSL_read(ssl, buffer, sizeof(buffer))) > 0)
			got += n;
	}
	SSL_free(ssl);
	close(fd);
	return got == 21;
}

int reconnectingThreads(SSL_CTX *server)
{
	int port = 0;
	const pid_t child = forkServer(&port, [server](int listener) { linesServer(server, listener); });
	SSL_CTX *ctx = SSL_CTX_new(TLS_client_method());
	std::atomic<int> made{ 0 }, failed{ 0 };
	std::vector<std::thread> clients;
	for (int t = 0; t < 4; t++) {
		clients.emplace_back([&] {
			for (int i = 0; i < 100; i++) {
				made++;
				failed += threeLines(ctx, port) ? 0 : 1;
			}
		});
	}
	for (std::thread &client : clients)
		client.join();
	std::printf("connections %d failed %d\n", made.load(), failed.load());
	kill(child, SIGTERM);
	waitpid(child, nullptr, 0);
	SSL_CTX_free(ctx);
	return 0;
}

} /* namespace */

int unixClose(SSL_CTX *server)
{
	int pair[2], written[2];
	if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, pair) != 0 || pipe(written) != 0)
		fail("socketpair");
	const pid_t child = fork();
	if (child == 0) {
		close(pair[0]);
		close(written[1]);
		SSL *ssl = SSL_new(server);
		SSL_set_fd(ssl, pair[1]);
		char some[10];
		/* Reads once the client wrote all three records: they are all in its socket. */
		if (SSL_accept(ssl) != 1 || SSL_write(ssl, "go", 2) != 2 || read(written[0], some, 1) != 1 ||
		    SSL_read(ssl, some, sizeof(some)) <= 0)
			_exit(2);
		close(pair[1]);
		_exit(0);
	}
	close(pair[1]);
	close(written[0]);
	SSL_CTX *ctx = SSL_CTX_new(TLS_client_method());
	SSL *ssl = SSL_new(ctx);
	SSL_set_fd(ssl, pair[0]);
	char go[2];
	if (SSL_connect(ssl) != 1 || SSL_read(ssl, go, sizeof(go)) != 2)
		fail("the handshake");
	const std::string record(16384, 'x');
	for (int i = 0; i < 3; i++)
		if (SSL_write(ssl, record.data(), static_cast<int>(record.size())) <= 0)
			fail("SSL_write");
	if (write(written[1], "w", 1) != 1)
		fail("write");
	close(written[1]);
	int status = -1;
	waitpid(child, &status, 0);
	errno = 0;
	char buffer[16];
	const int n = SSL_read(ssl, buffer, sizeof(buffer));
	std::printf("read %d error %d errno %d\n", n, SSL_get_error(ssl, n), errno);
	SSL_free(ssl);
	SSL_CTX_free(ctx);
	close(pair[0]);
	return 0;
}

/* An epoll set with one end of a new socketpair registered for reading: pair[0]. */
int registeredPair(int pair[2])
{
	const int set = epoll_create1(EPOLL_CLOEXEC);
	if (set < 0 || socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, pair) != 0)
		fail("setup");
	struct epoll_event event = {};
	event.events = EPOLLIN;
	if (epoll_ctl(set, EPOLL_CTL_ADD, pair[0], &event) != 0)
		fail("epoll_ctl");
	return set;
}

/*
 * A set made before the first connection, its registration's number freed and the
 * connection made: the next epoll_ctl reads the kernel's list from /proc into the freed
 * number, and the shim's own close of that file must not take the sets' lock again (a
 * review: it hung).
 */
int procListReuse()
{
	int pair[2];
	const int set = registeredPair(pair);
	struct epoll_event event = {};
	event.events = EPOLLIN;
	const int copy = dup(pair[0]);
	close(pair[0]);
	SSL_CTX *ctx = SSL_CTX_new(TLS_client_method());
	SSL *ssl = SSL_new(ctx);
	SSL_set_fd(ssl, copy);
	std::printf("epoll_ctl %d\n", epoll_ctl(set, EPOLL_CTL_ADD, pair[1], &event));
	SSL_free(ssl);
	SSL_CTX_free(ctx);
	return 0;
}

/* An SSL made and never connected: the process has a connection for the shim to follow. */
struct MadeSsl {
	SSL_CTX *ctx = SSL_CTX_new(TLS_client_method());
	SSL *ssl = SSL_new(ctx);
	MadeSsl()
	{
		if (!ssl)
			fail("SSL_new");
	}
	~MadeSsl()
	{
		SSL_free(ssl);
		SSL_CTX_free(ctx);
	}
	MadeSsl(const MadeSsl &) = delete;
	MadeSsl &operator=(const MadeSsl &) = delete;
};

/* A close of the highest number, with a registration the shim keeps (a hunt: it spun). */
int closeIntMax()
{
	MadeSsl made;
	int pair[2];
	registeredPair(pair);
	const int closed = close(INT_MAX);
	std::printf("close %d %s\n", closed, closed < 0 && errno == EBADF ? "EBADF" : "other");
	return 0;
}

/* Messages the kernel refuses, in a process with a connection: its answers, not a fault. */
int sendmsgRefused()
{
	MadeSsl made;
	int pair[2];
	if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, pair) != 0)
		fail("setup");
	const auto *unreadable = reinterpret_cast<const struct msghdr *>(16);
	const ssize_t bad = sendmsg(pair[0], unreadable, 0);
	std::printf("bad pointer %zd %s\n", bad, bad < 0 && errno == EFAULT ? "EFAULT" : "other");
	char byte = 'x';
	struct iovec part = { &byte, 1 };
	alignas(struct cmsghdr) char control[CMSG_SPACE(sizeof(int))] = {};
	struct msghdr message = {};
	message.msg_iov = &part;
	message.msg_iovlen = 1;
	message.msg_control = control;
	message.msg_controllen = sizeof(control);
	struct cmsghdr *header = CMSG_FIRSTHDR(&message);
	header->cmsg_level = SOL_SOCKET;
	header->cmsg_type = SCM_RIGHTS;
	header->cmsg_len = sizeof(struct cmsghdr) - 4; /* shorter than the header itself */
	const ssize_t shortHeader = sendmsg(pair[0], &message, 0);
	std::printf("short header %zd %s\n", shortHeader, shortHeader < 0 && errno == EINVAL ? "EINVAL" : "other");
	return 0;
}

/* Closes that fail close nothing: the socket's close stays what it was. */
int failedCloses(const char *port)
{
	SSL_CTX *ctx = SSL_CTX_new(TLS_client_method());
	int fd = -1;
	SSL *ssl = afterFirstLine(ctx, port, &fd);
	auto report = [fd](const char *what, int result) {
		struct linger setting = {};
		socklen_t length = sizeof(setting);
		getsockopt(fd, SOL_SOCKET, SO_LINGER, &setting, &length);
		std::printf("%s %d %s linger %d\n", what, result, result < 0 ? strerrorname_np(errno) : "-",
			    setting.l_onoff);
	};
	report("dup2", dup2(4000, fd));
	report("dup3", dup3(fd, fd, O_CLOEXEC));
	report("close_range", close_range(static_cast<unsigned>(fd), static_cast<unsigned>(fd), 0x40000000));
	std::string line;
	int lines = 1;
	for (; lines < 20; lines++) {
		if (!pollThenRead(ssl, fd, &line))
			break;
	}
	std::printf("lines %d\n", lines);
	SSL_shutdown(ssl);
	SSL_free(ssl);
	close(fd);
	SSL_CTX_free(ctx);
	return 0;
}

/* A wait made through syscall(): what the kernel writes back and what it refuses. */
int rawPpoll()
{
	MadeSsl made;
	int pipeFds[2];
	if (pipe(pipeFds) != 0)
		fail("setup");
	struct pollfd idle = { pipeFds[0], POLLIN, 0 };
	struct timespec timeout = { 0, 1000000 };
	const long waited = syscall(SYS_ppoll, &idle, 1, &timeout, nullptr, 8);
	std::printf("ppoll %ld time left %lld.%09ld\n", waited, static_cast<long long>(timeout.tv_sec), timeout.tv_nsec);
	sigset_t none;
	sigemptyset(&none);
	timeout = { 0, 1000000 };
	const long refused = syscall(SYS_ppoll, &idle, 1, &timeout, &none, 4);
	std::printf("bad mask size %ld %s\n", refused, refused < 0 && errno == EINVAL ? "EINVAL" : "other");
	close(pipeFds[0]);
	close(pipeFds[1]);
	return 0;
}

int main(int argc, char **argv)
{
	const std::string which = argc > 1 ? argv[1] : "";
	if (which == "empty-recv" && argc > 2)
		return emptyRecv(argv[2]);
	if (which == "callback-read" && argc > 2)
		return callbackRead(argv[2]);
	if (which == "bio-pair" && argc > 2)
		return bioPair(argv[2]);
	if (which == "proc-list-reuse")
		return procListReuse();
	if (which == "close-int-max")
		return closeIntMax();
	if (which == "sendmsg-refused")
		return sendmsgRefused();
	if (which == "raw-ppoll")
		return rawPpoll();
	if (which == "failed-closes" && argc > 2)
		return failedCloses(argv[2]);
	if (which == "lingering-close" || which == "unix-close" || which == "after-notify" ||
	    which == "reconnecting-threads") {
		SSL_CTX *server = serverContext(option(argc, argv, "--cert", ""), option(argc, argv, "--key", ""));
		const int result = which == "unix-close"             ? unixClose(server)
				   : which == "after-notify"         ? afterNotify(server, argc > 2 && std::string(argv[2]) == "reset")
				   : which == "reconnecting-threads" ? reconnectingThreads(server)
								     : lingeringClose(server);
		SSL_CTX_free(server);
		return result;
	}
	std::fprintf(stderr, "usage: raw_socket_cases empty-recv|callback-read|bio-pair|proc-list-reuse|close-int-max|sendmsg-refused|raw-ppoll|failed-closes|lingering-close|unix-close|after-notify|reconnecting-threads ...\n");
	return 2;
}
