#include "held_plaintext.h"

#include <cerrno>
#include <cstring>
#include <new>

#include "core/owned_lock.h"
#include "core/patient_lock.h"
#include "core/signals_blocked.h"

namespace tlstune {

namespace {

/*
 * This thread holds a HeldPlaintext's lock (it is encrypting): a call that comes back in
 * (a signal handler's close, OpenSSL calling an interposed function) must not wait for it.
 */
/* initial-exec: read by every query call of a connection (SSL_pending, SSL_get_error...). */
__attribute__((tls_model("initial-exec"))) thread_local bool encrypting = false;

class Encrypting {
public:
	Encrypting() noexcept { encrypting = true; }
	~Encrypting() { encrypting = false; }
};

/*
 * One spare record buffer for the process: a burst takes back the one its last record
 * gave up, without malloc. A signal handler that ends the image may have interrupted
 * this thread inside malloc, and the shim's thread must never wait for that lock while
 * it holds plaintext the handler needs.
 */
std::atomic<unsigned char *> spareBuffer{nullptr};

unsigned char *takeBuffer() noexcept
{
	if (unsigned char *spare = spareBuffer.exchange(nullptr, std::memory_order_acquire))
		return spare;
	return new (std::nothrow) unsigned char[HeldPlaintext::kCapacity];
}

using Guard = std::unique_lock<OwnedLock>;

/*
 * At the end of the process image: how long to wait for another thread that is
 * encrypting (it never blocks, so microseconds; the bound is for a thread that can never
 * finish, stopped inside a lock this one held when a signal interrupted it).
 */
constexpr std::chrono::milliseconds kEndPatience{200};
/*
 * Before a way out of a connection: the same bound, for a lock this thread cannot get
 * (a handler that interrupted it inside the coalescer's lock, which an encryption in
 * another thread waits for).
 */
constexpr std::chrono::milliseconds kWayOutPatience = kEndPatience;

} /* namespace */

void HeldPlaintext::GiveBack::operator()(unsigned char *buffer) const noexcept
{
	unsigned char *empty = nullptr;
	if (!spareBuffer.compare_exchange_strong(empty, buffer, std::memory_order_release))
		delete[] buffer;
}

bool HeldPlaintext::encryptingHere() noexcept
{
	return encrypting;
}

bool HeldPlaintext::hold(const void *data, std::size_t length, bool *becameHeld) noexcept
{
	*becameHeld = false;
	const std::size_t capacity = capacity_.load(std::memory_order_relaxed);
	if (encrypting || length > capacity)
		return false;
	Guard lock(mutex_);
	/* Before anything is read: a handler that closes the socket from here on sees it (leaving). */
	Copying copying(*this);
	if (inside_ > 0 || retired_ || ended_ || failure_.sslError || unfinished_ ||
	    (leftFd_ >= 0 && leftFd_ == fd_.load(std::memory_order_relaxed)))
		return false;
	/* kHandedOver: a handler sent what was held; Copying's end makes it 0 again. */
	std::size_t size = size_.load(std::memory_order_relaxed);
	if (size == kHandedOver)
		return false;
	if (size + length > capacity) {
		/* A failure makes this write go through, and it reports the failure. */
		encryptLocked(true, true);
		if (failure_.sslError)
			return false;
		/* 0, or kHandedOver if a handler came before the encryption blocked signals. */
		size = size_.load(std::memory_order_relaxed);
		if (size + length > capacity)
			return false;
	}
	if (!bytes_) {
		bytes_.reset(takeBuffer());
		if (!bytes_)
			return false;
	}
	/*
	 * Whole at every instruction: a handler that ends the image here sends size_ bytes.
	 * The fence keeps the compiler from storing the size before the copy (no instruction).
	 * A handler that closes the socket here sends them and leaves kHandedOver, which no
	 * size matches: then this write goes through as it is (and fails as without the shim).
	 */
	std::memcpy(bytes_.get() + size, data, length);
	std::atomic_signal_fence(std::memory_order_release);
	if (!size_.compare_exchange_strong(size, size + length, std::memory_order_relaxed))
		return false;
	*becameHeld = size == 0;
	return true;
}

HeldPlaintext::Copying::Copying(HeldPlaintext &held) noexcept : held_(held)
{
	held_.copying_ = true;
	std::atomic_signal_fence(std::memory_order_seq_cst);
}

HeldPlaintext::Copying::~Copying()
{
	std::atomic_signal_fence(std::memory_order_seq_cst);
	held_.copying_ = false;
	std::atomic_signal_fence(std::memory_order_seq_cst);
	/*
	 * A handler came during this write: what was held (with the write, if it was held
	 * by then) went to the kernel. No handler leaves kHandedOver from here on (copying_
	 * is false), so a load and a store do.
	 */
	if (held_.size_.load(std::memory_order_relaxed) == kHandedOver)
		held_.size_.store(0, std::memory_order_relaxed);
}

HeldPlaintext::Failure HeldPlaintext::enter(Entering how, const WriteCall *write) noexcept
{
	if (encrypting)
		return {};
	Guard lock(mutex_);
	const bool reports = how == Entering::Report || how == Entering::Write;
	if (how != Entering::Query && inside_ == 0 && size_.load(std::memory_order_relaxed) > 0)
		encryptLocked(true, reports);
	else if (write && inside_ == 0 && unfinished_ && !failure_.sslError && retriesFailedWrite(*write))
		finishLocked();
	inside_++;
	if (how == Entering::Keep || how == Entering::Query)
		return {};
	Failure failure = failure_;
	failure_ = {};
	if (how == Entering::Drop) {
		errors_.clear();
		leftFd_ = -1; /* a new connection, maybe on a new socket of that number */
		/* SSL_clear empties OpenSSL's record layer: no write is unfinished any more. */
		unfinished_ = 0;
		failedWrite_ = {};
		bytes_.reset();
		return {};
	}
	if (write && failure.sslError && !failedWrite_.data)
		failedWrite_ = *write;
	if (failure.sslError && errors_.count() > 0)
		failure.errors = &errors_;
	reported_ = failure.sslError;
	return failure;
}

void HeldPlaintext::leave() noexcept
{
	if (encrypting)
		return;
	Guard lock(mutex_);
	inside_--;
}

bool HeldPlaintext::encryptIfIdle(bool patient, bool socketLeaving) noexcept
{
	if (encrypting)
		return false;
	Guard lock(mutex_, std::try_to_lock);
	if (!lock.owns_lock() && socketLeaving && mutex_.heldHere())
		return handOverInterrupted();
	if (!lock.owns_lock() && (!patient || mutex_.heldHere() || !lockWithin(lock, kWayOutPatience)))
		return false;
	if (socketLeaving)
		leftFd_ = fd_.load(std::memory_order_relaxed);
	if (inside_ == 0 && !retired_ && size_.load(std::memory_order_relaxed) > 0)
		encryptLocked(false, false);
	return size_.load(std::memory_order_relaxed) == 0;
}

/*
 * A signal handler closes the socket (or shuts it down, or dup2s over it) after
 * interrupting this thread inside the lock: what is held is whole (hold()), so it goes to
 * the kernel now, as the bytes of the writes it acknowledged would have been there
 * already (a hunt: a one-shot timer's handler closing the socket lost up to 16 KiB in 3
 * runs of 60). The buffer stays: a write may be copying into it. That write, held only
 * if it was before the handler came, else goes through as it is (kHandedOver).
 */
bool HeldPlaintext::handOverInterrupted() noexcept
{
	leftFd_ = fd_.load(std::memory_order_relaxed);
	if (inside_ == 0 && !retired_)
		encryptLocked(false, false, true);
	if (copying_)
		size_.store(kHandedOver, std::memory_order_relaxed);
	const std::size_t left = size_.load(std::memory_order_relaxed);
	return left == 0 || left == kHandedOver;
}

bool HeldPlaintext::emptyNow() noexcept
{
	Guard lock(mutex_, std::try_to_lock);
	return lock.owns_lock() && size_.load(std::memory_order_relaxed) == 0;
}

void HeldPlaintext::encryptByOwner() noexcept
{
	if (encrypting)
		return;
	Guard lock(mutex_);
	if (inside_ == 0 && size_.load(std::memory_order_relaxed) > 0)
		encryptLocked(true, true);
}

void HeldPlaintext::retire() noexcept
{
	Guard lock(mutex_);
	/* Nobody reports a failure now: its entries leave this thread's queue with it. */
	if (inside_ == 0 && size_.load(std::memory_order_relaxed) > 0)
		encryptLocked(true, false);
	retired_ = true;
}

int HeldPlaintext::takeReportedError() noexcept
{
	Guard lock(mutex_);
	const int reported = reported_;
	reported_ = 0;
	return reported;
}

void HeldPlaintext::encryptLocked(bool byOwner, bool reportedHere, bool keepBuffer) noexcept
{
	if (size_.load(std::memory_order_relaxed) == 0 || retired_)
		return;
	const int savedErrno = errno;
	/*
	 * The bytes were reported written: a signal handler that ends the process must never
	 * find them half encrypted (everything else under the lock is whole at every
	 * instruction). Once per record; the shim's thread blocks every signal already.
	 */
	SignalsBlocked quiet;
	/* Read with signals blocked: a handler's close may have sent them (handOverInterrupted). */
	const std::size_t size = size_.load(std::memory_order_relaxed);
	if (size == 0 || size == kHandedOver) {
		errno = savedErrno;
		return;
	}
	Encrypting scope;
	errors_.clear();
	const ErrorMark mark = reportedHere ? ErrorMark{} : markErrors(*errorApi_);
	int sslError = 0;
	{
		SignalsBlocked::ProgramMayRun callbacks;
		sslError = encrypt_(ssl_, bytes_.get(), size, byOwner);
	}
	const int error = errno;
	/* This thread's queue as it was; a success's entries (if any) are nobody's. */
	if (!reportedHere)
		ErrorEntries::take(*errorApi_, mark, sslError > 0 ? &errors_ : nullptr);
	if (sslError == kNotNow) {
		errno = savedErrno;
		return;
	}
	if (sslError)
		failure_ = { sslError, error, nullptr };
	/* Encrypted or failed: either way the bytes are OpenSSL's now, as a write's would be. */
	size_.store(0, std::memory_order_release);
	if (sslError)
		unfinished_ = size;
	else if (!keepBuffer)
		bytes_.reset();
	errno = savedErrno;
}

void HeldPlaintext::finishLocked() noexcept
{
	const int savedErrno = errno;
	Encrypting scope;
	errors_.clear();
	int sslError = 0;
	{
		/* The record was encrypted already: only its sending is retried. */
		sslError = encrypt_(ssl_, bytes_.get(), unfinished_, true);
	}
	if (sslError) {
		failure_ = { sslError, errno, nullptr };
	} else {
		unfinished_ = 0;
		failedWrite_ = {};
		bytes_.reset();
	}
	errno = savedErrno;
}

bool HeldPlaintext::retriesFailedWrite(const WriteCall &write) const noexcept
{
	if (!failedWrite_.data)
		return true;
	return write.length >= failedWrite_.length &&
	       (write.data == failedWrite_.data || (write.movesBuffer && write.movesBuffer(ssl_)));
}

HeldPlaintext *HeldRegistry::attach(void *ssl, int fd, HeldPlaintext::Encrypt encrypt,
				    const ErrorQueueApi *errors) noexcept
{
	if (HeldPlaintext *known = of(ssl))
		return known;
	/*
	 * A signal handler's write that interrupted this thread inside the lock (of()): the
	 * connection holds nothing yet, so its write goes out as it is.
	 */
	if (mutex_.heldHere())
		return nullptr;
	/* The map changes: never half way for a handler that ends the image. Once per connection. */
	SignalsBlocked quiet;
	Guard lock(mutex_);
	auto found = entries_.find(ssl);
	if (found != entries_.end())
		return found->second.get();
	/* The image is ending: what a new entry held would outlive the last drain. */
	if (!holding())
		return nullptr;
	try {
		auto made = std::make_unique<HeldPlaintext>(ssl, encrypt, errors);
		HeldPlaintext *held = made.get();
		entries_.emplace(ssl, std::move(made));
		count_.fetch_add(1, std::memory_order_relaxed);
		indexLocked(held, fd);
		return held;
	} catch (const std::bad_alloc &) {
		return nullptr;
	}
}

/*
 * The last lookup of this thread: a program writing many small records calls of() a few
 * times per write, always for the same SSL, and the registry's lock and map showed in its
 * profile. Only one registry is ever made.
 */
struct LastLookup {
	void *ssl = nullptr;
	HeldPlaintext *held = nullptr;
	unsigned long generation = 0;
};
__attribute__((tls_model("initial-exec"))) thread_local LastLookup lastLookup;

HeldPlaintext *HeldRegistry::of(void *ssl) noexcept
{
	if (count_.load(std::memory_order_relaxed) == 0)
		return nullptr;
	/*
	 * A signal handler that writes, interrupting this thread inside the lock below (a hunt:
	 * SSL_write from a SIGALRM handler hung on it): the thread that holds the lock is this
	 * one, in a lookup, so the map is whole (changes block signals) and nobody else can
	 * change it; the cache may be half written.
	 */
	if (mutex_.heldHere()) {
		auto found = entries_.find(ssl);
		return found == entries_.end() ? nullptr : found->second.get();
	}
	const unsigned long generation = generation_.load(std::memory_order_acquire);
	if (lastLookup.held && lastLookup.ssl == ssl && lastLookup.generation == generation)
		return lastLookup.held;
	Guard lock(mutex_);
	auto found = entries_.find(ssl);
	HeldPlaintext *held = found == entries_.end() ? nullptr : found->second.get();
	lastLookup = { ssl, held, generation_.load(std::memory_order_relaxed) };
	return held;
}

void HeldRegistry::free(void *ssl) noexcept
{
	if (count_.load(std::memory_order_relaxed) == 0)
		return;
	std::unique_ptr<HeldPlaintext> gone;
	{
		SignalsBlocked quiet; /* as in attach() */
		Guard lock(mutex_);
		auto found = entries_.find(ssl);
		if (found == entries_.end())
			return;
		found->second->retire();
		unindex(found->second.get());
		gone = std::move(found->second);
		entries_.erase(found);
		/*
		 * The last connection gone: nothing is held, and no write can count itself in
		 * before a new one is made under this lock. The hint its writes left would keep
		 * the flusher passing every 200 us over nothing, for ever (a hunt: uwsgi and
		 * gunicorn used 7 to 10 % of a core while idle after a burst of small writes).
		 */
		if (count_.fetch_sub(1, std::memory_order_relaxed) == 1)
			held_.store(0, std::memory_order_relaxed);
		generation_.fetch_add(1, std::memory_order_release);
	}
}

void HeldRegistry::encryptAll() noexcept
{
	encryptAll(false, 0, INT_MAX, Pass::Every);
}

/*
 * A hunt: 20 small writes, then close and a socketpair that took the number. The flusher
 * was encrypting the held record when close only tried the locks, handed the kernel
 * nothing and closed; the record then went to the socketpair (or was lost, or went after
 * a shutdown's FIN, or past a message callback set meanwhile), 14 runs in 30.
 */
void HeldRegistry::encryptAllNow() noexcept
{
	encryptAll(true, 0, INT_MAX, Pass::Every);
}

void HeldRegistry::socketsLeaving(int first, int last) noexcept
{
	if (first == last)
		leaving_.note(first);
	else
		rangesLeaving_.fetch_add(1, std::memory_order_relaxed);
	/* Announced, then counted: holdingFor's read-modify-write of the count sees both. */
	waysOut_.fetch_add(1, std::memory_order_acq_rel);
	if (fds_.anyIn(first, last))
		encryptAll(true, first, last, Pass::Leaving);
}

void HeldRegistry::pushing(int fd) noexcept
{
	/* This thread's own held write counted itself before it returned. */
	if (held_.load(std::memory_order_relaxed) > 0 && fds_.mayHave(fd))
		encryptAll(true, fd, fd, Pass::Pushed);
}

void HeldRegistry::encryptAll(bool patient, int first, int last, Pass pass) noexcept
{
	/*
	 * A patient pass (a way out) goes on whatever the hint says: a write counts itself in
	 * held_ only after its bytes are held, and a close between the two left them for a
	 * detached socket (a hunt: a line lost in 5 runs of 300).
	 */
	if (encrypting || count_.load(std::memory_order_seq_cst) == 0 ||
	    (!patient && held_.load(std::memory_order_seq_cst) == 0))
		return;
	/* A handler that interrupted this thread's own pass: nothing to wait for. */
	if (mutex_.heldHere())
		return;
	/* As Coalescer::flushDirty: no siglongjmp out of a handler may leave the lock held. */
	SignalsBlocked quiet;
	Guard lock(mutex_, std::try_to_lock);
	if (!lock.owns_lock() && (!patient || !lockWithin(lock, kWayOutPatience)))
		return;
	if (pass != Pass::Every && encryptBySocket(first, last, pass == Pass::Leaving))
		return;
	/* Reset first: a buffer filled after this pass saw it counts again. */
	held_.store(0, std::memory_order_seq_cst);
	int left = 0;
	for (auto &entry : entries_) {
		const int fd = entry.second->fd();
		const bool ours = fd < 0 || (fd >= first && fd <= last);
		/*
		 * Counted again unless found empty under its lock: a write copying its bytes in
		 * under that lock has not stored their size yet, and uncounted they would wait
		 * for the program's next call, past the delay and past its waits.
		 */
		if (!(ours ? entry.second->encryptIfIdle(patient, pass == Pass::Leaving && fd >= 0)
			   : entry.second->emptyNow()))
			left++;
	}
	if (left)
		held_.fetch_add(left, std::memory_order_relaxed);
}

bool HeldRegistry::encryptBySocket(int first, int last, bool leaving) noexcept
{
	if (unindexed_ || static_cast<long long>(last) - first >= kLookedUpRange)
		return false;
	for (long long fd = first; fd <= last; fd++) {
		auto range = bySocket_.equal_range(static_cast<int>(fd));
		for (auto it = range.first; it != range.second; ++it)
			it->second->encryptIfIdle(true, leaving);
	}
	return true;
}

bool HeldRegistry::index(HeldPlaintext *held, int fd) noexcept
{
	/* A handler that interrupted a lookup: the map must not change under it. */
	if (mutex_.heldHere())
		return false;
	/* The map changes: never half way for a handler that ends the image (as attach). */
	SignalsBlocked quiet;
	Guard lock(mutex_);
	unindex(held);
	indexLocked(held, fd);
	return true;
}

void HeldRegistry::indexLocked(HeldPlaintext *held, int fd) noexcept
{
	held->writesTo(fd);
	try {
		bySocket_.emplace(fd, held);
	} catch (const std::bad_alloc &) {
		unindexed_ = true;
	}
}

void HeldRegistry::unindex(HeldPlaintext *held) noexcept
{
	auto range = bySocket_.equal_range(held->fd());
	for (auto it = range.first; it != range.second; ++it) {
		if (it->second == held) {
			bySocket_.erase(it);
			return;
		}
	}
}

void HeldPlaintext::encryptAtImageEnd(bool mayReturn) noexcept
{
	if (mutex_.heldHere()) {
		/*
		 * A handler interrupted this thread inside the lock (copying a write in, say):
		 * what is held is whole, and nobody returns to the interrupted call. An exec may
		 * return, into a copy that would go on with a stale size: then it stays held.
		 */
		if (!mayReturn && inside_ == 0 && !retired_)
			encryptLocked(false, false);
		ended_ = ended_ || !mayReturn;
		return;
	}
	Guard lock(mutex_, std::defer_lock);
	lockWithin(lock, kEndPatience);
	if (lock.owns_lock() && inside_ == 0 && !retired_ && size_.load(std::memory_order_relaxed) > 0)
		encryptLocked(false, false);
	/*
	 * Another thread's write after this (exit runs while the others do) is the kernel's at
	 * once, as without the shim: nothing would send it later.
	 */
	if (lock.owns_lock())
		ended_ = ended_ || !mayReturn;
}

void HeldRegistry::encryptAtImageEnd(bool mayReturn) noexcept
{
	/* Every entry, not the hint: the image may end between a first write and its noteHeld(). */
	if (encrypting || count_.load(std::memory_order_relaxed) == 0)
		return;
	/* Held here (a lookup was interrupted): the map is whole, it changes with signals blocked. */
	Guard lock(mutex_, std::defer_lock);
	if (!mutex_.heldHere() && !lockWithin(lock, kEndPatience))
		return;
	for (auto &entry : entries_)
		entry.second->encryptAtImageEnd(mayReturn);
}

void HeldRegistry::lockForFork() noexcept
{
	mutex_.lock();
	for (auto &entry : entries_)
		entry.second->mutex().lock();
}

void HeldRegistry::unlockInParent() noexcept
{
	for (auto &entry : entries_)
		entry.second->mutex().unlock();
	mutex_.unlock();
}

void HeldRegistry::unlockInChild() noexcept
{
	for (auto &entry : entries_) {
		entry.second->dropAfterFork();
		entry.second->mutex().unlock();
	}
	held_.store(0, std::memory_order_relaxed);
	mutex_.unlock();
}

} /* namespace tlstune */
