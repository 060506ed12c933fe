#pragma once

#include <cstddef>
#include <poll.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <sys/uio.h>

namespace tlstune {

/* The kernel's calls a read that goes on makes (the real ones: the shim's would answer from the queue). */
struct KernelReads {
	int (*ioctl)(int fd, unsigned long request, void *argument);
	int (*poll)(struct pollfd *fds, nfds_t nfds, int timeout);
	ssize_t (*recvmsg)(int fd, struct msghdr *msg, int flags);
	int (*fcntl)(int fd, int command, ...);
};

/*
 * A read of the program's own (not OpenSSL's, whose short reads the next fill answers)
 * that the socket's queue answered in part (done bytes of iov): the bytes the kernel
 * would have added in that one read, read into iov past done. Returns how many (0 or
 * more: the read already has bytes, so nothing here is an error of it).
 *
 * The kernel's read copies what its queue holds up to the size asked, and with
 * MSG_WAITALL waits for the rest, until a signal, a timeout (SO_RCVTIMEO), the end of
 * the stream or an error; a peek sees the same bytes. An error it meets after copying
 * bytes (the peer's reset) stays for the next read. So the kernel is asked only for the
 * bytes FIONREAD says it holds, and waits are poll's, which take no error: a read of an
 * empty socket with an error pending would take the error with it (a hunt: a liveness
 * peek made a reset into an end of stream). A pipe, or any fd recvmsg refuses, adds
 * nothing: its read stays short, as any stream's may be.
 */
std::size_t readOnInKernel(int fd, const struct iovec *iov, int iovcnt, std::size_t done, int flags,
			   const KernelReads &kernel);

} /* namespace tlstune */
