/*
 * dup, fcntl(F_DUPFD) and pidfd_getfd: a duplicate of a TLS connection's socket is readable
 * while the connection holds data, as every fd of a socket is (issue 12). dup2 and dup3
 * are in close.cpp: they close their target too.
 *
 * <fcntl.h> is left out: with 64-bit file offsets it renames fcntl to fcntl64, and both
 * are interposed here. The commands come from the kernel's header instead.
 */

#include <cstdarg>
#include <linux/fcntl.h>

#include "interpose/export.h"
#include "runtime/duplicates.h"

using namespace tlstune;

namespace {

/* The argument is an int or a pointer, passed on as glibc's own wrapper does. */
int fcntlCall(int (*real)(int, int, ...), int fd, int cmd, void *argument)
{
	if (!real) {
		errno = ENOSYS;
		return -1;
	}
	const int result = real(fd, cmd, argument);
	if (cmd == F_DUPFD || cmd == F_DUPFD_CLOEXEC)
		noteDuplicate(builtProcess(), fd, result);
	return result;
}

} /* namespace */

TLSTUNE_EXPORT int dup(int oldfd)
{
	const int result = libc().dup(oldfd);
	noteDuplicate(builtProcess(), oldfd, result);
	return result;
}

/* A copy of another process's descriptor, or of this one's own. */
TLSTUNE_EXPORT int pidfd_getfd(int pidfd, int targetfd, unsigned int flags)
{
	Process &p = process();
	if (!p.libc.pidfd_getfd) {
		errno = ENOSYS;
		return -1;
	}
	const int result = p.libc.pidfd_getfd(pidfd, targetfd, flags);
	noteDuplicate(&p, -1, result);
	return result;
}

TLSTUNE_EXPORT int fcntl(int fd, int cmd, ...)
{
	va_list rest;
	va_start(rest, cmd);
	void *argument = va_arg(rest, void *);
	va_end(rest);
	return fcntlCall(libc().fcntl, fd, cmd, argument);
}

TLSTUNE_EXPORT int fcntl64(int fd, int cmd, ...)
{
	va_list rest;
	va_start(rest, cmd);
	void *argument = va_arg(rest, void *);
	va_end(rest);
	return fcntlCall(libc().fcntl64, fd, cmd, argument);
}
