#include "stalled_writes.h"

#include <algorithm>
#include <poll.h>

#include "log.h"
#include "shim_thread.h"
#include "socket_owners.h"

namespace tlstune {

namespace {

/* The thread ends after this long with nothing to watch; the next stall starts another. */
constexpr std::chrono::seconds kIdleExit{1};
/*
 * How soon a newly stalled socket joins the poll at most. The thread wakes this often
 * only while something is stalled: fifty wake-ups a second, no spin.
 */
constexpr int kPollMs = 20;

} /* namespace */

StalledWrites::~StalledWrites()
{
	std::unique_lock<std::mutex> lock(mutex_);
	stopping_ = true;
	changed_.notify_all();
	changed_.wait(lock, [this] { return !running_; });
}

bool StalledWrites::watch(std::shared_ptr<PendingWrites> writes)
{
	ShimLock lock(mutex_);
	if (std::find(watched_.begin(), watched_.end(), writes) != watched_.end())
		return true;
	try {
		watched_.push_back(std::move(writes));
		count_.store(watched_.size(), std::memory_order_relaxed);
	} catch (const std::bad_alloc &) {
		return false;
	}
	if (!running_) {
		running_ = startShimThread([this] { loop(); });
		if (!running_) {
			watched_.pop_back();
			count_.store(watched_.size(), std::memory_order_relaxed);
			return false;
		}
	}
	/* A thread waiting for work (up to its idle exit) takes this one now. */
	changed_.notify_all();
	return true;
}

void StalledWrites::loop()
{
	std::vector<std::shared_ptr<PendingWrites>> round;
	std::vector<struct pollfd> sockets;
	std::vector<int> duplicates;
	for (;;) {
		{
			std::unique_lock<std::mutex> lock(mutex_);
			if (!stopping_ && watched_.empty())
				changed_.wait_for(lock, kIdleExit,
						  [this] { return stopping_ || !watched_.empty(); });
			if (stopping_ || watched_.empty()) {
				running_ = false;
				changed_.notify_all();
				return;
			}
			round = watched_;
		}
		sockets.clear();
		duplicates.clear();
		for (const auto &writes : round) {
			const bool input = writes->orphan() && writes->watchesInput();
			sockets.push_back({ writes->fd(), static_cast<short>(POLLOUT | (input ? POLLIN : 0)), 0 });
			if (writes->orphan())
				duplicates.push_back(writes->fd());
		}
		calls_.poll(sockets.data(), sockets.size(), kPollMs);
		std::size_t resets = 0;
		for (std::size_t i = 0; i < round.size(); i++) {
			if ((sockets[i].revents & POLLIN) && peerSent(*round[i], duplicates))
				resets++;
			else if (sockets[i].revents)
				round[i]->send();
		}
		if (resets)
			logLine(LogLevel::Debug, "%zu closed connections reset: their peers sent data, as "
				"the kernel resets them", resets);
		prune(round);
		/* The last reference to a finished orphan goes here: it closes its descriptor. */
		round.clear();
	}
}

void StalledWrites::prune(const std::vector<std::shared_ptr<PendingWrites>> &round)
{
	const auto now = std::chrono::steady_clock::now();
	std::size_t dropped = 0;
	{
		ShimLock lock(mutex_);
		for (const auto &writes : round) {
			const bool gaveUp = writes->dirty() && writes->orphan() &&
					    now - writes->lastProgress() > kOrphanPatience;
			if (writes->dirty() && writes->fd() >= 0 && !gaveUp)
				continue;
			if (gaveUp) {
				dropped += writes->pending();
				writes->drop();
			}
			watched_.erase(std::remove(watched_.begin(), watched_.end(), writes), watched_.end());
		}
		count_.store(watched_.size(), std::memory_order_relaxed);
		if (watched_.empty())
			changed_.notify_all();
	}
	/* After the lock: stderr may block. */
	if (dropped)
		logLine(LogLevel::Warn, "dropped %zu bytes written before a close: the peer took nothing "
			"for %lld s", dropped, static_cast<long long>(kOrphanPatience.count()));
}

bool StalledWrites::peerSent(PendingWrites &orphan, const std::vector<int> &duplicates)
{
	const int unread = unreadBytes(orphan.fd());
	/* EOF (the peer sends no more) or an error (the send reports it): nothing to watch. */
	if (unread <= 0) {
		orphan.setWatchesInput(false);
		return false;
	}
	/* The program may read it through a descriptor of its own: it is not closed yet. */
	if (socketNamedElsewhere(orphan.fd(), duplicates, calls_.close)) {
		orphan.setWatchesInput(false);
		return false;
	}
	orphan.drop();
	return true;
}

void StalledWrites::closed()
{
	/* A signal handler's close in a thread that holds the lock (in closing()) waits for nothing. */
	if (empty() || ShimLock::heldHere())
		return;
	ShimLock lock(mutex_);
	for (const auto &writes : watched_) {
		if (writes->orphan())
			writes->setWatchesInput(true);
	}
}

void StalledWrites::closing(int first, int last)
{
	ShimLock lock(mutex_);
	for (const auto &writes : watched_) {
		if (writes->orphan() && writes->fd() >= first && writes->fd() <= last)
			writes->disown();
	}
}

void StalledWrites::waitUntilEmpty(std::chrono::steady_clock::time_point deadline)
{
	std::unique_lock<std::mutex> lock(mutex_);
	changed_.wait_until(lock, deadline, [this] { return watched_.empty(); });
}

void StalledWrites::lockForFork()
{
	mutex_.lock();
	for (const auto &writes : watched_) {
		if (writes->orphan())
			writes->mutex().lock();
	}
}

void StalledWrites::unlockInParent()
{
	for (const auto &writes : watched_) {
		if (writes->orphan())
			writes->mutex().unlock();
	}
	mutex_.unlock();
}

void StalledWrites::unlockInChild()
{
	for (const auto &writes : watched_) {
		if (writes->orphan()) {
			writes->dropAfterFork();
			writes->mutex().unlock();
		}
	}
	watched_.clear();
	count_.store(0, std::memory_order_relaxed);
	running_ = false; /* the thread did not come along */
	mutex_.unlock();
}

} /* namespace tlstune */
