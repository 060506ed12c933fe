/*
 * Writers whose small writes TLSTUNE_COALESCE=records holds as plaintext, in the cases
 * where that could go wrong (issue 14). Usage: record_cases PORT CASE. CASE:
 *   key-update    TLS 1.3, against tls_server --echo --key-update: 20 rounds of 50 short
 *                 lines, each round read back; the server asks for a key update before
 *                 each echo, so the client's next writes follow its own KeyUpdate.
 *                 Prints "echoed N sha256 H"
 *   renegotiate   the same against tls_server --tls 1.2 --echo --renegotiate: the server
 *                 asks for a renegotiation while the client's next lines are written
 *   close-notify  against tls_server --sink --close-after 100: 50 lines, then SSL_read
 *                 (the server's close_notify), 50 more lines, SSL_shutdown; prints what
 *                 each step returned
 *   locked        a non-blocking connection shared by a reader and a writer thread under
 *                 the program's own lock (the pattern OpenSSL permits), against
 *                 tls_server --echo: 5000 short lines written, all read back. Prints
 *                 "echoed N sha256 H"
 *   queries       TLS 1.2: a writer thread writes 2000 short lines, another asks SSL_pending,
 *                 SSL_has_pending, SSL_get_shutdown and SSL_want meanwhile, both under the
 *                 program's lock, against tls_server --sink: while the shim encrypts held
 *                 lines from its own thread. Prints "wrote N lines"
 *   reset         TLS 1.2, against tls_server --sink --reset-after 100: 100 lines, a wait
 *                 for the reset, then lines until a write fails (SIGPIPE ignored); prints
 *                 that write's SSL_get_error and OpenSSL's error queue after it
 *   reuse         the same, then ERR_clear_error, SSL_clear and SSL_set_fd on a new
 *                 connection (tls_server --connections 2): SSL_connect and ten lines
 *                 there; prints what each returned and the error queue after them
 *   dup           key-update's rounds against tls_server --echo, on an SSL_dup of a new
 *                 SSL (which copies its ex_data), the original freed first
 *   ssl-bio       TLS 1.2, against tls_server --sink: 1000 short lines, SSL_write and BIO_write
 *                 through an SSL BIO (BIO_f_ssl) over the same SSL by turns
 *   errno         TLS 1.2, against tls_server --sink: errno set to EINTR before each of 20 short
 *                 writes; prints errno after each (OpenSSL's socket write clears it)
 *   no-retry      TLS 1.3, SSL_MODE_AUTO_RETRY cleared, against tls_server --echo: one line
 *                 written, then SSL_read until it returns data; prints each return and error
 */

#include <atomic>
#include <cerrno>
#include <csignal>
#include <cstdio>
#include <openssl/err.h>
#include <mutex>
#include <poll.h>
#include <thread>
#include <unistd.h>

#include "common/example.h"

using namespace example;

namespace {

SSL *connectSsl(const char *port, int *fd, bool fromDup = false)
{
	SSL_CTX *ctx = SSL_CTX_new(TLS_client_method());
	*fd = connectTo("127.0.0.1", port);
	SSL *ssl = SSL_new(ctx);
	if (fromDup) {
		SSL *copy = SSL_dup(ssl);
		SSL_free(ssl);
		ssl = copy;
	}
	SSL_set_fd(ssl, *fd);
	if (SSL_connect(ssl) != 1)
		fail("SSL_connect");
	return ssl;
}

/* The connection, its context and its fd go: a sanitizer build checks for leaks. */
void finish(SSL *ssl, int fd)
{
	SSL_CTX *ctx = SSL_get_SSL_CTX(ssl);
	SSL_free(ssl);
	SSL_CTX_free(ctx);
	close(fd);
}

std::string line(int i)
{
	return "line " + std::to_string(i) + "\n";
}

int echoCase(const char *port, bool fromDup)
{
	int fd = -1;
	SSL *ssl = connectSsl(port, &fd, fromDup);
	Sha256 digest;
	size_t echoed = 0;
	for (int round = 0, i = 0; round < 20; round++) {
		size_t written = 0;
		for (int end = i + 50; i < end; i++) {
			const std::string text = line(i);
			if (SSL_write(ssl, text.data(), static_cast<int>(text.size())) <= 0)
				fail("SSL_write");
			written += text.size();
		}
		for (size_t got = 0; got < written;) {
			char buffer[4096];
			const int n = SSL_read(ssl, buffer, sizeof(buffer));
			if (n <= 0)
				fail("SSL_read");
			digest.update(buffer, static_cast<size_t>(n));
			got += static_cast<size_t>(n);
			echoed += static_cast<size_t>(n);
		}
	}
	SSL_shutdown(ssl);
	std::printf("echoed %zu sha256 %s\n", echoed, digest.hex().c_str());
	finish(ssl, fd);
	return 0;
}

int closeNotifyCase(const char *port)
{
	int fd = -1;
	SSL *ssl = connectSsl(port, &fd);
	int failed = 0;
	for (int i = 0; i < 50; i++) {
		const std::string text = line(i);
		failed += SSL_write(ssl, text.data(), static_cast<int>(text.size())) <= 0;
	}
	char buffer[256];
	const int n = SSL_read(ssl, buffer, sizeof(buffer));
	std::printf("read %d error %d\n", n, SSL_get_error(ssl, n));
	for (int i = 50; i < 100; i++) {
		const std::string text = line(i);
		failed += SSL_write(ssl, text.data(), static_cast<int>(text.size())) <= 0;
	}
	std::printf("failed writes %d\n", failed);
	const int shut = SSL_shutdown(ssl);
	std::printf("shutdown %d\n", shut);
	finish(ssl, fd);
	return 0;
}

int sslBioCase(const char *port)
{
	int fd = -1;
	SSL *ssl = connectSsl(port, &fd);
	BIO *bio = BIO_new(BIO_f_ssl());
	BIO_set_ssl(bio, ssl, BIO_NOCLOSE);
	int failed = 0;
	for (int i = 0; i < 1000; i++) {
		const std::string text = line(i);
		const int n = static_cast<int>(text.size());
		failed += (i % 2 ? BIO_write(bio, text.data(), n) : SSL_write(ssl, text.data(), n)) != n;
	}
	std::printf("failed writes %d\n", failed);
	/* The SSL BIO took a reference to the SSL's socket BIO as its next: the chain goes. */
	BIO_free_all(bio);
	finish(ssl, fd);
	return 0;
}

int errnoCase(const char *port)
{
	int fd = -1;
	SSL *ssl = connectSsl(port, &fd);
	std::string seen;
	for (int i = 0; i < 20; i++) {
		const std::string text = line(i);
		errno = EINTR;
		const int n = SSL_write(ssl, text.data(), static_cast<int>(text.size()));
		seen += std::to_string(n) + ":" + std::to_string(errno) + " ";
	}
	std::printf("%s\n", seen.c_str());
	finish(ssl, fd);
	return 0;
}

int noRetryCase(const char *port)
{
	SSL_CTX *ctx = SSL_CTX_new(TLS_client_method());
	const int fd = connectTo("127.0.0.1", port);
	SSL *ssl = SSL_new(ctx);
	SSL_clear_mode(ssl, SSL_MODE_AUTO_RETRY);
	SSL_set_fd(ssl, fd);
	if (SSL_connect(ssl) != 1)
		fail("SSL_connect");
	const std::string text = line(0);
	SSL_write(ssl, text.data(), static_cast<int>(text.size()));
	for (int i = 0; i < 10; i++) {
		char buffer[256];
		const int n = SSL_read(ssl, buffer, sizeof(buffer));
		std::printf("read %d error %d\n", n, SSL_get_error(ssl, n));
		if (n > 0)
			break;
	}
	SSL_shutdown(ssl);
	finish(ssl, fd);
	return 0;
}

/* Waits until fd is ready for events (the program's lock not held). */
void waitFor(int fd, short events)
{
	struct pollfd ready = { fd, events, 0 };
	poll(&ready, 1, 10000);
}

int lockedCase(const char *port)
{
	int fd = -1;
	SSL *ssl = connectSsl(port, &fd);
	setNonBlocking(fd);
	std::mutex lock;
	constexpr int kLines = 5000;
	size_t total = 0;
	for (int i = 0; i < kLines; i++)
		total += line(i).size();

	std::thread writer([&] {
		for (int i = 0; i < kLines; i++) {
			const std::string text = line(i);
			for (;;) {
				int n, error;
				{
					std::lock_guard<std::mutex> held(lock);
					n = SSL_write(ssl, text.data(), static_cast<int>(text.size()));
					error = SSL_get_error(ssl, n);
				}
				if (n > 0)
					break;
				if (error != SSL_ERROR_WANT_WRITE && error != SSL_ERROR_WANT_READ)
					fail("SSL_write");
				waitFor(fd, error == SSL_ERROR_WANT_WRITE ? POLLOUT : POLLIN);
			}
		}
	});
	Sha256 digest;
	size_t echoed = 0;
	while (echoed < total) {
		char buffer[4096];
		int n, error;
		{
			std::lock_guard<std::mutex> held(lock);
			n = SSL_read(ssl, buffer, sizeof(buffer));
			error = SSL_get_error(ssl, n);
		}
		if (n > 0) {
			digest.update(buffer, static_cast<size_t>(n));
			echoed += static_cast<size_t>(n);
			continue;
		}
		if (error != SSL_ERROR_WANT_READ && error != SSL_ERROR_WANT_WRITE)
			fail("SSL_read");
		waitFor(fd, error == SSL_ERROR_WANT_READ ? POLLIN : POLLOUT);
	}
	writer.join();
	std::printf("echoed %zu sha256 %s\n", echoed, digest.hex().c_str());
	finish(ssl, fd);
	return 0;
}

SSL *connectTls12(const char *port, int *fd)
{
	SSL_CTX *ctx = SSL_CTX_new(TLS_client_method());
	SSL_CTX_set_max_proto_version(ctx, TLS1_2_VERSION);
	*fd = connectTo("127.0.0.1", port);
	SSL *ssl = SSL_new(ctx);
	SSL_set_fd(ssl, *fd);
	if (SSL_connect(ssl) != 1)
		fail("SSL_connect");
	return ssl;
}

int queriesCase(const char *port)
{
	int fd = -1;
	SSL *ssl = connectTls12(port, &fd);
	std::mutex lock;
	std::atomic<bool> done{ false };
	std::thread asking([&] {
		int answers = 0;
		while (!done.load()) {
			std::lock_guard<std::mutex> held(lock);
			answers += SSL_pending(ssl) + SSL_has_pending(ssl) + SSL_get_shutdown(ssl) +
				   (SSL_want(ssl) == SSL_NOTHING);
		}
		if (answers < 0)
			fail("answers");
	});
	int written = 0;
	for (int i = 0; i < 2000; i++) {
		const std::string text = line(i);
		std::lock_guard<std::mutex> held(lock);
		written += SSL_write(ssl, text.data(), static_cast<int>(text.size())) > 0;
	}
	done.store(true);
	asking.join();
	SSL_shutdown(ssl);
	std::printf("wrote %d lines\n", written);
	finish(ssl, fd);
	return 0;
}

/* OpenSSL's error queue, oldest first, as a program reports it; emptied. */
void printErrors(const char *when)
{
	std::printf("error queue %s:", when);
	while (const unsigned long code = ERR_get_error()) {
		char text[256];
		ERR_error_string_n(code, text, sizeof(text));
		std::printf(" [%s]", text);
	}
	std::printf("\n");
}

/*
 * Writes 100 lines to a peer that resets after 100 bytes, waits for the reset, then
 * writes on until a write fails and prints how. Held plaintext meets the reset in the
 * shim's encryption or send; the program sees it at this write or the next call.
 */
void writeUntilTheResetShows(SSL *ssl, int fd)
{
	signal(SIGPIPE, SIG_IGN);
	for (int i = 0; i < 100; i++) {
		const std::string text = line(i);
		if (SSL_write(ssl, text.data(), static_cast<int>(text.size())) <= 0)
			fail("SSL_write before the reset");
	}
	waitFor(fd, POLLIN);
	ERR_clear_error();
	for (int i = 100; i < 1100; i++) {
		const std::string text = line(i);
		const int n = SSL_write(ssl, text.data(), static_cast<int>(text.size()));
		if (n > 0)
			continue;
		std::printf("write failed: SSL_get_error %d\n", SSL_get_error(ssl, n));
		printErrors("after it");
		return;
	}
	std::printf("no write failed\n");
}

int resetCase(const char *port)
{
	int fd = -1;
	SSL *ssl = connectTls12(port, &fd);
	writeUntilTheResetShows(ssl, fd);
	finish(ssl, fd);
	return 0;
}

/* A failure of the old connection's is not the new one's. */
int reuseCase(const char *port)
{
	int fd = -1;
	SSL *ssl = connectTls12(port, &fd);
	writeUntilTheResetShows(ssl, fd);
	/* Lines the failed write's program may still write before it gives up. */
	for (int i = 0; i < 5; i++)
		SSL_write(ssl, "late\n", 5);
	ERR_clear_error();
	std::printf("SSL_clear %d\n", SSL_clear(ssl));
	close(fd);
	fd = connectTo("127.0.0.1", port);
	std::printf("SSL_set_fd %d\n", SSL_set_fd(ssl, fd));
	const int connected = SSL_connect(ssl);
	std::printf("SSL_connect %d\n", connected);
	int written = 0;
	for (int i = 0; i < 10; i++) {
		const std::string text = line(i);
		written += SSL_write(ssl, text.data(), static_cast<int>(text.size())) > 0;
	}
	std::printf("written %d of 10\n", written);
	printErrors("on the new connection");
	SSL_shutdown(ssl);
	finish(ssl, fd);
	return 0;
}

} /* namespace */

int main(int argc, char **argv)
{
	if (argc < 3)
		fail("usage: record_cases PORT CASE");
	const std::string how = argv[2];
	if (how == "key-update" || how == "renegotiate" || how == "dup")
		return echoCase(argv[1], how == "dup");
	if (how == "close-notify")
		return closeNotifyCase(argv[1]);
	if (how == "locked")
		return lockedCase(argv[1]);
	if (how == "queries")
		return queriesCase(argv[1]);
	if (how == "reset")
		return resetCase(argv[1]);
	if (how == "reuse")
		return reuseCase(argv[1]);
	if (how == "ssl-bio")
		return sslBioCase(argv[1]);
	if (how == "errno")
		return errnoCase(argv[1]);
	if (how == "no-retry")
		return noRetryCase(argv[1]);
	fail("unknown case");
}
