#include "socket_cache.h"

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <new>
#include <pthread.h>

namespace tlstune {

namespace {

/*
 * Each thread keeps one buffer for its fills: a fill reads into it, and a queue that
 * takes the bytes takes the buffer; a queue read empty gives its buffer back to the
 * thread that emptied it, if that one has none. So a burst allocates nothing, and the
 * heap is not cut up by a buffer made and freed at each fill (300 idle clients kept 53
 * KiB each against 41 without the shim when each fill had its own). A cancellation
 * unwinds through the fill, which has no cleanup of its own (a landing pad there made
 * AddressSanitizer fail its check of a cancelled thread's stack): the buffer is the
 * thread's still. The key's destructor frees it at the thread's end.
 */
struct Spare {
	char *bytes;
	std::size_t size;
};
__attribute__((tls_model("initial-exec"))) thread_local Spare spare = { nullptr, 0 };
pthread_key_t spareKey;
bool spareKeyMade = false;
pthread_once_t spareOnce = PTHREAD_ONCE_INIT;

void makeSpareKey() noexcept
{
	spareKeyMade = pthread_key_create(&spareKey, std::free) == 0;
}

/* This thread's buffer, of size bytes at least; null when it cannot have one. */
char *spareOf(std::size_t size) noexcept
{
	if (spare.bytes && spare.size >= size)
		return spare.bytes;
	pthread_once(&spareOnce, makeSpareKey);
	if (!spareKeyMade)
		return nullptr; /* no key: no read-ahead, rather than a leak at each thread's end */
	std::free(spare.bytes);
	spare.bytes = static_cast<char *>(std::malloc(size));
	spare.size = spare.bytes ? size : 0;
	pthread_setspecific(spareKey, spare.bytes);
	return spare.bytes;
}

/* The fill's buffer went to a queue. */
void spareTaken() noexcept
{
	spare = { nullptr, 0 };
	pthread_setspecific(spareKey, nullptr);
}

/* A queue's buffer of size bytes, read empty: this thread's, if it has none (else freed). */
void giveBack(char *bytes, std::size_t size) noexcept
{
	if (!bytes)
		return;
	if (spare.bytes || !spareKeyMade) {
		std::free(bytes);
		return;
	}
	spare = { bytes, size };
	pthread_setspecific(spareKey, bytes);
}

} /* namespace */

SocketCache::~SocketCache()
{
	/* Tests make their own: what they named goes. The process's lives as long as the process. */
	for (std::atomic<Slot *> &chunk : chunks_) {
		Slot *slots = chunk.load(std::memory_order_relaxed);
		if (!slots)
			continue;
		for (int i = 0; i < (1 << kChunkBits); i++)
			unname(slots[i]);
		std::free(slots);
	}
	while (Queue *q = free_) {
		free_ = q->nextFree;
		q->~Queue();
		std::free(q);
	}
}

SocketCache::Slot *SocketCache::slot(int fd, bool make) const noexcept
{
	if (fd < 0 || fd >= kNumbers)
		return nullptr;
	std::atomic<Slot *> &chunk = chunks_[fd >> kChunkBits];
	Slot *slots = chunk.load(std::memory_order_acquire);
	if (!slots && make) {
		/* Raw memory: no allocation the program's operator new could see or throw from. */
		Slot *fresh = static_cast<Slot *>(std::calloc(1u << kChunkBits, sizeof(Slot)));
		if (!fresh)
			return nullptr;
		for (int i = 0; i < (1 << kChunkBits); i++)
			new (&fresh[i]) Slot(nullptr);
		if (chunk.compare_exchange_strong(slots, fresh, std::memory_order_acq_rel))
			slots = fresh;
		else
			std::free(fresh); /* another thread made it first: slots is its */
	}
	return slots ? &slots[fd & ((1 << kChunkBits) - 1)] : nullptr;
}

SocketCache::Queue *SocketCache::locked(int fd) const noexcept
{
	Slot *s = fds_.mayHave(fd) ? slot(fd) : nullptr;
	Queue *q = s ? s->load(std::memory_order_acquire) : nullptr;
	if (!q || q->size.load(std::memory_order_acquire) == 0 || q->lock.heldHere())
		return nullptr;
	q->lock.lock();
	/* Closed (and maybe named by another number) since the load: the read is the kernel's. */
	if (s->load(std::memory_order_acquire) != q) {
		q->lock.unlock();
		return nullptr;
	}
	return q;
}

std::size_t SocketCache::queued(int fd) const noexcept
{
	const Slot *s = fds_.mayHave(fd) ? slot(fd) : nullptr;
	const Queue *q = s ? s->load(std::memory_order_acquire) : nullptr;
	return q ? q->size.load(std::memory_order_acquire) : 0;
}

void SocketCache::drop(Queue &q) noexcept
{
	giveBack(q.bytes, q.capacity);
	q.bytes = nullptr;
	q.capacity = 0;
	q.begin = q.end = 0;
	q.size.store(0, std::memory_order_release);
}

ssize_t SocketCache::take(int fd, const struct iovec *iov, int iovcnt, bool peek, bool discard, Copy copy) noexcept
{
	Queue *q = locked(fd);
	if (!q)
		return 0;
	std::size_t moved = 0;
	for (int i = 0; i < iovcnt && moved < q->end - q->begin; i++)
		moved += std::min(iov[i].iov_len, q->end - q->begin - moved);
	if (!discard && moved > 0) {
		const ssize_t copied = (copy ? copy : copyPlainly)(iov, iovcnt, q->bytes + q->begin, moved);
		if (copied <= 0) {
			q->lock.unlock();
			if (copied == 0)
				errno = EFAULT;
			return -1;
		}
		moved = static_cast<std::size_t>(copied);
	}
	if (!peek) {
		q->begin += moved;
		if (q->begin == q->end)
			drop(*q); /* an idle connection keeps no buffer (issue 24) */
		else
			q->size.store(q->end - q->begin, std::memory_order_release);
	}
	q->lock.unlock();
	return static_cast<ssize_t>(moved);
}

ssize_t SocketCache::copyPlainly(const struct iovec *to, int count, const char *from, std::size_t length) noexcept
{
	const std::size_t whole = length;
	for (int i = 0; i < count && length > 0; i++) {
		const std::size_t part = std::min(to[i].iov_len, length);
		std::memcpy(to[i].iov_base, from, part);
		from += part;
		length -= part;
	}
	return static_cast<ssize_t>(whole - length);
}

SocketCache::Queue *SocketCache::made() noexcept
{
	Queue *q = nullptr;
	if (!freeLock_.heldHere()) {
		std::lock_guard<OwnedLock> lock(freeLock_);
		if ((q = free_))
			free_ = q->nextFree;
	}
	if (!q) {
		void *memory = std::malloc(sizeof(Queue));
		q = memory ? new (memory) Queue() : nullptr;
	}
	return q;
}

void SocketCache::unname(Slot &slot) noexcept
{
	Queue *q = slot.exchange(nullptr, std::memory_order_acq_rel);
	if (!q || q->names.fetch_sub(1, std::memory_order_acq_rel) != 1)
		return;
	q->lives.fetch_add(1, std::memory_order_acq_rel);
	/* A handler's close inside this thread's take: the queue is left, unnamed. */
	if (q->lock.heldHere())
		return;
	{
		std::lock_guard<OwnedLock> lock(q->lock);
		drop(*q);
	}
	recycle(q);
}

void SocketCache::recycle(Queue *q) noexcept
{
	/* A handler that interrupted this thread's hold of the list: the queue is left out of it. */
	if (freeLock_.heldHere())
		return;
	std::lock_guard<OwnedLock> lock(freeLock_);
	q->nextFree = free_;
	free_ = q;
}

void SocketCache::note(int fd) noexcept
{
	if (!used_.load(std::memory_order_relaxed))
		used_.store(true, std::memory_order_relaxed);
	knownFds().note(fd);
	fds_.note(fd);
}

ssize_t SocketCache::fill(int fd, void *buf, std::size_t len, std::size_t size, Read read, void *context)
{
	Slot *s = size > len && !copiedFds().mayHave(fd) ? slot(fd, true) : nullptr;
	Queue *q = s ? s->load(std::memory_order_acquire) : nullptr;
	if (s && !q) {
		/*
		 * Named before the read: a close that comes while it is in the kernel unnames the
		 * queue, and the bytes of the closed file are not queued for the number's next one.
		 */
		note(fd);
		if ((q = made())) {
			q->names.store(1, std::memory_order_relaxed);
			Queue *none = nullptr;
			if (!s->compare_exchange_strong(none, q, std::memory_order_acq_rel)) {
				/* Another thread named one first: this one goes back. */
				q->names.store(0, std::memory_order_relaxed);
				recycle(q);
				q = none;
			}
		}
	}
	/* A handler's read inside this thread's take of the queue: the kernel's read alone. */
	if (q && q->lock.heldHere())
		q = nullptr;
	const unsigned life = q ? q->lives.load(std::memory_order_acquire) : 0;
	char *more = q ? spareOf(size - len) : nullptr;
	struct iovec parts[2] = { { buf, len }, { more, more ? size - len : 0 } };
	const ssize_t got = read(fd, parts, more ? 2 : 1, context);
	if (got <= static_cast<ssize_t>(len))
		return got; /* the buffer stays the thread's */
	const int savedErrno = errno;
	const std::size_t extra = static_cast<std::size_t>(got) - len;
	q->lock.lock();
	if (s->load(std::memory_order_acquire) != q || q->lives.load(std::memory_order_acquire) != life) {
		/* The number was closed meanwhile: the bytes went with its file. */
	} else if (q->size.load(std::memory_order_relaxed) == 0) {
		/* Read empty, it holds no buffer (drop). */
		spareTaken();
		q->bytes = more;
		q->capacity = size - len;
		q->begin = 0;
		q->end = extra;
	} else {
		/*
		 * Another thread filled the queue while this read was in the kernel (two readers
		 * of one socket at once, whose order the kernel does not promise either): this
		 * read's bytes come after. Out of memory, they are lost, as a read the kernel
		 * could not copy out is.
		 */
		char *joined = static_cast<char *>(std::realloc(q->bytes, q->end + extra));
		if (joined) {
			std::memcpy(joined + q->end, more, extra);
			q->bytes = joined;
			q->capacity = q->end + extra;
			q->end += extra;
		}
	}
	q->size.store(q->end - q->begin, std::memory_order_release);
	q->lock.unlock();
	errno = savedErrno;
	return static_cast<ssize_t>(len);
}

void SocketCache::duplicated(int from, int to) noexcept
{
	Slot *source = fds_.mayHave(from) ? slot(from) : nullptr;
	Queue *q = source ? source->load(std::memory_order_acquire) : nullptr;
	Slot *target = q ? slot(to, true) : nullptr;
	if (!target)
		return;
	/*
	 * A name is added only to a queue that still has one: a close of from racing this
	 * dup may have let it go (to the free list, for another socket's next fill).
	 */
	int names = q->names.load(std::memory_order_acquire);
	do {
		if (names == 0)
			return;
	} while (!q->names.compare_exchange_weak(names, names + 1, std::memory_order_acq_rel));
	if (source->load(std::memory_order_acquire) != q) {
		Slot undo(q);
		unname(undo);
		return;
	}
	note(to);
	if (Queue *before = target->exchange(q, std::memory_order_acq_rel)) {
		/* to named another queue and its close went unseen: that name goes now. */
		Slot gone(before);
		unname(gone);
	}
}

void SocketCache::closed(int first, int last) noexcept
{
	if (!fds_.anyIn(first, last))
		return;
	for (int fd = fds_.highestBelow(last < kNumbers ? last + 1 : kNumbers); fd >= first && fd >= 0;
	     fd = fds_.highestBelow(fd)) {
		fds_.forget(fd);
		if (Slot *s = slot(fd))
			unname(*s);
	}
}

void SocketCache::forkedChild() noexcept
{
	new (&freeLock_) OwnedLock();
	for (int fd = fds_.highestBelow(kNumbers); fd >= 0; fd = fds_.highestBelow(fd)) {
		Slot *s = slot(fd);
		Queue *q = s ? s->load(std::memory_order_relaxed) : nullptr;
		if (q && !q->lock.try_lock())
			new (&q->lock) OwnedLock(); /* held by a thread the child does not have */
		else if (q)
			q->lock.unlock();
	}
}

} /* namespace tlstune */
