#include "coalescer.h"

#include <algorithm>
#include <cerrno>
#include <climits>
#include <new>
#include <sys/socket.h>
#include <system_error>
#include <thread>

namespace tlstune {

namespace {

/*
 * The flusher sleeps for good after this many rounds with nothing to send. Waking it
 * costs a futex call and a context switch, so a program writing now and then (a
 * request-response loop) keeps it ticking instead of waking it for every request.
 */
constexpr int kIdleRounds = 50;

/*
 * This thread holds the registry: a close() from inside (a sanitizer's symbolizer, a
 * signal handler) must not wait for the lock it holds.
 */
thread_local bool holdingRegistry = false;

class RegistryLock {
public:
	explicit RegistryLock(std::mutex &mutex) : lock_(mutex) { holdingRegistry = true; }
	~RegistryLock() { holdingRegistry = false; }

private:
	std::lock_guard<std::mutex> lock_;
};

} /* namespace */

Coalescer::~Coalescer()
{
	std::unique_lock<std::mutex> lock(wakeMutex_);
	stopping_ = true;
	wake_.notify_all();
	wake_.wait(lock, [this] { return !flusherRunning_.load(std::memory_order_relaxed); });
}

PendingWrites *Coalescer::open(int fd)
{
	std::unique_ptr<PendingWrites> writes(new (std::nothrow) PendingWrites(fd, limit_, calls_,
									       &counters_));
	if (!writes)
		return nullptr;
	RegistryLock lock(registry_);
	try {
		entries_.push_back(std::move(writes));
	} catch (const std::bad_alloc &) {
		return nullptr;
	}
	entryCount_.fetch_add(1, std::memory_order_relaxed);
	return entries_.back().get();
}

void Coalescer::release(PendingWrites *writes)
{
	const int savedErrno = errno;
	writes->drain(kDrainTimeoutMs);
	RegistryLock lock(registry_);
	auto entry = std::find_if(entries_.begin(), entries_.end(),
				  [&](const std::unique_ptr<PendingWrites> &e) { return e.get() == writes; });
	if (entry != entries_.end()) {
		entries_.erase(entry);
		entryCount_.fetch_sub(1, std::memory_order_relaxed);
	}
	errno = savedErrno;
}

bool Coalescer::dirtied()
{
	if (!flusherRunning_.load(std::memory_order_acquire) && !startFlusher())
		return false;
	if (flusherIdle_.load(std::memory_order_acquire)) {
		std::lock_guard<std::mutex> lock(wakeMutex_);
		wake_.notify_one();
	}
	return true;
}

bool Coalescer::startFlusher()
{
	std::lock_guard<std::mutex> lock(wakeMutex_);
	if (flusherRunning_.load(std::memory_order_relaxed))
		return true;
	try {
		std::thread(&Coalescer::flusherLoop, this).detach();
	} catch (const std::system_error &) {
		return false;
	}
	flusherRunning_.store(true, std::memory_order_release);
	return true;
}

void Coalescer::flusherLoop()
{
	int quietRounds = 0;
	for (;;) {
		{
			std::unique_lock<std::mutex> lock(wakeMutex_);
			if (counters_.dirty.load(std::memory_order_relaxed) == 0 && ++quietRounds >= kIdleRounds) {
				flusherIdle_.store(true, std::memory_order_release);
				wake_.wait(lock, [this] {
					return stopping_ || counters_.dirty.load(std::memory_order_relaxed) > 0;
				});
				flusherIdle_.store(false, std::memory_order_relaxed);
				quietRounds = 0;
			}
			if (stopping_) {
				flusherRunning_.store(false, std::memory_order_relaxed);
				wake_.notify_all();
				return;
			}
		}
		/* A byte appended just after the last round waits one delay at most. */
		std::this_thread::sleep_for(delay_);
		flushAll();
	}
}

void Coalescer::flushDirty()
{
	if (holdingRegistry)
		return;
	const int savedErrno = errno;
	RegistryLock lock(registry_);
	for (const std::unique_ptr<PendingWrites> &writes : entries_) {
		/* Busy: the connection's own thread holds it and is sending itself. */
		if (writes->dirty())
			writes->tryFlush(kBackgroundSend);
	}
	errno = savedErrno;
}

void Coalescer::closing(int first, int last, bool detach)
{
	if (entryCount_.load(std::memory_order_relaxed) == 0 || holdingRegistry)
		return;
	const int savedErrno = errno;
	RegistryLock lock(registry_);
	for (const std::unique_ptr<PendingWrites> &writes : entries_) {
		const int fd = writes->fd();
		if (fd < first || fd > last)
			continue;
		if (writes->dirty())
			writes->drain(kDrainTimeoutMs);
		if (detach)
			writes->detach();
	}
	errno = savedErrno;
}

void Coalescer::drainAll()
{
	closing(0, INT_MAX, false);
}

void Coalescer::lockForFork()
{
	registry_.lock();
	wakeMutex_.lock();
	for (const std::unique_ptr<PendingWrites> &writes : entries_)
		writes->mutex().lock();
}

void Coalescer::unlockInParent()
{
	for (const std::unique_ptr<PendingWrites> &writes : entries_)
		writes->mutex().unlock();
	wakeMutex_.unlock();
	registry_.unlock();
}

void Coalescer::unlockInChild()
{
	for (const std::unique_ptr<PendingWrites> &writes : entries_) {
		writes->dropAfterFork();
		writes->mutex().unlock();
	}
	/* The flusher thread did not come along: the next write starts one. */
	flusherRunning_.store(false, std::memory_order_relaxed);
	flusherIdle_.store(false, std::memory_order_relaxed);
	wakeMutex_.unlock();
	registry_.unlock();
}

} /* namespace tlstune */
