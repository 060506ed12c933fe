/*
 * Processes made past glibc's fork(), which run no pthread_atfork handler. A child of
 * clone() without CLONE_VM (or of syscall(SYS_fork), SYS_clone or SYS_clone3: see
 * interpose/syscall.cpp) has a copy of what the shim holds and of its locks; a program
 * started by posix_spawn or popen (glibc's vfork-like clone inside) may write to an
 * inherited socket at once. Without the shim, every byte the program wrote
 * before was the kernel's already (a hunt: a clone child's 10 lines were lost, and a
 * spawned child's raw bytes overtook held lines), so the fork handlers run around the
 * first two and what is held goes to the kernel before the others.
 */

#include <cerrno>
#include <cstdarg>
#include <sched.h>

#include "interpose/export.h"
#include "runtime/runtime.h"

using namespace tlstune;

namespace {

struct CloneStart {
	int (*fn)(void *);
	void *arg;
};

/*
 * The child's first code: it runs on the copy of the parent's memory, locks taken. When
 * its function returns, glibc ends the child's thread alone (SYS_exit): what it holds goes
 * out first, and a flusher it started must not keep the process alive (it did, a second).
 */
int startChild(void *start)
{
	unlockInChild();
	const CloneStart *what = static_cast<const CloneStart *>(start);
	const int result = what->fn(what->arg);
	Process &p = process();
	p.drainBeforeImageEnds();
	p.coalescer.mainThreadLeft();
	return result;
}

} /* namespace */

/*
 * The three optional arguments are read whatever the flags say, as glibc's clone reads
 * them: the last from the caller's stack, past what a call without them passed.
 */
TLSTUNE_EXPORT __attribute__((no_sanitize("address"))) int clone(int (*fn)(void *), void *stack, int flags,
								  void *arg, ...)
{
	va_list rest;
	va_start(rest, arg);
	pid_t *parentTid = va_arg(rest, pid_t *);
	void *tls = va_arg(rest, void *);
	pid_t *childTid = va_arg(rest, pid_t *);
	va_end(rest);
	Process &p = process();
	if (!p.libc.clone) {
		errno = ENOSYS;
		return -1;
	}
	/*
	 * Another process in this memory, running beside this one, or borrowing it with this
	 * process's fds: the shim cannot tell its writes and closes from this process's (a
	 * hunt: its writes waited for the parent's next call; it ended a second late, with
	 * status 0; a CLONE_FILES child's close left the parent holding for the number a
	 * socketpair took next, which got the records). From now on nothing is held. One that
	 * borrows it with fds of its own (CLONE_VFORK) gets what is held first, as vfork's
	 * (a hunt: its shutdown went before 98 held lines).
	 */
	p.childInThisMemory(static_cast<unsigned>(flags));
	/* A thread, or vfork's borrower of this memory: nothing is copied. */
	if ((flags & CLONE_VM) || p.inVforkChild())
		return p.libc.clone(fn, stack, flags, arg, parentTid, tls, childTid);
	/*
	 * CLONE_VFORK: the parent waits for the child's exec or exit, and the locks would be
	 * held all that while, against the parent's other threads. Handed over, as for a
	 * spawned program; the child is taken for a vfork child (its pid is not the one the
	 * shim knows) and changes nothing of the shim's: it was not, and its _exit sent its
	 * copy of what another thread of the parent held since the hand-over, which the
	 * parent sent too (the peer reset the stream), or waited for a lock that thread held
	 * (3 runs of 100 of writer_cases clone-vfork with TLSTUNE_COALESCE=syscalls).
	 */
	if (flags & CLONE_VFORK) {
		p.handOver();
		noteChildSharingMemory();
		return p.libc.clone(fn, stack, flags, arg, parentTid, tls, childTid);
	}
	CloneStart start = { fn, arg };
	lockForFork();
	const int child = p.libc.clone(startChild, stack, flags, &start, parentTid, tls, childTid);
	const int savedErrno = errno;
	unlockInParent();
	errno = savedErrno;
	return child;
}

TLSTUNE_EXPORT int posix_spawn(pid_t *pid, const char *path, const posix_spawn_file_actions_t *actions,
			       const posix_spawnattr_t *attributes, char *const argv[], char *const envp[])
{
	if (Process *p = builtProcess())
		p->handOver();
	const auto real = libc().posix_spawn;
	return real ? real(pid, path, actions, attributes, argv, envp) : ENOSYS;
}

TLSTUNE_EXPORT int posix_spawnp(pid_t *pid, const char *file, const posix_spawn_file_actions_t *actions,
				const posix_spawnattr_t *attributes, char *const argv[], char *const envp[])
{
	if (Process *p = builtProcess())
		p->handOver();
	const auto real = libc().posix_spawnp;
	return real ? real(pid, file, actions, attributes, argv, envp) : ENOSYS;
}

/* glibc's system() spawns its shell with its own posix_spawn, past the interposed one. */
TLSTUNE_EXPORT int system(const char *command)
{
	if (Process *p = builtProcess())
		p->handOver();
	const auto real = libc().system;
	if (!real) {
		errno = ENOSYS;
		return -1;
	}
	return real(command);
}

TLSTUNE_EXPORT FILE *popen(const char *command, const char *type)
{
	if (Process *p = builtProcess())
		p->handOver();
	const auto real = libc().popen;
	if (!real) {
		errno = ENOSYS;
		return nullptr;
	}
	return real(command, type);
}

/*
 * vfork: the child borrows this memory and may exec a program that writes on an inherited
 * socket at once (a hunt: its raw bytes overtook the parent's held lines, 58 runs of 105),
 * so what is held goes to the kernel first. Its child returns through the caller's frame,
 * which a C wrapper would have left: an entry point that calls the hand-over, then jumps
 * to libc's vfork with the caller's stack as it found it. x86-64 only (the machines the
 * project builds for): elsewhere vfork stays libc's own.
 */
namespace {

pid_t vforkMissing()
{
	errno = ENOSYS;
	return -1;
}

} /* namespace */

extern "C" __attribute__((visibility("hidden"), used)) void *tlstune_before_vfork() noexcept
{
	if (Process *p = builtProcess())
		p->childInThisMemory(CLONE_VM | CLONE_VFORK);
	else
		noteChildSharingMemory();
	pid_t (*const real)() = libc().vfork;
	return reinterpret_cast<void *>(real ? real : vforkMissing);
}

#if defined(__x86_64__)
/* Stack aligned for the call (the return address is 8 bytes), then a tail jump. */
asm(R"(
	.text
	.globl vfork
	.type vfork, @function
	.p2align 4
vfork:
	.cfi_startproc
	endbr64
	sub $8, %rsp
	.cfi_adjust_cfa_offset 8
	call tlstune_before_vfork
	add $8, %rsp
	.cfi_adjust_cfa_offset -8
	jmp *%rax
	.cfi_endproc
	.size vfork, .-vfork
)");
#endif
