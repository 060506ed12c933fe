#include "held_plaintext.h"

#include <cerrno>
#include <cstring>
#include <new>

namespace tlstune {

namespace {

/*
 * This thread holds a HeldPlaintext's lock (it is encrypting): a call that comes back in
 * (a signal handler's close, OpenSSL calling an interposed function) must not wait for it.
 */
thread_local bool encrypting = false;

class Encrypting {
public:
	Encrypting() noexcept { encrypting = true; }
	~Encrypting() { encrypting = false; }
};

} /* namespace */

bool HeldPlaintext::encryptingHere() noexcept
{
	return encrypting;
}

bool HeldPlaintext::hold(const void *data, std::size_t length, bool *becameHeld) noexcept
{
	*becameHeld = false;
	if (encrypting || length > kCapacity)
		return false;
	std::lock_guard<std::mutex> lock(mutex_);
	if (inside_ > 0 || retired_ || failure_.sslError)
		return false;
	std::size_t size = size_.load(std::memory_order_relaxed);
	if (size + length > kCapacity) {
		/* A failure makes this write go through, and it reports the failure. */
		encryptLocked(true, true);
		if (failure_.sslError)
			return false;
		size = 0;
	}
	if (!bytes_) {
		bytes_.reset(new (std::nothrow) unsigned char[kCapacity]);
		if (!bytes_)
			return false;
	}
	std::memcpy(bytes_.get() + size, data, length);
	*becameHeld = size == 0;
	size_.store(size + length, std::memory_order_relaxed);
	return true;
}

HeldPlaintext::Failure HeldPlaintext::enter(Entering how) noexcept
{
	if (encrypting)
		return {};
	std::lock_guard<std::mutex> lock(mutex_);
	if (how != Entering::Query && inside_ == 0 && size_.load(std::memory_order_relaxed) > 0)
		encryptLocked(true, how == Entering::Report);
	inside_++;
	if (how == Entering::Keep || how == Entering::Query)
		return {};
	Failure failure = failure_;
	failure_ = {};
	if (how == Entering::Drop) {
		errors_.clear();
		return {};
	}
	if (failure.sslError && errors_.count() > 0)
		failure.errors = &errors_;
	reported_ = failure.sslError;
	return failure;
}

void HeldPlaintext::leave() noexcept
{
	if (encrypting)
		return;
	std::lock_guard<std::mutex> lock(mutex_);
	inside_--;
}

bool HeldPlaintext::encryptIfIdle() noexcept
{
	if (encrypting)
		return false;
	std::unique_lock<std::mutex> lock(mutex_, std::try_to_lock);
	if (!lock.owns_lock())
		return false;
	if (inside_ == 0 && !retired_ && size_.load(std::memory_order_relaxed) > 0)
		encryptLocked(false, false);
	return size_.load(std::memory_order_relaxed) == 0;
}

void HeldPlaintext::encryptByOwner() noexcept
{
	if (encrypting)
		return;
	std::lock_guard<std::mutex> lock(mutex_);
	if (inside_ == 0 && size_.load(std::memory_order_relaxed) > 0)
		encryptLocked(true, true);
}

void HeldPlaintext::retire() noexcept
{
	std::lock_guard<std::mutex> lock(mutex_);
	/* Nobody reports a failure now: its entries leave this thread's queue with it. */
	if (inside_ == 0 && size_.load(std::memory_order_relaxed) > 0)
		encryptLocked(true, false);
	retired_ = true;
}

int HeldPlaintext::takeReportedError() noexcept
{
	std::lock_guard<std::mutex> lock(mutex_);
	const int reported = reported_;
	reported_ = 0;
	return reported;
}

void HeldPlaintext::encryptLocked(bool byOwner, bool reportedHere) noexcept
{
	const std::size_t size = size_.load(std::memory_order_relaxed);
	if (size == 0 || retired_)
		return;
	const int savedErrno = errno;
	Encrypting scope;
	errors_.clear();
	const ErrorMark mark = reportedHere ? ErrorMark{} : markErrors(*errorApi_);
	const int sslError = encrypt_(ssl_, bytes_.get(), size, byOwner);
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
	bytes_.reset();
	errno = savedErrno;
}

HeldPlaintext *HeldRegistry::attach(void *ssl, HeldPlaintext::Encrypt encrypt,
				    const ErrorQueueApi *errors) noexcept
{
	if (HeldPlaintext *known = of(ssl))
		return known;
	std::lock_guard<std::mutex> lock(mutex_);
	auto found = entries_.find(ssl);
	if (found != entries_.end())
		return found->second.get();
	try {
		auto made = std::make_unique<HeldPlaintext>(ssl, encrypt, errors);
		HeldPlaintext *held = made.get();
		entries_.emplace(ssl, std::move(made));
		count_.fetch_add(1, std::memory_order_relaxed);
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
thread_local LastLookup lastLookup;

HeldPlaintext *HeldRegistry::of(void *ssl) noexcept
{
	if (count_.load(std::memory_order_relaxed) == 0)
		return nullptr;
	const unsigned long generation = generation_.load(std::memory_order_acquire);
	if (lastLookup.held && lastLookup.ssl == ssl && lastLookup.generation == generation)
		return lastLookup.held;
	std::lock_guard<std::mutex> lock(mutex_);
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
		std::lock_guard<std::mutex> lock(mutex_);
		auto found = entries_.find(ssl);
		if (found == entries_.end())
			return;
		found->second->retire();
		gone = std::move(found->second);
		entries_.erase(found);
		count_.fetch_sub(1, std::memory_order_relaxed);
		generation_.fetch_add(1, std::memory_order_release);
	}
}

void HeldRegistry::encryptAll() noexcept
{
	if (encrypting || held_.load(std::memory_order_relaxed) == 0)
		return;
	std::unique_lock<std::mutex> lock(mutex_, std::try_to_lock);
	if (!lock.owns_lock())
		return;
	/* Reset first: a buffer filled after this pass saw it counts again. */
	held_.store(0, std::memory_order_relaxed);
	int left = 0;
	for (auto &entry : entries_)
		if (!entry.second->encryptIfIdle() && entry.second->held())
			left++;
	if (left)
		held_.fetch_add(left, std::memory_order_relaxed);
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
