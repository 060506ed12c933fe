#pragma once

#include <cerrno>
#include <chrono>
#include <algorithm>
#include <cstring>
#include <poll.h>
#include <sys/socket.h>
#include <sys/epoll.h>
#include <sys/select.h>

#include <sys/single_threaded.h>

#include "buffered_fds.h"
#include "core/known_fds.h"
#include "epoll_sets.h"
#include "fill_gate.h"
#include "socket_cache.h"

namespace tlstune {

/*
 * The readiness layer. A program that waits for its socket before SSL_read would wait
 * forever for records read-ahead already moved into OpenSSL (the seeds' curl IMAPS stall).
 * Each wait call first asks the buffered set; when a connection it waits for holds data,
 * the real call runs with a zero timeout and those fds are added as readable.
 * Otherwise the real call runs untouched, with the program's own timeout: with nothing
 * buffered anywhere (the normal case) after one relaxed load.
 */

/*
 * Readable besides what the kernel says: a connection whose records OpenSSL holds, or an
 * epoll set that has one of them to report (a poll on the set's own fd). With nothing
 * held, no lookup: they lock, and a signal handler that leaves a wait by siglongjmp would
 * leave the lock held (a test's loop hung at its next wait).
 */
inline bool heldReadable(const BufferedFds &buffered, EpollSets &sets, int fd) noexcept
{
	return !buffered.empty() &&
	       (buffered.holds(fd) || (!sets.empty() && knownFds().mayHave(fd) && sets.reportsHeld(fd, buffered)));
}

/*
 * A wait's part in the fills (FillGate): in a process with threads, once a fill was made,
 * the wait counts itself in on the numbers fills were made on, and a queue that holds
 * bytes is readable from the moment its fill ends, before its SSL_read returns and the
 * connection is held (BufferedFds). Null members: no gate (a unit test's). Lock-free: a
 * signal handler that leaves the wait by siglongjmp leaves only its counts, which keep
 * those sockets' fills plain.
 */
struct WaitGate {
	FillGate *fills = nullptr;
	const SocketCache *cache = nullptr;

	bool applies() const noexcept { return fills && !__libc_single_threaded && fills->used(); }
	/* Counts the wait in on fd (where fills were made); then whether fd's queue holds bytes. */
	bool countedAndQueued(CountedWait &counted, int fd) const noexcept
	{
		return counted.count(fd) && cache->queued(fd) > 0;
	}
};

/*
 * realPoll(zeroTimeout) runs the real poll/ppoll over the same fds. The zero-timeout probe
 * leaves ppoll's signal mask out: a held connection is ready, and the kernel answers ready
 * fds before a signal the mask lets in (which stays pending); with the mask, the probe
 * met the signal and said EINTR.
 *
 * The probe comes first, so that the kernel reads the program's array before the shim
 * does: a pointer it cannot read is the kernel's EFAULT, never a fault in the shim. A wait
 * for none of the held connections that finds nothing ready then waits as the program asked,
 * unless the program's timeout is zero (instant): the probe was that whole wait (a ppoll
 * of zero timeout neither waits nor takes a signal its mask lets in).
 */
template <typename RealPoll>
int pollMerged(const BufferedFds &buffered, EpollSets &sets, const WaitGate &gate, bool instant, struct pollfd *fds,
	       nfds_t nfds, RealPoll realPoll)
{
	const bool gated = gate.applies();
	if (buffered.empty() && !gated)
		return realPoll(false);
	int ready = realPoll(true);
	if (ready < 0)
		return ready;
	constexpr short kReadable = POLLIN | POLLRDNORM;
	bool any = false;
	CountedWait counted(gated ? gate.fills : nullptr, nfds);
	for (nfds_t i = 0; i < nfds; i++) {
		if (!(fds[i].events & kReadable) ||
		    !((gated && gate.countedAndQueued(counted, fds[i].fd)) || heldReadable(buffered, sets, fds[i].fd)))
			continue;
		any = true;
		ready += fds[i].revents == 0;
		fds[i].revents |= fds[i].events & kReadable;
	}
	return any || ready > 0 || instant ? ready : realPoll(false);
}
template <typename RealPoll>
int pollMerged(const BufferedFds &buffered, EpollSets &sets, struct pollfd *fds, nfds_t nfds, RealPoll realPoll)
{
	return pollMerged(buffered, sets, WaitGate{}, false, fds, nfds, realPoll);
}

/* The kernel refuses such a timeout with EINVAL before it looks at anything else. */
inline bool refusedTimeout(const struct timespec *timeout) noexcept
{
	return timeout && (timeout->tv_sec < 0 || timeout->tv_nsec < 0 || timeout->tv_nsec >= 1000000000);
}

/* glibc's select refuses negative fields; it carries whole seconds of tv_usec over. */
inline bool refusedTimeout(const struct timeval *timeout) noexcept
{
	return timeout && (timeout->tv_sec < 0 || timeout->tv_usec < 0);
}

/*
 * What Linux's select writes back into its timeout: the time left, here of `asked` after
 * `elapsed` (at least a nanosecond, as any real wait takes), never below zero.
 */
struct timeval timeLeft(struct timeval asked, std::chrono::nanoseconds elapsed) noexcept;

/*
 * An epoll wait's timeout for a round the shim makes again within one call (its wake
 * taken, another wait's one-shot report): what is left of it after `elapsed`, rounded up,
 * so that the call ends no sooner and no later than the kernel's one wait would (a hunt:
 * a 500 ms wait woken by another thread's reads lasted 3.4 s). Infinite and zero stay.
 */
int timeLeftMs(int askedMs, std::chrono::nanoseconds elapsed) noexcept;
struct timespec timeLeftSpec(struct timespec asked, std::chrono::nanoseconds elapsed) noexcept;

/* When an epoll wait began, read only where a round may be made again. */
class WaitStart {
public:
	explicit WaitStart(bool now) noexcept : set_(now)
	{
		if (now)
			at_ = std::chrono::steady_clock::now();
	}
	/* The time since (zero where not read: the program's whole timeout). */
	std::chrono::nanoseconds elapsed() const noexcept
	{
		return set_ ? std::chrono::steady_clock::now() - at_ : std::chrono::nanoseconds(0);
	}

private:
	bool set_;
	std::chrono::steady_clock::time_point at_;
};

/*
 * fd's bit in a set the program may have allocated past FD_SETSIZE (FD_ISSET checks the
 * size), read and set through its byte: a set the program allocated for
 * nfds bits alone ((nfds + 7) / 8 bytes at the end of a page) is read no further than its
 * last byte, and the kernel's probe, which reads whole words, answers EFAULT there, as
 * without tlstune (a hunt: a SIGSEGV in the shim's read of the word).
 */
inline unsigned char *fdSetByte(const fd_set *set, int fd) noexcept
{
	const std::size_t bit = static_cast<std::size_t>(fd % __NFDBITS);
#if __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
	const std::size_t byte = bit / 8;
#else
	const std::size_t byte = sizeof(__fd_mask) - 1 - bit / 8;
#endif
	return reinterpret_cast<unsigned char *>(const_cast<fd_set *>(set)) +
	       static_cast<std::size_t>(fd / __NFDBITS) * sizeof(__fd_mask) + byte;
}
inline bool inFdSet(const fd_set *set, int fd) noexcept
{
	return (*fdSetByte(set, fd) >> (fd % 8)) & 1;
}
inline void addToFdSet(fd_set *set, int fd) noexcept
{
	*fdSetByte(set, fd) = static_cast<unsigned char>(*fdSetByte(set, fd) | (1u << (fd % 8)));
}

/* realSelect(zeroTimeout) runs the real select/pselect over the same sets (the mask as for ppoll). */
template <typename RealSelect>
int selectMerged(const BufferedFds &buffered, EpollSets &sets, const WaitGate &gate, int nfds, fd_set *readfds,
		 RealSelect realSelect)
{
	const bool gated = gate.applies();
	if ((buffered.empty() && !gated) || nfds <= 0 || !readfds)
		return realSelect(false);
	/*
	 * Only the bits of fds the shim may find held, and below nfds: the kernel reads those
	 * too (they are open), where nfds may name more than the set holds (select with
	 * getdtablesize(), whose kernel caps it at its table) or fewer words than an fd_set
	 * (OpenSSH, perl: howmany(nfds, NFDBITS)). Sets the program allocated above
	 * FD_SETSIZE are served up to kSelectBits (a hunt's connection on fd 1500 stalled).
	 */
	constexpr int kSelectBits = 16384;
	const int asked = std::min(nfds, kSelectBits);
	/* highestSet locks: asked only where something is held (heldReadable). */
	const int highest = std::max(buffered.empty() ? -1 : std::max(buffered.highestHeld(asked), sets.highestSet()),
				     gated ? gate.fills->highestTracked(asked) : -1);
	const int limit = std::min(asked, highest + 1);
	/* Every number fills were made on is counted in, for the wait below too. */
	CountedWait counted(gated ? gate.fills : nullptr, static_cast<std::size_t>(limit));
	/*
	 * What this look finds readable is what the wait reports, as poll's does: looked at
	 * again after the probe, a queue another thread had read meanwhile left the wait
	 * ready with nothing, and it returned 0 at once (a hunt: "timed out" within 1 to 5 ms
	 * of a 1 s timeout, 4 runs of 10).
	 */
	__fd_mask words[kSelectBits / __NFDBITS];
	fd_set *found = reinterpret_cast<fd_set *>(words);
	std::memset(words, 0, (static_cast<std::size_t>(limit) + 7) / 8);
	bool any = false;
	for (int fd = 0; fd < limit; fd++) {
		if (inFdSet(readfds, fd) &&
		    ((gated && gate.countedAndQueued(counted, fd)) || heldReadable(buffered, sets, fd))) {
			addToFdSet(found, fd);
			any = true;
		}
	}
	if (!any)
		return realSelect(false);
	int ready = realSelect(true);
	if (ready < 0)
		return ready;
	for (int fd = 0; fd < limit; fd++) {
		if (inFdSet(found, fd) && !inFdSet(readfds, fd)) {
			addToFdSet(readfds, fd);
			ready++;
		}
	}
	return ready;
}
template <typename RealSelect>
int selectMerged(const BufferedFds &buffered, EpollSets &sets, int nfds, fd_set *readfds, RealSelect realSelect)
{
	return selectMerged(buffered, sets, WaitGate{}, nfds, readfds, realSelect);
}

/*
 * Adds the registration's event to the `ready` events the real epoll_wait returned (at
 * most maxevents in all), joining an event with the same data. Returns the new count;
 * *delivered says whether the event is among them.
 */
int mergeEpollEvent(struct epoll_event *events, int ready, int maxevents,
		    const EpollRegistration &registration, bool *delivered) noexcept;

/*
 * realWait(zeroTimeout) runs the real epoll_wait/epoll_pwait/epoll_pwait2. The kernel's
 * semantics, had read-ahead left the bytes in the socket: a level-triggered registration
 * is readable while its connection holds data; an edge-triggered one gets one event per
 * arrival (EpollSets::claim), so a server that leaves data unread on purpose (nginx under
 * backpressure) is not woken again until more arrives.
 */
/*
 * realWait(zeroTimeout, room, elapsed, into): the real epoll wait for at most room events
 * (room <= maxevents), into that part of the program's events, its mask left out of the
 * probe as for ppoll, for what is left of the program's timeout after elapsed
 * (timeLeftMs). started: when the call began.
 */
template <typename RealWait>
__attribute__((noinline)) int epollMergedFully(const BufferedFds &buffered, EpollSets &sets, EpollCtl realCtl,
					       int epfd, struct epoll_event *events, int maxevents,
					       RealWait realWait, WaitStart started);

/*
 * The ready events a real wait with that ticket returned, as the kernel would have given
 * them: the shim's wake taken out, and one-shot reports another wait made
 * (EpollSets::delivered). *again: none is left where the kernel had some; the wait goes on,
 * as the kernel's would have. A few loads where the shim has neither.
 */
inline int takenIn(EpollSets &sets, EpollCtl realCtl, int epfd, struct epoll_event *events, int ready,
		   unsigned long ticket, bool *again) noexcept
{
	*again = false;
	if (ready <= 0 || (sets.wake().idle() && sets.noOneShots()))
		return ready;
	const unsigned long returned = sets.returned();
	const int kernelReady = ready;
	bool woken = false;
	if (!sets.wake().idle())
		ready = sets.wake().strip(events, ready, &woken);
	ready = sets.delivered(epfd, events, ready, nullptr, 0, ticket, realCtl, returned);
	*again = kernelReady > 0 && ready == 0;
	return ready;
}

/*
 * The wait as the program made it, where nothing is held and the kernel's answer needs
 * nothing of the shim's (no wake of its in the set, no one-shot to disarm): inline, so a
 * process without TLS pays a few loads (issue 24: the whole merge, out of line, made
 * epoll_wait 1.19x). Anything else goes to epollMergedFully, which waits again from the
 * start only where this wait returned nothing, as its own loop would.
 */
template <typename RealWait>
inline int epollMerged(const BufferedFds &buffered, EpollSets &sets, EpollCtl realCtl, int epfd,
		       struct epoll_event *events, int maxevents, RealWait realWait)
{
	/*
	 * The clock is read only where this wait may be made again: the shim woke a set, or has
	 * a one-shot, or another thread may wake one while this waits (a hunt: a wait begun
	 * before the process's first wake waited its whole timeout again at each). Not for a
	 * held connection alone: a process of one thread serving it makes no round again.
	 */
	const WaitStart started(!__libc_single_threaded || !sets.wake().idle() || !sets.noOneShots());
	if (!buffered.empty() && maxevents > 0)
		return epollMergedFully(buffered, sets, realCtl, epfd, events, maxevents, realWait, started);
	const unsigned long ticket = sets.noOneShots() ? 0 : sets.beginWait();
	bool again = false;
	const int ready = takenIn(sets, realCtl, epfd, events,
				  realWait(false, maxevents, std::chrono::nanoseconds(0), events),
				  ticket, &again);
	/* The wake stays until a wait settles it (epollMergedFully). */
	return again ? epollMergedFully(buffered, sets, realCtl, epfd, events, maxevents, realWait, started) : ready;
}

template <typename RealWait>
int epollMergedFully(const BufferedFds &buffered, EpollSets &sets, EpollCtl realCtl, int epfd,
		     struct epoll_event *events, int maxevents, RealWait realWait, WaitStart started)
{
	/* A server's held connections served by one wait at most; the rest take the next turns. */
	constexpr int kMaxExtra = 256;
	EpollWake &wake = sets.wake();
	/*
	 * Bounded by the waits themselves: a round ends early only for the shim's own wake
	 * (EpollWake) when another waiter of the set took what it announced, and the kernel
	 * too puts such a waiter back to sleep. A round made again waits what is left of the
	 * program's timeout.
	 */
	for (bool first = true;; first = false) {
		const std::chrono::nanoseconds elapsed = first ? std::chrono::nanoseconds(0) : started.elapsed();
		bool woken = false;
		/* Before the look at what is held: a wake made after it keeps the set woken. */
		const unsigned long before = wake.generation();
		if (buffered.empty() || maxevents <= 0) {
			const unsigned long ticket = sets.noOneShots() ? 0 : sets.beginWait();
			int ready = realWait(false, maxevents, elapsed, events);
			const unsigned long returned = sets.returned();
			if (ready > 0 && !wake.idle())
				ready = wake.strip(events, ready, &woken);
			/* Nothing held: nothing of the shim's to report, the wake leaves. */
			if (woken)
				wake.settle(epfd, realCtl, before);
			if (woken && ready == 0)
				continue;
			/* Only another wait's one-shot arms: wait again (EpollSets::delivered). */
			const int kernelReady = ready;
			ready = sets.delivered(epfd, events, ready, nullptr, 0, ticket, realCtl, returned);
			if (kernelReady > 0 && ready == 0)
				continue;
			return ready;
		}

		EpollRegistration extra[kMaxExtra];
		const int claimable = maxevents < kMaxExtra ? maxevents : kMaxExtra;
		int found = sets.claim(epfd, buffered, extra, claimable);
		/*
		 * The last wait's maxevents were filled by the kernel's events (an always-readable
		 * eventfd next to the socket, maxevents 1): this one serves the held connections
		 * first, and the kernel's events take the room they leave (none with maxevents 1),
		 * as the kernel's rotating ready list would have served them in turn (a hunt: all
		 * the room went to the held connections, 1 event where the kernel gave 11).
		 */
		const bool shimsTurn = found > 0 && sets.takeOwed(epfd);
		const int room = shimsTurn ? maxevents - found : maxevents;
		const unsigned long ticket = sets.noOneShots() ? 0 : sets.beginWait();
		int ready = room > 0 ? realWait(found > 0, room, elapsed, events) : 0;
		const unsigned long returned = sets.returned();
		if (ready > 0 && !wake.idle()) {
			const int kernelReady = ready;
			ready = wake.strip(events, ready, &woken);
			/*
			 * The wake took a place the set's other ready files had: the kernel, asked again
			 * at once, gives the next of them (it moved the wake to the end of its ready
			 * list). A hunt: with maxevents 1 a held connection's EPOLLOUT, EPOLLRDHUP or
			 * EPOLLHUP came in every other wait, the shim's EPOLLIN alone between. Not with
			 * one-shot registrations, whose reports are matched to the wait that made them.
			 */
			if (woken && kernelReady == room && sets.noOneShots()) {
				bool again = false;
				const int more = realWait(true, room - ready, elapsed, events + ready);
				if (more > 0)
					ready += wake.strip(events + ready, more, &again);
			}
		}
		/* Before the look for what to report: a wake made after it keeps the set woken. */
		const unsigned long seen = woken ? wake.generation() : 0;
		const int kernelReady = ready;
		ready = sets.delivered(epfd, events, ready, extra, found, ticket, realCtl, returned);
		/* Woken by the shim: a registration of a held connection was armed during the wait. */
		if (woken && found == 0)
			found = sets.claim(epfd, buffered, extra, claimable);
		/* Found some: the wake stays, for the set's other waiters (EpollWake). */
		if (woken && found == 0)
			wake.settle(epfd, realCtl, seen);
		if ((woken || kernelReady > 0) && ready == 0 && found == 0)
			continue;
		bool full = false;
		for (int i = 0; i < found; i++) {
			bool delivered = false;
			if (ready >= 0)
				ready = mergeEpollEvent(events, ready, maxevents, extra[i], &delivered);
			full |= ready >= 0 && !delivered;
			if (!delivered)
				sets.unclaim(epfd, extra[i]);
			else if (extra[i].events & EPOLLONESHOT)
				sets.disarm(epfd, extra[i], realCtl);
		}
		if (full && !shimsTurn)
			sets.owe(epfd);
		return ready;
	}
}

} /* namespace tlstune */
