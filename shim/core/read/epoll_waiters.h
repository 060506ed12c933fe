#pragma once

#include <atomic>
#include <cstdint>

namespace tlstune {

/*
 * The threads in an epoll wait, by set (issue 23). A fill moves records the kernel would
 * still hold into the shim's queue. A thread already blocked in epoll_wait on a set that
 * has the socket is not told: the kernel woke it for the arrival, found the socket read
 * empty, and put it back to sleep, where it would have found the records still there (a
 * program: 1 wait in 10 slept out its 20 s with two records held). So a call that filled,
 * in a process with threads, wakes the sets that register its socket while a thread waits
 * on one (EpollWake). Dekker: a wait counts itself in before it looks at what is held; a
 * call marks its connection held (BufferedFds) before it looks at the counts. Both sides
 * look by a read-modify-write of the count they share: of two such on one count, the later
 * sees the earlier and all before it (a fence would do as much, but ThreadSanitizer does
 * not follow fences).
 *
 * Counted only in a process with threads and a TLS context: a process of one thread cannot
 * fill while it waits, and one that never made a context has nothing to fill (a wait begun
 * between the first context and the first connection slept out its 20 s in 4 runs of 5
 * when waits counted from the connection). Sets share a slot every kSlots numbers: a wait
 * on one then costs another's fills a wake, nothing more. A wait left by siglongjmp stays
 * counted: the same.
 */
class EpollWaiters {
public:
	static constexpr int kSlots = 1 << 12;

	void enter(int epfd) noexcept
	{
		total_.fetch_add(1, std::memory_order_acq_rel);
		slots_[slot(epfd)].fetch_add(1, std::memory_order_acq_rel);
	}
	void leave(int epfd) noexcept
	{
		slots_[slot(epfd)].fetch_sub(1, std::memory_order_relaxed);
		total_.fetch_sub(1, std::memory_order_relaxed);
	}
	/* After the connection is marked held: whether any thread is in an epoll wait. */
	bool any() noexcept { return total_.fetch_add(0, std::memory_order_acq_rel) != 0; }
	/* The same for the waits on epfd, after any(). */
	bool waitingOn(int epfd) noexcept { return slots_[slot(epfd)].fetch_add(0, std::memory_order_acq_rel) != 0; }

	/* In a fork's child: the parent's other threads do not wait here. */
	void forkedChild() noexcept;

	/* The process made a TLS context: its waits count from now on, before its first connection too. */
	void countFromNow() noexcept
	{
		if (!counting())
			counting_.store(true, std::memory_order_relaxed);
	}
	/* One load: a process without TLS counts nothing. */
	bool counting() const noexcept { return counting_.load(std::memory_order_relaxed); }

private:
	static unsigned slot(int epfd) noexcept { return static_cast<unsigned>(epfd) & (kSlots - 1); }

	std::atomic<bool> counting_{ false };
	std::atomic<uint32_t> total_{ 0 };
	std::atomic<uint32_t> slots_[kSlots] = {};
};

/* The process's: zeroes in .bss, touched only by a process with threads and a TLS context. */
extern EpollWaiters g_epollWaiters;
inline EpollWaiters &epollWaiters() noexcept
{
	return g_epollWaiters;
}

/* One epoll wait, counted in for its length where counted is true. */
class CountedEpollWait {
public:
	CountedEpollWait(EpollWaiters &waiters, int epfd, bool counted) noexcept
		: waiters_(counted ? &waiters : nullptr), epfd_(epfd)
	{
		if (waiters_)
			waiters_->enter(epfd); /* before the wait's look at what is held */
	}
	~CountedEpollWait()
	{
		if (waiters_)
			waiters_->leave(epfd_);
	}
	CountedEpollWait(const CountedEpollWait &) = delete;
	CountedEpollWait &operator=(const CountedEpollWait &) = delete;

private:
	EpollWaiters *waiters_;
	int epfd_;
};

} /* namespace tlstune */
