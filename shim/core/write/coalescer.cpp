#include "coalescer.h"

#include <algorithm>
#include <cerrno>
#include <climits>
#include <new>
#include <sched.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <thread>
#include <unistd.h>

#include "core/futex.h"
#include "core/known_fds.h"
#include "core/log.h"
#include "core/shim_thread.h"
#include "core/signals_blocked.h"
#include "core/write/held_plaintext.h"

namespace tlstune {

namespace {

/* How often endFlusher asks whether the ended flusher's thread is gone, a yield apart. */
constexpr int kGoneChecks = 100000;

/* What TLSTUNE_LOG=info and debug show of where held bytes went: a server has thousands. */
RateLimit flushLines;
RateLimit stalledLines;
RateLimit waitedLines;
RateLimit threadLines;

/*
 * A pass of the flusher's found sockets full (the peer stopped reading after a batch
 * began): it tries again this much later, not every delay.
 */
constexpr std::chrono::milliseconds kFullSocketRetry{10};

/* A wait's patience with a pass of the flusher's: rounds of 2 ms, 200 ms in all (kEndPatience). */
constexpr int kPassRounds = 100;

/*
 * How long a way out waits for a lock another thread holds (a send never blocks under
 * one, so microseconds): bounded, because a signal handler that ends the process may have
 * interrupted this thread inside that very lock.
 */
constexpr std::chrono::milliseconds kPatience{200};

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
	knownFds().note(fd);
	std::shared_ptr<PendingWrites> writes(new (std::nothrow) PendingWrites(fd, limit_, calls_,
									       &counters_));
	if (!writes)
		return nullptr;
	PendingWrites *const added = writes.get();
	ShimLock lock(registry_);
	try {
		/* Room on the dirty list for every connection: dirtied() never allocates. */
		{
			ShimLock listed(dirtyListMutex_);
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
	ShimLock lock(registry_);
	handOver(writes);
	/*
	 * What the socket did not take in the drain's time goes with the connection, out of
	 * the count of those with bytes to send too: counted, it kept the flusher passing over
	 * nothing every 200 us for ever (a hunt: a socket full at SSL_free, 7 to 12 % of a
	 * core while idle).
	 */
	if (writes->dirty())
		writes->drop();
	{
		ShimLock listed(dirtyListMutex_);
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

PendingWrites::Result Coalescer::sendAsOwner(PendingWrites *writes, bool programsWrite)
{
	const PendingWrites::Result result = writes->sendAsOwner(programsWrite);
	if (result == PendingWrites::Result::Again)
		stalled(writes);
	return result;
}

void Coalescer::stalled(PendingWrites *writes)
{
	/* The bytes stay (one batch at most): the owner's retry sends them, as OpenSSL's would. */
	/* Here, in the connection's own call, no lock is held: stderr may block. */
	logLimited(stalledLines, LogLevel::Debug, "fd %d: socket full; held bytes go out as the peer reads",
		   writes->fd());
}

bool Coalescer::quietWrite(PendingWrites *writes) noexcept
{
	const bool early = writes->noteWrite(waitsOfThisThread()) <= kDirectWritesAfterWait;
	const auto now = std::chrono::steady_clock::now();
	/*
	 * A pause of the delay or more is a wait the shim could not see (a sleep, a condition
	 * variable, a pipe): what follows is a new request, whose first writes go out as after
	 * a wait. Else a header and its body after a sleep would wait for the flusher. Not
	 * the shim's own record of held plaintext: a burst's full record is no new request.
	 */
	const bool paused = !writes->dirty() && now - writes->lastWrite() >= delay_;
	if (paused && !HeldPlaintext::encryptingHere())
		writes->beginRun();
	writes->setLastWrite(now);
	return early || paused;
}

bool Coalescer::dirtied(PendingWrites *writes)
{
	if (ShimLock::heldHere())
		return false;
	{
		/* A handler that ends the image must not find this thread inside the list's lock. Once per batch. */
		SignalsBlocked quiet;
		ShimLock listed(dirtyListMutex_);
		if (!writes->listed()) {
			dirtyList_.push_back(writes); /* within the capacity open() reserved */
			writes->setListed(true);
		}
	}
	return plaintextHeld();
}

bool Coalescer::plaintextHeld()
{
	/* An active flusher looks at the dirty count before it sleeps: only a waiting one needs a call. */
	if (flusherIdle_.load(std::memory_order_acquire) ||
	    !flusherRunning_.load(std::memory_order_acquire)) {
		/*
		 * Once per burst: a handler that ends the image would wait for this very lock (its
		 * encryption wakes the flusher too), and the thread start takes glibc's locks.
		 */
		SignalsBlocked quiet;
		std::lock_guard<std::mutex> lock(wakeMutex_);
		heldSince_ = std::chrono::steady_clock::now();
		if (!flusherRunning_.load(std::memory_order_relaxed))
			return startFlusher();
		wake_.notify_one();
	}
	return true;
}

void Coalescer::endFlusher() noexcept
{
	{
		SignalsBlocked quiet;
		std::unique_lock<std::mutex> lock(wakeMutex_);
		if (flusherRunning_.load(std::memory_order_relaxed)) {
			stopping_ = true;
			wake_.notify_all();
			wake_.wait(lock, [this] { return !flusherRunning_.load(std::memory_order_relaxed); });
			stopping_ = false;
		}
	}
	/*
	 * Its loop has returned (or it ended idle a moment ago); the thread's own end follows
	 * within microseconds. Bounded: a number the kernel gave a new thread meanwhile.
	 */
	const pid_t tid = flusherTid_.load(std::memory_order_acquire);
	/* No thread was ever started, or its end is known already: nothing to wait for. */
	if (tid <= 0)
		return;
	const pid_t pid = getpid();
	for (int i = 0; i < kGoneChecks && syscall(SYS_tgkill, pid, tid, 0) == 0; i++)
		sched_yield();
	pid_t expected = tid;
	flusherTid_.compare_exchange_strong(expected, 0, std::memory_order_acq_rel);
}

void Coalescer::resumeFlusher()
{
	SignalsBlocked quiet;
	std::lock_guard<std::mutex> lock(wakeMutex_);
	if (!flusherRunning_.load(std::memory_order_relaxed) && work())
		startFlusher();
}

void Coalescer::mainThreadLeft() noexcept
{
	SignalsBlocked quiet;
	std::lock_guard<std::mutex> lock(wakeMutex_);
	mainLeft_ = true;
	wake_.notify_all();
}

void Coalescer::setPlaintextWork(PlaintextWork work) noexcept
{
	plaintextPending_.store(work.pending, std::memory_order_release);
	encryptPlaintext_.store(work.encrypt, std::memory_order_release);
}

bool Coalescer::work() const noexcept
{
	if (counters_.dirty.load(std::memory_order_relaxed) > 0)
		return true;
	bool (*pending)() noexcept = plaintextPending_.load(std::memory_order_acquire);
	return pending && pending();
}

bool Coalescer::startFlusher()
{
	const bool started = holding() && startShimThread([this] { flusherLoop(); });
	if (started) {
		flusherRunning_.store(true, std::memory_order_release);
	} else if (holding_.exchange(false, std::memory_order_relaxed)) {
		/*
		 * EAGAIN, EPERM or ENOSYS (a sandbox, RLIMIT_AS): nothing would bound the delay.
		 * Said at info: the program's stderr is as without tlstune (a hunt).
		 */
		logLimited(threadLines, LogLevel::Info,
			   "no thread could be started: small writes are no longer held in this process");
	}
	return started;
}

void Coalescer::flusherLoop()
{
	/*
	 * The kernel's default timer slack (50 us) would be added to every delay: the delay is
	 * the promise (issue 22: p50 within 50 us of it). This thread only; started before any
	 * confinement of the process (holding stops at one).
	 */
	prctl(PR_SET_TIMERSLACK, 1UL, 0UL, 0UL, 0UL);
	flusherTid_.store(gettid(), std::memory_order_release);
	for (;;) {
		std::chrono::steady_clock::time_point heldSince{};
		{
			/* Nothing held: block (no timer ticks), and end after a quiet while. */
			std::unique_lock<std::mutex> lock(wakeMutex_);
			if (!work()) {
				flusherIdle_.store(true, std::memory_order_release);
				wake_.wait_for(lock, idleExit_, [this] { return stopping_ || mainLeft_ || work(); });
				if (!stopping_ && !work()) {
					flusherRunning_.store(false, std::memory_order_release);
					flusherIdle_.store(false, std::memory_order_release);
					wake_.notify_all();
					return;
				}
				flusherIdle_.store(false, std::memory_order_release);
			}
			/*
			 * Taken once: only a start or a notify sets it (plaintextHeld, which finds this
			 * thread idle or gone), so a pass that follows a pass, or a wait that ended
			 * without a notify, finds none and waits a whole delay.
			 */
			heldSince = heldSince_;
			heldSince_ = {};
			if (stopping_) {
				flusherRunning_.store(false, std::memory_order_relaxed);
				wake_.notify_all();
				return;
			}
		}
		/*
		 * The first byte held waits one delay at most, counted from when it was held: the
		 * wake-up's own latency is part of it. But half a delay at least after a late wake
		 * (a loaded machine, strace): flushing at once would send a record per wake-up of
		 * a burst (100,000 writes of 100 B under strace: 1,112 records, against 671).
		 */
		if (fullSockets_.load(std::memory_order_relaxed))
			std::this_thread::sleep_for(kFullSocketRetry);
		else if (heldSince != std::chrono::steady_clock::time_point{})
			std::this_thread::sleep_until(
				std::max(heldSince + delay_, std::chrono::steady_clock::now() + delay_ / 2));
		else
			std::this_thread::sleep_for(delay_);
		flusherPassing_.store(1, std::memory_order_seq_cst);
		if (void (*encrypt)() noexcept = encryptPlaintext_.load(std::memory_order_acquire))
			encrypt();
		flushAll();
		flusherPassing_.store(0, std::memory_order_seq_cst);
		if (passWaiters_.load(std::memory_order_seq_cst) > 0)
			futexWake(&flusherPassing_, INT_MAX);
	}
}

void Coalescer::awaitFlusherPassSlowly() noexcept
{
	/* A handler that interrupted this thread inside the shim: the pass may wait for it. */
	if (ShimLock::heldHere())
		return;
	passWaiters_.fetch_add(1, std::memory_order_seq_cst);
	/* The pass never blocks; bounded all the same, as every wait of a way out is. */
	static const struct timespec kRound = { 0, 2000000 };
	for (int round = 0; round < kPassRounds && flusherPassing_.load(std::memory_order_seq_cst) != 0; round++)
		futexWait(&flusherPassing_, 1u, &kRound);
	passWaiters_.fetch_sub(1, std::memory_order_relaxed);
}

void Coalescer::flushDirty()
{
	if (ShimLock::heldHere())
		return;
	const int savedErrno = errno;
	/*
	 * From a program's thread before its wait: a handler that leaves the wait's wrapper by
	 * siglongjmp must not leave these locks held (a hunt: the next write hung on them).
	 */
	SignalsBlocked quiet;
	/* A listed connection is not freed while this lock is held: release() unlists first. */
	ShimLock listed(dirtyListMutex_);
	std::size_t kept = 0;
	bool full = false;
	for (PendingWrites *writes : dirtyList_) {
		/* Busy: another thread holds it, and is sending. */
		if (writes->dirty())
			full = writes->trySend() == PendingWrites::Result::Again || full;
		if (writes->dirty())
			dirtyList_[kept++] = writes;
		else
			writes->setListed(false);
	}
	dirtyList_.resize(kept);
	fullSockets_.store(full, std::memory_order_relaxed);
	errno = savedErrno;
}

void Coalescer::closing(int first, int last)
{
	if (idle() || ShimLock::heldHere())
		return;
	const int savedErrno = errno;
	ShimLock lock(registry_);
	/* Hands what fd's connection holds to the kernel; then it leaves the index. */
	auto visit = [&](std::unordered_multimap<int, PendingWrites *>::iterator it) {
		PendingWrites *writes = it->second;
		handOver(writes, PendingWrites::AfterSend::Detach);
		/* Not detached with the last send (its lock was not to be had): all the same. */
		if (writes->fd() >= 0)
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

template <typename Visit>
void Coalescer::forEachOf(int fd, Visit visit)
{
	if (entryCount_.load(std::memory_order_relaxed) == 0 || ShimLock::heldHere())
		return;
	const int savedErrno = errno;
	ShimLock lock(registry_);
	auto range = byFd_.equal_range(fd);
	for (auto it = range.first; it != range.second; ++it)
		visit(it->second);
	errno = savedErrno;
}

void Coalescer::shuttingDown(int fd)
{
	forEachOf(fd, [this](PendingWrites *writes) { handOver(writes, PendingWrites::AfterSend::WriteOut); });
}

void Coalescer::shutdownFailed(int fd)
{
	forEachOf(fd, [](PendingWrites *writes) { writes->shutdownFailed(); });
}

void Coalescer::handOverFor(int fd)
{
	forEachOf(fd, [this](PendingWrites *writes) { handOver(writes); });
}

void Coalescer::sendingAway(int fd)
{
	forEachOf(fd, [](PendingWrites *writes) { writes->sendAway(); });
}

void Coalescer::handOver(PendingWrites *writes, PendingWrites::AfterSend then)
{
	/* Nothing to send, nothing to do after: an SSL_free's, a close's of a connection at rest. */
	if (then == PendingWrites::AfterSend::Nothing && !writes->dirty())
		return;
	/* A shutdown of a connection at rest: no lock, so no signal mask to change. */
	if (then == PendingWrites::AfterSend::WriteOut && writes->writeOutAtRest())
		return;
	/* Bounded (kDrainTimeoutMs): a cancelled thread hands the bytes over first. */
	CancelDeferred whole;
	const int fd = writes->fd(); /* for the log: a detach forgets it */
	{
		SignalsBlocked quiet;
		/* Clean or not, what follows takes the lock: after whatever record the owner is appending. */
		if (writes->sendPatiently(kPatience, then) != PendingWrites::Result::Again)
			return;
	}
	/*
	 * A batch begins only when the socket has room for it (batchRoom), so this is the
	 * socket's own doing (another descriptor filled it, or it shrank): the bytes go out
	 * here, as the program's write would have sent them, waiting a bounded while.
	 */
	drainHere(writes, std::chrono::steady_clock::now() + std::chrono::milliseconds(kDrainTimeoutMs), then);
	if (writes->dirty())
		logLimited(waitedLines, LogLevel::Warn,
			   "fd %d: the socket took nothing for %d ms: the bytes held are dropped", fd,
			   kDrainTimeoutMs);
	else
		logLimited(waitedLines, LogLevel::Info, "fd %d: the socket filled under held bytes; they went out",
			   fd);
}

void Coalescer::drainHere(PendingWrites *writes, std::chrono::steady_clock::time_point deadline,
			  PendingWrites::AfterSend then)
{
	while ((then != PendingWrites::AfterSend::Nothing || writes->dirty()) &&
	       writes->sendPatiently(kPatience, then) == PendingWrites::Result::Again) {
		const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
			deadline - std::chrono::steady_clock::now());
		struct pollfd writable = { writes->fd(), POLLOUT, 0 };
		if (left.count() <= 0 || calls_.poll(&writable, 1, static_cast<int>(left.count())) <= 0)
			return;
	}
}

void Coalescer::drainAll()
{
	if (idle() || ShimLock::heldHere())
		return;
	const int savedErrno = errno;
	logLimited(flushLines, LogLevel::Debug, "the process image ends: sending what is held");
	{
		ShimLock lock(registry_, kPatience);
		if (lock.owns())
			for (const auto &entry : entries_)
				handOver(entry.second.get());
	}
	errno = savedErrno;
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
	flusherPassing_.store(0, std::memory_order_relaxed);
	passWaiters_.store(0, std::memory_order_relaxed);
	dirtyListMutex_.unlock();
	wakeMutex_.unlock();
	registry_.unlock();
}

} /* namespace tlstune */
