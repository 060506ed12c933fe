/*
 * Threads cancelled while they wait in calls the shim interposes, in a program that has
 * no C++ runtime of its own (linked statically): the process has no unwinder until
 * pthread_cancel loads libgcc_s.so.1, and the unwinding then crosses the shim's frames.
 * The shim must not load one before (runtime/unwinder.cpp).
 *
 *   cancelled_waits   for poll, epoll_wait, select and read on an empty pipe: a thread
 *                     waits, is cancelled and joined. Prints "unwinder before: no" and,
 *                     per call, "CALL canceled".
 */

#include <cstdio>
#include <cstring>
#include <fstream>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <string>
#include <sys/epoll.h>
#include <sys/select.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "common/asleep.h"

namespace {

enum class Wait { Poll, EpollWait, Select, Read };

struct Waiter {
	Wait how;
	int fd;
	long tid = 0;
	int epoll = -1;
};

void *wait(void *arg)
{
	Waiter &w = *static_cast<Waiter *>(arg);
	__atomic_store_n(&w.tid, static_cast<long>(syscall(SYS_gettid)), __ATOMIC_RELEASE);
	char byte;
	switch (w.how) {
	case Wait::Poll: {
		pollfd p = { w.fd, POLLIN, 0 };
		poll(&p, 1, -1);
		break;
	}
	case Wait::EpollWait: {
		epoll_event event = {};
		epoll_wait(w.epoll, &event, 1, -1);
		break;
	}
	case Wait::Select: {
		fd_set readable;
		FD_ZERO(&readable);
		FD_SET(w.fd, &readable);
		select(w.fd + 1, &readable, nullptr, nullptr, nullptr);
		break;
	}
	case Wait::Read:
		if (read(w.fd, &byte, 1) < 0)
			perror("read");
		break;
	}
	return nullptr;
}

/* Until the thread sleeps in its call (cancelled earlier, it still is). */
void untilAsleep(const Waiter &w)
{
	long tid = 0;
	for (int i = 0; i < 100000 && !(tid = __atomic_load_n(&w.tid, __ATOMIC_ACQUIRE)); i++)
		sched_yield();
	example::untilAsleep(static_cast<pid_t>(tid));
}

bool unwinderLoaded()
{
	std::ifstream maps("/proc/self/maps");
	for (std::string line; std::getline(maps, line);)
		if (line.find("libgcc_s") != std::string::npos)
			return true;
	return false;
}

} /* namespace */

int main()
{
	std::printf("unwinder before: %s\n", unwinderLoaded() ? "yes" : "no");
	const struct {
		Wait how;
		const char *name;
	} calls[] = { { Wait::Poll, "poll" }, { Wait::EpollWait, "epoll_wait" }, { Wait::Select, "select" },
		      { Wait::Read, "read" } };
	for (const auto &call : calls) {
		int pipeFds[2];
		if (pipe(pipeFds) != 0)
			return 1;
		Waiter w;
		w.how = call.how;
		w.fd = pipeFds[0];
		w.epoll = epoll_create1(EPOLL_CLOEXEC);
		epoll_event event = {};
		event.events = EPOLLIN;
		epoll_ctl(w.epoll, EPOLL_CTL_ADD, w.fd, &event);
		pthread_t thread;
		if (pthread_create(&thread, nullptr, wait, &w) != 0)
			return 1;
		untilAsleep(w);
		pthread_cancel(thread);
		void *result = nullptr;
		pthread_join(thread, &result);
		std::printf("%s %s\n", call.name, result == PTHREAD_CANCELED ? "canceled" : "returned");
		close(w.epoll);
		close(pipeFds[0]);
		close(pipeFds[1]);
	}
	return 0;
}
