#pragma once

#include <cstring>
#include <sys/socket.h>

#include <cerrno>

#include "runtime.h"

namespace tlstune {

/* A copy of an epoll set's fd is that set; not in a vfork child, which changes no state. */
__attribute__((noinline)) inline void noteSetCopy(Process &p, int from, int to) noexcept
{
	if (!p.inVforkChild())
		p.epoll.aliased(from, to);
}

/*
 * After a dup (any of them) made fd `to` of `from` (-1: unknown): a wait on either sees
 * what a connection holds for their file (BufferedFds::duplicated), also before the
 * shim's state is built (p null): one load each, and a store the first time. With the
 * state, a copy of a set's fd is the set.
 */
inline void noteDuplicate(Process *p, int from, int to) noexcept
{
	if (to < 0)
		return;
	copiedFds().note(to);
	if (from < 0)
		return;
	copiedFds().note(from);
	/* The copy names the bytes the shim queued of the socket, as it names its kernel queue. */
	if (p && p->cache.mayHave(from))
		p->cache.duplicated(from, to);
	if (p && knownFds().mayHave(from) && !p->epoll.empty())
		noteSetCopy(*p, from, to);
}

/* Each descriptor an SCM_RIGHTS message carries. */
template <typename Each>
void forEachPassed(const struct msghdr *msg, Each each)
{
	for (const struct cmsghdr *header = CMSG_FIRSTHDR(msg); header;
	     header = CMSG_NXTHDR(const_cast<struct msghdr *>(msg), const_cast<struct cmsghdr *>(header))) {
		/*
		 * A header the kernel refuses (EINVAL) is not read past: a length below the
		 * header's own, or beyond the control buffer (a hunt: a SIGSEGV).
		 */
		const size_t room = msg->msg_controllen - static_cast<size_t>(reinterpret_cast<const char *>(header) -
									      static_cast<const char *>(msg->msg_control));
		if (header->cmsg_len < CMSG_LEN(0) || header->cmsg_len > room)
			return;
		if (header->cmsg_level != SOL_SOCKET || header->cmsg_type != SCM_RIGHTS)
			continue;
		const size_t count = (header->cmsg_len - CMSG_LEN(0)) / sizeof(int);
		for (size_t i = 0; i < count; i++) {
			int fd;
			std::memcpy(&fd, CMSG_DATA(header) + i * sizeof(int), sizeof(int));
			each(fd);
		}
	}
}

/*
 * A number that names the same socket as fd and has bytes the shim queued of it (a
 * connection holding data reads it), or -1. An fstat, and a look at the connections that
 * hold data.
 */
inline int queuedNumberOf(Process &p, int fd) noexcept
{
	ino_t ino;
	if (!p.cache.used() || p.buffered.empty() || !streamInode(fd, &ino))
		return -1;
	int found = -1;
	p.buffered.forEach(0, [&](int held, ino_t heldIno, unsigned long long) {
		if (found < 0 && held != fd && heldIno == ino && p.cache.mayHave(held))
			found = held;
	});
	return found;
}

/*
 * The descriptors an SCM_RIGHTS message brought: a socket this process's connection reads
 * may come back under another number (a process handing connections to itself, or a copy
 * sent and returned), and a wait on that number must see what OpenSSL holds for it, a
 * read on it what the shim queued (a hunt: a connection moved to the copy by SSL_set_fd,
 * or kept on its number by a dup2 of the copy, read past the queue: "wrong version
 * number", every byte lost).
 */
inline void noteReceivedDescriptors(Process &p, const struct msghdr *msg) noexcept
{
	const int savedErrno = errno;
	forEachPassed(msg, [&p](int fd) { noteDuplicate(&p, queuedNumberOf(p, fd), fd); });
	errno = savedErrno;
}

/*
 * The descriptors an SCM_RIGHTS message is about to send: a socket sent away may be waited
 * on where the shim cannot see, so a connection that reads it stops reading ahead (before
 * the copy arrives). The same for a socket given SO_RCVLOWAT above 1, whose readiness the
 * kernel counts in bytes. Noted before the process makes its first SSL too: the socket
 * may carry one later. These calls are rare; a stat each.
 */
inline void noteUnfollowedSocket(Process &p, int fd) noexcept
{
	if (p.inVforkChild())
		return;
	const int savedErrno = errno;
	ino_t ino;
	if (streamInode(fd, &ino))
		p.unseen.noteUnfollowed(ino);
	errno = savedErrno;
}

/*
 * A socket sent away may be written at once by the process that receives it: what is held
 * for it goes to the kernel first, and nothing more is held for it (a hunt: that process's
 * raw bytes overtook 780 held ones). Found by number: a copy under another number sent
 * instead is not (docs/limits.md). Not noexcept: the send may block, a cancellation point
 * as the sendmsg it comes before.
 */
inline void handOverSentSocket(Process &p, int fd)
{
	if (p.inVforkChild())
		return;
	const int savedErrno = errno;
	p.coalescer.sendingAway(fd);
	p.held.socketsLeaving(fd, fd);
	p.held.socketsLeft(fd, fd); /* what began a record since is held no more (sendingAway) */
	p.coalescer.handOverFor(fd);
	errno = savedErrno;
}

/*
 * Before the message goes: only a process that holds or held writes reads it (the kernel
 * has not yet, and a bad pointer would fault here where sendmsg answers EFAULT).
 */
inline void handOverSentDescriptors(Process &p, const struct msghdr *msg)
{
	if (!p.coalescer.idle() && msg && msg->msg_controllen > 0)
		forEachPassed(msg, [&p](int fd) { handOverSentSocket(p, fd); });
}

/* Once the kernel took the message (sent >= 0): every process notes what it sent. */
inline void noteSentDescriptors(Process &p, const struct msghdr *msg, ssize_t sent) noexcept
{
	if (sent >= 0 && msg->msg_controllen > 0)
		forEachPassed(msg, [&p](int fd) { noteUnfollowedSocket(p, fd); });
}

} /* namespace tlstune */
