/*
 * Programs that leave an OpenSSL call other than by its return: the shim's frames are on
 * the stack in between, and must let the unwinding through as OpenSSL's own frames do.
 * Each runs against tls_server --tls 1.2 --sink, with and without the shim.
 *
 *   cancel-reader PORT   five lines written, then a thread blocked in SSL_read on a peer
 *                        that sends nothing is cancelled; ten more lines and a shutdown.
 *                        Prints "joined canceled" and "wrote 60 shutdown R".
 *   cancel-writer PORT   a thread writing 14-byte lines in a loop is cancelled (deferred)
 *                        once it has written 1,000. Prints "joined canceled" and
 *                        "accepted N": the peer must get N bytes, or one line more.
 *   throw-callback PORT  a verify callback throws a C++ exception through SSL_connect,
 *                        caught around it. Prints "caught rejected by policy".
 *   longjmp-callback PORT
 *                        a verify callback longjmps out of SSL_connect (as C error
 *                        handlers such as Lua's leave a callback); that SSL is freed, and a
 *                        second connection writes ten lines (tls_server --connections 2).
 *                        Prints "callback bailed out", "shutdown R", "end".
 *   siglongjmp-read PORT twice: five lines, an SSL_read on a silent peer that a SIGALRM
 *                        handler leaves by siglongjmp (the old timeout idiom), ten lines, a
 *                        shutdown (tls_server --connections 2). Prints "round N: read timed
 *                        out" and "shutdown R" each round.
 */

#include <atomic>
#include <cstdio>
#include <fstream>
#include <csetjmp>
#include <csignal>
#include <pthread.h>
#include <stdexcept>
#include <sys/syscall.h>
#include <unistd.h>

#include "common/example.h"

using namespace example;

namespace {

SSL *g_ssl = nullptr;
std::atomic<long> g_accepted{ 0 };
std::atomic<long> g_readerThread{ 0 };

void *reader(void *)
{
	g_readerThread = syscall(SYS_gettid);
	char buffer[100];
	SSL_read(g_ssl, buffer, sizeof(buffer));
	return nullptr;
}

/*
 * Whether thread tid is inside a read system call now (the kernel's own view of it):
 * tlstune's read-ahead reads with readv and recvmsg.
 */
bool insideRead(long tid)
{
	std::ifstream call("/proc/self/task/" + std::to_string(tid) + "/syscall");
	long number = -1;
	call >> number;
	return number == SYS_read || number == SYS_recvfrom || number == SYS_readv || number == SYS_recvmsg;
}

void *writer(void *)
{
	char line[32];
	for (long i = 0;; i++) {
		const int n = std::snprintf(line, sizeof(line), "line %08ld\n", i);
		if (SSL_write(g_ssl, line, n) != n)
			fail("SSL_write");
		g_accepted += n;
	}
	return nullptr;
}

const char *joined(pthread_t thread)
{
	void *result = nullptr;
	pthread_join(thread, &result);
	return result == PTHREAD_CANCELED ? "canceled" : "returned";
}

int cancelReader(const char *port)
{
	SSL_CTX *ctx = SSL_CTX_new(TLS_client_method());
	int fd = -1;
	g_ssl = connectSsl(ctx, port, &fd);
	for (int i = 0; i < 5; i++)
		SSL_write(g_ssl, "hello\n", 6);
	pthread_t thread;
	pthread_create(&thread, nullptr, reader, nullptr);
	/* Bounded: the reader reaches its read within microseconds. */
	for (long spins = 0; spins < 20000000 && !(g_readerThread && insideRead(g_readerThread)); spins++)
		sched_yield();
	pthread_cancel(thread);
	std::printf("joined %s\n", joined(thread));
	int written = 0;
	for (int i = 0; i < 10; i++)
		written += SSL_write(g_ssl, "after\n", 6);
	std::printf("wrote %d shutdown %d\n", written, SSL_shutdown(g_ssl));
	SSL_free(g_ssl);
	close(fd);
	SSL_CTX_free(ctx);
	return 0;
}

int cancelWriter(const char *port)
{
	SSL_CTX *ctx = SSL_CTX_new(TLS_client_method());
	int fd = -1;
	g_ssl = connectSsl(ctx, port, &fd);
	pthread_t thread;
	pthread_create(&thread, nullptr, writer, nullptr);
	for (long spins = 0; spins < 20000000 && g_accepted < 14000; spins++)
		sched_yield();
	pthread_cancel(thread);
	const char *how = joined(thread);
	std::printf("joined %s\naccepted %ld\n", how, g_accepted.load());
	std::fflush(stdout);
	SSL_free(g_ssl);
	close(fd);
	SSL_CTX_free(ctx);
	return 0;
}

int rejectByPolicy(int, X509_STORE_CTX *)
{
	throw std::runtime_error("rejected by policy");
}

int throwCallback(const char *port)
{
	SSL_CTX *ctx = SSL_CTX_new(TLS_client_method());
	SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER, rejectByPolicy);
	const int fd = connectTo("127.0.0.1", port);
	SSL *ssl = SSL_new(ctx);
	SSL_set_fd(ssl, fd);
	try {
		std::printf("connect %d\n", SSL_connect(ssl));
	} catch (const std::exception &error) {
		std::printf("caught %s\n", error.what());
	}
	SSL_free(ssl);
	close(fd);
	SSL_CTX_free(ctx);
	return 0;
}

jmp_buf g_bailOut;

int bailOut(int, X509_STORE_CTX *)
{
	longjmp(g_bailOut, 1);
}

void writeNumbered(SSL *ssl, const char *what, int count)
{
	char line[32];
	for (int i = 0; i < count; i++) {
		const int n = std::snprintf(line, sizeof(line), "%s %02d\n", what, i);
		if (SSL_write(ssl, line, n) != n)
			fail("SSL_write");
	}
}

int longjmpCallback(const char *port)
{
	SSL_CTX *rejecting = SSL_CTX_new(TLS_client_method());
	SSL_CTX_set_verify(rejecting, SSL_VERIFY_PEER, bailOut);
	int fd = connectTo("127.0.0.1", port);
	SSL *ssl = SSL_new(rejecting);
	SSL_set_fd(ssl, fd);
	if (setjmp(g_bailOut) == 0)
		std::printf("connect %d\n", SSL_connect(ssl));
	else
		std::printf("callback bailed out\n");
	SSL_free(ssl);
	close(fd);
	SSL_CTX *ctx = SSL_CTX_new(TLS_client_method());
	ssl = connectSsl(ctx, port, &fd);
	writeNumbered(ssl, "second", 10);
	std::printf("shutdown %d\nend\n", SSL_shutdown(ssl));
	SSL_free(ssl);
	close(fd);
	SSL_CTX_free(ctx);
	SSL_CTX_free(rejecting);
	return 0;
}

sigjmp_buf g_timedOut;

void onAlarm(int)
{
	siglongjmp(g_timedOut, 1);
}

int siglongjmpRead(const char *port)
{
	struct sigaction action = {};
	action.sa_handler = onAlarm;
	sigaction(SIGALRM, &action, nullptr);
	SSL_CTX *ctx = SSL_CTX_new(TLS_client_method());
	for (int round = 0; round < 2; round++) {
		int fd = -1;
		SSL *ssl = connectSsl(ctx, port, &fd);
		writeNumbered(ssl, round ? "r1 before" : "r0 before", 5);
		if (sigsetjmp(g_timedOut, 1) == 0) {
			/* The peer sends nothing: only the alarm ends the read. */
			ualarm(100000, 0);
			char buffer[100];
			std::printf("read %d\n", SSL_read(ssl, buffer, sizeof(buffer)));
		} else {
			std::printf("round %d: read timed out\n", round);
		}
		writeNumbered(ssl, round ? "r1 after" : "r0 after", 10);
		std::printf("shutdown %d\n", SSL_shutdown(ssl));
		SSL_free(ssl);
		close(fd);
	}
	SSL_CTX_free(ctx);
	return 0;
}

} /* namespace */

int main(int argc, char **argv)
{
	const std::string which = argc > 2 ? argv[1] : "";
	if (which == "cancel-reader")
		return cancelReader(argv[2]);
	if (which == "cancel-writer")
		return cancelWriter(argv[2]);
	if (which == "throw-callback")
		return throwCallback(argv[2]);
	if (which == "longjmp-callback")
		return longjmpCallback(argv[2]);
	if (which == "siglongjmp-read")
		return siglongjmpRead(argv[2]);
	fail("usage: unwinding_cases cancel-reader|cancel-writer|throw-callback|longjmp-callback|siglongjmp-read PORT");
}
