#pragma once

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <mutex>
#include <vector>

#include <sys/socket.h>
#include <sys/types.h>

#include "core/known_fds.h"

namespace tlstune {

/*
 * The inode of the stream fd names (a socket, or a pipe: TLS over a pipe pair polls it
 * just the same): what an epoll registration is matched by, since /proc/self/fdinfo gives
 * each registration's inode. False for any other file.
 */
bool streamInode(int fd, ino_t *ino) noexcept;

/* The abortive closes a closing() set, to take back when the close fails (a dup2 from a bad fd). */
struct AbortiveCloses {
	static constexpr int kMost = 64;
	struct Made {
		int fd;
		struct linger before; /* the socket's own setting */
	};
	Made made[kMost];
	int count = 0;
};

/*
 * The fds whose socket's queue holds bytes the shim read ahead (SocketCache): the kernel
 * would hold them without it. The wait wrappers report these readable.
 *
 * An entry leaves when its queue is read empty and when the program closes the fd; a
 * freed connection's entry is the queue's (handOver): checking the fd's inode on every
 * wait instead cost one fstat per poll, as many syscalls as read-ahead saves (measured
 * with curl).
 *
 * Empty is the normal state, and the wrappers check it with one relaxed load; everything
 * else takes the lock, which only a connection with buffered data makes anyone take.
 */
class BufferedFds {
public:
	/* copies: where duplicated() notes numbers; the process's (copiedFds()) for the shim's own. */
	explicit BufferedFds(FdBitmap *copies = nullptr) noexcept : copies_(copies ? copies : &ownCopies_) {}

	bool empty() const noexcept { return count_.load(std::memory_order_relaxed) == 0; }

	/*
	 * Records whether owner (a connection, or a queue) has bytes queued for the socket fd.
	 * arrival counts the calls that read new bytes into the queue: each is one edge an
	 * edge-triggered epoll registration of the socket may be told of (EpollSets).
	 */
	void set(const void *owner, int fd, ino_t ino, bool buffered, unsigned long long arrival = 0) noexcept;
	/* owner's entry goes (a freed connection whose queue is empty, a queue read empty). */
	void forget(const void *owner) noexcept;
	/* from's entry is to's from now on (a freed connection's, to the queue its socket keeps). */
	void handOver(const void *from, const void *to) noexcept;
	/* A handOver was ever made: an entry may belong to a queue. One load. */
	bool anyHandedOver() const noexcept { return handedOver_.load(std::memory_order_relaxed); }
	/*
	 * Called (outside the lock) with a socket's inode when an entry for it leaves by set()
	 * or forget(): OpenSSL holds nothing the shim took for it any more (EpollSets::released).
	 */
	using Released = void (*)(ino_t ino);
	void onReleased(Released released) noexcept { released_ = released; }
	/*
	 * The highest fd below `below` a wait may find held, a connection's or a copy's (-1:
	 * none): an fd the kernel reads too, being open (select reads no further).
	 */
	int highestHeld(int below) const noexcept;
	/*
	 * The process image ends (exit, _exit, abort, an exec): its sockets close with it, or
	 * are left to a new image that knows nothing of the shim's queues, and those with bytes
	 * queued are reset at their last close, as the kernel resets them. made: where each socket's own setting is kept, for an exec that fails.
	 */
	void imageEnds(AbortiveCloses *made = nullptr) const noexcept;

	/* True when fd has buffered data. */
	bool holds(int fd) const noexcept;
	/* Same, and ino is the inode of that socket (an epoll registration of it). */
	bool holds(int fd, ino_t ino) const noexcept;
	/* A connection holding data reads the socket whose inode is ino, by whatever fd. */
	bool holdsInode(ino_t ino) const noexcept;

	/*
	 * Calls visit(fd, ino, arrival) for every entry, under the lock: visit must not call in.
	 * The visit begins at entry start (modulo their count) and wraps, so that waits which
	 * serve a few connections at a time can take turns.
	 */
	template <typename Visit>
	void forEach(std::size_t start, Visit visit) const
	{
		std::lock_guard<std::mutex> lock(mutex_);
		const std::size_t count = entries_.size();
		for (std::size_t i = 0; i < count; i++) {
			const Entry &entry = entries_[(start + i) % count];
			visit(entry.fd, entry.ino, entry.arrival);
		}
	}

	/*
	 * fd is a copy the program made (dup, dup2, dup3, fcntl F_DUPFD, a descriptor received
	 * with SCM_RIGHTS), or the number it made one from (OpenSSL may read the copy while
	 * the program waits on the original: a hunt's stalled 10 runs of 10): a wait on it
	 * sees the data a connection holds for the same file,
	 * as a wait on any fd of a socket sees the kernel's (issue 12). Only the number is
	 * noted, with one load (and a store the first time), in every process: which file it
	 * names is asked (fstat) when a wait on it meets held data, so a copy made before the
	 * socket's first connection, or a number reused since, is seen as it is then. Not
	 * forgotten at close: a number noted once costs that fstat, and only while something
	 * is held.
	 */
	void duplicated(int fd) noexcept { copies_->note(fd); }

	/*
	 * The program is about to close fds first..last: the kernel resets a connection closed
	 * with data unread in its socket, and that data sits in the shim's queue instead, so
	 * the close would send a FIN. Each socket among them with bytes queued gets SO_LINGER 0, the abortive close that sends the kernel's reset when its
	 * last descriptor closes, whatever its peer has acknowledged (the kernel's reset throws
	 * that away too); not one a fork shared (the other process's own reads decide its end,
	 * as without the shim).
	 */
	void closing(int first, int last, AbortiveCloses *made = nullptr) noexcept;
	/* The close closing() prepared failed (nothing closed): its sockets close as they would have. */
	void closeFailed(const AbortiveCloses &made) noexcept;
	/*
	 * The program closed fds first..last (close, dup2 onto it, close_range): their numbers
	 * may now name other files, which must not inherit the readiness. A connection whose
	 * socket another descriptor keeps open (a copy) stays held, by its inode alone (fd -1),
	 * until its next OpenSSL call names its fd again: a wait on the copy sees it, as the
	 * kernel's readiness belongs to the socket, not to a number.
	 */
	void closed(int first, int last) noexcept;
	/*
	 * The program read fd's queue empty itself, outside OpenSSL: nothing is left to report
	 * (a drain loop after SSL_shutdown was woken a million times otherwise). Its entries
	 * go, and the connection registers again at its next call, as after a close.
	 */
	void quieted(int fd) noexcept;

	/* Counts closed() and quieted() calls: a connection whose entry one dropped registers again. */
	unsigned closings() const noexcept { return closings_.load(std::memory_order_relaxed); }

	/*
	 * fork() must not leave the child with the lock held by a thread it does not have.
	 * Every connection so far is the two processes' now: neither's close is the last.
	 */
	void lockForFork() noexcept
	{
		mutex_.lock();
		for (Entry &entry : entries_)
			entry.shared = true;
	}
	void unlockAfterFork() noexcept { mutex_.unlock(); }

private:
	struct Entry {
		const void *owner;
		int fd;
		ino_t ino;
		unsigned long long arrival;
		/*
		 * Made before a fork: the other process may go on with the socket and read all of
		 * it, so a close here must not reset it (closing).
		 */
		bool shared = false;
	};

	const Entry *find(int fd) const noexcept;
	/*
	 * Under the lock: a descriptor outside first..last that names the socket whose inode
	 * is ino (another entry's, or a copy's: one fstat per copy number), or -1.
	 */
	int openElsewhere(ino_t ino, int first, int last) const noexcept;
	/* Under the lock: a copy among first..last that names the socket whose inode is ino, or -1. */
	int copyAmong(ino_t ino, int first, int last) const noexcept;
	/* The inode registered for fd, if any. */
	bool lookup(int fd, ino_t *ino) const noexcept;
	void publishCount() noexcept { count_.store(entries_.size(), std::memory_order_relaxed); }

	mutable std::mutex mutex_;
	std::vector<Entry> entries_;
	std::atomic<std::size_t> count_{0};
	/* duplicated()'s numbers. */
	FdBitmap ownCopies_;
	FdBitmap *const copies_;
	std::atomic<unsigned> closings_{0};
	std::atomic<bool> handedOver_{false};
	Released released_ = nullptr;
};

} /* namespace tlstune */
