#include "wait_merge.h"

#include <cerrno>

namespace tlstune {

struct timeval timeLeft(struct timeval asked, std::chrono::nanoseconds elapsed) noexcept
{
	constexpr long long kMicros = 1000000;
	/* A wait of some 30,000 years or more: nothing of it has gone. */
	if (asked.tv_sec >= static_cast<time_t>(1000000000000LL))
		return asked;
	const long long askedUs = static_cast<long long>(asked.tv_sec) * kMicros + asked.tv_usec;
	/* Nanoseconds rounded up: the kernel's answer is truncated to whole microseconds below. */
	const long long elapsedNs = elapsed.count();
	const long long elapsedUs = elapsedNs <= 0 ? 1 : (elapsedNs + 999) / 1000;
	const long long left = askedUs > elapsedUs ? askedUs - elapsedUs : 0;
	struct timeval result;
	result.tv_sec = static_cast<time_t>(left / kMicros);
	result.tv_usec = static_cast<suseconds_t>(left % kMicros);
	return result;
}

int timeLeftMs(int askedMs, std::chrono::nanoseconds elapsed) noexcept
{
	if (askedMs <= 0 || elapsed.count() <= 0)
		return askedMs;
	constexpr long long kNsPerMs = 1000000;
	const long long left = askedMs * kNsPerMs - elapsed.count();
	return left <= 0 ? 0 : static_cast<int>((left + kNsPerMs - 1) / kNsPerMs);
}

struct timespec timeLeftSpec(struct timespec asked, std::chrono::nanoseconds elapsed) noexcept
{
	constexpr long long kNsPerSecond = 1000000000;
	/* A wait of some 290 years or more: nothing of it has gone (and no overflow). */
	if (elapsed.count() <= 0 || asked.tv_sec >= static_cast<time_t>(9000000000LL))
		return asked;
	const long long left = static_cast<long long>(asked.tv_sec) * kNsPerSecond + asked.tv_nsec - elapsed.count();
	struct timespec result = { 0, 0 };
	if (left > 0) {
		result.tv_sec = static_cast<time_t>(left / kNsPerSecond);
		result.tv_nsec = static_cast<long>(left % kNsPerSecond);
	}
	return result;
}

int mergeEpollEvent(struct epoll_event *events, int ready, int maxevents,
		    const EpollRegistration &registration, bool *delivered) noexcept
{
	const uint32_t readable = registration.events & (EPOLLIN | EPOLLRDNORM);
	*delivered = true;
	for (int i = 0; i < ready; i++) {
		if (events[i].data.u64 == registration.data) {
			events[i].events |= readable;
			return ready;
		}
	}
	if (ready >= maxevents) {
		*delivered = false;
		return ready;
	}
	events[ready].events = readable;
	events[ready].data.u64 = registration.data;
	return ready + 1;
}

} /* namespace tlstune */
