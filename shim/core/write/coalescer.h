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
 * This thread's waits so far: poll, select, epoll_wait and the rest, and every OpenSSL
 * call that may wait for the peer (read, peek, handshake, shutdown). A connection's write
 * after a wait of its thread goes out at once, in the program's call: the next wait
 * would send it anyway, so a request-response loop gains nothing from holding it and
 * would pay a thread's wake-up per round. Writes that follow it with no wait between are
 * held (and merged), after the first kDirectWritesAfterWait.
 */
inline unsigned long &waitsOfThisThread() noexcept
{
	/* initial-exec: counted by every wait of the host program. */
	static thread_local unsigned long waits __attribute__((tls_model("initial-exec"))) = 0;
	return waits;
}

/*
 * A request is often two writes (a header, then its body) before the wait for the answer:
 * merging them saves one send and would cost a wake-up of the shim's thread, measured at
 * 1.3x to 1.6x the client's CPU. So the first writes after a wait (or after a pause of the
 * delay, a wait the shim cannot see) go out as they are, and holding begins with the one
 * after them: only a burst is merged.
 */
constexpr unsigned kDirectWritesAfterWait = 2;

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
 * What is held is bounded so that it never needs a thread, a duplicate descriptor or a
 * wait to reach the kernel: a batch holds at most half the room the socket has when it
 * begins (PendingWrites::batchRoom), and never more than the limit, one record. So every
 * way out (close, shutdown, SSL_free, exit, exec, fork) hands the bytes over at once, in
 * the calling thread, and the kernel owns them as it would have without the shim. When
 * the socket is full, the connection's own write sends (and blocks, or says WANT_WRITE)
 * as without the shim.
 *
 * Nothing here is proportional to the number of connections: a server with thousands
 * closes files and waits all the time. A close finds its fd's connections by number, a
 * wait visits only the connections holding bytes (the dirty list), a connection leaves
 * by its address.
 *
 * Lock order: registry_, then dirtyListMutex_, then a PendingWrites' lock.
 * wakeMutex_ is never held with another.
 */
class Coalescer {
public:
	/*
	 * The flusher thread ends after idleExit with nothing to send, and the next held write
	 * starts another: a thread of the shim's is one more thread in the program's process
	 * (issue 11; unshare and setns end it at once, endFlusher).
	 */
	static constexpr std::chrono::milliseconds kIdleExit{1000};

	Coalescer(std::size_t limit, std::chrono::microseconds delay, SocketCalls calls,
		  std::chrono::milliseconds idleExit = kIdleExit) noexcept
		: limit_(limit), delay_(delay), idleExit_(idleExit), calls_(calls) {}
	/* Stops the flusher thread (it ends by itself once nothing was held for idleExit). */
	~Coalescer();
	Coalescer(const Coalescer &) = delete;
	Coalescer &operator=(const Coalescer &) = delete;

	std::size_t limit() const noexcept { return limit_; }
	std::chrono::microseconds delay() const noexcept { return delay_; }

	/*
	 * TLSTUNE_COALESCE=records: held plaintext is work for the flusher too. pending says
	 * whether any is held (the flusher stays awake while it is); encrypt turns it into
	 * records, before each of the flusher's passes. Set once, before any is held.
	 */
	struct PlaintextWork {
		bool (*pending)() noexcept;
		void (*encrypt)() noexcept;
	};
	void setPlaintextWork(PlaintextWork work) noexcept;
	/* Plaintext was held: the flusher makes it a record within the delay. False: no flusher. */
	bool plaintextHeld();
	const PendingWrites::Counters &counters() const noexcept { return counters_; }

	/* A connection writing to fd; nullptr when out of memory. */
	PendingWrites *open(int fd);
	/* The connection goes away (its filter BIO is freed): its bytes go to the kernel now. */
	void release(PendingWrites *writes);

	/*
	 * From the connection's own call: sends what is pending as OpenSSL's write would.
	 * Again: the socket is full; the bytes stay for the connection's next call.
	 */
	PendingWrites::Result sendAsOwner(PendingWrites *writes, bool programsWrite = true);
	/* The connection's own send found the socket full (logged). */
	void stalled(PendingWrites *writes);

	/*
	 * The connection's own write is about to go through the filter: true when it finds the
	 * connection quiet (nothing held and no write within the delay, or one of the first
	 * kDirectWritesAfterWait since its thread waited or the connection paused for the
	 * delay), and goes out at once, as it would without the shim. Only writes that follow
	 * within the delay with no wait between are held, so a process that writes now and
	 * then, or a request-response loop, costs no wake-ups.
	 */
	bool quietWrite(PendingWrites *writes) noexcept;

	/*
	 * After an append made writes non-empty: they go on the dirty list, and the flusher
	 * will send them within the delay. False when that cannot be promised (no flusher
	 * thread could be started, or this thread is inside the Coalescer already, from a
	 * signal handler): the caller must flush itself.
	 */
	bool dirtied(PendingWrites *writes);

	/*
	 * From now on nothing is held: every write goes straight to the socket (the process
	 * may no longer make the calls holding needs). What is held goes out now.
	 */
	void stopHolding()
	{
		holding_.store(false, std::memory_order_relaxed);
		flushDirty();
	}
	/* The same where nothing was ever held (idle): nothing to flush. */
	void stopHoldingIdle() noexcept { holding_.store(false, std::memory_order_relaxed); }
	bool holding() const noexcept { return holding_.load(std::memory_order_relaxed); }

	/* The program is about to wait: every connection's bytes go out, without blocking. */
	void flushAll()
	{
		if (anyPending())
			flushDirty();
	}

	/*
	 * After the program's own flush before a wait: a pass of the flusher's that was under
	 * way (it held the locks the flush only tries) ends first, so that what the program was
	 * told is written is the kernel's when it waits. A hunt under load: a poll, then
	 * SIGTERM at its default action, and the peer got 1 line of 20. One load otherwise.
	 */
	void awaitFlusherPass() noexcept
	{
		if (flusherPassing_.load(std::memory_order_seq_cst) != 0)
			awaitFlusherPassSlowly();
	}

	/*
	 * The main thread left by pthread_exit: the process ends with its last thread, and the
	 * flusher must not outlive them by its idle wait. From now on it ends as soon as it
	 * has nothing to send.
	 */
	void mainThreadLeft() noexcept;
	/*
	 * Ends the flusher thread, if there is one, and waits until the kernel has let it go:
	 * then the process has the program's threads alone (unshare(CLONE_NEWUSER) refuses
	 * more than one). The caller hands what is held to the kernel first; the next held
	 * write starts another flusher.
	 */
	void endFlusher() noexcept;
	/* After endFlusher: a flusher again if another thread held bytes meanwhile. */
	void resumeFlusher();
	/* Whether the flusher thread runs now. */
	bool flusherRunning() const noexcept { return flusherRunning_.load(std::memory_order_acquire); }

	/* fds first..last are about to be closed: their bytes go to the kernel first. */
	void closing(int first, int last);

	/*
	 * fd's sending side is about to be shut down: its bytes go to the kernel first, and
	 * its connections' later writes go straight to the socket, whose answer they report
	 * (a hunt: three writes after shutdown(SHUT_WR) were reported written, and SIGPIPE
	 * came at the fourth; a record appended as the shutdown passed was lost, 138 runs of
	 * 300).
	 */
	void shuttingDown(int fd);
	/* The shutdown failed: the connections of fd write on. */
	void shutdownFailed(int fd);
	/* fd is about to be sent to another process: nothing more is held for it. */
	void sendingAway(int fd);
	/* What fd's connections hold goes to the kernel now. */
	void handOverFor(int fd);
	/* The same, before the program pushes fd's socket itself: one load while nothing is pending. */
	void pushing(int fd)
	{
		if (anyPending())
			handOverFor(fd);
	}
	/* Some connection has bytes the kernel has not taken yet. */
	bool anyPending() const noexcept { return counters_.dirty.load(std::memory_order_relaxed) > 0; }

	/* At exit, _exit, exec or abort: what is pending goes to the kernel. */
	void drainAll();
	/* No connection was ever attached (or all are gone), and no bytes are left over. */
	bool idle() const noexcept
	{
		return entryCount_.load(std::memory_order_relaxed) == 0;
	}

	void lockForFork();
	void unlockInParent();
	/* The child's copies of pending bytes are dropped: the parent sends them, once. */
	void unlockInChild();

	/*
	 * How long a way out waits for a socket that filled under held bytes after their batch
	 * began (batchRoom said there was room): the program's own write would have waited.
	 */
	static constexpr int kDrainTimeoutMs = 5000;

private:
	/* visit(writes) for each connection writing to fd, under the registry's lock. */
	template <typename Visit>
	void forEachOf(int fd, Visit visit);

	void flushDirty();
	void awaitFlusherPassSlowly() noexcept;
	bool startFlusher();
	/* With wakeMutex_ held: whether the flusher has anything to do. */
	bool work() const noexcept;
	void flusherLoop();
	/* With registry_ held: what writes holds goes to the kernel now, then. */
	void handOver(PendingWrites *writes, PendingWrites::AfterSend then = PendingWrites::AfterSend::Nothing);
	/* Sends what writes holds, waiting up to the deadline: the way out when nothing else is. */
	void drainHere(PendingWrites *writes, std::chrono::steady_clock::time_point deadline,
		       PendingWrites::AfterSend then);

	const std::size_t limit_;
	const std::chrono::microseconds delay_;
	const std::chrono::milliseconds idleExit_;
	const SocketCalls calls_;

	std::mutex registry_; /* guards entries_ and byFd_ */
	std::unordered_map<const PendingWrites *, std::shared_ptr<PendingWrites>> entries_;
	std::unordered_multimap<int, PendingWrites *> byFd_; /* the attached ones */
	std::atomic<int> entryCount_{0};

	/* The connections that may hold bytes; its capacity is kept at entries_.size(). */
	std::mutex dirtyListMutex_;
	std::vector<PendingWrites *> dirtyList_;
	PendingWrites::Counters counters_;
	std::atomic<bool> holding_{true};
	std::atomic<bool> fullSockets_{false}; /* the flusher's last pass met a full socket */

	std::mutex wakeMutex_;
	std::condition_variable wake_;
	std::atomic<bool> flusherRunning_{false};
	std::atomic<bool> flusherIdle_{false};
	bool stopping_ = false; /* guarded by wakeMutex_ */
	bool mainLeft_ = false; /* guarded by wakeMutex_: the flusher does not wait idle */
	std::atomic<pid_t> flusherTid_{0}; /* the last flusher's thread, until it is known gone */
	/* 1 while the flusher encrypts and sends (never blocking); a futex word for awaitFlusherPass. */
	std::atomic<uint32_t> flusherPassing_{0};
	std::atomic<int> passWaiters_{0};
	/* Guarded by wakeMutex_: when the work that last woke (or started) the flusher was held. */
	std::chrono::steady_clock::time_point heldSince_{};
	std::atomic<bool (*)() noexcept> plaintextPending_{nullptr};
	std::atomic<void (*)() noexcept> encryptPlaintext_{nullptr};
};

} /* namespace tlstune */
