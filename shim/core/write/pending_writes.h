#pragma once

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <poll.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <vector>

#include "core/patient_lock.h"
#include "core/signals_blocked.h"

namespace tlstune {

/* libc's calls, never the shim's own (its poll flushes). */
struct SocketCalls {
	ssize_t (*send)(int fd, const void *data, size_t length, int flags);
	int (*poll)(struct pollfd *fds, unsigned long nfds, int timeout);
};

/*
 * How the shim sends: never blocking (the owner waits for room unlocked, with poll), and
 * never raising SIGPIPE, which belongs to the write that reports the error (kept until
 * then), in the program's thread.
 */
constexpr int kSend = MSG_DONTWAIT | MSG_NOSIGNAL;

/*
 * This thread holds one of the coalescer's locks: a close(), exit() or wait from inside
 * (a signal handler, a sanitizer's symbolizer) must not wait for a lock it holds.
 */
class ShimLock {
public:
	/*
	 * Marked held before it is taken: a signal handler that interrupts this thread between
	 * taking the lock and marking it would wait for itself (a hunt: a timer's close_range
	 * hung every thread in Coalescer::closing). One that interrupts it while it waits
	 * leaves the shim's part of its call undone, as for a lock it holds.
	 */
	explicit ShimLock(std::mutex &mutex) : outer_(markHeld()), lock_(mutex) {}
	ShimLock(std::mutex &mutex, std::try_to_lock_t) : outer_(markHeld()), lock_(mutex, std::try_to_lock)
	{
		held = outer_ || lock_.owns_lock();
	}
	/* At the end of the process image: it never waits for ever. */
	ShimLock(std::mutex &mutex, std::chrono::milliseconds patience)
		: outer_(markHeld()), lock_(mutex, std::defer_lock)
	{
		const bool taken = lockWithin(lock_, patience);
		held = outer_ || taken;
	}
	/*
	 * Marked free after it is released, for the same reason: members are destroyed after
	 * the destructor's body, so a mark cleared there left a window in which a handler's
	 * close_range waited for this very thread's lock (a hunt: 1 hang in 1,031 runs of
	 * writer_cases timer-close, every thread then waiting on the registry's lock).
	 */
	~ShimLock()
	{
		if (lock_.owns_lock())
			lock_.unlock();
		std::atomic_signal_fence(std::memory_order_seq_cst);
		held = outer_;
	}
	ShimLock(const ShimLock &) = delete;
	ShimLock &operator=(const ShimLock &) = delete;

	bool owns() const noexcept { return lock_.owns_lock(); }
	static bool heldHere() noexcept { return held; }

private:
	/* Whether this thread held one already; from now on it does. */
	static bool markHeld() noexcept
	{
		const bool was = held;
		held = true;
		std::atomic_signal_fence(std::memory_order_seq_cst);
		return was;
	}

	static thread_local bool held;
	const bool outer_; /* before lock_: marked before the lock is taken */
	std::unique_lock<std::mutex> lock_;
};

/*
 * The encrypted records of one connection that OpenSSL has written and the shim has not
 * sent yet, and the socket they go to. Records are appended whole and sent in order, so
 * the peer sees exactly the bytes OpenSSL wrote, only in fewer segments and syscalls.
 *
 * Two kinds of callers: the thread inside the connection's own OpenSSL call (append,
 * sendAsOwner), which may block as OpenSSL's own write would; and everyone else (the
 * flusher thread, another thread's poll, close, exit), which only ever sends with
 * kBackgroundSend. One mutex orders them, and nobody holds it across a call that may
 * block (issue 11: a writer blocked on a stalled peer held it, and shutdown, exit and
 * fork waited for it). Every send is a non-blocking one under it; the owner, on a
 * blocking socket that filled after all, waits for room with poll, unlocked, and the
 * bytes stay here meanwhile for any way out to hand over.
 */
class PendingWrites : public std::enable_shared_from_this<PendingWrites> {
public:
	/* Process-wide counts every PendingWrites adds to. */
	struct Counters {
		std::atomic<int> dirty{0};        /* connections holding bytes: a fast "none" */
		std::atomic<uint64_t> records{0}; /* records appended */
		std::atomic<uint64_t> sends{0};   /* send syscalls made */
	};

	PendingWrites(int fd, std::size_t limit, SocketCalls calls, Counters *counters) noexcept
		: fd_(fd), limit_(limit), calls_(calls), counters_(counters) {}

	enum class Result {
		Done,     /* appended, or nothing left to send */
		Again,    /* the socket is full (non-blocking): bytes remain */
		Failed,   /* errno says why; for a send, the bytes are dropped */
		Busy,     /* trySend only: someone else holds the lock */
		NoRoom,   /* append only: a new batch, and the socket has no room for it */
	};

	/*
	 * From the connection's own write: appends a record, first sending what is pending
	 * (sendAsOwner) when it would not fit. Again and Failed leave the record unappended,
	 * for OpenSSL to retry or report. becameDirty: the buffer was empty before.
	 */
	Result append(const void *record, std::size_t length, bool *becameDirty);
	/*
	 * The record of held plaintext (TLSTUNE_COALESCE=records), from any thread: appended
	 * past the limit rather than sent, so that its encryption never blocks. Bounded: one
	 * record beyond the limit per connection, as held plaintext is encrypted only after
	 * the previous record was appended.
	 */
	Result appendOverflow(const void *record, std::size_t length, bool *becameDirty);

	/*
	 * From the connection's own call: sends what is pending as OpenSSL's write would
	 * (blocking or not as the socket is), holding no lock while it may block. It never
	 * raises SIGPIPE: the call may be a read or a wait, which would not have written
	 * (a hunt: SSL_read died of it). A failure is kept (errno says why) for the write
	 * that reports it (reportError). programsWrite false: a flush before a read or a wait,
	 * later than the writes (see sendLocked).
	 */
	Result sendAsOwner(bool programsWrite = true);
	/* Anyone else: sends what the socket takes now, never waiting. */
	Result send();
	/* The same without waiting for the lock. */
	Result trySend();
	/*
	 * A way out's last send, and what follows it in the same hold of the lock once nothing
	 * is left to send: a record appended between the two would be lost.
	 */
	enum class AfterSend {
		Nothing,
		Detach,   /* a close: nothing more may be sent to that number */
		WriteOut, /* a shutdown of the sending side: later writes go straight to the socket */
	};
	/* The same waiting for the lock a bounded while (a way out). */
	Result sendPatiently(std::chrono::milliseconds patience, AfterSend then = AfterSend::Nothing);
	/*
	 * A shutdown's AfterSend::WriteOut on a connection that holds nothing and is appending
	 * nothing: done without the lock, so without the signal mask the lock needs (two
	 * system calls a connection in a server that shuts its connections down, lighttpd).
	 * False: the caller takes the locked way (sendPatiently).
	 */
	bool writeOutAtRest() noexcept;

	/*
	 * Before a batch begins (nothing pending): the largest batch the socket can take now
	 * without blocking, at most the limit, 0 when it cannot take one. Only so much of the
	 * connection's writes may be held: what is held goes to the kernel at once on every way
	 * out (close, exit, fork, a signal handler that exits), and never needs a thread or a
	 * wait to get there. A socket near full gets smaller batches, not none: a writer that
	 * outruns its peer still merges. One getsockopt(SO_MEMINFO), the kernel's own
	 * accounting of the socket's send buffer.
	 */
	std::size_t batchRoom() const noexcept;

	/* The socket is being closed: nothing more may be sent to that number. */
	void detach() noexcept;
	int fd() const noexcept { return fd_.load(std::memory_order_relaxed); }

	/* In a forked child, with the lock held: the parent sends what is pending, not both. */
	void dropAfterFork() noexcept;
	/* The error a send met: the connection is broken, every later write reports it. */
	int error() const noexcept { return error_.load(std::memory_order_acquire); }
	/*
	 * The same, for a write that reports it: as the kernel reports a socket's error once,
	 * and EPIPE to every write after it (its sending side is gone).
	 */
	int reportError() noexcept;
	/* From now on every write fails with error (the connection is broken). */
	void fail(int error) noexcept;
	/* The shutdown that AfterSend::WriteOut came before failed: writes may be held again. */
	void shutdownFailed() noexcept { shut_.store(false, std::memory_order_relaxed); }

	bool dirty() const noexcept { return dirty_.load(std::memory_order_relaxed); }
	/*
	 * A connection freed with bytes its socket never took (a drain that ran out): they
	 * are dropped, and the connection is clean. Skipped where a send holds the lock past
	 * 200 ms.
	 */
	void drop() noexcept;
	/*
	 * The last send found the socket full, and none has emptied it since: the peer is
	 * slow, so the connection's writes go straight to the socket (and block, or report
	 * WANT_WRITE, as without the shim) instead of piling up here.
	 */
	bool stalled() const noexcept { return stalled_.load(std::memory_order_relaxed); }
	/*
	 * The socket was sent to another process (SCM_RIGHTS), which may write to it at once:
	 * from then on nothing is held for it (rule 2: the shim cannot see that writer).
	 */
	void sendAway() noexcept { sentAway_.store(true, std::memory_order_relaxed); }
	/*
	 * Nothing is held for this connection's socket, sent away or shut down for writing: its
	 * writes go to the kernel, which answers them (after a shutdown, EPIPE, or the reset
	 * the peer sent, as the kernel tells it: a hunt found ECONNRESET answered EPIPE).
	 */
	bool writesDirect() const noexcept
	{
		return sentAway_.load(std::memory_order_relaxed) || shut_.load(std::memory_order_relaxed) ||
		       peerGone_.load(std::memory_order_relaxed);
	}
	/* Bytes waiting: BIO_CTRL_WPENDING. */
	std::size_t pending() noexcept;

	std::mutex &mutex() noexcept { return mutex_; }

	/*
	 * When the connection's own last write went through the filter, or held plaintext was
	 * last encrypted into it (by any thread: appendOverflow).
	 */
	std::chrono::steady_clock::time_point lastWrite() const noexcept
	{
		return lastWrite_.load(std::memory_order_relaxed);
	}
	void setLastWrite(std::chrono::steady_clock::time_point at) noexcept
	{
		lastWrite_.store(at, std::memory_order_relaxed);
	}
	/*
	 * The connection's writes since its writing thread last waited (waits: that thread's
	 * waitsOfThisThread()), this one counted in. Only the owner writes them.
	 */
	unsigned noteWrite(unsigned long waits) noexcept
	{
		const unsigned run = writesSince(waits);
		waitsAtLastWrite_.store(waits, std::memory_order_relaxed);
		writesSinceWait_.store(run, std::memory_order_relaxed);
		return run;
	}
	/* The write just noted follows a pause the shim could not see: it is a run's first. */
	void beginRun() noexcept { writesSinceWait_.store(1, std::memory_order_relaxed); }
	/* What noteWrite would answer, counting nothing. */
	unsigned writesSince(unsigned long waits) const noexcept
	{
		return waitsAtLastWrite_.load(std::memory_order_relaxed) != waits
			       ? 1
			       : writesSinceWait_.load(std::memory_order_relaxed) + 1;
	}
	/* On the Coalescer's list of connections to flush; only that list's lock reads it. */
	bool listed() const noexcept { return listed_; }
	void setListed(bool listed) noexcept { listed_ = listed; }

private:
	/*
	 * later: a send made later than the program's writes (the shim's thread, a flush
	 * before a read or a wait, a way out). Where the peer has reset the connection, such
	 * a send would take the reset from the socket, which reports its error once: the
	 * program's read or wait would see an end of stream (a hunt: SSL_read's "unexpected
	 * eof" in 19 runs of 30, poll without POLLERR, SO_ERROR 0). So it looks first (poll,
	 * which leaves the error where it is), and finding the connection gone drops what is
	 * held, as the kernel drops what it holds at a reset (peerGone_).
	 */
	Result sendLocked(bool later);
	/* POLLERR with POLLHUP: the connection is gone, and the kernel keeps its error. */
	bool peerGoneLocked() noexcept;
	/* Anyone but the owner, later than the program's writes: then past Nagle (nagle_push.h). */
	Result sendLaterLocked();
	/*
	 * sendAsOwner on a socket that filled after all: waits, holding no lock, until it has
	 * room, as a blocking write would. False: the write says "again" (a non-blocking
	 * socket, SO_SNDTIMEO ran out); errno EAGAIN.
	 */
	bool waitForRoom() noexcept;
	Result appendRecord(const void *record, std::size_t length, bool *becameDirty, bool overflow);
	/* With the lock held: a record may not be appended (broken, shut or closed); errno says why. */
	bool refusedLocked() noexcept;
	/* Whether length more bytes fit in the batch being gathered (false: none is). */
	bool fitsInBatch(std::size_t length) noexcept;
	void markClean() noexcept;
	void markDirty() noexcept;

	std::mutex mutex_;
	std::atomic<int> fd_;
	const std::size_t limit_;
	const SocketCalls calls_;
	Counters *const counters_;
	std::vector<unsigned char> bytes_;
	std::size_t sent_ = 0; /* bytes_[0, sent_) already went out */
	std::size_t batchLimit_ = 0; /* the batch's size at most: batchRoom() when it began */
	std::atomic<bool> dirty_{false};
	std::atomic<bool> stalled_{false};
	std::atomic<bool> sentAway_{false};
	std::atomic<bool> shut_{false}; /* shut down for writing (AfterSend::WriteOut) */
	/*
	 * A later send found the connection gone: nothing is held from then on, and the
	 * connection's writes go to the kernel, whose error the first of them meets.
	 */
	std::atomic<bool> peerGone_{false};
	std::atomic<int> appending_{0}; /* appendRecord calls under way: writeOutAtRest's other half */
	/* Written under mutex_; read without it by error(), once per held write. */
	std::atomic<int> error_{0};
	bool listed_ = false;
	std::atomic<std::chrono::steady_clock::time_point> lastWrite_{};
	std::atomic<unsigned long> waitsAtLastWrite_{0};
	std::atomic<unsigned> writesSinceWait_{0};
};

} /* namespace tlstune */
