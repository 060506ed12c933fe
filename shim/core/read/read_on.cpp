#include "read_on.h"

#include <algorithm>
#include <cerrno>
#include <climits>
#include <fcntl.h>
#include <sys/ioctl.h>
#include <sys/time.h>

namespace tlstune {

namespace {

/* The parts of iov a read past its first `from` bytes fills: at most kMostParts, with at most `most` bytes. */
constexpr int kMostParts = 64;
int partsFrom(const struct iovec *iov, int iovcnt, std::size_t from, std::size_t most, struct iovec *parts)
{
	int count = 0;
	for (int i = 0; i < iovcnt && most > 0 && count < kMostParts; i++) {
		const std::size_t length = iov[i].iov_len;
		if (from >= length) {
			from -= length;
			continue;
		}
		const std::size_t part = std::min(length - from, most);
		/* MSG_TRUNC's parts may be null: the kernel copies nothing there. */
		parts[count].iov_base = iov[i].iov_base ? static_cast<char *>(iov[i].iov_base) + from : nullptr;
		parts[count].iov_len = part;
		count++;
		most -= part;
		from = 0;
	}
	return count;
}

std::size_t room(const struct iovec *iov, int iovcnt)
{
	std::size_t total = 0;
	for (int i = 0; i < iovcnt; i++)
		total += iov[i].iov_len;
	return total;
}

/* The bytes the kernel holds for fd, read without taking any of them or an error. */
std::size_t heldByKernel(int fd, const KernelReads &kernel)
{
	int count = 0;
	return kernel.ioctl(fd, FIONREAD, &count) == 0 && count > 0 ? static_cast<std::size_t>(count) : 0;
}

/* poll's timeout for a read of fd that waits: its SO_RCVTIMEO, -1 for none. */
int receiveTimeout(int fd)
{
	struct timeval limit = {};
	socklen_t length = sizeof limit;
	if (getsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &limit, &length) != 0 || (limit.tv_sec == 0 && limit.tv_usec == 0))
		return -1;
	const long long ms = static_cast<long long>(limit.tv_sec) * 1000 + (limit.tv_usec + 999) / 1000;
	return static_cast<int>(std::min<long long>(ms, INT_MAX));
}

/* A read with flags would wait for bytes: MSG_WAITALL on a blocking socket. */
bool waitsForAll(int fd, int flags, const KernelReads &kernel)
{
	if (!(flags & MSG_WAITALL) || (flags & MSG_DONTWAIT))
		return false;
	const int status = kernel.fcntl(fd, F_GETFL);
	return status >= 0 && !(status & O_NONBLOCK);
}

} /* namespace */

std::size_t readOnInKernel(int fd, const struct iovec *iov, int iovcnt, std::size_t done, int flags,
			   const KernelReads &kernel)
{
	const std::size_t total = room(iov, iovcnt);
	if (total <= done)
		return 0;
	const std::size_t wanted = total - done;
	const int savedErrno = errno;
	std::size_t held = heldByKernel(fd, kernel);
	const bool waits = waitsForAll(fd, flags, kernel);
	if (held == 0 && waits) {
		/* Until the first byte, poll: a read's wait would end by taking an error that came. */
		struct pollfd one = { fd, POLLIN, 0 };
		if (kernel.poll(&one, 1, receiveTimeout(fd)) > 0)
			held = heldByKernel(fd, kernel);
	}
	std::size_t added = 0;
	if (held > 0) {
		/*
		 * With bytes there, the kernel's own read copies them first, then waits (MSG_WAITALL)
		 * and ends at a signal, a timeout or an error with what it has, the error kept.
		 */
		struct iovec parts[kMostParts];
		struct msghdr msg = {};
		msg.msg_iov = parts;
		msg.msg_iovlen = static_cast<std::size_t>(partsFrom(iov, iovcnt, done, waits ? wanted : held, parts));
		const ssize_t n = kernel.recvmsg(fd, &msg, waits ? flags : flags | MSG_DONTWAIT);
		added = n > 0 ? static_cast<std::size_t>(n) : 0;
	}
	errno = savedErrno;
	return added;
}

} /* namespace tlstune */
