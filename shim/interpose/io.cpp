/*
 * The read family, only to learn which socket a connection reads: a read made while this
 * thread is inside an OpenSSL call is that connection's. Outside OpenSSL calls this is one
 * thread-local load.
 */

#include <cerrno>

#include "interpose/export.h"
#include "core/read/wait_merge.h"
#include "runtime/duplicates.h"
#include "runtime/socket_read.h"

using namespace tlstune;

namespace {

/* A read that does not return (a cancellation point's unwinding) says so (CallScope::readLeft). */
struct Reading {
	bool returned = false;
	~Reading()
	{
		if (!returned)
			CallScope::readLeft();
	}
};

/* asked: the bytes the read asks for (Connection::kWholeBuffer where it is an iovec's). */
template <typename Function, typename... Args>
ssize_t forward(Function LibcApi::*function, int fd, size_t asked, Args... args)
{
	Reading reading;
	ssize_t n = (libc().*function)(fd, args...);
	reading.returned = true;
	int savedErrno = errno;
	noteRead(fd, n, asked);
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
 * empty: what OpenSSL holds is not reported until the connection's next OpenSSL call.
 */
template <typename Function, typename... Args>
ssize_t forwardRead(Function LibcApi::*function, int fd, bool takes, size_t asked, Args... args)
{
	ssize_t n = forward(function, fd, asked, args...);
	Process *p = builtProcess();
	if (takes && p && !CallScope::active()) {
		/* Records a freed SSL left unread there: the kernel would have given them to this read. */
		p->buffered.readByProgram(fd);
		if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
			const int savedErrno = errno;
			p->buffered.quieted(fd);
			errno = savedErrno;
		}
	}
	return n;
}

/*
 * An ask of the socket's data (not of its error queue) on a connection whose records
 * OpenSSL holds, outside OpenSSL's calls: the kernel would have them queued.
 */
bool asksHeld(Process &p, int fd, int flags) noexcept
{
	return !(flags & MSG_ERRQUEUE) && !p.buffered.empty() && !CallScope::active() && p.buffered.holds(fd);
}

/*
 * The kernel's answer, without waiting, to an ask that must not wait on a connection
 * whose records OpenSSL holds: what it says stands (bytes still queued, a pipe's
 * ENOTSOCK), except that its socket is empty. ask(flags) makes the real call.
 */
template <typename Ask>
bool kernelAnswered(Ask ask, int flags, ssize_t *n) noexcept
{
	*n = ask(flags | MSG_DONTWAIT);
	return *n >= 0 || (errno != EAGAIN && errno != EWOULDBLOCK);
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
 * The program looks at more than one of fd's raw bytes (UnseenWaits::notePeeked); not
 * before its first connection. A peek of one byte asks whether the peer is still there
 * (curl's and libcurl's check of a kept-alive connection), which the shim answers as the
 * kernel would: it keeps its read-ahead (curl on one keep-alive connection read 100
 * times per MiB instead of 24 when it did not).
 */
void notePeek(Process &p, int fd, size_t len) noexcept
{
	if (len > 1 && ConnectionSlot::anyMade())
		p.unseen.notePeeked(fd);
}

/*
 * The recv family also answers a program's MSG_PEEK for data OpenSSL holds. from and
 * fromlen: recvfrom's, null for the others.
 */
template <typename Function, typename... Args>
ssize_t forwardPeek(Function LibcApi::*function, int fd, void *buf, size_t len, int flags,
		    struct sockaddr *from, socklen_t *fromlen, Args... args)
{
	Process *built = builtProcess();
	if (!built)
		return forwardRead(function, fd, takesBytes(flags), len, buf, len, args...);
	Process &p = *built;
	/*
	 * A read of no bytes, or a blocking peek, would wait for bytes the socket no longer
	 * has: OpenSSL holds them, and the kernel, which would have had them queued, answers
	 * at once (0 for no bytes, a peek as peekBuffered does).
	 */
	if ((len == 0 || (flags & (MSG_PEEK | MSG_DONTWAIT)) == MSG_PEEK) && asksHeld(p, fd, flags)) {
		if (flags & MSG_PEEK)
			notePeek(p, fd, len);
		ssize_t n;
		if (kernelAnswered([&](int asked) { return p.libc.recv(fd, buf, len, asked); }, flags, &n))
			return answered(n, from, fromlen);
		return answered(len == 0 ? 0 : peekBuffered(p.buffered, fd, buf, len, flags | MSG_DONTWAIT, n), from,
				fromlen);
	}
	ssize_t n = forwardRead(function, fd, takesBytes(flags), len, buf, len, args...);
	if (!(flags & MSG_PEEK) || CallScope::active())
		return n;
	notePeek(p, fd, len);
	const ssize_t peeked = peekBuffered(p.buffered, fd, buf, len, flags, n);
	return n < 0 ? answered(peeked, from, fromlen) : peeked;
}

} /* namespace */

TLSTUNE_EXPORT ssize_t read(int fd, void *buf, size_t count)
{
	return forwardRead(&LibcApi::read, fd, true, count, buf, count);
}

TLSTUNE_EXPORT ssize_t __read_chk(int fd, void *buf, size_t count, size_t buflen)
{
	return forwardRead(&LibcApi::read_chk, fd, true, count, buf, count, buflen);
}

TLSTUNE_EXPORT ssize_t readv(int fd, const struct iovec *iov, int iovcnt)
{
	return forwardRead(&LibcApi::readv, fd, true, Connection::kWholeBuffer, iov, iovcnt);
}

TLSTUNE_EXPORT ssize_t recv(int fd, void *buf, size_t len, int flags)
{
	return forwardPeek(&LibcApi::recv, fd, buf, len, flags, nullptr, nullptr, flags);
}

TLSTUNE_EXPORT ssize_t __recv_chk(int fd, void *buf, size_t len, size_t buflen, int flags)
{
	return forwardPeek(&LibcApi::recv_chk, fd, buf, len, flags, nullptr, nullptr, buflen, flags);
}

TLSTUNE_EXPORT ssize_t recvfrom(int fd, void *buf, size_t len, int flags, struct sockaddr *from,
				socklen_t *fromlen)
{
	return forwardPeek(&LibcApi::recvfrom, fd, buf, len, flags, from, fromlen, flags, from, fromlen);
}

TLSTUNE_EXPORT ssize_t __recvfrom_chk(int fd, void *buf, size_t len, size_t buflen, int flags,
				      struct sockaddr *from, socklen_t *fromlen)
{
	return forwardPeek(&LibcApi::recvfrom_chk, fd, buf, len, flags, from, fromlen, buflen, flags, from,
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
 * A recvmsg of no bytes on a connection whose records OpenSSL holds, as forwardPeek
 * answers one: true when it is answered, *n set. No control message comes with it.
 */
bool answeredNoBytes(Process &p, int fd, struct msghdr *msg, int flags, ssize_t *n)
{
	if (p.buffered.empty() || !asksNoBytes(msg) || !asksHeld(p, fd, flags))
		return false;
	if (kernelAnswered([&](int flagsNow) { return p.libc.recvmsg(fd, msg, flagsNow); }, flags, n))
		return true;
	*n = 0;
	answerNoBytes(msg);
	return true;
}

/* recvmmsg's: each of the messages asks for no bytes (a hunt: it waited for the peer). */
bool answeredNoBytes(Process &p, int fd, struct mmsghdr *vector, unsigned int length, int flags,
		     struct timespec *timeout, int *n)
{
	if (p.buffered.empty() || !vector || length == 0 || length > 1024)
		return false;
	for (unsigned int i = 0; i < length; i++) {
		if (!asksNoBytes(&vector[i].msg_hdr))
			return false;
	}
	if (!asksHeld(p, fd, flags))
		return false;
	ssize_t answered;
	if (kernelAnswered([&](int flagsNow) { return p.libc.recvmmsg(fd, vector, length, flagsNow, timeout); },
			   flags, &answered)) {
		*n = static_cast<int>(answered);
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
	if (!answeredNoBytes(p, fd, msg, flags, &n))
		n = forwardRead(&LibcApi::recvmsg, fd, takesBytes(flags), Connection::kWholeBuffer, msg, flags);
	/* Read once the kernel took msg: a bad one faulted there, not here. */
	if ((flags & MSG_PEEK) && n >= 0 && !CallScope::active()) {
		size_t len = 0;
		for (size_t i = 0; i < msg->msg_iovlen && len <= 1; i++)
			len += msg->msg_iov[i].iov_len;
		notePeek(p, fd, len);
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
	if (!answeredNoBytes(p, fd, vector, length, flags, timeout, &received))
		received = static_cast<int>(forwardRead(&LibcApi::recvmmsg, fd, takesBytes(flags),
							Connection::kWholeBuffer, vector, length, flags, timeout));
	for (int i = 0; i < received; i++) {
		if (vector[i].msg_hdr.msg_controllen > 0)
			noteReceivedDescriptors(p, &vector[i].msg_hdr);
	}
	return received;
}
