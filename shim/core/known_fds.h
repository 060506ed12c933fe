#pragma once

#include <atomic>
#include <cstdint>

namespace tlstune {

/*
 * The fd numbers the shim may keep state for: a coalescing connection's socket, a socket
 * with data held in OpenSSL or a duplicate of one, an epoll set or a registration in one.
 * The close family asks here first, with one relaxed load, and leaves every other number
 * to the kernel at once (issue 24: a close in a process with an epoll set and no TLS made
 * a getpid and took two mutexes).
 *
 * A number is noted before its state is made, by whoever makes it, and forgotten only by
 * the close that removes that state, before the number is freed: a number that may have
 * state is never missed. Numbers from kNumbers up are always "maybe".
 */
class KnownFds {
public:
	static constexpr int kNumbers = 1 << 16;

	bool mayKnow(int fd) const noexcept
	{
		if (static_cast<unsigned>(fd) >= static_cast<unsigned>(kNumbers))
			return true;
		return words_[fd >> 6].load(std::memory_order_relaxed) & bit(fd);
	}
	void note(int fd) noexcept
	{
		if (static_cast<unsigned>(fd) < static_cast<unsigned>(kNumbers))
			words_[fd >> 6].fetch_or(bit(fd), std::memory_order_relaxed);
	}
	/* Only from a close that removes the number's state itself, before the number is free. */
	void forget(int fd) noexcept
	{
		if (static_cast<unsigned>(fd) < static_cast<unsigned>(kNumbers))
			words_[fd >> 6].fetch_and(~bit(fd), std::memory_order_relaxed);
	}

private:
	static uint64_t bit(int fd) noexcept { return uint64_t{1} << (fd & 63); }

	/* 8 KiB of zeroes until a number is noted: a process without TLS touches none of it. */
	std::atomic<uint64_t> words_[kNumbers / 64] = {};
};

/* The process's one: zeroes in .bss, so no constructor runs and a lookup is one load. */
extern KnownFds g_knownFds;
inline KnownFds &knownFds() noexcept
{
	return g_knownFds;
}

} /* namespace tlstune */
