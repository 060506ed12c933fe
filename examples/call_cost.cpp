/*
 * What a call costs where tlstune has no work (issue 24): the calls the shim interposes,
 * on fds it knows nothing of, timed in a tight loop. tlstune-bench runs it with and
 * without the shim, interleaved. Prints "ns N" (per call, the loop's median of 5 rounds).
 * Usage: call_cost CASE [CALLS], CASE:
 *   close-epoll   close of /dev/null in a process that has an epoll set (and no TLS)
 *   close-epoll-tls
 *                 close of an eventfd registered in an epoll set, in a process with a TLS
 *                 connection: an fd the shim knows (it records the set's registrations)
 *   dup-close     dup of /dev/null and close of the copy, the same process
 *   dup-close-tls the same in a process with a TLS connection (an SSL made first), where
 *                 the shim notes each copy's number
 *   epoll-ctl     EPOLL_CTL_ADD then EPOLL_CTL_DEL of an eventfd
 *   epoll-ctl-tls the same in a process with a TLS connection (an SSL made first), where
 *                 the shim records each registration
 *   epoll-wait    epoll_wait with a zero timeout on a set with one idle eventfd
 *   poll          poll with a zero timeout on one idle eventfd
 *   write         write of a byte to /dev/null
 *   ssl-pending, ssl-get-error, ssl-get-mode
 *                 SSL_pending, SSL_get_error(ssl, 1) and SSL_get_mode on an SSL that never
 *                 wrote (a few ns each: timed as whole loops, not call by call)
 */

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fcntl.h>
#include <poll.h>
#include <string>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <unistd.h>
#include <vector>

#include <openssl/ssl.h>

namespace {

[[noreturn]] void fail(const char *what)
{
	std::perror(what);
	std::exit(1);
}

/* The SSL cases, a few ns each: five rounds, each timed as a whole loop, not call by call. */
std::vector<double> sslRounds(const std::string &how, long calls)
{
	SSL_CTX *context = SSL_CTX_new(TLS_client_method());
	SSL *ssl = context ? SSL_new(context) : nullptr;
	if (!ssl)
		fail("SSL_new");
	/* The case chosen once: a comparison per call would cost more than the call. */
	long (*call)(SSL *) = nullptr;
	if (how == "ssl-pending")
		call = [](SSL *s) { return static_cast<long>(SSL_pending(s)); };
	else if (how == "ssl-get-error")
		call = [](SSL *s) { return static_cast<long>(SSL_get_error(s, 1)); };
	else if (how == "ssl-get-mode")
		call = [](SSL *s) { return static_cast<long>(SSL_get_mode(s)); };
	if (!call)
		fail("unknown case");
	std::vector<double> rounds;
	volatile long sink = 0;
	for (int round = 0; round < 5; round++) {
		const auto started = std::chrono::steady_clock::now();
		for (long i = 0; i < calls; i++)
			sink = sink + call(ssl);
		rounds.push_back(std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - started).count() /
				 static_cast<double>(calls));
	}
	SSL_free(ssl);
	SSL_CTX_free(context);
	return rounds;
}

} /* namespace */

int main(int argc, char **argv)
{
	if (argc < 2)
		fail("usage: call_cost CASE [CALLS]");
	const std::string how = argv[1];
	const long calls = argc > 2 ? std::atol(argv[2]) : 200000;
	const int set = epoll_create1(EPOLL_CLOEXEC);
	const int idle = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	const int null = open("/dev/null", O_RDWR | O_CLOEXEC);
	if (set < 0 || idle < 0 || null < 0)
		fail("setup");
	struct epoll_event event = {};
	event.events = EPOLLIN;
	if (how == "epoll-wait" && epoll_ctl(set, EPOLL_CTL_ADD, idle, &event) != 0)
		fail("epoll_ctl");
	const bool sslCase = how.compare(0, 4, "ssl-") == 0;
	/* A connection the shim follows: from then on it records the sets' registrations. */
	const bool tlsCase = how == "epoll-ctl-tls" || how == "dup-close-tls" || how == "close-epoll-tls";
	SSL_CTX *context = tlsCase ? SSL_CTX_new(TLS_client_method()) : nullptr;
	SSL *connection = context ? SSL_new(context) : nullptr;
	if (tlsCase && !connection)
		fail("SSL_new");
	/* The case chosen once, outside the timed part: comparing names per call cost more than a call. */
	static int setFd, idleFd, nullFd, copyFd;
	static struct epoll_event registered;
	setFd = set, idleFd = idle, nullFd = null, registered = event;
	void (*call)() = nullptr;
	if (how == "close-epoll" || how == "close-epoll-tls")
		call = [] { close(copyFd); };
	else if (how == "dup-close" || how == "dup-close-tls")
		call = [] { close(dup(nullFd)); };
	else if (how == "epoll-ctl" || how == "epoll-ctl-tls")
		call = [] {
			epoll_ctl(setFd, EPOLL_CTL_ADD, idleFd, &registered);
			epoll_ctl(setFd, EPOLL_CTL_DEL, idleFd, nullptr);
		};
	else if (how == "epoll-wait")
		call = [] {
			struct epoll_event got;
			epoll_wait(setFd, &got, 1, 0);
		};
	else if (how == "write")
		call = [] {
			static const char byte = 'x';
			if (write(nullFd, &byte, 1) != 1)
				fail("write");
		};
	else if (how == "poll")
		call = [] {
			struct pollfd pfd = { idleFd, POLLIN, 0 };
			poll(&pfd, 1, 0);
		};
	else if (!sslCase)
		fail("unknown case");
	const bool closeCase = how == "close-epoll" || how == "close-epoll-tls";
	const bool registeredCopy = how == "close-epoll-tls";
	std::vector<double> rounds = sslCase ? sslRounds(how, calls) : std::vector<double>();
	for (int round = 0; round < 5 && !sslCase; round++) {
		double spent = 0;
		for (long i = 0; i < calls; i++) {
			if (closeCase && !registeredCopy)
				copyFd = dup(null);
			else if (registeredCopy) {
				copyFd = eventfd(0, EFD_CLOEXEC);
				if (copyFd < 0 || epoll_ctl(set, EPOLL_CTL_ADD, copyFd, &event) != 0)
					fail("close-epoll-tls setup");
			}
			const auto started = std::chrono::steady_clock::now();
			call();
			spent += std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - started).count();
		}
		rounds.push_back(spent / static_cast<double>(calls));
	}
	SSL_free(connection);
	SSL_CTX_free(context);
	std::sort(rounds.begin(), rounds.end());
	std::printf("ns %.1f\n", rounds[2]);
	return 0;
}
