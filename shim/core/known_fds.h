#pragma once

#include <atomic>
#include <cstdint>

namespace tlstune {

/*
 * How many fds apart a way out may range (close_range, closefrom, exit) before the shim
 * walks every connection it keeps instead of looking each number up.
 */
constexpr long long kLookedUpRange = 64;

/*
 * A bit per fd number, read with one relaxed load: a set bit only ever means "look closer",
 * never "is". A negative number is never had (the kernel answers EBADF); numbers from
 * kNumbers up share one bit, set once such a number is noted and kept: a close(-1), or a
 * close of a number past the bitmap in a process that never noted one there, touches
 * nothing of the shim's (a signal handler's close(-1) while its thread held the shim's
 * lock in an SSL_read hung the process).
 */
class FdBitmap {
public:
	static constexpr int kNumbers = 1 << 16;

	bool mayHave(int fd) const noexcept
	{
		if (static_cast<unsigned>(fd) >= static_cast<unsigned>(kNumbers))
			return fd >= 0 && beyond_.load(std::memory_order_relaxed);
		return words_[fd >> 6].load(std::memory_order_relaxed) & bit(fd);
	}
	/* A load first: noting a number again (a loop's dup takes the same one) writes nothing. */
	void note(int fd) noexcept
	{
		if (static_cast<unsigned>(fd) >= static_cast<unsigned>(kNumbers)) {
			if (fd >= 0 && !beyond_.load(std::memory_order_relaxed))
				beyond_.store(true, std::memory_order_relaxed);
			return;
		}
		std::atomic<uint64_t> &word = words_[fd >> 6];
		if (!(word.load(std::memory_order_relaxed) & bit(fd)))
			word.fetch_or(bit(fd), std::memory_order_relaxed);
	}
	void forget(int fd) noexcept
	{
		if (static_cast<unsigned>(fd) < static_cast<unsigned>(kNumbers))
			words_[fd >> 6].fetch_and(~bit(fd), std::memory_order_relaxed);
	}
	/* Whether a number of first..last may be set. */
	bool anyIn(int first, int last) const noexcept
	{
		if (first < 0)
			first = 0;
		if (first > last)
			return false;
		if (last >= kNumbers && beyond_.load(std::memory_order_relaxed))
			return true;
		return highestBelow(last < kNumbers ? last + 1 : kNumbers) >= first;
	}
	void forgetIn(int first, int last) noexcept
	{
		if (first == last) {
			forget(first);
			return;
		}
		for (int fd = highestBelow(last < kNumbers ? last + 1 : kNumbers); fd >= first && fd >= 0;
		     fd = highestBelow(fd))
			forget(fd);
	}
	/* The highest number below `below` (at most kNumbers) whose bit is set; -1: none. */
	int highestBelow(int below) const noexcept
	{
		if (below > kNumbers)
			below = kNumbers;
		for (int word = (below - 1) >> 6; below > 0 && word >= 0; word--) {
			uint64_t bits = words_[word].load(std::memory_order_relaxed);
			const int end = below - word * 64; /* bits of this word below `below` */
			if (end < 64)
				bits &= (uint64_t{1} << end) - 1;
			if (bits)
				return word * 64 + 63 - __builtin_clzll(bits);
		}
		return -1;
	}

private:
	static uint64_t bit(int fd) noexcept { return uint64_t{1} << (fd & 63); }

	/* 8 KiB of zeroes until a number is noted: a process that notes none touches none of it. */
	std::atomic<uint64_t> words_[kNumbers / 64] = {};
	std::atomic<bool> beyond_{ false };
};

/*
 * The fd numbers the shim may keep state for: a coalescing connection's socket, a socket
 * with data held in OpenSSL, an epoll set or a registration in one. The close family asks
 * here first, with one relaxed load, and leaves every other number to the kernel at once
 * (issue 24: a close in a process with an epoll set and no TLS made a getpid and took two
 * mutexes).
 *
 * A number is noted before its state is made, by whoever makes it, and forgotten only by
 * the close that removes that state, before the number is freed: a number that may have
 * state is never missed.
 */
using KnownFds = FdBitmap;

/* The process's one: zeroes in .bss, so no constructor runs and a lookup is one load. */
extern KnownFds g_knownFds;
inline KnownFds &knownFds() noexcept
{
	return g_knownFds;
}

/*
 * Both numbers of every dup the process made (BufferedFds::duplicated): noted from load on,
 * before the shim's state is built (a socket duplicated before the first OpenSSL call),
 * with one load (and a store the first time). Also in .bss.
 */
extern FdBitmap g_copiedFds;
inline FdBitmap &copiedFds() noexcept
{
	return g_copiedFds;
}

} /* namespace tlstune */
