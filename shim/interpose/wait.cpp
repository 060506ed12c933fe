/*
 * The wait family: core/read/wait_merge.h calls the real function, adding the sockets
 * whose bytes the shim read ahead (with nothing queued, after one relaxed load).
 */

#include <climits>
#include <cstdarg>
#include <chrono>
#include <sys/ioctl.h>

#include "core/read/wait_merge.h"
#include "interpose/export.h"
#include "runtime/runtime.h"

using namespace tlstune;

namespace {

const struct timespec kZeroSpec = { 0, 0 };

/*
 * The program is about to wait, maybe for the answer to what it wrote: send that first.
 * Before the process's first connection nothing can be held, written or merged, and the
 * wrappers pass the wait straight on (issue 24: one load and a branch).
 */
void beforeWait(Process &p)
{
	waitsOfThisThread()++;
	if (p.held.anyHeld() && !p.inVforkChild())
		p.held.encryptAll();
	p.coalescer.flushAll();
	p.coalescer.awaitFlusherPass();
}

bool nothingToWaitFor() noexcept
{
	return !ConnectionSlot::anyMade();
}

/* A timeout the kernel refuses (EINVAL) goes to it as it is: the shim's probe would hide it. */
template <typename Timeout>
bool straightToTheKernel(const Timeout *timeout) noexcept
{
	return nothingToWaitFor() || refusedTimeout(timeout);
}

/* A timeout of zero: the wait is one look. */
bool instantly(const struct timespec *timeout) noexcept
{
	return timeout && timeout->tv_sec == 0 && timeout->tv_nsec == 0;
}

WaitGate gateOf(Process &p) noexcept
{
	return WaitGate{ &fillGate(), &p.cache };
}

/* The merged wait, out of line: the wrappers' gate and the real call stay a few instructions. */
template <typename Merged>
__attribute__((noinline)) int mergedWait(Merged merged)
{
	Process &p = process();
	beforeWait(p);
	return merged(p);
}

/*
 * An epoll wait before the process's first connection counts itself in where the process
 * made a TLS context and has threads (EpollWaiters): one load where it made none.
 */
bool countsBeforeAConnection() noexcept
{
	return epollWaiters().counting() && !__libc_single_threaded;
}

/*
 * An epoll wait that went straight to the kernel (it began before the process's first
 * connection) may end after the shim's work on its set began: the shim's wake joined the
 * set, or one-shot arms were claimed. Its events are taken in as a wait of the shim's
 * takes them, with the oldest ticket (it began before every disarm): a hunt's thread pool,
 * whose workers waited from before the first accept, got the wake's event (data
 * "tlstunew": a program that indexes by it crashed) and a connection two workers had at
 * once. One left with no event waits again through the shim, as the kernel would have
 * gone on waiting. One load and a compare for a process the shim has not begun.
 */
template <typename Again>
int afterStraightWait(int epfd, struct epoll_event *events, int ready, Again again)
{
	if (ready <= 0 || !builtProcess())
		return ready;
	Process &p = process();
	bool waitAgain = false;
	ready = takenIn(p.epoll, p.libc.epoll_ctl, epfd, events, ready, 0, &waitAgain);
	return waitAgain ? again() : ready;
}

} /* namespace */

TLSTUNE_EXPORT int poll(struct pollfd *fds, nfds_t nfds, int timeout)
{
	if (nothingToWaitFor())
		return libc().poll(fds, nfds, timeout);
	return mergedWait([=](Process &p) {
		const int ready = pollMerged(p.buffered, p.epoll, gateOf(p), timeout == 0, fds, nfds,
					     [&](bool zero) { return p.libc.poll(fds, nfds, zero ? 0 : timeout); });
		return ready;
	});
}

TLSTUNE_EXPORT int __poll_chk(struct pollfd *fds, nfds_t nfds, int timeout, size_t fdslen)
{
	if (nothingToWaitFor())
		return libc().poll_chk(fds, nfds, timeout, fdslen);
	return mergedWait([=](Process &p) {
		const int ready = pollMerged(p.buffered, p.epoll, gateOf(p), timeout == 0, fds, nfds, [&](bool zero) {
			return p.libc.poll_chk(fds, nfds, zero ? 0 : timeout, fdslen);
		});
		return ready;
	});
}

TLSTUNE_EXPORT int ppoll(struct pollfd *fds, nfds_t nfds, const struct timespec *timeout,
			 const sigset_t *sigmask)
{
	if (straightToTheKernel(timeout))
		return libc().ppoll(fds, nfds, timeout, sigmask);
	return mergedWait([=](Process &p) {
		const int ready = pollMerged(p.buffered, p.epoll, gateOf(p), instantly(timeout), fds, nfds, [&](bool zero) {
			return p.libc.ppoll(fds, nfds, zero ? &kZeroSpec : timeout, zero ? nullptr : sigmask);
		});
		return ready;
	});
}

TLSTUNE_EXPORT int __ppoll_chk(struct pollfd *fds, nfds_t nfds, const struct timespec *timeout,
			       const sigset_t *sigmask, size_t fdslen)
{
	if (straightToTheKernel(timeout))
		return libc().ppoll_chk(fds, nfds, timeout, sigmask, fdslen);
	return mergedWait([=](Process &p) {
		const int ready = pollMerged(p.buffered, p.epoll, gateOf(p), instantly(timeout), fds, nfds, [&](bool zero) {
			return p.libc.ppoll_chk(fds, nfds, zero ? &kZeroSpec : timeout, zero ? nullptr : sigmask, fdslen);
		});
		return ready;
	});
}

TLSTUNE_EXPORT int select(int nfds, fd_set *readfds, fd_set *writefds, fd_set *exceptfds,
			  struct timeval *timeout)
{
	if (straightToTheKernel(timeout))
		return libc().select(nfds, readfds, writefds, exceptfds, timeout);
	return mergedWait([=](Process &p) {
		return selectMerged(p.buffered, p.epoll, gateOf(p), nfds, readfds, [&](bool zero) {
			if (!zero)
				return p.libc.select(nfds, readfds, writefds, exceptfds, timeout);
			struct timeval zeroTime = { 0, 0 };
			if (!timeout)
				return p.libc.select(nfds, readfds, writefds, exceptfds, &zeroTime);
			/* Linux's select writes back the time left: of the program's timeout, not the probe's. */
			const auto start = std::chrono::steady_clock::now();
			const int ready = p.libc.select(nfds, readfds, writefds, exceptfds, &zeroTime);
			if (ready >= 0)
				*timeout = timeLeft(*timeout, std::chrono::steady_clock::now() - start);
			return ready;
		});
	});
}

TLSTUNE_EXPORT int pselect(int nfds, fd_set *readfds, fd_set *writefds, fd_set *exceptfds,
			   const struct timespec *timeout, const sigset_t *sigmask)
{
	if (straightToTheKernel(timeout))
		return libc().pselect(nfds, readfds, writefds, exceptfds, timeout, sigmask);
	return mergedWait([=](Process &p) {
		return selectMerged(p.buffered, p.epoll, gateOf(p), nfds, readfds, [&](bool zero) {
			return p.libc.pselect(nfds, readfds, writefds, exceptfds,
					      zero ? &kZeroSpec : timeout, zero ? nullptr : sigmask);
		});
	});
}

/*
 * The sets' registrations are kept as the program makes them, from its first connection
 * on: a wait reads no /proc file.
 */
TLSTUNE_EXPORT int epoll_create(int size)
{
	Process &p = process(); /* built here: a set the shim knows from its start is read exactly */
	int epfd = p.libc.epoll_create(size);
	if (epfd >= 0)
		p.epoll.created(epfd, ConnectionSlot::anyMade());
	return epfd;
}

TLSTUNE_EXPORT int epoll_create1(int flags)
{
	Process &p = process();
	int epfd = p.libc.epoll_create1(flags);
	if (epfd >= 0)
		p.epoll.created(epfd, ConnectionSlot::anyMade());
	return epfd;
}

namespace {

/*
 * A registration in a process with a connection: recorded with the real call (done: the
 * real call was made before the first connection came, and succeeded).
 */
__attribute__((noinline)) int registered(Process &p, int epfd, int op, int fd, struct epoll_event *event,
					 bool done)
{
	if (!done) {
		if (p.epoll.control(epfd, op, fd, event, p.libc.epoll_ctl, &p.buffered) != 0)
			return -1;
	} else {
		p.epoll.changed(epfd, op, fd, event);
	}
	if (armsOneShot(op, event))
		p.unseen.noteOneShot(fd);
	/*
	 * The kernel polls the file on MOD and ADD, and wakes the set's waiters: so does the
	 * shim, but in a set another process may share (a hunt: a child's wake reached the
	 * parent's wait as an event of data "tlstunew").
	 */
	if (op != EPOLL_CTL_DEL && event && (event->events & (EPOLLIN | EPOLLRDNORM)) && !p.buffered.empty() &&
	    p.buffered.holds(fd) && p.epoll.ownedHere(epfd))
		p.epoll.wake().wake(epfd, p.libc.epoll_ctl);
	return 0;
}

} /* namespace */

/*
 * Nothing is recorded before the process's first connection (issue 24): a set's list is
 * then read from the kernel once, when it first matters, and the call is two loads and
 * the real one. Asked again after the real call, so a change the gate missed is in the
 * list that reading finds.
 */
TLSTUNE_EXPORT int epoll_ctl(int epfd, int op, int fd, struct epoll_event *event)
{
	if (!ConnectionSlot::anyMade()) {
		const int result = libc().epoll_ctl(epfd, op, fd, event);
		if (result != 0 || !ConnectionSlot::anyMade()) {
			/* No connection to look: one made later on fd looks at its first call. */
			if (result == 0 && armsOneShot(op, event))
				oneShotFds().note(fd);
			return result;
		}
		return registered(process(), epfd, op, fd, event, true);
	}
	return registered(process(), epfd, op, fd, event, false);
}

TLSTUNE_EXPORT int epoll_wait(int epfd, struct epoll_event *events, int maxevents, int timeout)
{
	auto merged = [=] {
		return mergedWait([=](Process &p) {
			const CountedEpollWait counted(epollWaiters(), epfd, !__libc_single_threaded);
			return epollMerged(p.buffered, p.epoll, p.libc.epoll_ctl, epfd, events, maxevents,
					   [&](bool zero, int room, std::chrono::nanoseconds elapsed, struct epoll_event *into) {
						   return p.libc.epoll_wait(epfd, into, room,
									    zero ? 0 : timeLeftMs(timeout, elapsed));
					   });
		});
	};
	if (nothingToWaitFor()) {
		const CountedEpollWait counted(epollWaiters(), epfd, countsBeforeAConnection());
		return afterStraightWait(epfd, events, libc().epoll_wait(epfd, events, maxevents, timeout), merged);
	}
	return merged();
}

TLSTUNE_EXPORT int epoll_pwait(int epfd, struct epoll_event *events, int maxevents, int timeout,
			       const sigset_t *sigmask)
{
	auto merged = [=] {
		return mergedWait([=](Process &p) {
			const CountedEpollWait counted(epollWaiters(), epfd, !__libc_single_threaded);
			return epollMerged(p.buffered, p.epoll, p.libc.epoll_ctl, epfd, events, maxevents,
					   [&](bool zero, int room, std::chrono::nanoseconds elapsed, struct epoll_event *into) {
						   return p.libc.epoll_pwait(epfd, into, room,
									     zero ? 0 : timeLeftMs(timeout, elapsed),
									     zero ? nullptr : sigmask);
					   });
		});
	};
	if (nothingToWaitFor()) {
		const CountedEpollWait counted(epollWaiters(), epfd, countsBeforeAConnection());
		return afterStraightWait(epfd, events, libc().epoll_pwait(epfd, events, maxevents, timeout, sigmask),
					 merged);
	}
	return merged();
}

TLSTUNE_EXPORT int epoll_pwait2(int epfd, struct epoll_event *events, int maxevents,
				const struct timespec *timeout, const sigset_t *sigmask)
{
	if (!libc().epoll_pwait2) {
		errno = ENOSYS;
		return -1;
	}
	auto merged = [=] {
		return mergedWait([=](Process &p) {
			const CountedEpollWait counted(epollWaiters(), epfd, !__libc_single_threaded);
			return epollMerged(p.buffered, p.epoll, p.libc.epoll_ctl, epfd, events, maxevents,
					   [&](bool zero, int room, std::chrono::nanoseconds elapsed, struct epoll_event *into) {
						   struct timespec left = timeout ? timeLeftSpec(*timeout, elapsed) : kZeroSpec;
						   return p.libc.epoll_pwait2(epfd, into, room,
									      zero ? &kZeroSpec : timeout ? &left : nullptr,
									      zero ? nullptr : sigmask);
					   });
		});
	};
	if (straightToTheKernel(timeout)) {
		const CountedEpollWait counted(epollWaiters(), epfd, countsBeforeAConnection());
		return afterStraightWait(epfd, events, libc().epoll_pwait2(epfd, events, maxevents, timeout, sigmask),
					 merged);
	}
	return merged();
}

/* Every ioctl takes at most one argument, an int or a pointer: pass it on as a pointer. */
TLSTUNE_EXPORT int ioctl(int fd, unsigned long request, ...)
{
	va_list args;
	va_start(args, request);
	void *argument = va_arg(args, void *);
	va_end(args);

	Process &p = process();
	int result = p.libc.ioctl(fd, request, argument);
	/* What the shim queued of the socket is in the kernel's count without it (stunnel asks). */
	if (request == FIONREAD && result == 0 && p.cache.mayHave(fd)) {
		int *bytes = static_cast<int *>(argument);
		const std::size_t queued = p.cache.queued(fd);
		*bytes = queued > static_cast<std::size_t>(INT_MAX - *bytes) ? INT_MAX : *bytes + static_cast<int>(queued);
	}
	return result;
}
