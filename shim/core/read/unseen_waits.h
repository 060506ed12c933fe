#pragma once

#include <atomic>
#include <cstddef>
#include <sys/types.h>

#include "core/known_fds.h"

namespace tlstune {

/*
 * Waits the shim cannot serve (issue 23): read-ahead holds records the kernel no longer
 * shows, so it is on only for a connection whose waits go through the shim's poll,
 * select and epoll. These ways out are seen here:
 * - a ring: once the process has made an io_uring instance, any socket may be waited on
 *   by POLL_ADD or added to epoll by IORING_OP_EPOLL_CTL, neither of which the shim sees;
 * - a socket's file sent away with SCM_RIGHTS: another process waits on it there;
 * - a socket given SO_RCVLOWAT above 1: the kernel's answer counts its bytes, not records;
 * - an fd the program armed EPOLLONESHOT (oneShotFds): an arm goes to one waiter, and the
 *   kernel's report of what the socket has and the shim's of what it queued cannot be
 *   made one hand-over.
 * (A program that reads or peeks at the raw stream itself is followed: it reads what the
 * shim queued first, SocketCache.)
 * A connection asks at each of its calls whether anything changed since it last looked
 * (one load); when something did and it concerns it, it stops reading ahead. What the
 * shim queued then is still read first; it reads no further ahead.
 */
class UnseenWaits {
public:
	/* Bumped by every note: a connection that saw this number has nothing new to ask. */
	unsigned generation() const noexcept { return generation_.load(std::memory_order_acquire); }

	/* The process made a ring: no connection reads ahead from now on. */
	void noteRing() noexcept;
	/* The process made an SSL BIO, which reads its SSL past the shim: the same. */
	void noteSslBio() noexcept;
	/*
	 * The socket file ino went where the shim cannot follow its waits. Lock-free: a
	 * signal handler may send a descriptor while its thread is inside this.
	 */
	void noteUnfollowed(ino_t ino) noexcept;

	/*
	 * The program armed fd EPOLLONESHOT in a process with a connection: a connection on
	 * it stops reading ahead at its next call. Only a number not noted before makes the
	 * connections look (a pool re-arms after every event).
	 */
	void noteOneShot(int fd) noexcept;

	/* Whether the shim still follows every wait on the socket file ino (0: not known yet). */
	bool follows(ino_t ino) const noexcept;

	/*
	 * The process confined itself (seccomp): a connection decided from now on is not
	 * looked at (fstat, getsockopt may be forbidden) and does not read ahead.
	 */
	void noteConfined() noexcept { confined_.store(true, std::memory_order_relaxed); }
	bool confined() const noexcept { return confined_.load(std::memory_order_relaxed); }

	/* The inodes remembered; past them every connection counts as unfollowed. */
	static constexpr size_t kKept = 256;

private:
	/* No connection reads ahead from now on; why, for the log, once. */
	void stopEverywhere(const char *why) noexcept;
	/* fd joins numbers; only a number not there before makes the connections look. */
	void noteNumber(FdBitmap &numbers, int fd) noexcept;

	std::atomic<unsigned> generation_{0};
	std::atomic<bool> confined_{false};
	std::atomic<bool> everything_{false}; /* a ring, an SSL BIO, or more files than kKept */
	/* Slots are taken by count_, then written: a slot taken and not yet written reads 0. */
	std::atomic<size_t> count_{0};
	std::atomic<ino_t> inodes_[kKept] = {};
};

/*
 * The fd numbers the program has armed EPOLLONESHOT (in any set, by EPOLL_CTL_ADD or MOD),
 * from the process's start: a connection on one does not read ahead. Two reporters of one
 * arm raced: the shim's claim of a held connection and the kernel's report of its socket,
 * which the shim can only take out after the fact; tickets and disarms narrowed it (hunts
 * of worker pools: two workers on one connection, or one told of an arm it had not made,
 * in up to 18 runs of 30 before, 1 to 2 in 100 after) but could not close it. Without
 * read-ahead OpenSSL holds no record the kernel does not show, and the kernel is the one
 * reporter, as without the shim; what a connection held before its first one-shot arm it
 * still hands out, and the shim alone reports it (EpollSets: the kernel's arm is made
 * without input meanwhile). A number is never forgotten: a connection that comes later
 * on a number a pool used does not read ahead either. Zeroes in .bss.
 */
extern FdBitmap g_oneShotFds;
inline FdBitmap &oneShotFds() noexcept
{
	return g_oneShotFds;
}


} /* namespace tlstune */
