/*
 * A program that confines itself with seccomp may forbid the calls the shim makes on its
 * behalf (send for held bytes, getsockopt, clone for the flusher): under strict mode any
 * of them kills the process, under a filter it may fail or kill. So what is held goes out
 * before the confinement begins, and nothing is held afterwards (issue 22). Both ways in
 * are seen: prctl(PR_SET_SECCOMP) and the seccomp system call (libseccomp's), and both
 * also when the call fails: the process then simply holds nothing any more.
 */

#include <cerrno>
#include <cstdarg>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "interpose/export.h"
#include "runtime/runtime.h"

using namespace tlstune;

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

/*
 * glibc's syscall(2) takes six arguments after the number, whatever the call uses: the
 * last comes from the caller's stack, past what a call with fewer passed, which
 * AddressSanitizer would take for an overflow (syscall(SYS_gettid) from a program).
 */
TLSTUNE_EXPORT __attribute__((no_sanitize("address"))) long syscall(long number, ...)
{
	va_list rest;
	va_start(rest, number);
	long arguments[6];
	for (long &argument : arguments)
		argument = va_arg(rest, long);
	va_end(rest);
	Process &p = process();
	/* A raw close is a close: the wrappers hand over what the shim holds for the fds first. */
	if (number == SYS_close)
		return close(static_cast<int>(arguments[0]));
	if (number == SYS_close_range && p.libc.close_range)
		return close_range(static_cast<unsigned>(arguments[0]), static_cast<unsigned>(arguments[1]),
				   static_cast<int>(arguments[2]));
	if (number == SYS_seccomp)
		p.enterSandbox();
	/* The process image ends here, as in _exit: what is held goes to the kernel first. */
	if (number == SYS_exit_group)
		p.drainBeforeImageEnds();
	const long result = p.libc.syscall(number, arguments[0], arguments[1], arguments[2], arguments[3],
					   arguments[4], arguments[5]);
	/* libuv makes its ring this way (core/read/unseen_waits.h). */
	if (number == SYS_io_uring_setup && result >= 0) {
		const int savedErrno = errno;
		p.unseen.noteRing();
		errno = savedErrno;
	}
	return result;
}
