#include "coalescer.h"

#include <algorithm>
#include <cerrno>
#include <climits>
#include <new>
#include <pthread.h>
#include <signal.h>
#include <sys/socket.h>
#include <system_error>
#include <thread>

namespace tlstune {

namespace {

/*
 * The flusher thread ends after this long with nothing to send, and the next held write
 * starts another: a process with a thread of the shim's cannot unshare(CLONE_NEWUSER) or
 * run under seccomp's strict mode (issue 11).
 */
constexpr std::chrono::seconds kFlusherIdleExit{1};

/*
 * How many fds apart a close may range before closing() walks every attached connection
 * instead of looking each number up (close_range over a wide range, exit).
 */
constexpr long long kLookedUpRange = 64;

/*
 * This thread holds one of the Coalescer's locks: a close() or wait from inside (a
 * sanitizer's symbolizer, a signal handler) must not wait for a lock it holds.
 */
thread_local bool insideCoalescer = false;

class InsideLock {
public:
	explicit InsideLock(std::mutex &mutex) : lock_(mutex), outer_(insideCoalescer)
	{
		insideCoalescer = true;
	}
	~InsideLock() { insideCoalescer = outer_; }

private:
	std::lock_guard<std::mutex> lock_;
	const bool outer_;
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
	PendingWrites *const added = writes.get();
	InsideLock lock(registry_);
	try {
		/* Room on the dirty list for every connection: dirtied() never allocates. */
		{
			InsideLock listed(dirtyListMutex_);
			if (dirtyList_.capacity() <= entries_.size())
				dirtyList_.reserve(2 * entries_.size() + 1);
		}
		const auto indexed = byFd_.emplace(fd, added);
		try {
			entries_.emplace(added, std::move(writes));
		} catch (const std::bad_alloc &) {
			byFd_.erase(indexed);
			return nullptr;
		}
	} catch (const std::bad_alloc &) {
		return nullptr;
	}
	entryCount_.fetch_add(1, std::memory_order_relaxed);
	return added;
}

void Coalescer::release(PendingWrites *writes)
{
	const int savedErrno = errno;
	writes->drain(kDrainTimeoutMs);
	InsideLock lock(registry_);
	{
		InsideLock listed(dirtyListMutex_);
		const auto entry = std::find(dirtyList_.begin(), dirtyList_.end(), writes);
		if (entry != dirtyList_.end())
			dirtyList_.erase(entry);
	}
	const auto attached = byFd_.equal_range(writes->fd());
	for (auto it = attached.first; it != attached.second; ++it) {
		if (it->second == writes) {
			byFd_.erase(it);
			break;
		}
	}
	if (entries_.erase(writes))
		entryCount_.fetch_sub(1, std::memory_order_relaxed);
	errno = savedErrno;
}

bool Coalescer::quietWrite(PendingWrites *writes) noexcept
{
	const auto now = std::chrono::steady_clock::now();
	const bool quiet = !writes->dirty() && now - writes->lastWrite() >= delay_;
	writes->setLastWrite(now);
	return quiet;
}

bool Coalescer::dirtied(PendingWrites *writes)
{
	if (insideCoalescer)
		return false;
	{
		InsideLock listed(dirtyListMutex_);
		if (!writes->listed()) {
			dirtyList_.push_back(writes); /* within the capacity open() reserved */
			writes->setListed(true);
		}
	}
	/* An active flusher looks at the dirty count before it sleeps: only a waiting one needs a call. */
	if (flusherIdle_.load(std::memory_order_acquire) ||
	    !flusherRunning_.load(std::memory_order_acquire)) {
		std::lock_guard<std::mutex> lock(wakeMutex_);
		if (!flusherRunning_.load(std::memory_order_relaxed))
			return startFlusher();
		wake_.notify_one();
	}
	return true;
}

bool Coalescer::startFlusher()
{
	/* Signals are the program's: the thread takes none (a sigwait loop, pselect's EINTR). */
	sigset_t all, old;
	sigfillset(&all);
	pthread_sigmask(SIG_SETMASK, &all, &old);
	bool started = true;
	try {
		std::thread(&Coalescer::flusherLoop, this).detach();
	} catch (const std::system_error &) {
		started = false;
	}
	pthread_sigmask(SIG_SETMASK, &old, nullptr);
	if (started)
		flusherRunning_.store(true, std::memory_order_release);
	return started;
}

void Coalescer::flusherLoop()
{
	for (;;) {
		{
			/* Nothing held: block (no timer ticks), and end after a quiet while. */
			std::unique_lock<std::mutex> lock(wakeMutex_);
			if (counters_.dirty.load(std::memory_order_relaxed) == 0) {
				flusherIdle_.store(true, std::memory_order_release);
				const bool woken = wake_.wait_for(lock, kFlusherIdleExit, [this] {
					return stopping_ || counters_.dirty.load(std::memory_order_relaxed) > 0;
				});
				if (!woken) {
					flusherRunning_.store(false, std::memory_order_release);
					flusherIdle_.store(false, std::memory_order_release);
					wake_.notify_all();
					return;
				}
				flusherIdle_.store(false, std::memory_order_release);
			}
			if (stopping_) {
				flusherRunning_.store(false, std::memory_order_relaxed);
				wake_.notify_all();
				return;
			}
		}
		/* The first byte held waits one delay at most. */
		std::this_thread::sleep_for(delay_);
		flushAll();
	}
}

void Coalescer::flushDirty()
{
	if (insideCoalescer)
		return;
	const int savedErrno = errno;
	/* A listed connection is not freed while this lock is held: release() unlists first. */
	InsideLock listed(dirtyListMutex_);
	std::size_t kept = 0;
	for (PendingWrites *writes : dirtyList_) {
		/* Busy: the connection's own thread holds it and is sending itself. */
		if (writes->dirty())
			writes->tryFlush(kBackgroundSend);
		if (writes->dirty())
			dirtyList_[kept++] = writes;
		else
			writes->setListed(false);
	}
	dirtyList_.resize(kept);
	errno = savedErrno;
}

void Coalescer::closing(int first, int last, bool detach)
{
	if (entryCount_.load(std::memory_order_relaxed) == 0 || insideCoalescer)
		return;
	const int savedErrno = errno;
	InsideLock lock(registry_);
	/* Sends what fd's connection holds; a detached one leaves the index. */
	auto visit = [&](std::unordered_multimap<int, PendingWrites *>::iterator it) {
		PendingWrites *writes = it->second;
		if (writes->dirty())
			writes->drain(kDrainTimeoutMs);
		if (!detach)
			return std::next(it);
		writes->detach();
		return byFd_.erase(it);
	};
	if (static_cast<long long>(last) - first < kLookedUpRange) {
		for (long long fd = first; fd <= last; fd++) {
			auto range = byFd_.equal_range(static_cast<int>(fd));
			for (auto it = range.first; it != range.second;)
				it = visit(it);
		}
	} else {
		for (auto it = byFd_.begin(); it != byFd_.end();)
			it = it->first < first || it->first > last ? std::next(it) : visit(it);
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
	dirtyListMutex_.lock();
	for (const auto &entry : entries_)
		entry.second->mutex().lock();
}

void Coalescer::unlockInParent()
{
	for (const auto &entry : entries_)
		entry.second->mutex().unlock();
	dirtyListMutex_.unlock();
	wakeMutex_.unlock();
	registry_.unlock();
}

void Coalescer::unlockInChild()
{
	for (const auto &entry : entries_) {
		entry.second->dropAfterFork();
		entry.second->mutex().unlock();
	}
	for (PendingWrites *writes : dirtyList_)
		writes->setListed(false);
	dirtyList_.clear();
	/* The flusher thread did not come along: the next write starts one. */
	flusherRunning_.store(false, std::memory_order_relaxed);
	flusherIdle_.store(false, std::memory_order_relaxed);
	dirtyListMutex_.unlock();
	wakeMutex_.unlock();
	registry_.unlock();
}

} /* namespace tlstune */
