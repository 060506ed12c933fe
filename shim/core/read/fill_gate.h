#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>

#include "core/known_fds.h"

namespace tlstune {

/*
 * A fill (SocketCache::fill) takes more of a socket than OpenSSL asked for. A thread
 * already in the kernel's poll or select for that socket is not told: the kernel would
 * still hold all but one record and wake it, the shim's queue wakes nobody (a hunt: 25 of
 * 50 rounds slept a second with 10 records unread). So in a process with threads, a fill
 * reads ahead only while no thread waits on the socket, and a wait that begins while a
 * fill is under way waits for it to end (a read that does not block: microseconds) and
 * then sees its bytes in the queue. Dekker on two counts per number: a wait counts itself
 * in before it looks at the queue, a fill counts itself in before it reads; each sees the
 * other, or comes after it.
 *
 * A process of one thread never asks (nobody else can wait), and a wait asks only about
 * the numbers a fill was made on before (one relaxed load each). Numbers share a word
 * every kWords: a wait on one then keeps another's fills plain, nothing more. epoll sets
 * are not counted (docs/limits.md).
 */
class FillGate {
public:
	static constexpr int kWords = 1 << 14;

	/*
	 * waitRounds: of 2 ms, the longest a wait waits for a fill, 0 for 10 (a test's gate
	 * waits longer). Zero keeps the process's one in .bss.
	 */
	constexpr explicit FillGate(int waitRounds = 0) noexcept : waitRounds_(waitRounds) {}

	/* A fill was made on fd before: a wait on it counts itself in. One load. */
	bool tracks(int fd) const noexcept { return fills_.mayHave(fd); }

	/* A fill in a process of one thread: a wait once it has threads counts itself in on fd. */
	void note(int fd) noexcept
	{
		if (!fills_.mayHave(fd))
			noteFirst(fd);
	}

	/*
	 * Before a fill's read: true when it may read ahead (no thread waits on fd); then
	 * leaveFill once its bytes are in the queue, and the read must not block. False on the
	 * number's first fill, which only notes it: a wait that began before then was not
	 * counted.
	 */
	bool enterFill(int fd) noexcept;
	void leaveFill(int fd) noexcept;

	/*
	 * A wait on fd begins: counted in, it waits out a fill under way (not this thread's),
	 * for 20 ms at most.
	 */
	void enterWait(int fd) noexcept;
	void leaveWait(int fd) noexcept;

	/* In a fork's child: the parent's other threads' waits and fills are not its own. */
	void forkedChild() noexcept;

	/* A fill was ever made: a wait in a process with threads counts itself in. One load. */
	bool used() const noexcept { return used_.load(std::memory_order_relaxed); }
	/* The highest number below `below` a fill was made on (-1: none). */
	int highestTracked(int below) const noexcept { return fills_.highestBelow(below); }

private:
	static unsigned slot(int fd) noexcept { return static_cast<unsigned>(fd) & (kWords - 1); }
	void leave(unsigned at) noexcept;
	void noteFirst(int fd) noexcept;

	int waitRounds_;
	FdBitmap fills_;
	std::atomic<bool> used_{ false };
	/*
	 * By slot: the waits counted in (a wait left by siglongjmp stays counted: 32 bits, so
	 * that no number of them reaches the fills), and the fills under way (a futex word).
	 */
	std::atomic<uint32_t> waits_[kWords] = {};
	std::atomic<uint32_t> filling_[kWords] = {};
};

/* The process's one: zeroes in .bss (128 KiB), touched only by a process with threads that fills. */
extern FillGate g_fillGate;
inline FillGate &fillGate() noexcept
{
	return g_fillGate;
}

/*
 * The numbers one wait counted itself in on (FillGate::enterWait), left when it ends. Up
 * to kMost, on the stack: a wait may be a signal handler's, which must not allocate (a
 * hunt: a handler's poll of 2,000 fds hung in malloc's lock its thread held). A wait on
 * more counts no more: those numbers' fills may read ahead as before the gate.
 */
class CountedWait {
public:
	/* gate null: counts nothing (a process of one thread). */
	CountedWait(FillGate *gate, std::size_t most) noexcept : gate_(gate), most_(gate ? most : 0) {}
	~CountedWait();
	CountedWait(const CountedWait &) = delete;
	CountedWait &operator=(const CountedWait &) = delete;

	/* Counts the wait in on fd where a fill was made: whether it did. */
	bool count(int fd) noexcept;

	static constexpr std::size_t kMost = 256;

private:
	FillGate *gate_;
	std::size_t most_; /* the numbers the wait may name */
	std::size_t counted_ = 0;
	int fds_[kMost];
};

} /* namespace tlstune */
