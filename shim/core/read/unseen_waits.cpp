#include "unseen_waits.h"

#include <algorithm>

#include "core/log.h"

namespace tlstune {

FdBitmap g_oneShotFds;

void UnseenWaits::noteRing() noexcept
{
	stopEverywhere("an io_uring instance exists: no connection reads ahead from now on");
}

void UnseenWaits::noteSslBio() noexcept
{
	stopEverywhere("an SSL BIO exists: no connection reads ahead from now on");
}

void UnseenWaits::stopEverywhere(const char *why) noexcept
{
	if (everything_.exchange(true, std::memory_order_acq_rel))
		return;
	generation_.fetch_add(1, std::memory_order_acq_rel);
	logLine(LogLevel::Info, "%s", why);
}

void UnseenWaits::noteUnfollowed(ino_t ino) noexcept
{
	if (ino == 0 || !follows(ino))
		return;
	const size_t slot = count_.fetch_add(1, std::memory_order_acq_rel);
	if (slot < kKept)
		inodes_[slot].store(ino, std::memory_order_release);
	else
		everything_.store(true, std::memory_order_release);
	/* After the slot: a connection that sees this number sees the inode too. */
	generation_.fetch_add(1, std::memory_order_acq_rel);
}

void UnseenWaits::noteNumber(FdBitmap &numbers, int fd) noexcept
{
	if (numbers.mayHave(fd))
		return;
	numbers.note(fd);
	/* After the bit: a connection that sees this number sees the bit too. */
	generation_.fetch_add(1, std::memory_order_acq_rel);
}

void UnseenWaits::noteOneShot(int fd) noexcept
{
	noteNumber(oneShotFds(), fd);
}

bool UnseenWaits::follows(ino_t ino) const noexcept
{
	if (generation() == 0)
		return true;
	if (everything_.load(std::memory_order_acquire))
		return false;
	if (ino == 0)
		return true;
	const size_t count = std::min(count_.load(std::memory_order_acquire), kKept);
	for (size_t i = 0; i < count; i++) {
		if (inodes_[i].load(std::memory_order_acquire) == ino)
			return false;
	}
	return true;
}

} /* namespace tlstune */
