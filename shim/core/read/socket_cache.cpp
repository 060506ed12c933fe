#include "socket_cache.h"

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <new>

namespace tlstune {

SocketCache::~SocketCache()
{
	for (std::atomic<Queue *> &chunk : chunks_) {
		Queue *queues = chunk.load(std::memory_order_relaxed);
		if (!queues)
			continue;
		for (int i = 0; i < (1 << kChunkBits); i++) {
			std::free(queues[i].bytes);
			queues[i].~Queue();
		}
		std::free(queues);
	}
}

SocketCache::Queue *SocketCache::find(int fd) const noexcept
{
	if (fd < 0 || fd >= kNumbers)
		return nullptr;
	Queue *queues = chunks_[fd >> kChunkBits].load(std::memory_order_acquire);
	return queues ? &queues[fd & ((1 << kChunkBits) - 1)] : nullptr;
}

SocketCache::Queue *SocketCache::queue(int fd) noexcept
{
	if (fd < 0 || fd >= kNumbers)
		return nullptr;
	std::atomic<Queue *> &chunk = chunks_[fd >> kChunkBits];
	Queue *queues = chunk.load(std::memory_order_acquire);
	if (!queues) {
		/* Raw memory: no allocation the program's operator new could see or throw from. */
		void *memory = std::calloc(1u << kChunkBits, sizeof(Queue));
		if (!memory)
			return nullptr;
		Queue *made = static_cast<Queue *>(memory);
		for (int i = 0; i < (1 << kChunkBits); i++)
			new (&made[i]) Queue();
		if (chunk.compare_exchange_strong(queues, made, std::memory_order_acq_rel)) {
			queues = made;
		} else {
			std::free(memory); /* another thread made it first: queues is its */
		}
	}
	return &queues[fd & ((1 << kChunkBits) - 1)];
}

const void *SocketCache::owner(int fd) noexcept
{
	return queue(fd);
}

std::size_t SocketCache::queued(int fd) const noexcept
{
	if (!fds_.mayHave(fd))
		return 0;
	const Queue *q = find(fd);
	return q ? q->size.load(std::memory_order_acquire) : 0;
}

void SocketCache::drop(Queue &q) noexcept
{
	std::free(q.bytes);
	q.bytes = nullptr;
	q.begin = q.end = 0;
	q.size.store(0, std::memory_order_release);
}

std::size_t SocketCache::take(int fd, const struct iovec *iov, int iovcnt, bool peek) noexcept
{
	Queue *q = fds_.mayHave(fd) ? find(fd) : nullptr;
	if (!q || q->size.load(std::memory_order_acquire) == 0 || q->lock.heldHere())
		return 0;
	std::lock_guard<OwnedLock> lock(q->lock);
	const unsigned closes = q->closes.load(std::memory_order_relaxed);
	std::size_t moved = 0;
	std::size_t at = q->begin;
	for (int i = 0; i < iovcnt && at < q->end; i++) {
		const std::size_t part = std::min(iov[i].iov_len, q->end - at);
		std::memcpy(iov[i].iov_base, q->bytes + at, part);
		at += part;
		moved += part;
	}
	/* A handler that interrupted the copy closed the number: nothing stays for its next file. */
	if (q->closes.load(std::memory_order_relaxed) != closes)
		drop(*q);
	if (peek || moved == 0 || !q->bytes)
		return moved;
	q->begin = at;
	if (q->begin == q->end)
		drop(*q); /* an idle connection keeps no buffer (issue 24) */
	else
		q->size.store(q->end - q->begin, std::memory_order_release);
	return moved;
}

ssize_t SocketCache::fill(int fd, void *buf, std::size_t len, std::size_t size, Read read, void *context) noexcept
{
	Queue *q = size > len ? queue(fd) : nullptr;
	char *more = q ? static_cast<char *>(std::malloc(size - len)) : nullptr;
	/*
	 * Noted before the read: a close that comes while it is in the kernel finds the
	 * queue, and the bytes of the closed file are not queued for the number's next one.
	 */
	unsigned closes = 0;
	if (more) {
		if (!used_.load(std::memory_order_relaxed))
			used_.store(true, std::memory_order_relaxed);
		knownFds().note(fd);
		fds_.note(fd);
		closes = q->closes.load(std::memory_order_acquire);
	}
	struct iovec parts[2] = { { buf, len }, { more, more ? size - len : 0 } };
	const ssize_t got = read(fd, parts, more ? 2 : 1, context);
	if (got <= static_cast<ssize_t>(len)) {
		const int savedErrno = errno;
		std::free(more);
		errno = savedErrno;
		return got;
	}
	const std::size_t extra = static_cast<std::size_t>(got) - len;
	std::lock_guard<OwnedLock> lock(q->lock);
	if (q->closes.load(std::memory_order_relaxed) != closes) {
		std::free(more); /* the file was closed meanwhile: its bytes went with it */
	} else if (q->size.load(std::memory_order_relaxed) == 0) {
		std::free(q->bytes);
		q->bytes = more;
		q->begin = 0;
		q->end = extra;
	} else {
		/*
		 * Another thread filled the queue while this read was in the kernel (two readers
		 * of one socket at once, whose order the kernel does not promise either): this
		 * read's bytes come after.
		 */
		char *joined = static_cast<char *>(std::realloc(q->bytes, q->end + extra));
		if (joined) {
			std::memcpy(joined + q->end, more, extra);
			q->bytes = joined;
			q->end += extra;
		}
		std::free(more);
	}
	q->size.store(q->end - q->begin, std::memory_order_release);
	return static_cast<ssize_t>(len);
}

void SocketCache::closed(int first, int last) noexcept
{
	if (!fds_.anyIn(first, last))
		return;
	for (int fd = fds_.highestBelow(last < kNumbers ? last + 1 : kNumbers); fd >= first && fd >= 0;
	     fd = fds_.highestBelow(fd)) {
		Queue *q = find(fd);
		fds_.forget(fd);
		if (!q)
			continue;
		q->closes.fetch_add(1, std::memory_order_acq_rel);
		if (q->lock.heldHere())
			continue; /* a handler's close inside a take: the take's bytes go at the next close */
		std::lock_guard<OwnedLock> lock(q->lock);
		drop(*q);
	}
}

void SocketCache::forkedChild() noexcept
{
	for (int fd = fds_.highestBelow(kNumbers); fd >= 0; fd = fds_.highestBelow(fd)) {
		Queue *q = find(fd);
		if (q && !q->lock.try_lock())
			new (&q->lock) OwnedLock(); /* held by a thread the child does not have */
		else if (q)
			q->lock.unlock();
	}
}

} /* namespace tlstune */
