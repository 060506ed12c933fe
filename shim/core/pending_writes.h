#pragma once

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <poll.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <vector>

namespace tlstune {

/* libc's send(2) and poll(2): never the shim's own poll, which flushes. */
struct SocketCalls {
	ssize_t (*send)(int fd, const void *data, size_t length, int flags);
	int (*poll)(struct pollfd *fds, unsigned long nfds, int timeout);
};

/*
 * How everyone but the connection's own write sends: never blocking, and never raising
 * SIGPIPE in a thread whose signal mask the program did not choose (the error is kept
 * and reported by the connection's next write instead).
 */
constexpr int kBackgroundSend = MSG_DONTWAIT | MSG_NOSIGNAL;

/*
 * The encrypted records of one connection that OpenSSL has written and the shim has not
 * sent yet, and the socket they go to. Records are appended whole and sent in order, so
 * the peer sees exactly the bytes OpenSSL wrote, only in fewer segments and syscalls.
 *
 * Two kinds of callers: the thread inside the connection's own OpenSSL call (append,
 * flushes before reads), which may block as OpenSSL's own write would; and everyone else
 * (the flusher thread, another thread's poll), which only ever sends with kBackgroundSend
 * and never calls into OpenSSL. One mutex orders them.
 */
class PendingWrites {
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
		Failed,   /* errno says why; for a flush, the bytes are dropped */
		Busy,     /* tryFlush only: the owner holds it, and is sending itself */
	};

	/*
	 * From the connection's own write: appends a record, first sending what is pending
	 * when it would not fit (with flags 0: blocking or not as the socket is). Again and
	 * Failed leave the record unappended, for OpenSSL to retry or report. becameDirty:
	 * the buffer was empty before.
	 */
	Result append(const void *record, std::size_t length, bool *becameDirty);

	/* Sends what is pending. flags: 0 in the owner's call, kBackgroundSend elsewhere. */
	Result flush(int flags);
	/* The same without waiting for the lock. */
	Result tryFlush(int flags);

	/*
	 * Sends everything, waiting up to timeoutMs for room in the socket (poll), before the
	 * connection or its socket goes away. What cannot be sent by then is dropped.
	 */
	Result drain(int timeoutMs);

	/* The socket is being closed: nothing more may be sent to that number. */
	void detach() noexcept;
	int fd() const noexcept { return fd_.load(std::memory_order_relaxed); }

	/* In a forked child, with the lock held: the parent sends what is pending, not both. */
	void dropAfterFork() noexcept;
	/* The error a flush met: the connection is broken, every later write reports it. */
	int error() noexcept;

	bool dirty() const noexcept { return dirty_.load(std::memory_order_relaxed); }
	/* Bytes waiting: BIO_CTRL_WPENDING. */
	std::size_t pending() noexcept;

	std::mutex &mutex() noexcept { return mutex_; }

	/* When the connection's own last write went through the filter; only that thread reads it. */
	std::chrono::steady_clock::time_point lastWrite() const noexcept { return lastWrite_; }
	void setLastWrite(std::chrono::steady_clock::time_point at) noexcept { lastWrite_ = at; }

	/* On the Coalescer's list of connections to flush; only that list's lock reads it. */
	bool listed() const noexcept { return listed_; }
	void setListed(bool listed) noexcept { listed_ = listed; }

private:
	Result flushLocked(int flags);
	void markClean() noexcept;

	std::mutex mutex_;
	std::atomic<int> fd_;
	const std::size_t limit_;
	const SocketCalls calls_;
	Counters *const counters_;
	std::vector<unsigned char> bytes_;
	std::size_t sent_ = 0; /* bytes_[0, sent_) already went out */
	std::atomic<bool> dirty_{false};
	int error_ = 0;
	bool listed_ = false;
	std::chrono::steady_clock::time_point lastWrite_{};
};

} /* namespace tlstune */
