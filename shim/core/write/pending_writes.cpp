#include "pending_writes.h"

#include <cerrno>
#include <algorithm>
#include <linux/sock_diag.h>
#include <new>
#include <sys/socket.h>

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
	{
		ShimLock lock(mutex_);
		if (refusedLocked())
			return Result::Failed;
	}
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
	if (!overflow && shut_.load(std::memory_order_relaxed))
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

PendingWrites::Result PendingWrites::sendAsOwner()
{
	/* Nothing held (every direct write asks): no signal mask to change. */
	if (!dirty())
		return Result::Done;
	{
		/*
		 * A batch began on a socket with room for it (batchRoom): it goes at once, under
		 * the lock a close's hand-over takes, so that the close finds the bytes either
		 * sent or still here (taken out, they were neither).
		 */
		SignalsBlocked quiet;
		ShimLock lock(mutex_);
		const Result sent = sendLocked(MSG_DONTWAIT);
		if (sent != Result::Again)
			return sent;
	}
	/* The socket filled after all (another descriptor of it wrote): as OpenSSL's write would. */
	return sendTakenOut();
}

PendingWrites::Result PendingWrites::sendTakenOut()
{
	std::vector<unsigned char> taken;
	std::size_t done;
	int fd;
	{
		ShimLock lock(mutex_);
		fd = this->fd();
		if (sent_ == bytes_.size())
			return Result::Done;
		if (fd < 0)
			return sendLocked(0); /* drops them: EBADF */
		/*
		 * Only the owner appends, so nothing arrives behind these while they are out. The
		 * buffers trade places, keeping their capacity: a burst reuses the same two.
		 */
		taken.swap(spare_);
		taken.swap(bytes_);
		done = sent_;
		sent_ = 0;
		markClean();
	}
	/*
	 * A blocking send is a cancellation point, as the program's own write is: a cancelled
	 * thread leaves the bytes where they were, for the close or exit that follows.
	 */
	struct PutBack {
		PendingWrites &writes;
		std::vector<unsigned char> &taken;
		const std::size_t &done;
		bool needed = true;
		~PutBack()
		{
			if (!needed)
				return;
			ShimLock lock(writes.mutex_);
			writes.bytes_.swap(taken);
			writes.sent_ = done;
			writes.markDirty();
		}
	} putBack{ *this, taken, done };
	int sendErrno = 0;
	while (done < taken.size()) {
		const ssize_t n = calls_.send(fd, taken.data() + done, taken.size() - done, 0);
		if (n >= 0) {
			counters_->sends.fetch_add(1, std::memory_order_relaxed);
			done += static_cast<std::size_t>(n);
		} else if (errno != EINTR) {
			sendErrno = errno;
			break;
		}
	}
	putBack.needed = false;
	ShimLock lock(mutex_);
	Result result = Result::Done;
	if (done == taken.size()) {
		stalled_.store(false, std::memory_order_relaxed);
	} else if (sendErrno == EAGAIN || sendErrno == EWOULDBLOCK) {
		/* Back where they were: the owner appended nothing meanwhile, it was sending. */
		bytes_.swap(taken);
		sent_ = done;
		markDirty();
		stalled_.store(true, std::memory_order_relaxed);
		result = Result::Again;
	} else {
		error_ = sendErrno;
		result = Result::Failed;
	}
	taken.clear();
	spare_.swap(taken);
	if (result != Result::Done)
		errno = sendErrno;
	return result;
}

PendingWrites::Result PendingWrites::send()
{
	ShimLock lock(mutex_);
	return sendLocked(kBackgroundSend);
}

PendingWrites::Result PendingWrites::sendPatiently(std::chrono::milliseconds patience, AfterSend then)
{
	ShimLock lock(mutex_, patience);
	if (!lock.owns())
		return Result::Busy;
	const Result result = sendLocked(kBackgroundSend);
	if (result == Result::Again)
		return result;
	if (then == AfterSend::Detach)
		fd_.store(-1, std::memory_order_relaxed);
	else if (then == AfterSend::WriteOut)
		shut_.store(true, std::memory_order_relaxed);
	return result;
}

PendingWrites::Result PendingWrites::trySend()
{
	ShimLock lock(mutex_, std::try_to_lock);
	if (!lock.owns())
		return Result::Busy;
	return sendLocked(kBackgroundSend);
}

PendingWrites::Result PendingWrites::sendLocked(int flags)
{
	/* Under the lock, and never blocking: a cancelled thread must not leave them half sent. */
	CancelDeferred whole;
	const int fd = this->fd();
	while (sent_ < bytes_.size()) {
		if (fd < 0) {
			errno = EBADF;
			break;
		}
		const ssize_t n = calls_.send(fd, bytes_.data() + sent_, bytes_.size() - sent_, flags);
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
