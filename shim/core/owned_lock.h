#pragma once

#include <atomic>
#include <sys/syscall.h>
#include <unistd.h>

#include "core/futex.h"

namespace tlstune {

/*
 * A mutex whose one word is its holder's thread id, so a thread can tell exactly whether
 * it holds it. A signal handler that ends the process (its _exit) may have interrupted
 * this very thread inside the lock: with a std::mutex it cannot know that, and waits for
 * itself or gives up on what the lock guards. Taking the lock and naming the holder are one
 * compare-and-swap, so there is no moment between them for a handler to fall into.
 * Uncontended: one atomic operation each way, as a std::mutex.
 */
class OwnedLock {
public:
	void lock() noexcept
	{
		const int me = thisThread();
		int holder = 0;
		while (!owner_.compare_exchange_weak(holder, me, std::memory_order_acquire,
						     std::memory_order_relaxed)) {
			if (holder != 0) {
				/* Dekker with unlock(): it sees the waiter, or the futex sees the word change. */
				waiters_.fetch_add(1, std::memory_order_seq_cst);
				futexWait(&owner_, holder);
				waiters_.fetch_sub(1, std::memory_order_relaxed);
			}
			holder = 0;
		}
	}
	bool try_lock() noexcept
	{
		int holder = 0;
		return owner_.compare_exchange_strong(holder, thisThread(), std::memory_order_acquire,
						      std::memory_order_relaxed);
	}
	void unlock() noexcept
	{
		owner_.store(0, std::memory_order_seq_cst);
		if (waiters_.load(std::memory_order_seq_cst) > 0)
			futexWake(&owner_, 1);
	}
	/* Whether this thread holds it: exact, also from a signal handler that interrupted it. */
	bool heldHere() const noexcept { return owner_.load(std::memory_order_relaxed) == thisThread(); }

	/*
	 * This thread's id, asked of the kernel once per thread. A forked child keeps its
	 * parent's number for the thread that forked: it is still unique in the child.
	 */
	static int thisThread() noexcept
	{
		static thread_local int id = 0;
		if (id == 0)
			id = static_cast<int>(syscall(SYS_gettid));
		return id;
	}

private:
	std::atomic<int> owner_{0};
	std::atomic<int> waiters_{0};
};

} /* namespace tlstune */
