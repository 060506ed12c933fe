#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "pending_writes.h"

namespace tlstune {

/*
 * Every connection's PendingWrites, and the rules for when their bytes go out besides a
 * full buffer: before the program waits (poll/select/epoll on any fd), before an fd is
 * closed or shut down, when the connection is freed, at exit, and in any case within the
 * delay, from a flusher thread, when the program blocks where the shim cannot see
 * (stdin, a condition variable, sleep).
 *
 * Why a flush from another thread is safe: the bytes it sends are ciphertext that OpenSSL
 * finished with when its write returned; they live in the PendingWrites, not in OpenSSL,
 * and go to the fd recorded when the filter was attached. So a flush needs the
 * PendingWrites' lock and send(2), never an OpenSSL call or lock; only the connection's
 * own thread, inside its own OpenSSL call, touches OpenSSL state. A close of that fd
 * (seen by the close family) detaches it under the same lock before the number is freed.
 *
 * Nothing here is proportional to the number of connections: a server with thousands
 * closes files and waits all the time. A close finds its fd's connections by number, a
 * wait visits only the connections holding bytes (the dirty list), a connection leaves
 * by its address.
 *
 * Lock order: registry_, then dirtyListMutex_, then a PendingWrites' lock; nobody takes
 * either while holding a PendingWrites' lock. wakeMutex_ is never held with another.
 */
class Coalescer {
public:
	Coalescer(std::size_t limit, std::chrono::microseconds delay, SocketCalls calls) noexcept
		: limit_(limit), delay_(delay), calls_(calls) {}
	/* Stops the flusher thread (it ends by itself once nothing was held for a second). */
	~Coalescer();
	Coalescer(const Coalescer &) = delete;
	Coalescer &operator=(const Coalescer &) = delete;

	std::size_t limit() const noexcept { return limit_; }
	const PendingWrites::Counters &counters() const noexcept { return counters_; }

	/* A connection writing to fd; nullptr when out of memory. */
	PendingWrites *open(int fd);
	/* The connection goes away (its filter BIO is freed): its bytes go out first (bounded). */
	void release(PendingWrites *writes);

	/*
	 * The connection's own write is about to go through the filter: true when it finds the
	 * connection quiet (nothing held, no write within the delay), and goes out at once, as
	 * it would without the shim. Only writes that follow within the delay are held, so a
	 * process that writes now and then costs no timer wake-ups.
	 */
	bool quietWrite(PendingWrites *writes) noexcept;

	/*
	 * After an append made writes non-empty: they go on the dirty list, and the flusher
	 * will send them within the delay. False when that cannot be promised (no flusher
	 * thread could be started, or this thread is inside the Coalescer already, from a
	 * signal handler): the caller must flush itself.
	 */
	bool dirtied(PendingWrites *writes);

	/* The program is about to wait: every connection's bytes go out, without blocking. */
	void flushAll()
	{
		if (counters_.dirty.load(std::memory_order_relaxed) > 0)
			flushDirty();
	}

	/*
	 * fds first..last are about to be closed (detach: nothing may be sent to those numbers
	 * afterwards) or shut down: their bytes go out first (bounded).
	 */
	void closing(int first, int last, bool detach);

	/* At exit: what is pending goes out (bounded). */
	void drainAll();
	/* No connection was ever attached (or all are gone): nothing to drain or detach. */
	bool idle() const noexcept { return entryCount_.load(std::memory_order_relaxed) == 0; }

	void lockForFork();
	void unlockInParent();
	/* The child's copies of pending bytes are dropped: the parent sends them, once. */
	void unlockInChild();

	/* How long close, SSL_free and exit wait for a peer that does not read. */
	static constexpr int kDrainTimeoutMs = 5000;

private:
	void flushDirty();
	bool startFlusher();
	void flusherLoop();

	const std::size_t limit_;
	const std::chrono::microseconds delay_;
	const SocketCalls calls_;

	std::mutex registry_; /* guards entries_ and byFd_ */
	std::unordered_map<const PendingWrites *, std::unique_ptr<PendingWrites>> entries_;
	std::unordered_multimap<int, PendingWrites *> byFd_; /* the attached ones */
	std::atomic<int> entryCount_{0};

	/* The connections that may hold bytes; its capacity is kept at entries_.size(). */
	std::mutex dirtyListMutex_;
	std::vector<PendingWrites *> dirtyList_;
	PendingWrites::Counters counters_;

	std::mutex wakeMutex_;
	std::condition_variable wake_;
	std::atomic<bool> flusherRunning_{false};
	std::atomic<bool> flusherIdle_{false};
	bool stopping_ = false; /* guarded by wakeMutex_ */
};

} /* namespace tlstune */
