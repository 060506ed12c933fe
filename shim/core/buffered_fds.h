#pragma once

#include <atomic>
#include <cstddef>
#include <mutex>
#include <vector>

#include <sys/types.h>

namespace tlstune {

/* Which socket an fd number refers to: fd numbers are reused after close(). */
struct SocketId {
	dev_t dev = 0;
	ino_t ino = 0;
	bool operator==(const SocketId &other) const { return dev == other.dev && ino == other.ino; }
};
/* False when fd is not an open socket. */
bool identifySocket(int fd, SocketId *id) noexcept;

/*
 * The fds whose connection holds data in OpenSSL's buffers: records read ahead from the
 * socket or decrypted bytes not yet returned. The wait wrappers report these readable.
 *
 * Empty is the normal state, and the wrappers check it with one relaxed load; everything
 * else takes the lock, which only a connection with buffered data makes anyone take.
 */
class BufferedFds {
public:
	bool empty() const noexcept { return count_.load(std::memory_order_relaxed) == 0; }

	/* Records whether owner (one connection) holds buffered data for the socket fd. */
	void set(const void *owner, int fd, const SocketId &id, bool buffered) noexcept;
	void forget(const void *owner) noexcept;

	/* True when fd has buffered data and is still the socket it had then. */
	bool holds(int fd) const noexcept;
	/* Same, and ino is the inode of that socket (for epoll registrations). */
	bool holds(int fd, ino_t ino) const noexcept;

	/* fork() must not leave the child with the lock held by a thread it does not have. */
	void lockForFork() noexcept { mutex_.lock(); }
	void unlockAfterFork() noexcept { mutex_.unlock(); }

private:
	struct Entry {
		const void *owner;
		int fd;
		SocketId id;
	};

	const Entry *find(int fd) const noexcept;

	mutable std::mutex mutex_;
	std::vector<Entry> entries_;
	std::atomic<std::size_t> count_{0};
};

} /* namespace tlstune */
