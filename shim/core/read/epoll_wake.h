#pragma once

#include <atomic>
#include <mutex>
#include <sys/epoll.h>
#include <sys/types.h>

namespace tlstune {

/* The real epoll_ctl: the shim's own calls must not come back through its wrapper. */
using EpollCtl = int (*)(int, int, int, struct epoll_event *);

/*
 * Wakes the threads blocked on an epoll set when a registration the shim reports becomes
 * armed: EPOLL_CTL_MOD or ADD of a connection whose records OpenSSL holds. The kernel polls
 * the file on MOD and ADD and wakes the set's waiters when it is ready; the file is empty
 * (OpenSSL read it), so only the shim can. A thread-pool loop whose worker re-armed a
 * one-shot registration while the main thread waited stalled until that wait timed out.
 *
 * One eventfd of the shim's, made the first time it is needed and always readable, is
 * added to the set; the next wait on the set that sees its event takes it out again
 * (strip) and reports the held connections instead. No waiter is tracked: a re-arm of a
 * held connection costs two epoll_ctl calls, and nothing else costs anything.
 */
class EpollWake {
public:
	void wake(int epfd, EpollCtl ctl) noexcept;
	/*
	 * Removes the wake's events from the count events the real wait returned, taking it
	 * out of epfd: the new count. *woken: one was there.
	 */
	int strip(int epfd, EpollCtl ctl, struct epoll_event *events, int count, bool *woken) noexcept;
	/* No set has the wake: a wait has nothing to strip. */
	bool idle() const noexcept { return armed_.load(std::memory_order_acquire) == 0; }

private:
	/* The eventfd, made or made again (the program closed its number): -1 if none can be. */
	int descriptor() noexcept;

	std::mutex mutex_;
	int fd_ = -1;
	dev_t dev_ = 0;
	ino_t ino_ = 0;
	std::atomic<int> armed_{0}; /* sets the wake was added to and not yet taken out of */
};

} /* namespace tlstune */
