/*
 * The close family: an fd number the program closes may come back as another file, which
 * must not inherit a connection's readiness, nor receive bytes a connection wrote before;
 * those go out first. With no TLS connection, one relaxed load each.
 */

#include <cerrno>
#include <climits>
#include <sys/socket.h>
#include <unistd.h>

#include "interpose/export.h"
#include "runtime/runtime.h"

using namespace tlstune;

namespace {

/* After the real call: fds first..last no longer name what they did (unless it failed). */
void forgetClosed(bool closed, int first, int last)
{
	Process &p = process();
	if (!closed || (p.buffered.empty() && p.epoll.empty()))
		return;
	int savedErrno = errno;
	if (!p.buffered.empty())
		p.buffered.closed(first, last);
	p.epoll.closed(first, last);
	errno = savedErrno;
}

} /* namespace */

TLSTUNE_EXPORT int close(int fd)
{
	process().coalescer.closing(fd, fd, true);
	int result = process().libc.close(fd);
	/* Linux frees the number even when close reports an error (EINTR, EIO), not for EBADF. */
	forgetClosed(result == 0 || errno != EBADF, fd, fd);
	return result;
}

TLSTUNE_EXPORT int dup2(int oldfd, int newfd)
{
	if (oldfd != newfd)
		process().coalescer.closing(newfd, newfd, true);
	int result = process().libc.dup2(oldfd, newfd);
	forgetClosed(result >= 0 && oldfd != newfd, newfd, newfd);
	return result;
}

TLSTUNE_EXPORT int dup3(int oldfd, int newfd, int flags)
{
	process().coalescer.closing(newfd, newfd, true);
	int result = process().libc.dup3(oldfd, newfd, flags);
	forgetClosed(result >= 0, newfd, newfd);
	return result;
}

TLSTUNE_EXPORT int close_range(unsigned first, unsigned last, int flags)
{
	Process &p = process();
	if (!p.libc.close_range) {
		errno = ENOSYS;
		return -1;
	}
	if (!(flags & CLOSE_RANGE_CLOEXEC) && first <= INT_MAX)
		p.coalescer.closing(static_cast<int>(first), last > INT_MAX ? INT_MAX : static_cast<int>(last),
				    true);
	int result = p.libc.close_range(first, last, flags);
	/* CLOSE_RANGE_CLOEXEC only marks them; they stay open. */
	forgetClosed(result == 0 && !(flags & CLOSE_RANGE_CLOEXEC) && first <= INT_MAX,
		     static_cast<int>(first), last > INT_MAX ? INT_MAX : static_cast<int>(last));
	return result;
}

/* Shutting down the sending side after bytes the shim still holds would lose them. */
TLSTUNE_EXPORT int shutdown(int fd, int how)
{
	Process &p = process();
	if (how != SHUT_RD)
		p.coalescer.closing(fd, fd, false);
	return p.libc.shutdown(fd, how);
}
