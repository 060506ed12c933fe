/*
 * Where a connection's waits may go past the shim (core/read/unseen_waits.h): a socket
 * sent away, SO_RCVLOWAT, an io_uring instance. Each costs a branch on its arguments
 * when it is not one of these.
 */

#include <atomic>
#include <cerrno>
#include <dlfcn.h>
#include <sys/socket.h>

#include "interpose/export.h"
#include "runtime/duplicates.h"

using namespace tlstune;

TLSTUNE_EXPORT ssize_t sendmsg(int fd, const struct msghdr *msg, int flags)
{
	Process &p = process();
	handOverSentDescriptors(p, msg);
	const ssize_t sent = p.libc.sendmsg(fd, msg, flags);
	const int savedErrno = errno;
	noteSentDescriptors(p, msg, sent);
	errno = savedErrno;
	return sent;
}

TLSTUNE_EXPORT int sendmmsg(int fd, struct mmsghdr *messages, unsigned count, int flags)
{
	Process &p = process();
	for (unsigned i = 0; !p.coalescer.idle() && messages && i < count && i < 1024; i++)
		handOverSentDescriptors(p, &messages[i].msg_hdr);
	const int sent = p.libc.sendmmsg(fd, messages, count, flags);
	const int savedErrno = errno;
	/* The messages the kernel took: the first `sent`. */
	for (int i = 0; i < sent; i++)
		noteSentDescriptors(p, &messages[i].msg_hdr, 0);
	errno = savedErrno;
	return sent;
}

/*
 * A connection decided later asks the socket itself (getsockopt at its decision): before
 * the process's first connection nothing needs noting.
 */
TLSTUNE_EXPORT int setsockopt(int fd, int level, int name, const void *value, socklen_t length)
{
	Process &p = process();
	const int done = p.libc.setsockopt(fd, level, name, value, length);
	if (done == 0 && level == SOL_SOCKET && name == SO_RCVLOWAT && value && length >= sizeof(int) &&
	    *static_cast<const int *>(value) > 1 && ConnectionSlot::anyMade())
		noteUnfollowedSocket(p, fd);
	return done;
}

/*
 * liburing makes its rings with its own system calls, past libc (Debian's 2.3 and later):
 * its entry points are where a ring is seen. libuv calls syscall(2) (interpose/sandbox.cpp).
 */
struct io_uring;
struct io_uring_params;

namespace {

/* liburing's definition, looked up at the first call: the program may dlopen it late. */
template <typename Function>
Function liburing(std::atomic<Function> &slot, const char *name) noexcept
{
	Function next = slot.load(std::memory_order_relaxed);
	if (!next) {
		next = reinterpret_cast<Function>(dlsym(RTLD_NEXT, name));
		slot.store(next, std::memory_order_relaxed);
	}
	return next;
}

/* liburing's calls answer 0 (or a descriptor) on success, -errno on failure. */
int ringMade(int result) noexcept
{
	if (result >= 0)
		process().unseen.noteRing();
	return result;
}

} /* namespace */

TLSTUNE_EXPORT int io_uring_queue_init(unsigned entries, struct io_uring *ring, unsigned flags)
{
	static std::atomic<int (*)(unsigned, struct io_uring *, unsigned)> next{nullptr};
	auto real = liburing(next, "io_uring_queue_init");
	return real ? ringMade(real(entries, ring, flags)) : -ENOSYS;
}

TLSTUNE_EXPORT int io_uring_queue_init_params(unsigned entries, struct io_uring *ring,
					      struct io_uring_params *params)
{
	static std::atomic<int (*)(unsigned, struct io_uring *, struct io_uring_params *)> next{nullptr};
	auto real = liburing(next, "io_uring_queue_init_params");
	return real ? ringMade(real(entries, ring, params)) : -ENOSYS;
}

TLSTUNE_EXPORT int io_uring_queue_init_mem(unsigned entries, struct io_uring *ring,
					   struct io_uring_params *params, void *buffer, size_t size)
{
	static std::atomic<int (*)(unsigned, struct io_uring *, struct io_uring_params *, void *, size_t)>
		next{nullptr};
	auto real = liburing(next, "io_uring_queue_init_mem");
	return real ? ringMade(real(entries, ring, params, buffer, size)) : -ENOSYS;
}

TLSTUNE_EXPORT int io_uring_setup(unsigned entries, struct io_uring_params *params)
{
	static std::atomic<int (*)(unsigned, struct io_uring_params *)> next{nullptr};
	auto real = liburing(next, "io_uring_setup");
	return real ? ringMade(real(entries, params)) : -ENOSYS;
}
