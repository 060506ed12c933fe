#pragma once

#include <atomic>
#include <cstddef>

#include <sys/types.h>
#include <sys/uio.h>

#include "core/known_fds.h"
#include "core/owned_lock.h"

namespace tlstune {

/*
 * The bytes the shim read ahead from a socket and nobody has asked for yet: the socket's
 * receive queue, continued in user space (issue 23). OpenSSL reads with its own read-ahead
 * off, a record header and then its body, and the shim answers those reads from here,
 * filling the queue with one large read of the kernel when it is empty. Every read of the
 * socket the shim sees, OpenSSL's or the program's own (a raw recv after close_notify, a
 * peek, FIONREAD), takes from here first, so the stream is one and in order, and OpenSSL
 * holds exactly what it would hold without the shim: SSL_has_pending, BIO_number_read and
 * the bytes after close_notify are as without.
 *
 * A queue belongs to the socket's file, as the kernel's does: every number the program
 * made a copy of it under (dup, dup2, dup3, F_DUPFD) after the first fill names the same
 * queue, and it lives until the last of them is closed. A fill is made only for a
 * connection the shim follows (ReadTuning), and not on a number that was a copy or had
 * one before (copiedFds): its other numbers would read past the queue.
 *
 * Reads by fd, one relaxed load (a bitmap) for an fd that never had a queue. A queue's
 * lock is held only to move bytes, never across a system call: a close while another
 * thread is blocked in a fill does not wait for it. A signal handler that reads the fd
 * while its thread holds the lock goes to the kernel (OwnedLock::heldHere).
 */
class SocketCache {
public:
	SocketCache() noexcept = default;
	~SocketCache();
	SocketCache(const SocketCache &) = delete;
	SocketCache &operator=(const SocketCache &) = delete;

	/* Numbers at and past this are never queued: their reads go to the kernel. */
	static constexpr int kNumbers = FdBitmap::kNumbers;

	/* A fill was ever made: a close has a queue to look for. One load. */
	bool used() const noexcept { return used_.load(std::memory_order_relaxed); }
	/* fd may have bytes queued: one load. */
	bool mayHave(int fd) const noexcept { return fds_.mayHave(fd); }
	/* The bytes queued for fd (0 when none). */
	std::size_t queued(int fd) const noexcept;

	/*
	 * A copy of length bytes at from into the parts of to that reports a buffer the
	 * process may not write as the kernel does: the bytes copied, or -1 (EFAULT).
	 */
	using Copy = ssize_t (*)(const struct iovec *to, int count, const char *from, std::size_t length);
	/* The plain copy (memcpy): take's own where no copy is given. */
	static ssize_t copyPlainly(const struct iovec *to, int count, const char *from, std::size_t length) noexcept;
	/*
	 * Moves up to the iovec's length of fd's queue into it (copies, with peek; counts
	 * without copying, with discard: TCP's MSG_TRUNC), by copy where given. Returns the
	 * bytes moved: 0 when the queue is empty or this thread holds its lock (a signal
	 * handler that interrupted it), the read then being the kernel's; -1 when copy
	 * failed at the first byte, the queue as it was.
	 */
	ssize_t take(int fd, const struct iovec *iov, int iovcnt, bool peek = false, bool discard = false,
		     Copy copy = nullptr) noexcept;
	ssize_t take(int fd, void *buf, std::size_t len, bool peek = false) noexcept
	{
		struct iovec one = { buf, len };
		return take(fd, &one, 1, peek);
	}

	/*
	 * A read of len bytes of fd that the queue could not answer, made as one kernel read
	 * of up to size bytes: read(fd, iov, 2) receives into buf first and into a new queue
	 * after it. Returns what read returned for buf's part (errno kept), and queues the
	 * rest. A fill that cannot get its memory reads len bytes only. Not noexcept: the
	 * read is a cancellation point, whose unwinding goes through (the queue as it was).
	 */
	using Read = ssize_t (*)(int fd, const struct iovec *iov, int iovcnt, void *context);
	ssize_t fill(int fd, void *buf, std::size_t len, std::size_t size, Read read, void *context);

	/* The program made `to` a copy of `from`: it names from's queue too. */
	void duplicated(int from, int to) noexcept;
	/* The program closed fds first..last: their queues go with their last number. */
	void closed(int first, int last) noexcept;

	/*
	 * In a fork's child: a queue lock another thread of the parent held (moving bytes) is
	 * let go. The queues are copies: the two processes' reads may each take them, as each
	 * may take what OpenSSL held at the fork.
	 */
	void forkedChild() noexcept;

	/* The address that stands for fd's queue as a BufferedFds owner (null: none). */
	const void *owner(int fd) const noexcept { return slot(fd) ? slot(fd)->load(std::memory_order_acquire) : nullptr; }

private:
	struct Queue {
		OwnedLock lock;
		char *bytes = nullptr;
		std::size_t capacity = 0; /* of bytes */
		std::size_t begin = 0;
		std::size_t end = 0;
		std::atomic<std::size_t> size{ 0 }; /* end - begin, read without the lock */
		std::atomic<int> names{ 0 };          /* the numbers that name it */
		/* Bumped as its last name goes: a fill across that never queues into its next life. */
		std::atomic<unsigned> lives{ 0 };
		Queue *nextFree = nullptr;
	};
	static constexpr int kChunkBits = 10;
	static constexpr int kChunks = kNumbers >> kChunkBits;
	using Slot = std::atomic<Queue *>;

	/* fd's slot: made with make (null when out of memory or past kNumbers). */
	Slot *slot(int fd, bool make = false) const noexcept;
	/* The queue fd names, locked, or null (none, or this thread holds its lock). */
	Queue *locked(int fd) const noexcept;
	/* A queue named by no number yet, from the free list or new; null when out of memory. */
	Queue *made() noexcept;
	/* slot names no queue any more; the last name lets it go to the free list. */
	void unname(Slot &slot) noexcept;
	/* q, named by nothing, goes to the free list. */
	void recycle(Queue *q) noexcept;
	/* fd may name a queue from now on: the close family and take look for it. */
	void note(int fd) noexcept;
	/* Under q's lock: drops what q holds. */
	static void drop(Queue &q) noexcept;

	FdBitmap fds_;
	std::atomic<bool> used_{ false };
	mutable std::atomic<Slot *> chunks_[kChunks] = {};
	/* Guards the free list alone. A handler that finds it held here makes or leaks a queue. */
	OwnedLock freeLock_;
	Queue *free_ = nullptr;
};

} /* namespace tlstune */
