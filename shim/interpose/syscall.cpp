/*
 * syscall(2): a call the shim interposes, made through libc's syscall() instead of its
 * wrapper, is that wrapper's call. Each is routed to the shim's own (a read hunt: a wait
 * by syscall(SYS_poll), or on a copy made by syscall(SYS_dup), stalled a connection that
 * read ahead). The waits' results and errno are the wrappers', which are the kernel's.
 * Left to the kernel: pselect6, whose raw form writes the time left back where glibc's
 * pselect does not, and every call the shim does not interpose.
 */

#include <algorithm>
#include <array>
#include <cerrno>
#include <chrono>
#include <cstdarg>
#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <sys/prctl.h>
#include <sys/epoll.h>
#include <sys/select.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <linux/sched.h>
#include <unistd.h>

#include "core/raw_syscalls.h"
#include "core/signals_blocked.h"
#include "interpose/export.h"
#include "interpose/raw_writes.h"
#include "runtime/duplicates.h"
#include "runtime/runtime.h"

using namespace tlstune;

namespace {

/* A copy of the process that returns here in both: a fork glibc does not see. */
long forkedPast(Process &p, long number, const long (&a)[6])
{
	lockForFork();
	const long child = p.libc.syscall(number, a[0], a[1], a[2], a[3], a[4], a[5]);
	const int savedErrno = errno;
	if (child == 0)
		unlockInChild();
	else
		unlockInParent();
	errno = savedErrno;
	return child;
}

/*
 * clone3's arguments, read as the kernel would, without faulting where it answers EFAULT
 * (a bad pointer is the kernel's to report).
 */
bool clone3Arguments(long args, long size, struct clone_args *arguments) noexcept
{
	if (args == 0 || size < static_cast<long>(CLONE_ARGS_SIZE_VER0))
		return false;
	const struct iovec local = { arguments, CLONE_ARGS_SIZE_VER0 };
	const struct iovec remote = { reinterpret_cast<void *>(args), CLONE_ARGS_SIZE_VER0 };
	const int savedErrno = errno;
	const bool read = process_vm_readv(getpid(), &local, 1, &remote, 1, 0) ==
			  static_cast<ssize_t>(CLONE_ARGS_SIZE_VER0);
	errno = savedErrno;
	return read;
}

/*
 * A raw clone or clone3 (flags, and whether the child has a stack of its own): a copy of
 * the process as fork's runs the fork handlers around it; a vfork-like copy (the parent
 * waits, the locks would stay held all that while) gets what is held handed over first,
 * as for a spawned program (interpose/spawn.cpp has the same for the clone wrapper).
 */
long clonedPast(Process &p, long number, const long (&a)[6], unsigned long long flags, bool ownStack)
{
	p.childInThisMemory(flags);
	if (!(flags & CLONE_VM) && !p.inVforkChild()) {
		if (flags & CLONE_VFORK)
			p.handOver();
		else if (!ownStack)
			return forkedPast(p, number, a);
	}
	return p.libc.syscall(number, a[0], a[1], a[2], a[3], a[4], a[5]);
}

/* A new descriptor from the kernel (dup, fcntl's F_DUPFD, pidfd_getfd): a copy as dup's. */
long duplicated(Process &p, long number, const long (&a)[6], int from)
{
	const long result = p.libc.syscall(number, a[0], a[1], a[2], a[3], a[4], a[5]);
	noteDuplicate(&p, from, static_cast<int>(result));
	return result;
}

template <typename T>
T *pointer(long argument) noexcept
{
	return reinterpret_cast<T *>(argument);
}

int fd(long argument) noexcept
{
	return static_cast<int>(argument);
}

/* The kernel takes poll's count as an unsigned int (a hunt passed 1 << 40: 0 entries). */
nfds_t pollCount(long argument) noexcept
{
	return static_cast<unsigned int>(argument);
}

} /* namespace */

/* The numbers wrapperCall routes: every other call pays this test alone. */
constexpr long kRouted[] = { SYS_close, SYS_close_range, SYS_dup, SYS_dup2, SYS_dup3, SYS_fcntl,
			     SYS_pidfd_getfd, SYS_poll, SYS_ppoll, SYS_select, SYS_epoll_wait,
			     SYS_epoll_pwait, SYS_epoll_pwait2, SYS_epoll_ctl, SYS_read, SYS_readv,
			     SYS_recvfrom, SYS_recvmsg, SYS_recvmmsg, SYS_sendmsg, SYS_sendmmsg, SYS_shutdown,
			     SYS_setsockopt };
constexpr long kRoutedBelow = 512;

constexpr std::array<bool, kRoutedBelow> routedTable()
{
	std::array<bool, kRoutedBelow> table = {};
	for (const long number : kRouted)
		table[static_cast<std::size_t>(number)] = true;
	return table;
}

constexpr std::array<bool, kRoutedBelow> kIsRouted = routedTable();

bool routed(long number) noexcept
{
	return number >= 0 && number < kRoutedBelow && kIsRouted[static_cast<std::size_t>(number)];
}

/* The kernel's sigset_t: what the raw calls that take a mask check their size against. */
constexpr long kKernelSigsetBytes = 8;

/*
 * The raw ppoll checks the mask's size and writes the time left back, where glibc's
 * copies the timeout (a loop that waits again with what is left never ended under a
 * periodic signal): the same here around the wrapper.
 */
bool rawPpoll(const long (&a)[6], long *result)
{
	if (a[3] && a[4] != kKernelSigsetBytes)
		return false;
	auto *timeout = pointer<struct timespec>(a[2]);
	const auto start = std::chrono::steady_clock::now();
	*result = ppoll(pointer<struct pollfd>(a[0]), pollCount(a[1]), timeout, pointer<const sigset_t>(a[3]));
	if (timeout && (*result >= 0 || errno == EINTR)) {
		const int savedErrno = errno;
		const auto left = std::chrono::seconds(timeout->tv_sec) + std::chrono::nanoseconds(timeout->tv_nsec) -
				  (std::chrono::steady_clock::now() - start);
		const auto nanoseconds = std::max<long long>(0, std::chrono::nanoseconds(left).count());
		timeout->tv_sec = static_cast<time_t>(nanoseconds / 1000000000);
		timeout->tv_nsec = static_cast<long>(nanoseconds % 1000000000);
		errno = savedErrno;
	}
	return true;
}

/* The wrapper's call for a number the shim interposes: *result, and true. */
bool wrapperCall(Process &p, long number, const long (&a)[6], long *result)
{
	switch (number) {
	/* Closes: the wrappers hand over what the shim holds for the fds first. */
	case SYS_close:
		*result = close(fd(a[0]));
		return true;
	case SYS_close_range:
		if (!p.libc.close_range)
			return false;
		*result = close_range(static_cast<unsigned>(a[0]), static_cast<unsigned>(a[1]), fd(a[2]));
		return true;
	case SYS_dup2:
		*result = dup2(fd(a[0]), fd(a[1]));
		return true;
	case SYS_dup3:
		*result = dup3(fd(a[0]), fd(a[1]), fd(a[2]));
		return true;
	case SYS_dup:
		*result = duplicated(p, number, a, fd(a[0]));
		return true;
	case SYS_fcntl:
		if (a[1] != F_DUPFD && a[1] != F_DUPFD_CLOEXEC)
			return false;
		*result = duplicated(p, number, a, fd(a[0]));
		return true;
	/* Another process's descriptor, or this one's own: what it names is learnt from it. */
	case SYS_pidfd_getfd:
		*result = duplicated(p, number, a, -1);
		return true;
	/* Waits. */
	case SYS_poll:
		*result = poll(pointer<struct pollfd>(a[0]), pollCount(a[1]), fd(a[2]));
		return true;
	case SYS_ppoll:
		return rawPpoll(a, result);
	case SYS_select:
		*result = select(fd(a[0]), pointer<fd_set>(a[1]), pointer<fd_set>(a[2]), pointer<fd_set>(a[3]),
			      pointer<struct timeval>(a[4]));
		return true;
	case SYS_epoll_wait:
		*result = epoll_wait(fd(a[0]), pointer<struct epoll_event>(a[1]), fd(a[2]), fd(a[3]));
		return true;
	case SYS_epoll_pwait:
		if (a[4] && a[5] != kKernelSigsetBytes)
			return false;
		*result = epoll_pwait(fd(a[0]), pointer<struct epoll_event>(a[1]), fd(a[2]), fd(a[3]),
				   pointer<const sigset_t>(a[4]));
		return true;
	case SYS_epoll_pwait2:
		if (a[4] && a[5] != kKernelSigsetBytes)
			return false;
		*result = epoll_pwait2(fd(a[0]), pointer<struct epoll_event>(a[1]), fd(a[2]),
				    pointer<const struct timespec>(a[3]), pointer<const sigset_t>(a[4]));
		return true;
	case SYS_epoll_ctl:
		*result = epoll_ctl(fd(a[0]), fd(a[1]), fd(a[2]), pointer<struct epoll_event>(a[3]));
		return true;
	/* Reads, sends and socket changes the shim notes. */
	case SYS_read:
		*result = read(fd(a[0]), pointer<void>(a[1]), static_cast<size_t>(a[2]));
		return true;
	case SYS_readv:
		*result = readv(fd(a[0]), pointer<const struct iovec>(a[1]), fd(a[2]));
		return true;
	case SYS_recvfrom:
		*result = recvfrom(fd(a[0]), pointer<void>(a[1]), static_cast<size_t>(a[2]), fd(a[3]),
				pointer<struct sockaddr>(a[4]), pointer<socklen_t>(a[5]));
		return true;
	case SYS_recvmsg:
		*result = recvmsg(fd(a[0]), pointer<struct msghdr>(a[1]), fd(a[2]));
		return true;
	case SYS_recvmmsg:
		*result = recvmmsg(fd(a[0]), pointer<struct mmsghdr>(a[1]), static_cast<unsigned>(a[2]), fd(a[3]),
				pointer<struct timespec>(a[4]));
		return true;
	case SYS_sendmmsg:
		*result = sendmmsg(fd(a[0]), pointer<struct mmsghdr>(a[1]), static_cast<unsigned>(a[2]), fd(a[3]));
		return true;
	case SYS_sendmsg:
		*result = sendmsg(fd(a[0]), pointer<const struct msghdr>(a[1]), fd(a[2]));
		return true;
	case SYS_shutdown:
		*result = shutdown(fd(a[0]), fd(a[1]));
		return true;
	case SYS_setsockopt:
		*result = setsockopt(fd(a[0]), fd(a[1]), fd(a[2]), pointer<const void>(a[3]),
				  static_cast<socklen_t>(a[4]));
		return true;
	default:
		return false;
	}
}

/*
 * glibc's syscall(2) takes six arguments after the number, whatever the call uses: the
 * last comes from the caller's stack, past what a call with fewer passed, which
 * AddressSanitizer would take for an overflow (syscall(SYS_gettid) from a program).
 */
TLSTUNE_EXPORT __attribute__((no_sanitize("address"))) long syscall(long number, ...)
{
	va_list rest;
	va_start(rest, number);
	long a[6];
	for (long &argument : a)
		argument = va_arg(rest, long);
	va_end(rest);
	Process &p = process();
	if (routed(number) && !RawSyscalls::active()) {
		/*
		 * syscall() is no cancellation point where the wrappers (read, poll) are one: the
		 * wrapper runs with cancellation deferred (no system call), so a cancel request
		 * waits for the program's next point, as it would have.
		 */
		CancelDeferred noCancel;
		RawSyscalls inside;
		long result = 0;
		if (wrapperCall(p, number, a, &result))
			return result;
	}
	switch (number) {
	/* The program's own bytes (interpose/raw_writes.cpp): what is held for the socket goes first. */
	case SYS_write:
	case SYS_writev:
	case SYS_pwritev2:
	case SYS_sendto:
	case SYS_sendfile:
	case SYS_splice:
		/* Not the shim's own raw calls; splice's fd written to is its third argument. */
		if (!RawSyscalls::active())
			programWrites(fd(a[number == SYS_splice ? 2 : 0]), __builtin_return_address(0));
		break;
	/* Sandboxes and ends (interpose/sandbox.cpp, exit.cpp). */
	case SYS_seccomp:
		p.enterSandbox();
		break;
	case SYS_prctl:
		if (a[0] == PR_SET_SECCOMP)
			p.enterSandbox();
		break;
	/* An exec, as execve's: what is held goes to the kernel first. */
	case SYS_execve:
	case SYS_execveat:
		p.drainBeforeImageEnds(Process::ImageEnd::MayReturn);
		break;
	/* The process image ends here, as in _exit: what is held goes to the kernel first. */
	case SYS_exit_group:
		p.drainBeforeImageEnds();
		break;
	/* A copy of the process with no stack of its own and no CLONE_VM (interpose/spawn.cpp). */
	case SYS_fork:
		if (!p.inVforkChild())
			return forkedPast(p, number, a);
		break;
	/* The child borrows this memory and runs on (interpose/spawn.cpp's vfork). */
	case SYS_vfork:
		p.childInThisMemory(CLONE_VM | CLONE_VFORK);
		break;
	case SYS_clone:
		return clonedPast(p, number, a, static_cast<unsigned long>(a[0]), a[1] != 0);
	/*
	 * The same made by clone3 (a hunt: its child sent the parent's held plaintext again,
	 * a bad record MAC at the peer, 5 runs in 5, and once hung on a lock it copied held).
	 */
	case SYS_clone3: {
		struct clone_args arguments = {};
		if (clone3Arguments(a[0], a[1], &arguments))
			return clonedPast(p, number, a, arguments.flags, arguments.stack != 0);
		break;
	}
	default:
		break;
	}
	const long result = p.libc.syscall(number, a[0], a[1], a[2], a[3], a[4], a[5]);
	/* libuv makes its ring this way (core/read/unseen_waits.h). */
	if (number == SYS_io_uring_setup && result >= 0) {
		const int savedErrno = errno;
		p.unseen.noteRing();
		errno = savedErrno;
	}
	return result;
}
