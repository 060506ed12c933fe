/*
 * The read family. A read made while this thread is inside an OpenSSL call is that
 * connection's, and names its socket. Every read of an fd whose bytes the shim read ahead
 * takes them first (SocketCache), and OpenSSL's read of a connection the shim reads ahead
 * for fills that queue with one large read. Outside OpenSSL calls, on an fd without a
 * queue, this is a load and a thread-local load.
 */

#include <cerrno>
#include <climits>
#include <sys/single_threaded.h>
#include <sys/uio.h>

#include "core/read/read_on.h"
#include "interpose/export.h"
#include "runtime/duplicates.h"
#include "runtime/socket_read.h"

using namespace tlstune;

namespace {

template <typename Function, typename... Args>
ssize_t forward(Function LibcApi::*function, int fd, Args... args)
{
	ssize_t n = (libc().*function)(fd, args...);
	int savedErrno = errno;
	noteRead(fd, n);
	errno = savedErrno;
	return n;
}

/*
 * A read that takes the socket's bytes: not a peek, nor a read of the error queue or of
 * the urgent byte (a hunt: MSG_ERRQUEUE's EAGAIN quieted a connection holding records).
 */
bool takesBytes(int flags) noexcept
{
	return !(flags & (MSG_PEEK | MSG_ERRQUEUE | MSG_OOB));
}

/*
 * A read of the program's own that takes the socket's bytes (takes) and found the socket
 * empty, its queue too: nothing of it is reported until the connection's next OpenSSL
 * call (an entry left of a queue read by another connection's calls goes).
 */
template <typename Function, typename... Args>
ssize_t forwardRead(Function LibcApi::*function, int fd, bool takes, Args... args)
{
	ssize_t n = forward(function, fd, args...);
	Process *p = builtProcess();
	if (takes && p && !CallScope::active() && n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
		const int savedErrno = errno;
		p->buffered.quieted(fd);
		errno = savedErrno;
	}
	return n;
}

/*
 * A copy into a buffer of the program's own, which may be one the kernel would refuse
 * (EFAULT, a hunt's read into a read-only mapping faulted in the shim): made by the
 * kernel, process_vm_writev to this process; where that is not allowed (a sandbox), a
 * plain copy.
 */
ssize_t copyAsTheKernel(const struct iovec *to, int count, const char *from, std::size_t length)
{
	struct iovec local = { const_cast<char *>(from), length };
	const ssize_t copied = process_vm_writev(process().pid, &local, 1, to, static_cast<unsigned long>(count), 0);
	if (copied >= 0 || errno == EFAULT)
		return copied;
	return SocketCache::copyPlainly(to, count, from, length);
}

/*
 * fd's queue of bytes read ahead answers a read of them (not of the error queue or the
 * urgent byte): *n set, true. Emptied by a read of the program's own, outside OpenSSL's
 * calls, its readiness goes at once (the connection's next call registers it again).
 *
 * A read the queue answered in part goes on in the kernel where the kernel's one read
 * would have: a read of the program's own takes what the kernel holds behind (and with
 * MSG_WAITALL waits for the rest), and so does a peek (read_on.h). OpenSSL's reads stop
 * there: their next read fills the queue.
 */
__attribute__((noinline)) bool queueAnswered(int fd, const struct iovec *iov, int iovcnt, int flags,
					     ssize_t *n) noexcept
{
	Process *p = builtProcess();
	if (!p || !p->cache.mayHave(fd) || (flags & (MSG_OOB | MSG_ERRQUEUE)))
		return false;
	const int savedErrno = errno;
	/*
	 * OpenSSL's reads are into its own buffers; the program's may be any (copyAsTheKernel),
	 * unless it confined itself (seccomp), which may kill it for a system call it did not list.
	 */
	const bool programs = !CallScope::active();
	const SocketCache::Copy copy = programs && !p->unseen.confined() ? copyAsTheKernel : nullptr;
	/* TCP's MSG_TRUNC counts the bytes and copies none (the buffer may be null). */
	const ssize_t moved = p->cache.take(fd, iov, iovcnt, flags & MSG_PEEK, flags & MSG_TRUNC, copy);
	if (moved < 0) {
		*n = -1; /* errno EFAULT */
		return true;
	}
	if (moved > 0 && (programs || (flags & (MSG_PEEK | MSG_WAITALL)))) {
		static const KernelReads kernel = { p->libc.ioctl, p->libc.poll, p->libc.recvmsg, p->libc.fcntl };
		const std::size_t more = readOnInKernel(fd, iov, iovcnt, static_cast<std::size_t>(moved), flags, kernel);
		if (!(flags & MSG_PEEK) && p->cache.queued(fd) == 0 && programs)
			p->buffered.quieted(fd);
		*n = moved + static_cast<ssize_t>(more);
	} else {
		*n = moved;
	}
	errno = savedErrno;
	return moved > 0;
}

/* Only a process with a connection the shim follows can have a queue: one load else (issue 24). */
inline bool queueAnswers(int fd, const struct iovec *iov, int iovcnt, int flags, ssize_t *n) noexcept
{
	return ConnectionSlot::anyMade() && queueAnswered(fd, iov, iovcnt, flags, n);
}

/* The same for len bytes into buf. */
bool queueAnswers(int fd, void *buf, std::size_t len, int flags, ssize_t *n)
{
	struct iovec one = { buf, len };
	return len > 0 && queueAnswers(fd, &one, 1, flags, n);
}

/*
 * The kernel's read of a fill: readv for read(2), which a pipe takes too; recvmsg for
 * recv(2), with its flags. nowait: it must not block (FillGate), preadv2's RWF_NOWAIT for
 * read(2).
 */
struct FillRead {
	int flags;
	bool socket;
	bool nowait;
};
ssize_t fillRead(int fd, const struct iovec *iov, int iovcnt, void *context)
{
	const FillRead &how = *static_cast<const FillRead *>(context);
	ssize_t n;
	if (how.socket) {
		struct msghdr msg = {};
		msg.msg_iov = const_cast<struct iovec *>(iov);
		msg.msg_iovlen = static_cast<size_t>(iovcnt);
		n = libc().recvmsg(fd, &msg, how.flags | (how.nowait ? MSG_DONTWAIT : 0));
	} else if (how.nowait) {
		n = preadv2(fd, iov, iovcnt, -1, RWF_NOWAIT);
	} else {
		n = libc().readv(fd, iov, iovcnt);
	}
	const int savedErrno = errno;
	noteRead(fd, n);
	errno = savedErrno;
	return n;
}

/*
 * A fill in a process with threads: only while no thread waits on fd (FillGate), by a read
 * that does not block, so that a wait beginning meanwhile waits microseconds for it. Where
 * it finds nothing yet (or the file takes no such read), OpenSSL's own read follows
 * (false), blocking as it would have: one more read, for a read that waits.
 */
bool gatedFill(int fd, void *buf, std::size_t len, std::size_t size, int flags, bool socket, ssize_t *n)
{
	if (!fillGate().enterFill(fd))
		return false;
	/* Left on every way out: the read is a cancellation point. */
	struct Left {
		FillGate &gate;
		int fd;
		~Left() { gate.leaveFill(fd); }
	} left{ fillGate(), fd };
	const int savedErrno = errno;
	FillRead how = { flags, socket, true };
	*n = process().cache.fill(fd, buf, len, size, fillRead, &how);
	if (*n >= 0 || (flags & MSG_DONTWAIT))
		return true;
	/* Nothing yet, or a read the file or kernel does not take (a filter may refuse preadv2). */
	const bool failed = errno != EAGAIN && errno != EWOULDBLOCK && errno != EOPNOTSUPP && errno != ENOSYS &&
			    errno != EPERM && errno != EINVAL;
	/*
	 * The read that follows leaves errno alone where it returns 0, and OpenSSL's socket BIO
	 * reads errno then: the fill's EAGAIN made an end of stream a WANT_READ on a blocking
	 * socket (a hunt, 10 runs of 10 in a thread of a thread-per-connection server).
	 */
	if (!failed)
		errno = savedErrno;
	return failed;
}

/*
 * OpenSSL reads fd for a connection the shim reads ahead for, and its queue is empty: one
 * read of the kernel takes what the connection reads ahead (SocketCache::fill). *n set,
 * true; false where the read is not such a one (a peek, a flag that changes what a read
 * returns), and in a process that confined itself.
 */
__attribute__((noinline)) bool fillIfAhead(int fd, void *buf, std::size_t len, int flags, bool socket,
					   ssize_t *n)
{
	const std::size_t size = CallScope::readAheadFor(fd);
	if (size <= len || (flags & ~MSG_DONTWAIT))
		return false;
	/* A confined process (seccomp) may allow read and recv alone: OpenSSL's own reads, then. */
	if (process().unseen.confined())
		return false;
	if (!__libc_single_threaded)
		return gatedFill(fd, buf, len, size, flags, socket, n);
	fillGate().note(fd);
	FillRead how = { flags, socket, false };
	*n = process().cache.fill(fd, buf, len, size, fillRead, &how);
	return true;
}

/* A process without a connection the shim follows: one load (issue 24). */
inline bool filled(int fd, void *buf, std::size_t len, int flags, bool socket, ssize_t *n)
{
	return len > 0 && ConnectionSlot::anyMade() && fillIfAhead(fd, buf, len, flags, socket, n);
}

/*
 * An ask of no bytes of the socket's data (not of its error queue) where the shim queued
 * bytes of it: the kernel, which would have had them, would not wait.
 */
bool asksNothingOfQueued(int fd, int flags) noexcept
{
	Process *p = ConnectionSlot::anyMade() ? builtProcess() : nullptr;
	return p && !(flags & MSG_ERRQUEUE) && p->cache.queued(fd) > 0;
}

/*
 * The answer to a recv family's ask of no bytes of a socket whose bytes the shim queued
 * is 0, the kernel's from bytes it holds, which leaves an error come after them (a reset)
 * for the next read: asking the kernel took that error (a hunt). What is no socket (a
 * pipe's queue) is refused as the kernel refuses it: true then, *n -1 and errno ENOTSOCK.
 */
bool refusedAsNoSocket(int fd, ssize_t *n) noexcept
{
	const int savedErrno = errno;
	int type;
	socklen_t length = sizeof type;
	if (getsockopt(fd, SOL_SOCKET, SO_TYPE, &type, &length) != 0 && errno == ENOTSOCK) {
		*n = -1;
		return true;
	}
	errno = savedErrno;
	return false;
}

/*
 * The shim answered a recvfrom in the kernel's place: a stream socket has no source
 * address, and the kernel writes its length, 0, where the caller gave a buffer for one.
 */
ssize_t answered(ssize_t n, struct sockaddr *from, socklen_t *fromlen) noexcept
{
	if (n >= 0 && from && fromlen)
		*fromlen = 0;
	return n;
}

/*
 * The recv family: the queue, a fill, or the kernel. from and fromlen: recvfrom's, null
 * for the others.
 */
template <typename Function, typename... Args>
ssize_t forwardRecv(Function LibcApi::*function, int fd, void *buf, size_t len, int flags,
		    struct sockaddr *from, socklen_t *fromlen, Args... args)
{
	ssize_t n;
	if (queueAnswers(fd, buf, len, flags, &n))
		return answered(n, from, fromlen);
	/* curl's BIO and OpenSSL's read with recv: a fill there names no source address. */
	if (!from && filled(fd, buf, len, flags, true, &n))
		return n;
	if (len == 0 && asksNothingOfQueued(fd, flags)) {
		if (!refusedAsNoSocket(fd, &n))
			n = 0;
		return answered(n, from, fromlen);
	}
	return forwardRead(function, fd, takesBytes(flags), buf, len, args...);
}

/* read(2) and its fortified form: the queue, a fill, or the kernel. */
template <typename Function, typename... Args>
ssize_t readThrough(Function LibcApi::*function, int fd, void *buf, size_t count, Args... args)
{
	ssize_t n;
	if (queueAnswers(fd, buf, count, 0, &n) || filled(fd, buf, count, 0, false, &n))
		return n;
	/* Of no bytes, with bytes queued: the kernel, which would have them, would not wait. */
	if (count == 0 && asksNothingOfQueued(fd, 0))
		return 0;
	return forwardRead(function, fd, true, buf, count, args...);
}

} /* namespace */

TLSTUNE_EXPORT ssize_t read(int fd, void *buf, size_t count)
{
	return readThrough(&LibcApi::read, fd, buf, count);
}

/* A count past the buffer is the real function's to refuse (it aborts). */
TLSTUNE_EXPORT ssize_t __read_chk(int fd, void *buf, size_t count, size_t buflen)
{
	if (count > buflen)
		return libc().read_chk(fd, buf, count, buflen);
	return readThrough(&LibcApi::read_chk, fd, buf, count, buflen);
}

TLSTUNE_EXPORT ssize_t readv(int fd, const struct iovec *iov, int iovcnt)
{
	ssize_t n;
	/* More parts than IOV_MAX: the kernel's EINVAL, the queue kept. */
	if (iovcnt > 0 && iovcnt <= IOV_MAX && iov && queueAnswers(fd, iov, iovcnt, 0, &n))
		return n;
	return forwardRead(&LibcApi::readv, fd, true, iov, iovcnt);
}

TLSTUNE_EXPORT ssize_t recv(int fd, void *buf, size_t len, int flags)
{
	return forwardRecv(&LibcApi::recv, fd, buf, len, flags, nullptr, nullptr, flags);
}

TLSTUNE_EXPORT ssize_t __recv_chk(int fd, void *buf, size_t len, size_t buflen, int flags)
{
	if (len > buflen)
		return libc().recv_chk(fd, buf, len, buflen, flags);
	return forwardRecv(&LibcApi::recv_chk, fd, buf, len, flags, nullptr, nullptr, buflen, flags);
}

TLSTUNE_EXPORT ssize_t recvfrom(int fd, void *buf, size_t len, int flags, struct sockaddr *from,
				socklen_t *fromlen)
{
	return forwardRecv(&LibcApi::recvfrom, fd, buf, len, flags, from, fromlen, flags, from, fromlen);
}

TLSTUNE_EXPORT ssize_t __recvfrom_chk(int fd, void *buf, size_t len, size_t buflen, int flags,
				      struct sockaddr *from, socklen_t *fromlen)
{
	if (len > buflen)
		return libc().recvfrom_chk(fd, buf, len, buflen, flags, from, fromlen);
	return forwardRecv(&LibcApi::recvfrom_chk, fd, buf, len, flags, from, fromlen, buflen, flags, from,
			   fromlen);
}

namespace {

/* msg asks for no bytes. More than UIO_MAXIOV parts: the kernel's EMSGSIZE, before the shim counts them. */
bool asksNoBytes(const struct msghdr *msg) noexcept
{
	if (!msg || msg->msg_iovlen > 1024)
		return false;
	for (size_t i = 0; i < msg->msg_iovlen; i++) {
		if (msg->msg_iov[i].iov_len != 0)
			return false;
	}
	return true;
}

/* The kernel's answer of no bytes to msg: no flags, no control data, no address. */
void answerNoBytes(struct msghdr *msg) noexcept
{
	msg->msg_flags = 0;
	msg->msg_controllen = 0;
	if (msg->msg_name)
		msg->msg_namelen = 0; /* as answered() */
}

/*
 * A recvmsg of no bytes of a socket whose bytes the shim queued, as forwardRecv
 * answers one: true when it is answered, *n set. No control message comes with it.
 */
bool answeredNoBytes(int fd, struct msghdr *msg, int flags, ssize_t *n)
{
	if (!asksNothingOfQueued(fd, flags) || !asksNoBytes(msg))
		return false;
	if (refusedAsNoSocket(fd, n))
		return true;
	*n = 0;
	answerNoBytes(msg);
	return true;
}

/* recvmmsg's: each of the messages asks for no bytes (a hunt: it waited for the peer). */
bool answeredNoBytes(int fd, struct mmsghdr *vector, unsigned int length, int flags, int *n)
{
	if (!asksNothingOfQueued(fd, flags) || !vector || length == 0 || length > 1024)
		return false;
	for (unsigned int i = 0; i < length; i++) {
		if (!asksNoBytes(&vector[i].msg_hdr))
			return false;
	}
	ssize_t refused;
	if (refusedAsNoSocket(fd, &refused)) {
		*n = -1;
		return true;
	}
	for (unsigned int i = 0; i < length; i++) {
		answerNoBytes(&vector[i].msg_hdr);
		vector[i].msg_len = 0;
	}
	*n = static_cast<int>(length);
	return true;
}

} /* namespace */

TLSTUNE_EXPORT ssize_t recvmsg(int fd, struct msghdr *msg, int flags)
{
	Process &p = process();
	ssize_t n;
	/* The program's msg is looked at only where bytes are queued: else the kernel sees it first. */
	if (p.cache.mayHave(fd) && msg && msg->msg_iovlen > 0 && msg->msg_iovlen <= 1024 &&
	    queueAnswers(fd, msg->msg_iov, static_cast<int>(msg->msg_iovlen), flags, &n)) {
		answerNoBytes(msg); /* a stream's bytes: no flags, control data or address */
	} else if (!answeredNoBytes(fd, msg, flags, &n)) {
		n = forwardRead(&LibcApi::recvmsg, fd, takesBytes(flags), msg, flags);
	}
	/* A copy of a socket received with SCM_RIGHTS is a duplicate, as a dup's is. */
	if (n >= 0 && msg && msg->msg_controllen > 0)
		noteReceivedDescriptors(p, msg);
	return n;
}

/* Several messages at once: the descriptors they carry are copies, as recvmsg's (a hunt's stalled). */
TLSTUNE_EXPORT int recvmmsg(int fd, struct mmsghdr *vector, unsigned int length, int flags, struct timespec *timeout)
{
	Process &p = process();
	if (!p.libc.recvmmsg) {
		errno = ENOSYS;
		return -1;
	}
	int received;
	if (!answeredNoBytes(fd, vector, length, flags, &received))
		received = static_cast<int>(forwardRead(&LibcApi::recvmmsg, fd, takesBytes(flags), vector, length,
							flags, timeout));
	for (int i = 0; i < received; i++) {
		if (vector[i].msg_hdr.msg_controllen > 0)
			noteReceivedDescriptors(p, &vector[i].msg_hdr);
	}
	return received;
}
