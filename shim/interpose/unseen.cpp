/*
 * Where a connection's waits may go past the shim (core/read/unseen_waits.h): a socket
 * sent away, an io_uring instance (SO_RCVLOWAT: interpose/socket_options.cpp). Each costs
 * a branch on its arguments when it is not one of these.
 */

#include <atomic>
#include <cerrno>
#include <dlfcn.h>
#include <sys/socket.h>

#include "interpose/export.h"
#include "interpose/raw_writes.h"
#include "runtime/duplicates.h"

using namespace tlstune;

/*
 * Before the process's state is built nothing is held or followed: the message goes at
 * once, and a descriptor it carried is noted once the kernel took it (a socket sent away
 * before the first SSL may carry one later).
 */
TLSTUNE_EXPORT ssize_t sendmsg(int fd, const struct msghdr *msg, int flags)
{
	programWrites(fd, __builtin_return_address(0));
	if (Process *p = builtProcess())
		handOverSentDescriptors(*p, msg);
	const ssize_t sent = libc().sendmsg(fd, msg, flags);
	if (sent >= 0 && msg->msg_controllen > 0) {
		const int savedErrno = errno;
		noteSentDescriptors(process(), msg, sent);
		errno = savedErrno;
	}
	return sent;
}

TLSTUNE_EXPORT int sendmmsg(int fd, struct mmsghdr *messages, unsigned count, int flags)
{
	programWrites(fd, __builtin_return_address(0));
	Process *p = builtProcess();
	for (unsigned i = 0; p && !p->coalescer.idle() && messages && i < count && i < 1024; i++)
		handOverSentDescriptors(*p, &messages[i].msg_hdr);
	const int sent = libc().sendmmsg(fd, messages, count, flags);
	const int savedErrno = errno;
	/* The messages the kernel took: the first `sent`. */
	for (int i = 0; i < sent; i++) {
		if (messages[i].msg_hdr.msg_controllen > 0)
			noteSentDescriptors(process(), &messages[i].msg_hdr, 0);
	}
	errno = savedErrno;
	return sent;
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
