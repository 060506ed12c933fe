#include "pending_writes.h"

#include <cerrno>
#include <chrono>
#include <new>
#include <poll.h>
#include <sys/socket.h>

namespace tlstune {

PendingWrites::Result PendingWrites::append(const void *record, std::size_t length, bool *becameDirty)
{
	std::lock_guard<std::mutex> lock(mutex_);
	*becameDirty = false;
	if (error_) {
		errno = error_;
		return Result::Failed;
	}
	if (fd() < 0) {
		errno = EBADF;
		return Result::Failed;
	}
	if (bytes_.size() - sent_ + length > limit_) {
		const Result flushed = flushLocked(0);
		if (flushed != Result::Done)
			return flushed;
	}
	const unsigned char *begin = static_cast<const unsigned char *>(record);
	try {
		bytes_.insert(bytes_.end(), begin, begin + length);
	} catch (const std::bad_alloc &) {
		/* Called from OpenSSL's C code: no exception may leave. The write fails instead. */
		errno = ENOMEM;
		return Result::Failed;
	}
	counters_->records.fetch_add(1, std::memory_order_relaxed);
	*becameDirty = !dirty_.exchange(true, std::memory_order_relaxed);
	if (*becameDirty)
		counters_->dirty.fetch_add(1, std::memory_order_relaxed);
	return Result::Done;
}

PendingWrites::Result PendingWrites::flush(int flags)
{
	std::lock_guard<std::mutex> lock(mutex_);
	return flushLocked(flags);
}

PendingWrites::Result PendingWrites::tryFlush(int flags)
{
	std::unique_lock<std::mutex> lock(mutex_, std::try_to_lock);
	if (!lock.owns_lock())
		return Result::Busy;
	return flushLocked(flags);
}

PendingWrites::Result PendingWrites::flushLocked(int flags)
{
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
		if (errno == EAGAIN || errno == EWOULDBLOCK)
			return Result::Again;
		break;
	}
	const bool broken = sent_ < bytes_.size();
	/* A broken connection: what OpenSSL's own write would have reported, from now on. */
	if (broken)
		error_ = errno;
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

PendingWrites::Result PendingWrites::drain(int timeoutMs)
{
	std::lock_guard<std::mutex> lock(mutex_);
	const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeoutMs);
	for (;;) {
		const Result result = flushLocked(kBackgroundSend);
		if (result != Result::Again)
			return result;
		const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
			deadline - std::chrono::steady_clock::now());
		struct pollfd writable = { fd(), POLLOUT, 0 };
		if (left.count() <= 0 || calls_.poll(&writable, 1, static_cast<int>(left.count())) <= 0) {
			markClean();
			errno = ETIMEDOUT;
			return Result::Failed;
		}
	}
}

void PendingWrites::detach() noexcept
{
	fd_.store(-1, std::memory_order_relaxed);
}

void PendingWrites::dropAfterFork() noexcept
{
	markClean();
}

std::size_t PendingWrites::pending() noexcept
{
	std::lock_guard<std::mutex> lock(mutex_);
	return bytes_.size() - sent_;
}

int PendingWrites::error() noexcept
{
	std::lock_guard<std::mutex> lock(mutex_);
	return error_;
}

} /* namespace tlstune */
