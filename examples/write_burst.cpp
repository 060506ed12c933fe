/*
 * Writes to a TLS server on 127.0.0.1 in many small SSL_write calls: the pattern the
 * shim coalesces. Usage: write_burst PORT MODE [OPTIONS]
 *   --writes N --size B   N writes of B bytes of the data pattern (--seed S), then
 *                         close_notify; prints "sent N sha256 H" (tls_server --sink)
 *     --nonblocking       on a non-blocking socket: WANT_WRITE waits for POLLOUT and the
 *                         write is retried; prints "socket full" the first time
 *     --fork-at K         fork after write K; the child exits at once through exit()
 *     --timing            first prints "burst microseconds U": from the first write to
 *                         the end of a zero-timeout poll after the last (a program that
 *                         waits next; by then every byte is in the kernel)
 *     --discard           the records go to a null BIO after the handshake, never sent:
 *                         what the burst costs OpenSSL alone, without a syscall (the
 *                         floor for any coalescing under SSL_write); ends as "free"
 *     --dry               makes and digests the data but writes none of it: what the
 *                         program costs apart from its writes (the bench subtracts it)
 *     --end HOW           how the connection ends after the burst: "shutdown" (default,
 *                         close_notify both ways), "close" (close(fd), then SSL_free) or
 *                         "free" (SSL_free, then close(fd)); the last two send no close_notify
 *     --idle MS           after a "close" or "free" end, stays idle for MS ms (the span
 *                         measured, no wait for anything) and prints "idle cpu microseconds
 *                         U": what the whole process spent meanwhile
 *   --lines               sends each line of stdin with one write, then waits in fgets()
 *                         for the next (tls_server --lines prints them as they arrive)
 *   --ping N              N times: write --size bytes, poll until readable, read the
 *                         echo back (tls_server --echo); prints "pings N ok"
 *     --cpu               ... and "cpu microseconds U" (user + system, the whole process)
 *     --header H          each round writes H bytes first, in an SSL_write of their own
 *                         (a request's header, then its body), and reads both back
 *   --latency N --writes W  N requests of W writes of --size bytes, each followed by a
 *                         2 ms sleep, a wait the shim cannot see (tls_server --stamps
 *                         W*size --requests N); prints "latency microseconds p50 A p99 B
 *                         max C": from each request's last SSL_write to the server having
 *                         it whole, by the monotonic clock both processes share
 *   --threads T --cert C --key K [--rounds R]
 *                         T threads, each R times (default 1) making a context that
 *                         verifies C, and a connection over a socketpair to a server
 *                         thread of this process that reads it: --writes N writes of
 *                         --size B, polling now and then; prints "threads T ok" when every
 *                         connection verified and its server thread got exactly its bytes
 * SIGPIPE is ignored: a failed write prints "write failed: SSL error E, errno X" and
 * exits 1.
 */

#include <algorithm>
#include <chrono>
#include <csignal>
#include <ctime>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <thread>
#include <unistd.h>
#include <vector>

#include "common/example.h"

using namespace example;

namespace {

bool announcedFull = false;

/* Writes all of data, waiting for room on a non-blocking socket. */
void writeAll(SSL *ssl, int fd, const unsigned char *data, size_t length)
{
	size_t done = 0;
	while (done < length) {
		size_t n = 0;
		const int ok = SSL_write_ex(ssl, data + done, length - done, &n);
		if (ok) {
			done += n;
			continue;
		}
		const int error = SSL_get_error(ssl, ok);
		if (error != SSL_ERROR_WANT_WRITE && error != SSL_ERROR_WANT_READ) {
			std::printf("write failed: SSL error %d, errno %d\n", error, errno);
			std::exit(1);
		}
		if (!announcedFull) {
			std::printf("socket full\n");
			std::fflush(stdout);
			announcedFull = true;
		}
		struct pollfd pfd = { fd, static_cast<short>(error == SSL_ERROR_WANT_WRITE ? POLLOUT : POLLIN), 0 };
		poll(&pfd, 1, 60000);
	}
}

void burst(SSL *ssl, int fd, uint64_t writes, size_t size, uint64_t seed, uint64_t forkAt, bool timing,
	   bool dry)
{
	Pattern pattern(seed);
	Sha256 digest;
	std::vector<unsigned char> chunk(size);
	const auto started = std::chrono::steady_clock::now();
	for (uint64_t i = 0; i < writes; i++) {
		pattern.fill(chunk.data(), size);
		digest.update(chunk.data(), size);
		if (!dry)
			writeAll(ssl, fd, chunk.data(), size);
		if (i + 1 == forkAt) {
			const pid_t child = fork();
			if (child == 0)
				std::exit(0);
			int status = 0;
			waitpid(child, &status, 0);
		}
	}
	if (timing) {
		/* A program that waits next (here for nothing): every byte is in the kernel then. */
		struct pollfd pfd = { fd, POLLOUT, 0 };
		poll(&pfd, 1, 0);
		const std::chrono::duration<double, std::micro> took = std::chrono::steady_clock::now() - started;
		std::printf("burst microseconds %.0f\n", took.count());
	}
	std::printf("sent %llu sha256 %s\n", static_cast<unsigned long long>(writes * size),
		    digest.hex().c_str());
}

void lines(SSL *ssl, int fd)
{
	char line[4096];
	while (std::fgets(line, sizeof(line), stdin))
		writeAll(ssl, fd, reinterpret_cast<unsigned char *>(line), std::strlen(line));
}

uint64_t monotonicNs()
{
	struct timespec now;
	clock_gettime(CLOCK_MONOTONIC, &now);
	return static_cast<uint64_t>(now.tv_sec) * 1000000000u + static_cast<uint64_t>(now.tv_nsec);
}

void latency(SSL *ssl, int fd, uint64_t count, uint64_t writes, size_t size)
{
	std::vector<unsigned char> piece(size, 'l');
	std::vector<uint64_t> lastWrite(count), arrived(count);
	for (uint64_t i = 0; i < count; i++) {
		for (uint64_t w = 0; w < writes; w++)
			writeAll(ssl, fd, piece.data(), size);
		lastWrite[i] = monotonicNs();
		/* nanosleep: no wait the shim sees, so nothing it holds goes out because of it. */
		struct timespec pause = { 0, 2000000 };
		nanosleep(&pause, nullptr);
	}
	unsigned char *into = reinterpret_cast<unsigned char *>(arrived.data());
	for (size_t got = 0; got < count * sizeof(uint64_t);) {
		size_t n = 0;
		if (!SSL_read_ex(ssl, into + got, count * sizeof(uint64_t) - got, &n))
			fail("the server's times did not come");
		got += n;
	}
	std::vector<double> delays(count);
	for (uint64_t i = 0; i < count; i++)
		delays[i] = (static_cast<double>(arrived[i]) - static_cast<double>(lastWrite[i])) / 1000.0;
	std::sort(delays.begin(), delays.end());
	std::printf("latency microseconds p50 %.0f p99 %.0f max %.0f\n", delays[count / 2], delays[count * 99 / 100],
		    delays[count - 1]);
}

/* User and system time of the whole process so far, in microseconds. */
long long cpuMicroseconds()
{
	struct rusage usage = {};
	getrusage(RUSAGE_SELF, &usage);
	return (usage.ru_utime.tv_sec + usage.ru_stime.tv_sec) * 1000000LL + usage.ru_utime.tv_usec +
	       usage.ru_stime.tv_usec;
}

void ping(SSL *ssl, int fd, uint64_t count, size_t size, size_t header, bool cpu)
{
	std::vector<unsigned char> request(size, 'p'), head(header, 'h'), answer(size + header);
	for (uint64_t i = 0; i < count; i++) {
		if (header)
			writeAll(ssl, fd, head.data(), header);
		writeAll(ssl, fd, request.data(), size);
		for (size_t got = 0; got < size + header;) {
			struct pollfd pfd = { fd, POLLIN, 0 };
			if (SSL_pending(ssl) == 0 && poll(&pfd, 1, 60000) != 1)
				fail("no answer within 60 s");
			size_t n = 0;
			if (SSL_read_ex(ssl, answer.data() + got, size + header - got, &n))
				got += n;
			else if (SSL_get_error(ssl, 0) != SSL_ERROR_WANT_READ)
				fail("read");
		}
	}
	std::printf("pings %llu ok\n", static_cast<unsigned long long>(count));
	if (!cpu)
		return;
	std::printf("cpu microseconds %lld\n", cpuMicroseconds());
}

/*
 * One client thread's connection, in a context of its own that verifies the server with
 * the CA file ca, and its server thread, over a socketpair.
 */
bool pairedBurst(const std::string &ca, SSL_CTX *serverCtx, uint64_t writes, size_t size, uint64_t seed)
{
	SSL_CTX *clientCtx = SSL_CTX_new(TLS_client_method());
	if (SSL_CTX_load_verify_locations(clientCtx, ca.c_str(), nullptr) != 1) {
		SSL_CTX_free(clientCtx);
		return false;
	}
	SSL_CTX_set_verify(clientCtx, SSL_VERIFY_PEER, nullptr);
	int fds[2];
	if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds) != 0)
		return false;
	std::string received;
	std::thread server([&] {
		SSL *ssl = SSL_new(serverCtx);
		SSL_set_fd(ssl, fds[1]);
		Sha256 digest;
		if (SSL_accept(ssl) == 1) {
			unsigned char buffer[16384];
			size_t n = 0;
			while (SSL_read_ex(ssl, buffer, sizeof(buffer), &n))
				digest.update(buffer, n);
			SSL_shutdown(ssl);
		}
		received = digest.hex();
		SSL_free(ssl);
		close(fds[1]);
	});

	SSL *ssl = SSL_new(clientCtx);
	SSL_set_fd(ssl, fds[0]);
	SSL_set1_host(ssl, "localhost");
	Pattern pattern(seed);
	Sha256 digest;
	std::vector<unsigned char> chunk(size);
	bool ok = SSL_connect(ssl) == 1;
	for (uint64_t i = 0; ok && i < writes; i++) {
		pattern.fill(chunk.data(), size);
		digest.update(chunk.data(), size);
		ok = SSL_write(ssl, chunk.data(), static_cast<int>(size)) == static_cast<int>(size);
		/* A program that polls between writes: its wait pushes every connection's bytes. */
		if (i % 1000 == 0) {
			struct pollfd pfd = { fds[0], POLLOUT, 0 };
			poll(&pfd, 1, 0);
		}
	}
	ok = ok && SSL_get_verify_result(ssl) == X509_V_OK;
	SSL_shutdown(ssl);
	SSL_free(ssl);
	shutdown(fds[0], SHUT_WR);
	server.join();
	close(fds[0]);
	SSL_CTX_free(clientCtx);
	return ok && received == digest.hex();
}

int threads(int argc, char **argv, uint64_t count, size_t size)
{
	const std::string cert = option(argc, argv, "--cert", "");
	SSL_CTX *server = serverContext(cert, option(argc, argv, "--key", ""));
	const uint64_t writes = number(argc, argv, "--writes", 1);
	const uint64_t rounds = number(argc, argv, "--rounds", 1);
	const uint64_t good = sumOverThreads(count, [&](uint64_t t) {
		uint64_t ok = 0;
		for (uint64_t r = 0; r < rounds; r++)
			ok += pairedBurst(cert, server, writes, size, t * rounds + r + 1);
		return ok;
	});
	SSL_CTX_free(server);
	if (good != count * rounds) {
		std::printf("threads %llu of %llu connections ok\n", static_cast<unsigned long long>(good),
			    static_cast<unsigned long long>(count * rounds));
		return 1;
	}
	std::printf("threads %llu ok\n", static_cast<unsigned long long>(count));
	return 0;
}

} /* namespace */

int main(int argc, char **argv)
{
	std::signal(SIGPIPE, SIG_IGN);
	if (argc < 2)
		fail("usage: write_burst PORT --writes N --size B | --lines | --ping N | --threads T");
	bool nonBlocking = false, lineMode = false, discard = false, timing = false, dry = false, cpu = false;
	for (int i = 1; i < argc; i++) {
		timing = timing || std::string(argv[i]) == "--timing";
		cpu = cpu || std::string(argv[i]) == "--cpu";
		nonBlocking = nonBlocking || std::string(argv[i]) == "--nonblocking";
		lineMode = lineMode || std::string(argv[i]) == "--lines";
		discard = discard || std::string(argv[i]) == "--discard";
		dry = dry || std::string(argv[i]) == "--dry";
	}
	const size_t size = number(argc, argv, "--size", 100);
	if (const uint64_t count = number(argc, argv, "--threads", 0))
		return threads(argc, argv, count, size);

	SSL_CTX *ctx = SSL_CTX_new(TLS_client_method());
	SSL *ssl = SSL_new(ctx);
	const int fd = connectTo("127.0.0.1", argv[1]);
	SSL_set_fd(ssl, fd);
	if (SSL_connect(ssl) != 1)
		fail("handshake");
	if (nonBlocking)
		setNonBlocking(fd);
	if (std::find_if(argv, argv + argc, [](const char *a) { return std::string(a) == "--nodelay"; }) != argv + argc) {
		const int on = 1;
		setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &on, sizeof(on));
	}
	if (discard)
		SSL_set0_wbio(ssl, BIO_new(BIO_s_null()));

	if (lineMode)
		lines(ssl, fd);
	else if (const uint64_t count = number(argc, argv, "--ping", 0))
		ping(ssl, fd, count, size, number(argc, argv, "--header", 0), cpu);
	else if (const uint64_t count = number(argc, argv, "--latency", 0))
		latency(ssl, fd, count, number(argc, argv, "--writes", 1), size);
	else
		burst(ssl, fd, number(argc, argv, "--writes", 1), size, number(argc, argv, "--seed", 1),
		      number(argc, argv, "--fork-at", 0), timing, dry);
	std::fflush(stdout);

	const std::string end = discard ? "free" : option(argc, argv, "--end", "shutdown");
	if (end == "close" || end == "free") {
		if (end == "close")
			close(fd);
		SSL_free(ssl);
		if (end == "free")
			close(fd);
		SSL_CTX_free(ctx);
		if (const uint64_t idle = number(argc, argv, "--idle", 0)) {
			const long long before = cpuMicroseconds();
			usleep(static_cast<useconds_t>(idle * 1000));
			std::printf("idle cpu microseconds %lld\n", cpuMicroseconds() - before);
		}
		return 0;
	}
	/* close_notify, then the server's, so the server has read everything before we go. */
	for (int i = 0; i < 100; i++) {
		const int r = SSL_shutdown(ssl);
		if (r == 1 || (r < 0 && SSL_get_error(ssl, r) != SSL_ERROR_WANT_READ &&
			       SSL_get_error(ssl, r) != SSL_ERROR_WANT_WRITE))
			break;
		struct pollfd pfd = { fd, POLLIN, 0 };
		if (r < 0)
			poll(&pfd, 1, 60000);
	}
	SSL_free(ssl);
	close(fd);
	SSL_CTX_free(ctx);
	return 0;
}
