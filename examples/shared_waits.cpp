/*
 * shared_waits WAIT [--early yes] --cert C --key K: one thread blocked in SSL_read of a
 * connection (under the program's lock); a forked server sends three records of 16 KiB
 * in one TCP segment. The moment the reader's SSL_read has read the first record's header
 * (its message callback), another thread begins WAIT (poll, ppoll, select, pselect, or
 * epoll: epoll_wait on a set the socket was added to first; 20 s) for the socket to be
 * readable, and the callback returns once that thread is in the kernel (its /proc syscall
 * file says so) or done. --early yes: that thread is in WAIT before the records are sent,
 * on the reader's CPU at a lower priority; --early connection (epoll): the same, in WAIT
 * from before the process's first connection (its contexts made). Either way the kernel
 * still holds the other two records and ends the wait; that thread then reads them.
 * Prints "reader 16384", "wait readable" (or "wait timed out", then no more) and
 * "waiter 32768".
 */

#include <atomic>
#include <fstream>
#include <mutex>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sched.h>
#include <string>
#include <sys/epoll.h>
#include <sys/select.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <thread>
#include <unistd.h>

#include "common/example.h"

using namespace example;

namespace {

constexpr int kRecord = 16384;
constexpr int kRecords = 3;
constexpr int kWaitMs = 20000;

/* The forked server: a handshake, then the records once the trigger pipe says so. */
[[noreturn]] void serve(int listener, SSL_CTX *ctx, int trigger)
{
	const int fd = accept(listener, nullptr, nullptr);
	SSL *ssl = SSL_new(ctx);
	SSL_set_fd(ssl, fd);
	if (fd < 0 || SSL_accept(ssl) != 1)
		fail("SSL_accept");
	char go;
	if (read(trigger, &go, 1) != 1)
		fail("the trigger");
	const int on = 1, off = 0;
	setsockopt(fd, IPPROTO_TCP, TCP_CORK, &on, sizeof on);
	const std::string record(kRecord, 'r');
	for (int i = 0; i < kRecords; i++)
		if (SSL_write(ssl, record.data(), kRecord) != kRecord)
			fail("SSL_write");
	setsockopt(fd, IPPROTO_TCP, TCP_CORK, &off, sizeof off);
	/* Until the client closes. */
	char rest[256];
	while (SSL_read(ssl, rest, sizeof rest) > 0) {
	}
	_exit(0);
}

/* The system call thread tid is in now (-1: running, or unknown). */
long inSyscall(pid_t tid)
{
	std::ifstream in("/proc/self/task/" + std::to_string(tid) + "/syscall");
	long number = -1;
	in >> number;
	return number;
}

bool blockedInRead(long number)
{
	return number == SYS_read || number == SYS_readv || number == SYS_recvfrom || number == SYS_recvmsg;
}

bool blockedInWait(long number)
{
	return number == SYS_poll || number == SYS_ppoll || number == SYS_select || number == SYS_pselect6 ||
	       number == SYS_epoll_wait || number == SYS_epoll_pwait;
}

/*
 * --early: the reader and the waiter share one CPU, the waiter at the lowest priority
 * (SCHED_IDLE), so that the reader runs first when the records arrive and reads what it
 * reads before the woken waiter looks again; without the shim the kernel still holds two
 * records then.
 */
void shareOneCpu(bool idle)
{
	cpu_set_t allowed;
	if (sched_getaffinity(0, sizeof allowed, &allowed) != 0)
		fail("sched_getaffinity");
	int first = 0;
	while (first < CPU_SETSIZE && !CPU_ISSET(first, &allowed))
		first++;
	cpu_set_t one;
	CPU_ZERO(&one);
	CPU_SET(first, &one);
	const struct sched_param none = {};
	if (sched_setaffinity(0, sizeof one, &one) != 0 || (idle && sched_setscheduler(0, SCHED_IDLE, &none) != 0))
		fail("sched_setaffinity, sched_setscheduler");
}

/* WAIT on fd for input: whether it said readable before its timeout. */
bool waitReadable(const std::string &how, int fd, int epfd)
{
	if (how == "epoll") {
		struct epoll_event event = {};
		return epoll_wait(epfd, &event, 1, kWaitMs) == 1 && (event.events & EPOLLIN);
	}
	if (how == "poll" || how == "ppoll") {
		struct pollfd wanted = { fd, POLLIN, 0 };
		const struct timespec timeout = { kWaitMs / 1000, 0 };
		const int ready = how == "poll" ? poll(&wanted, 1, kWaitMs) : ppoll(&wanted, 1, &timeout, nullptr);
		return ready == 1 && (wanted.revents & POLLIN);
	}
	fd_set readable;
	FD_ZERO(&readable);
	FD_SET(fd, &readable);
	int ready;
	if (how == "select") {
		struct timeval timeout = { kWaitMs / 1000, 0 };
		ready = select(fd + 1, &readable, nullptr, nullptr, &timeout);
	} else {
		const struct timespec timeout = { kWaitMs / 1000, 0 };
		ready = pselect(fd + 1, &readable, nullptr, nullptr, &timeout, nullptr);
	}
	return ready == 1 && FD_ISSET(fd, &readable);
}

} /* namespace */

int main(int argc, char **argv)
{
	if (argc < 2)
		fail("usage: shared_waits poll|ppoll|select|pselect|epoll [--early yes|connection] --cert C --key K");
	const std::string how = argv[1];
	SSL_CTX *serverCtx = serverContext(option(argc, argv, "--cert", ""), option(argc, argv, "--key", ""));
	/* No session tickets: nothing arrives before the records, for a wait begun --early. */
	SSL_CTX_set_num_tickets(serverCtx, 0);
	int trigger[2];
	if (pipe(trigger) != 0)
		fail("pipe");
	int port = 0;
	const pid_t server = forkServer(&port, [&](int listener) { serve(listener, serverCtx, trigger[0]); });
	SSL_CTX *ctx = SSL_CTX_new(TLS_client_method());
	const std::string early = option(argc, argv, "--early", "no");
	/* --early connection: the wait begins before the process's first connection. */
	const bool beforeConnection = early == "connection";
	if (beforeConnection && how != "epoll")
		fail("--early connection waits on an epoll set");
	/* epoll: the set is the program's from the start, its socket registered once connected. */
	const int epfd = how == "epoll" ? epoll_create1(0) : -1;
	if (how == "epoll" && epfd < 0)
		fail("epoll_create1");
	int fd = -1;
	SSL *ssl = nullptr;
	std::mutex lock;
	std::atomic<pid_t> readerTid{ 0 }, waiterTid{ 0 };
	std::atomic<bool> armed{ false }, waitNow{ false }, waited{ false };
	int readerGot = 0, waiterGot = 0;
	bool readable = false;
	auto wait = [&] {
		waiterTid = static_cast<pid_t>(syscall(SYS_gettid));
		if (early != "no")
			shareOneCpu(true);
		/* Bounded: the reader's callback says go within a few scheduling rounds of the trigger. */
		for (int i = 0; i < 10000000 && early == "no" && !waitNow.load(); i++)
			sched_yield();
		readable = waitReadable(how, beforeConnection ? -1 : fd, epfd);
		waited = true;
		if (!readable)
			return;
		/* After the reader's SSL_read, which began once ssl was set. */
		std::lock_guard<std::mutex> held(lock);
		char buffer[kRecord];
		while (waiterGot < (kRecords - 1) * kRecord) {
			const int n = SSL_read(ssl, buffer, sizeof buffer);
			if (n <= 0)
				break;
			waiterGot += n;
		}
	};
	/* The callback's view of them: set before any thread starts, which reads them. */
	static std::atomic<bool> *onHeader, *go, *done;
	static std::atomic<pid_t> *waitingTid;
	onHeader = &armed, go = &waitNow, done = &waited, waitingTid = &waiterTid;
	std::thread waiter;
	if (beforeConnection) {
		waiter = std::thread(wait);
		/* Bounded: the waiter is in the kernel within a few scheduling rounds. */
		for (int i = 0; i < 10000000 && !blockedInWait(inSyscall(waiterTid.load())); i++)
			sched_yield();
	}
	/*
	 * On the context, before the connection: OpenSSL 3.5 (the Debian 13 leg) never called
	 * a callback set on the SSL after the handshake for a record header it read, so the
	 * waiter began only after the reader's SSL_read, 6 s later (its bound), and the case
	 * tested nothing there. Armed only once the handshake is done.
	 */
	SSL_CTX_set_msg_callback(ctx, [](int written, int, int type, const void *, size_t, SSL *, void *) {
		if (written || type != SSL3_RT_HEADER || !onHeader->exchange(false))
			return;
		*go = true;
		/* Bounded: the waiter is in the kernel, or done, within a few scheduling rounds. */
		for (int i = 0; i < 10000000 && !done->load() && !blockedInWait(inSyscall(waitingTid->load())); i++)
			sched_yield();
	});
	ssl = connectSsl(ctx, std::to_string(port).c_str(), &fd);
	struct epoll_event interest = {};
	interest.events = EPOLLIN;
	interest.data.fd = fd;
	if (how == "epoll" && epoll_ctl(epfd, EPOLL_CTL_ADD, fd, &interest) != 0)
		fail("epoll_ctl");
	if (!beforeConnection)
		waiter = std::thread(wait);
	std::thread reader([&] {
		readerTid = static_cast<pid_t>(syscall(SYS_gettid));
		if (early != "no")
			shareOneCpu(false);
		std::lock_guard<std::mutex> held(lock);
		char buffer[kRecord];
		readerGot = SSL_read(ssl, buffer, sizeof buffer);
	});
	/* Bounded: the reader is in the kernel within a few scheduling rounds. */
	for (int i = 0; i < 10000000 && !blockedInRead(inSyscall(readerTid.load())); i++)
		sched_yield();
	for (int i = 0; i < 10000000 && early != "no" && !blockedInWait(inSyscall(waiterTid.load())); i++)
		sched_yield();
	armed = early == "no";
	if (write(trigger[1], "g", 1) != 1)
		fail("write");
	reader.join();
	waiter.join();
	std::printf("reader %d\nwait %s\n", readerGot, readable ? "readable" : "timed out");
	if (readable)
		std::printf("waiter %d\n", waiterGot);
	SSL_shutdown(ssl);
	SSL_free(ssl);
	close(fd);
	waitpid(server, nullptr, 0);
	SSL_CTX_free(ctx);
	SSL_CTX_free(serverCtx);
	return 0;
}
