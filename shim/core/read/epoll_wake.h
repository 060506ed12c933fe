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
 * added to the set (level-triggered). Every wait strips its event and reports the held
 * connections instead; it stays in the set while a wait that saw it finds any to report,
 * so that the kernel wakes the set's other waiters in turn, as it does for a
 * level-triggered file that stays ready (a hunt: with three threads waiting, two slept
 * out their timeout where the kernel woke all three). The first wait that finds nothing
 * to report takes it out (settle). No waiter is tracked: a re-arm of a held connection
 * costs two epoll_ctl calls, and nothing else costs anything.
 */
class EpollWake {
public:
	EpollWake() = default;
	/* The process's lives as long as the process; a unit test's leaves no number behind. */
	~EpollWake();
	EpollWake(const EpollWake &) = delete;
	EpollWake &operator=(const EpollWake &) = delete;

	void wake(int epfd, EpollCtl ctl) noexcept;
	/*
	 * Removes the wake's events from the count events the real wait returned: the new
	 * count. *woken: one was there. Whatever another waiter did meanwhile: the wake's
	 * event never reaches the program (a hunt: a second waiter got it, data "tlstunew").
	 */
	int strip(struct epoll_event *events, int count, bool *woken) const noexcept;
	/* Which wakes were made: read after a wait that was woken, before it looks for what to report. */
	unsigned long generation() const noexcept { return generation_.load(std::memory_order_acquire); }
	/*
	 * A woken wait found nothing of the shim's to report: the wake leaves epfd, unless
	 * another was made since seen (its connection would go untold).
	 */
	void settle(int epfd, EpollCtl ctl, unsigned long seen) noexcept;
	/* No wake was ever made: a wait has nothing to strip. */
	bool idle() const noexcept { return generation() == 0; }

private:
	/* The eventfd, made or made again (the program closed its number): -1 if none can be. */
	int descriptor() noexcept;

	std::mutex mutex_;
	int fd_ = -1;
	dev_t dev_ = 0;
	ino_t ino_ = 0;
	std::atomic<unsigned long> generation_{0}; /* wakes made: moves on under mutex_ */
};

} /* namespace tlstune */
