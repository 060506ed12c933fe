/*
 * The close family: an fd number the program closes may come back as another file, which
 * must not inherit a connection's readiness, nor receive bytes a connection wrote before;
 * those go out first. With no TLS connection, one relaxed load each.
 */

#include <cerrno>
#include <climits>
#include <cstdio>
#include <sys/socket.h>
#include <unistd.h>

#include "core/known_fds.h"
#include "interpose/export.h"
#include "runtime/duplicates.h"
#include "runtime/runtime.h"

using namespace tlstune;

namespace {

/*
 * The shim keeps state for fds (connections holding data or bytes, epoll sets) and this
 * process may change it: not a vfork child, which shares the parent's memory and locks
 * but not its fds (issue 11: a child's close of fds 3-63 broke the parent's writes).
 * The child shares even the parent thread's thread-local storage, so its pid is the only
 * sign: a getpid(2) per close, once the process has made such a child (inVforkChild).
 */
bool tracking(Process &p)
{
	if (p.coalescer.idle() && p.buffered.empty() && p.epoll.empty() && !p.cache.used())
		return false;
	return !p.inVforkChild();
}

/*
 * Before the real call: what was written goes out, and what the kernel does with unread
 * data at a close (BufferedFds::closing). made: the abortive closes set, for a call that
 * may fail.
 */
void handOver(Process &p, int first, int last, AbortiveCloses *made)
{
	p.held.socketsLeaving(first, last);
	p.coalescer.closing(first, last);
	if (!p.buffered.empty())
		p.buffered.closing(first, last, made);
}

/* The numbers' state but their epoll registrations' goes. */
void forgetAllButRegistrations(Process &p, int first, int last)
{
	p.held.closed(first, last);
	if (!p.buffered.empty())
		p.buffered.closed(first, last);
	p.cache.closed(first, last);
}

/* handOver, and the registrations at the numbers learn their files (a dup keeps them). */
void beforeClose(Process &p, int first, int last, AbortiveCloses *made = nullptr)
{
	handOver(p, first, last, made);
	p.epoll.closing(first, last);
}

/* fds first..last no longer name what they did: their state goes. */
void forgetClosed(Process &p, int first, int last)
{
	int savedErrno = errno;
	forgetAllButRegistrations(p, first, last);
	p.epoll.closed(first, last);
	errno = savedErrno;
}

/*
 * Before a call that frees the numbers first..last (close, close_range, closefrom,
 * fclose, freopen): the hand-over, then their state goes while they are still this
 * process's. Once they are free another thread may take one (socket, accept) and begin a
 * connection there, whose state a forgetting after the call dropped (a hunt: four threads
 * dialling and closing; a handshake's bytes read ahead for a new socket went with the old
 * one's close, and the handshake hung, 9 runs in 10). A close that fails frees nothing
 * only for a number that was not open (EBADF), whose state was stale.
 */
void beforeFreeing(Process &p, int first, int last, AbortiveCloses *made = nullptr)
{
	handOver(p, first, last, made);
	int savedErrno = errno;
	forgetAllButRegistrations(p, first, last);
	/* closing and closed in one hold of the sets' lock (issue 24: a close of a registered fd). */
	p.epoll.freeing(first, last);
	errno = savedErrno;
}

/*
 * After a dup2 or dup3 that beforeClose(first, last) began: it replaces the file at the
 * number in one step, so nobody takes the number between, and it may fail having closed
 * nothing (a bad oldfd): the state goes after, if it closed.
 */
void afterReplacing(Process &p, bool closed, int first, int last)
{
	p.held.socketsLeft(first, last);
	if (closed)
		forgetClosed(p, first, last);
}

/*
 * A number the shim has state for is forgotten before the real call frees it (nobody can
 * note it again until then), and noted again if it was not open after all.
 */
bool closingKnown(Process &p, int fd)
{
	if (!knownFds().mayHave(fd) || !tracking(p))
		return false;
	knownFds().forget(fd);
	return true;
}

void closeFailed(bool badNumber, int fd)
{
	if (badNumber)
		knownFds().note(fd);
}

} /* namespace */

/* A close of a number the shim may have state for; out of line, so close stays a few loads. */
static __attribute__((noinline)) int closeKnown(int fd)
{
	Process &p = process();
	if (!closingKnown(p, fd))
		return p.libc.close(fd);
	beforeFreeing(p, fd, fd);
	int result = p.libc.close(fd);
	/* Linux frees the number even when close reports an error (EINTR, EIO), not for EBADF. */
	closeFailed(result != 0 && errno == EBADF, fd);
	p.held.socketsLeft(fd, fd);
	return result;
}

TLSTUNE_EXPORT int close(int fd)
{
	if (!knownFds().mayHave(fd))
		return libc().close(fd);
	return closeKnown(fd);
}

TLSTUNE_EXPORT int dup2(int oldfd, int newfd)
{
	if (!builtProcess()) {
		const int result = libc().dup2(oldfd, newfd);
		if (oldfd != newfd)
			noteDuplicate(nullptr, oldfd, result);
		return result;
	}
	Process &p = process();
	if (oldfd == newfd || !closingKnown(p, newfd)) {
		const int result = p.libc.dup2(oldfd, newfd);
		if (oldfd != newfd)
			noteDuplicate(&p, oldfd, result);
		return result;
	}
	AbortiveCloses made;
	beforeClose(p, newfd, newfd, &made);
	int result = p.libc.dup2(oldfd, newfd);
	if (result < 0)
		p.buffered.closeFailed(made);
	closeFailed(result < 0, newfd);
	afterReplacing(p, result >= 0, newfd, newfd);
	if (oldfd != newfd)
		noteDuplicate(&p, oldfd, result);
	return result;
}

TLSTUNE_EXPORT int dup3(int oldfd, int newfd, int flags)
{
	if (!builtProcess()) {
		const int result = libc().dup3(oldfd, newfd, flags);
		noteDuplicate(nullptr, oldfd, result);
		return result;
	}
	Process &p = process();
	if (!closingKnown(p, newfd)) {
		const int result = p.libc.dup3(oldfd, newfd, flags);
		noteDuplicate(&p, oldfd, result);
		return result;
	}
	AbortiveCloses made;
	beforeClose(p, newfd, newfd, &made);
	int result = p.libc.dup3(oldfd, newfd, flags);
	if (result < 0)
		p.buffered.closeFailed(made);
	closeFailed(result < 0, newfd);
	afterReplacing(p, result >= 0, newfd, newfd);
	noteDuplicate(&p, oldfd, result);
	return result;
}

TLSTUNE_EXPORT int close_range(unsigned first, unsigned last, int flags)
{
	if (!libc().close_range) {
		errno = ENOSYS;
		return -1;
	}
	Process *built = builtProcess();
	if (!built || !tracking(*built))
		return libc().close_range(first, last, flags);
	Process &p = *built;
	const int from = static_cast<int>(first), to = last > INT_MAX ? INT_MAX : static_cast<int>(last);
	/*
	 * CLOSE_RANGE_CLOEXEC only marks them; they stay open. A range or a flag the kernel
	 * refuses (EINVAL) closes nothing, and it says so before closing anything.
	 */
	const bool refused = first > last || (flags & ~(CLOSE_RANGE_UNSHARE | CLOSE_RANGE_CLOEXEC));
	const bool closes = !refused && !(flags & CLOSE_RANGE_CLOEXEC) && first <= INT_MAX;
	AbortiveCloses made;
	if (closes)
		beforeFreeing(p, from, to, &made);
	int result = p.libc.close_range(first, last, flags);
	if (result != 0)
		p.buffered.closeFailed(made);
	if (closes)
		p.held.socketsLeft(from, to);
	return result;
}

/*
 * glibc's closefrom calls the close_range system call itself, not through its PLT: seen
 * only here (records the shim still held went out into a socketpair that took fd 3).
 */
TLSTUNE_EXPORT void closefrom(int lowfd)
{
	if (!libc().closefrom)
		return;
	if (!builtProcess()) {
		libc().closefrom(lowfd);
		return;
	}
	Process &p = process();
	const bool closes = lowfd >= 0 && tracking(p);
	if (closes)
		beforeFreeing(p, lowfd, INT_MAX);
	p.libc.closefrom(lowfd);
	if (closes)
		p.held.socketsLeft(lowfd, INT_MAX);
}

/*
 * glibc's fclose closes the stream's fd itself, not through close's PLT: a socket the
 * program wrapped in a FILE (fdopen) lost the bytes the shim held for it (30 of 75).
 */
TLSTUNE_EXPORT int fclose(FILE *stream)
{
	if (!builtProcess())
		return libc().fclose(stream);
	Process &p = process();
	const int fd = stream ? fileno_unlocked(stream) : -1;
	if (fd < 0 || !closingKnown(p, fd))
		return p.libc.fclose(stream);
	/* The stream's fd is closed whatever fclose reports (a failed flush, EINTR). */
	beforeFreeing(p, fd, fd);
	const int result = p.libc.fclose(stream);
	p.held.socketsLeft(fd, fd);
	return result;
}

/* freopen and freopen64 (interpose/reopen.cpp): fclose's hand-over around the real call. */
FILE *reopenStream(bool large, const char *path, const char *mode, FILE *stream)
{
	if (!builtProcess())
		return (large ? libc().freopen64 : libc().freopen)(path, mode, stream);
	Process &p = process();
	FILE *(*const real)(const char *, const char *, FILE *) = large ? p.libc.freopen64 : p.libc.freopen;
	const int fd = stream ? fileno_unlocked(stream) : -1;
	if (fd < 0 || !closingKnown(p, fd))
		return real(path, mode, stream);
	/* The old fd is closed whether or not the new file opened (glibc closes it first). */
	beforeFreeing(p, fd, fd);
	FILE *result = real(path, mode, stream);
	p.held.socketsLeft(fd, fd);
	return result;
}

/*
 * Shutting down the sending side before bytes the shim still holds would lose them. A
 * vfork child's shutdown too, unlike its close: the socket is the parent's, and what
 * another thread of the parent holds for it goes first (a hunt: the child's shutdown
 * went before up to 16,383 bytes a writer thread was told were written, 27 runs of 30).
 */
TLSTUNE_EXPORT int shutdown(int fd, int how)
{
	if (!builtProcess())
		return libc().shutdown(fd, how);
	Process &p = process();
	if (!knownFds().mayHave(fd) || p.coalescer.idle())
		return p.libc.shutdown(fd, how);
	if (how != SHUT_WR && how != SHUT_RDWR) {
		/*
		 * A thread blocked reading wakes with an end of stream, and the alert OpenSSL
		 * sends for it goes out from there: what is held goes first, as it went before
		 * the shutdown without tlstune (a hunt: the alert overtook 27 of 45 bytes).
		 */
		if (how == SHUT_RD)
			p.pushHeld(fd);
		return p.libc.shutdown(fd, how);
	}
	p.held.socketsLeaving(fd, fd);
	p.coalescer.shuttingDown(fd);
	const int result = p.libc.shutdown(fd, how);
	const int savedErrno = errno;
	p.held.socketsLeft(fd, fd);
	if (result != 0)
		p.coalescer.shutdownFailed(fd);
	errno = savedErrno;
	return result;
}
