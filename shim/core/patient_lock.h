#pragma once

#include <chrono>
#include <mutex>
#include <time.h>

namespace tlstune {

/*
 * Takes lock (made with std::defer_lock) within patience, trying every 100 us: the end of
 * a process image must never wait for ever (a signal handler may have interrupted this
 * very thread inside the lock). Tries rather than std::timed_mutex: libstdc++ times
 * its lock with pthread_mutex_clocklock, which ThreadSanitizer does not see taken.
 */
template <typename Mutex>
bool lockWithin(std::unique_lock<Mutex> &lock, std::chrono::milliseconds patience) noexcept
{
	const auto deadline = std::chrono::steady_clock::now() + patience;
	while (!lock.try_lock()) {
		if (std::chrono::steady_clock::now() >= deadline)
			return false;
		const struct timespec pause = { 0, 100 * 1000 };
		nanosleep(&pause, nullptr);
	}
	return true;
}

} /* namespace tlstune */
