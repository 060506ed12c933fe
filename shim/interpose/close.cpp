/*
 * The close family: an fd number the program closes may come back as another file, which
 * must not inherit a connection's readiness. With nothing buffered, one relaxed load.
 */

#include <cerrno>
#include <climits>
#include <unistd.h>

#include "interpose/export.h"
#include "runtime/runtime.h"

using namespace tlstune;

namespace {

/* After the real call: fds first..last no longer name what they did (unless it failed). */
void forgetClosed(bool closed, int first, int last)
{
	BufferedFds &buffered = process().buffered;
	if (!closed || buffered.empty())
		return;
	int savedErrno = errno;
	buffered.closed(first, last);
	errno = savedErrno;
}

} /* namespace */

TLSTUNE_EXPORT int close(int fd)
{
	int result = process().libc.close(fd);
	/* Linux frees the number even when close reports an error (EINTR, EIO), not for EBADF. */
	forgetClosed(result == 0 || errno != EBADF, fd, fd);
	return result;
}

TLSTUNE_EXPORT int dup2(int oldfd, int newfd)
{
	int result = process().libc.dup2(oldfd, newfd);
	forgetClosed(result >= 0 && oldfd != newfd, newfd, newfd);
	return result;
}

TLSTUNE_EXPORT int dup3(int oldfd, int newfd, int flags)
{
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
	int result = p.libc.close_range(first, last, flags);
	/* CLOSE_RANGE_CLOEXEC only marks them; they stay open. */
	forgetClosed(result == 0 && !(flags & CLOSE_RANGE_CLOEXEC) && first <= INT_MAX,
		     static_cast<int>(first), last > INT_MAX ? INT_MAX : static_cast<int>(last));
	return result;
}
