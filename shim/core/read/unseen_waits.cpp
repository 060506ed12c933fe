#include "unseen_waits.h"

#include <algorithm>

#include "core/log.h"

namespace tlstune {

void UnseenWaits::noteRing() noexcept
{
	{
		std::lock_guard<std::mutex> lock(mutex_);
		if (everything_)
			return;
		everything_ = true;
	}
	generation_.fetch_add(1, std::memory_order_acq_rel);
	logLine(LogLevel::Info, "an io_uring instance exists: no connection reads ahead from now on");
}

void UnseenWaits::noteUnfollowed(ino_t ino) noexcept
{
	{
		std::lock_guard<std::mutex> lock(mutex_);
		if (everything_ || std::find(inodes_, inodes_ + count_, ino) != inodes_ + count_)
			return;
		if (count_ == kKept)
			everything_ = true;
		else
			inodes_[count_++] = ino;
	}
	generation_.fetch_add(1, std::memory_order_acq_rel);
}

bool UnseenWaits::follows(ino_t ino) const noexcept
{
	if (generation() == 0)
		return true;
	std::lock_guard<std::mutex> lock(mutex_);
	return !everything_ && std::find(inodes_, inodes_ + count_, ino) == inodes_ + count_;
}

} /* namespace tlstune */
