/*
 * The program's own bytes on a socket: write, writev, send, sendto, sendfile and splice
 * here, sendmsg and sendmmsg in interpose/unseen.cpp, the raw system calls in syscall.cpp.
 * What the shim holds for that socket goes to the kernel first, so that they follow every
 * record SSL_write was told was written, as without tlstune (a hunt: ten short lines, then
 * six bytes by any of these, then close: the peer got 2 lines, then the six bytes, 5 runs
 * of 5 each). One load or two for a number the shim does not know: every write of a
 * process without TLS. glibc's own writes (stdio on an fdopen'ed socket) pass no PLT and
 * are not seen (limits.md).
 */

#include <sys/socket.h>
#include <sys/uio.h>
#include <fcntl.h>
#include <unistd.h>

#include "interpose/export.h"
#include "interpose/raw_writes.h"
#include "runtime/runtime.h"

using namespace tlstune;

namespace tlstune {

void programWritesKnown(int fd, const void *caller) noexcept
{
	Process *p = builtProcess();
	if (!p || (!p->held.anyHeld() && !p->coalescer.anyPending()))
		return;
	/*
	 * Not the shim's own sends (they run under its locks, or while it encrypts), nor
	 * OpenSSL's (libcrypto's socket BIO, under a connection's SSL_write): those are the
	 * records themselves. (Asked only where something is held: a process that holds
	 * nothing may use no OpenSSL, whose look-up would count it as one that does.)
	 */
	if (ShimLock::heldHere() || HeldPlaintext::encryptingHere() || crypto().inLibcrypto(caller))
		return;
	p->pushHeld(fd);
}

} /* namespace tlstune */

TLSTUNE_EXPORT ssize_t write(int fd, const void *data, size_t length)
{
	programWrites(fd, __builtin_return_address(0));
	return libc().write(fd, data, length);
}

TLSTUNE_EXPORT ssize_t writev(int fd, const struct iovec *parts, int count)
{
	programWrites(fd, __builtin_return_address(0));
	return libc().writev(fd, parts, count);
}

TLSTUNE_EXPORT ssize_t send(int fd, const void *data, size_t length, int flags)
{
	programWrites(fd, __builtin_return_address(0));
	return libc().send(fd, data, length, flags);
}

TLSTUNE_EXPORT ssize_t sendto(int fd, const void *data, size_t length, int flags, const struct sockaddr *to,
			      socklen_t toLength)
{
	programWrites(fd, __builtin_return_address(0));
	return libc().sendto(fd, data, length, flags, to, toLength);
}

TLSTUNE_EXPORT ssize_t sendfile(int out, int in, off_t *offset, size_t count)
{
	programWrites(out, __builtin_return_address(0));
	return libc().sendfile(out, in, offset, count);
}

/*
 * The same function in glibc on a 64-bit system (_FILE_OFFSET_BITS=64 names it so; the
 * header is not included here, where it would name the one above so too).
 */
TLSTUNE_EXPORT ssize_t sendfile64(int out, int in, off_t *offset, size_t count) __attribute__((alias("sendfile")));

TLSTUNE_EXPORT ssize_t splice(int in, loff_t *inOffset, int out, loff_t *outOffset, size_t length, unsigned flags)
{
	programWrites(out, __builtin_return_address(0));
	return libc().splice(in, inOffset, out, outOffset, length, flags);
}
