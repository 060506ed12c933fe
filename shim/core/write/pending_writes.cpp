#include "pending_writes.h"

#include <cerrno>
#include <algorithm>
#include <linux/sock_diag.h>
#include <new>
#include <climits>
#include <fcntl.h>
#include <sys/time.h>
#include <sys/socket.h>

#include "nagle_push.h"

namespace tlstune {

thread_local bool ShimLock::held = false;

PendingWrites::Result PendingWrites::append(const void *record, std::size_t length, bool *becameDirty)
{
	return appendRecord(record, length, becameDirty, false);
}

PendingWrites::Result PendingWrites::appendOverflow(const void *record, std::size_t length,
						    bool *becameDirty)
{
	/* A record of held plaintext is a write too: the connection is not quiet. */
	setLastWrite(std::chrono::steady_clock::now());
	return appendRecord(record, length, becameDirty, true);
}

PendingWrites::Result PendingWrites::appendRecord(const void *record, std::size_t length,
						  bool *becameDirty, bool overflow)
{
	*becameDirty = false;
	/* Before shut_ is read: writeOutAtRest sees this append, or this sees its shut_. */
	appending_.fetch_add(1, std::memory_order_seq_cst);
	struct Ended {
		std::atomic<int> &appending;
		~Ended() { appending.fetch_sub(1, std::memory_order_release); }
	} ended{ appending_ };
	{
		ShimLock lock(mutex_);
		if (refusedLocked())
			return Result::Failed;
	}
	/* Held plaintext acknowledged before the reset was seen: the kernel would drop it too. */
	if (overflow && peerGone_.load(std::memory_order_relaxed))
		return Result::Done;
	if (!overflow && !fitsInBatch(length)) {
		const Result sent = sendAsOwner();
		if (sent != Result::Done)
			return sent;
	}
	const unsigned char *begin = static_cast<const unsigned char *>(record);
	ShimLock lock(mutex_);
	/* A close passed since the look above: this record would never go out. */
	if (refusedLocked())
		return Result::Failed;
	/* A shutdown did: the kernel answers this write, as without the shim. */
	if (!overflow && shut_.load(std::memory_order_seq_cst))
		return Result::NoRoom;
	/*
	 * A new batch only on a socket with room for it, asked under the lock: the flusher
	 * may have emptied the buffer since the caller looked.
	 */
	if (!overflow && sent_ == bytes_.size()) {
		batchLimit_ = batchRoom();
		if (length > batchLimit_)
			return Result::NoRoom;
	}
	try {
		bytes_.insert(bytes_.end(), begin, begin + length);
	} catch (const std::bad_alloc &) {
		/* Called from OpenSSL's C code: no exception may leave. The write fails instead. */
		errno = ENOMEM;
		return Result::Failed;
	}
	counters_->records.fetch_add(1, std::memory_order_relaxed);
	*becameDirty = !dirty_.load(std::memory_order_relaxed);
	markDirty();
	return Result::Done;
}

bool PendingWrites::refusedLocked() noexcept
{
	if (error_) {
		errno = error_;
		error_ = EPIPE; /* reported once, as the kernel does (reportError) */
		return true;
	}
	if (fd() < 0) {
		errno = EBADF;
		return true;
	}
	return false;
}

PendingWrites::Result PendingWrites::sendAsOwner(bool programsWrite)
{
	/* Nothing held (every direct write asks): no signal mask to change. */
	if (!dirty())
		return Result::Done;
	/*
	 * Every send is made under the lock a close's hand-over takes, so that the close finds
	 * the bytes either sent or still here: never taken out and on their way (a hunt: a
	 * close racing the writer's own send lost its last lines). A batch began on a socket
	 * with room for it (batchRoom), so the first send takes it all but where another
	 * descriptor of the socket filled it meanwhile: then this thread waits for room as
	 * OpenSSL's blocking write would, holding no lock while it waits.
	 */
	for (;;) {
		{
			SignalsBlocked quiet;
			ShimLock lock(mutex_);
			const Result sent = sendLocked(!programsWrite);
			if (sent != Result::Again)
				return sent;
		}
		if (!waitForRoom())
			return Result::Again;
	}
}

bool PendingWrites::waitForRoom() noexcept
{
	const int savedErrno = errno;
	const int fd = this->fd();
	const int flags = fd >= 0 ? fcntl(fd, F_GETFL) : -1;
	/* A non-blocking socket's write says "again", as the kernel's would. */
	if (flags < 0 || (flags & O_NONBLOCK)) {
		errno = EAGAIN;
		return false;
	}
	/* SO_SNDTIMEO bounds a blocking write: it then says "again" too. */
	struct timeval limit = {};
	socklen_t length = sizeof(limit);
	int timeout = -1;
	if (getsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &limit, &length) == 0 && (limit.tv_sec || limit.tv_usec)) {
		const long long ms = limit.tv_sec * 1000LL + (limit.tv_usec + 999) / 1000;
		timeout = static_cast<int>(std::min<long long>(INT_MAX, ms));
	}
	/* A cancellation point, as the program's write is: the bytes stay for the way out that follows. */
	struct pollfd writable = { fd, POLLOUT, 0 };
	const int ready = calls_.poll(&writable, 1, timeout);
	if (ready == 0) {
		errno = EAGAIN;
		return false;
	}
	/* A poll that fails (not for a signal) is the write's failure: errno says why. */
	if (ready < 0 && errno != EINTR)
		return false;
	errno = savedErrno;
	return true;
}

PendingWrites::Result PendingWrites::send()
{
	ShimLock lock(mutex_);
	return sendLaterLocked();
}

PendingWrites::Result PendingWrites::sendPatiently(std::chrono::milliseconds patience, AfterSend then)
{
	ShimLock lock(mutex_, patience);
	if (!lock.owns())
		return Result::Busy;
	const Result result = sendLocked(true);
	if (result == Result::Again)
		return result;
	if (then == AfterSend::Detach)
		fd_.store(-1, std::memory_order_relaxed);
	else if (then == AfterSend::WriteOut)
		shut_.store(true, std::memory_order_relaxed);
	return result;
}

bool PendingWrites::writeOutAtRest() noexcept
{
	if (dirty() || appending_.load(std::memory_order_relaxed) != 0)
		return false;
	/*
	 * Dekker with appendRecord: a later append finds shut_ and writes to the kernel; one
	 * under way, or what it appended (after its release), is seen here. Seen: shut_ stays
	 * (an append then flushes before it writes) and the locked way sends what is held.
	 */
	shut_.store(true, std::memory_order_seq_cst);
	return appending_.load(std::memory_order_seq_cst) == 0 && !dirty();
}

PendingWrites::Result PendingWrites::trySend()
{
	ShimLock lock(mutex_, std::try_to_lock);
	if (!lock.owns())
		return Result::Busy;
	return sendLaterLocked();
}

PendingWrites::Result PendingWrites::sendLaterLocked()
{
	const bool any = sent_ < bytes_.size();
	const Result result = sendLocked(true);
	/* Under the lock: the owner's next record waits, and comes after the push. */
	if (any && result == Result::Done && fd() >= 0)
		pushPastNagle(fd());
	return result;
}

bool PendingWrites::peerGoneLocked() noexcept
{
	if (sent_ == bytes_.size() || fd() < 0)
		return false;
	const int savedErrno = errno;
	struct pollfd probe = { fd(), POLLOUT, 0 };
	const bool gone = calls_.poll(&probe, 1, 0) == 1 && (probe.revents & POLLERR) && (probe.revents & POLLHUP);
	errno = savedErrno;
	if (gone) {
		peerGone_.store(true, std::memory_order_relaxed);
		markClean();
	}
	return gone;
}

PendingWrites::Result PendingWrites::sendLocked(bool later)
{
	/* Under the lock, and never blocking: a cancelled thread must not leave them half sent. */
	CancelDeferred whole;
	if (later && peerGoneLocked())
		return Result::Done;
	const int fd = this->fd();
	while (sent_ < bytes_.size()) {
		if (fd < 0) {
			errno = EBADF;
			break;
		}
		const ssize_t n = calls_.send(fd, bytes_.data() + sent_, bytes_.size() - sent_, kSend);
		if (n >= 0) {
			counters_->sends.fetch_add(1, std::memory_order_relaxed);
			sent_ += static_cast<std::size_t>(n);
			continue;
		}
		if (errno == EINTR)
			continue;
		if (errno == EAGAIN || errno == EWOULDBLOCK) {
			stalled_.store(true, std::memory_order_relaxed);
			return Result::Again;
		}
		break;
	}
	const bool broken = sent_ < bytes_.size();
	/* A broken connection: what OpenSSL's own write would have reported, from now on. */
	if (broken)
		error_ = errno;
	else
		stalled_.store(false, std::memory_order_relaxed);
	markClean();
	return broken ? Result::Failed : Result::Done;
}

void PendingWrites::markClean() noexcept
{
	bytes_.clear();
	sent_ = 0;
	if (dirty_.exchange(false, std::memory_order_relaxed))
		counters_->dirty.fetch_sub(1, std::memory_order_relaxed);
}

void PendingWrites::drop() noexcept
{
	ShimLock lock(mutex_, std::chrono::milliseconds(200));
	if (lock.owns())
		markClean();
}

void PendingWrites::markDirty() noexcept
{
	if (!dirty_.exchange(true, std::memory_order_relaxed))
		counters_->dirty.fetch_add(1, std::memory_order_relaxed);
}

void PendingWrites::detach() noexcept
{
	/* Under the lock every send holds: the close that follows comes after the last of them. */
	ShimLock lock(mutex_, std::chrono::milliseconds(200));
	fd_.store(-1, std::memory_order_relaxed);
}

void PendingWrites::dropAfterFork() noexcept
{
	markClean();
}

std::size_t PendingWrites::batchRoom() const noexcept
{
	/*
	 * The kernel charges a buffer's overhead too (sk_wmem_queued counts whole skbs for
	 * TCP, sk_wmem_alloc for a Unix socket): a batch of half the room stays well inside
	 * what send() takes without blocking.
	 */
	uint32_t memory[SK_MEMINFO_VARS] = {};
	socklen_t length = sizeof(memory);
	const int savedErrno = errno;
	const int fd = this->fd();
	const bool known = fd >= 0 && getsockopt(fd, SOL_SOCKET, SO_MEMINFO, memory, &length) == 0 &&
			   length >= sizeof(uint32_t) * (SK_MEMINFO_WMEM_QUEUED + 1);
	errno = savedErrno;
	if (!known)
		return 0;
	const uint64_t used = std::max(memory[SK_MEMINFO_WMEM_ALLOC], memory[SK_MEMINFO_WMEM_QUEUED]);
	const uint64_t room = used < memory[SK_MEMINFO_SNDBUF] ? memory[SK_MEMINFO_SNDBUF] - used : 0;
	return static_cast<std::size_t>(std::min<uint64_t>(limit_, room / 2));
}

bool PendingWrites::fitsInBatch(std::size_t length) noexcept
{
	ShimLock lock(mutex_);
	return bytes_.size() - sent_ + length <= batchLimit_;
}

std::size_t PendingWrites::pending() noexcept
{
	ShimLock lock(mutex_);
	return bytes_.size() - sent_;
}

int PendingWrites::reportError() noexcept
{
	ShimLock lock(mutex_);
	const int error = error_;
	if (error)
		error_ = EPIPE;
	return error;
}

void PendingWrites::fail(int error) noexcept
{
	ShimLock lock(mutex_);
	error_ = error;
}

} /* namespace tlstune */
