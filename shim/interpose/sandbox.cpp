/*
 * A program that confines itself with seccomp may forbid the calls the shim makes on its
 * behalf (send for held bytes, getsockopt, clone for the flusher): under strict mode any
 * of them kills the process, under a filter it may fail or kill. So what is held goes out
 * before the confinement begins, and nothing is held afterwards (issue 22). Both ways in
 * are seen: prctl(PR_SET_SECCOMP) and the seccomp system call (libseccomp's), and both
 * also when the call fails: the process then simply holds nothing any more.
 *
 * unshare and setns refuse a user namespace (and unshare CLONE_THREAD, CLONE_SIGHAND and
 * CLONE_VM) to a process with more than one thread: where the shim's flusher was the one
 * more, what is held goes to the kernel, the flusher ends, and the call is made again.
 * unshare(CLONE_FILES) leaves the shim's thread in the old fd table, where a number may
 * name another socket than the program's (a hunt: a new connection's record went to the
 * closed one's peer on the number both had, and the old socket lived on a second in the
 * flusher's table): nothing is held from then on (Process::unsharingFiles).
 */

#include <cerrno>
#include <cstdarg>
#include <sched.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "interpose/export.h"
#include "runtime/runtime.h"

using namespace tlstune;

namespace {

/* call() again without the shim's thread, when it failed as only a multi-threaded process does. */
template <typename Call>
int singleThreaded(bool needsOneThread, Call call)
{
	const int result = call();
	if (result == 0 || errno != EINVAL || !needsOneThread)
		return result;
	Process &p = process();
	/* A vfork child shares the parent's memory (the kernel's EINVAL is for that): hands off. */
	if (p.inVforkChild())
		return result;
	const int savedErrno = errno;
	p.held.encryptAllNow();
	p.coalescer.flushAll();
	p.coalescer.endFlusher();
	errno = savedErrno;
	const int again = call();
	const int callErrno = errno;
	p.coalescer.resumeFlusher();
	errno = callErrno;
	return again;
}

} /* namespace */

TLSTUNE_EXPORT int unshare(int flags)
{
	/* A process that built no state holds nothing and has no thread of the shim's. */
	Process *built = builtProcess();
	if (built && (flags & CLONE_FILES))
		built->unsharingFiles();
	const int oneThread = CLONE_NEWUSER | CLONE_THREAD | CLONE_SIGHAND | CLONE_VM;
	return singleThreaded((flags & oneThread) != 0, [&] { return libc().unshare(flags); });
}

/* nstype 0 takes whatever namespace fd names, a user namespace among them. */
TLSTUNE_EXPORT int setns(int fd, int nstype)
{
	const bool user = nstype == 0 || (nstype & CLONE_NEWUSER) != 0;
	return singleThreaded(user, [&] { return process().libc.setns(fd, nstype); });
}

TLSTUNE_EXPORT int prctl(int option, ...)
{
	va_list rest;
	va_start(rest, option);
	unsigned long arguments[4];
	for (unsigned long &argument : arguments)
		argument = va_arg(rest, unsigned long);
	va_end(rest);
	Process &p = process();
	if (option == PR_SET_SECCOMP)
		p.enterSandbox();
	return p.libc.prctl(option, arguments[0], arguments[1], arguments[2], arguments[3]);
}
