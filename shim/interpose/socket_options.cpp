/*
 * setsockopt: the options that change what the shim may do with a socket. Any other costs
 * a load and a branch, and nothing before the process's state is built.
 */

#include <cerrno>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>

#include "core/known_fds.h"
#include "interpose/export.h"
#include "runtime/duplicates.h"

using namespace tlstune;

namespace {

/*
 * The program changes how the socket gathers its bytes (TCP_CORK on or off, TCP_NODELAY):
 * what the shim holds for it goes in first, where the program's own writes went (a hunt,
 * lighttpd's way: cork, small writes, uncork, wait for the answer took 41 ms a request
 * against 0.04 without tlstune, the held bytes missing the uncork and meeting Nagle after
 * it; 269 ms when it corked again before the wait).
 */
bool gathering(int level, int name) noexcept
{
	return level == IPPROTO_TCP && (name == TCP_CORK || name == TCP_NODELAY);
}

/*
 * SO_RCVLOWAT above 1: the kernel counts the socket's readiness in bytes, which the shim
 * cannot follow. A connection decided later asks the socket itself (getsockopt at its
 * decision): before the process's first connection nothing needs noting. SO_PEEK_OFF of
 * 0 or more: each peek starts where the last ended, in the kernel's queue, which the
 * shim's queue would not follow (a hunt: three peeks of 2 bytes saw "HE" three times).
 */
bool unfollowable(int level, int name, const void *value, socklen_t length) noexcept
{
	if (level != SOL_SOCKET || !value || length < sizeof(int))
		return false;
	const int set = *static_cast<const int *>(value);
	return (name == SO_RCVLOWAT && set > 1) || (name == SO_PEEK_OFF && set >= 0);
}

} /* namespace */

TLSTUNE_EXPORT int setsockopt(int fd, int level, int name, const void *value, socklen_t length)
{
	Process *p = builtProcess();
	if (p && gathering(level, name) && (knownFds().mayHave(fd) || copiedFds().mayHave(fd)))
		p->pushHeld(fd);
	const int done = libc().setsockopt(fd, level, name, value, length);
	if (done == 0 && p && unfollowable(level, name, value, length) && ConnectionSlot::anyMade())
		noteUnfollowedSocket(*p, fd);
	return done;
}
