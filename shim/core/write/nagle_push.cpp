#include "nagle_push.h"

#include <cerrno>
#include <linux/sockios.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "core/raw_syscalls.h"

namespace tlstune {

namespace {

bool tcpOption(int fd, int name, int *value) noexcept
{
	socklen_t length = sizeof(*value);
	return getsockopt(fd, IPPROTO_TCP, name, value, &length) == 0;
}

} /* namespace */

void pushPastNagle(int fd) noexcept
{
	const int savedErrno = errno;
	int noDelay = 1, corked = 1, unsent = 0;
	/* A Unix socket or a pipe answers no TCP option: nothing to push. */
	if (tcpOption(fd, TCP_NODELAY, &noDelay) && !noDelay && ioctl(fd, SIOCOUTQNSD, &unsent) == 0 &&
	    unsent > 0 && tcpOption(fd, TCP_CORK, &corked) && !corked) {
		/* Straight to the kernel: the shim's own push is not the program's (socket_options.cpp). */
		RawSyscalls raw;
		const int on = 1, off = 0;
		if (syscall(SYS_setsockopt, fd, IPPROTO_TCP, TCP_NODELAY, &on, sizeof(on)) == 0)
			syscall(SYS_setsockopt, fd, IPPROTO_TCP, TCP_NODELAY, &off, sizeof(off));
	}
	errno = savedErrno;
}

} /* namespace tlstune */
