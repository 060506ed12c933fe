/*
 * Where the process image ends without exit(): _exit, _Exit, quick_exit and the exec
 * family. What the coalescer holds is sent first, as the kernel would have had it already
 * without the shim (issue 11: ten short writes then _exit reached the peer as nothing).
 * exit() itself is covered by the library's destructor (runtime.cpp), after the atexit
 * handlers. An exec that fails returns with the program as it was: the bytes went out
 * earlier. abort() and a failed assert() hand over what is held the same way (beforeAbort).
 */

#include <alloca.h>
#include <csignal>
#include <cstdarg>
#include <unistd.h>

#include "interpose/export.h"
#include "runtime/runtime.h"

using namespace tlstune;

namespace {

/* The arguments of execl and friends, up to the terminating null pointer, on the stack. */
#define COLLECT_ARGUMENTS(first, argv, rest)                                    \
	va_list rest;                                                           \
	va_start(rest, first);                                                  \
	size_t count_ = 1;                                                      \
	{                                                                       \
		va_list counting;                                               \
		va_copy(counting, rest);                                        \
		while (va_arg(counting, char *))                                \
			count_++;                                               \
		va_end(counting);                                               \
	}                                                                       \
	/* alloca: a vfork child must not allocate from the parent's heap. */    \
	char **argv = static_cast<char **>(alloca((count_ + 1) * sizeof(char *))); \
	argv[0] = const_cast<char *>(first);                                    \
	for (size_t i = 1; i <= count_; i++)                                    \
		argv[i] = va_arg(rest, char *);

/*
 * An exec: what is held goes to the kernel first, and a socket whose records OpenSSL holds
 * unread will close as the kernel closes it; an exec that fails, and returns, takes those
 * resets back.
 */
class ImageMayEnd {
public:
	ImageMayEnd() noexcept
	{
		if (Process *p = builtProcess())
			p->drainBeforeImageEnds(Process::ImageEnd::MayReturn, &made_);
	}
	~ImageMayEnd()
	{
		if (made_.count)
			process().buffered.closeFailed(made_);
	}
	ImageMayEnd(const ImageMayEnd &) = delete;
	ImageMayEnd &operator=(const ImageMayEnd &) = delete;

private:
	AbortiveCloses made_;
};

/*
 * The program's own abort: what is held goes to the kernel as at _exit, waiting for a
 * writer in another thread to leave the shim's locks (a hunt: a thread writing 100-byte
 * lines while main aborted lost up to 16 KB it had been told were written, 22 runs of
 * 170, when abort only tried the locks). Where a SIGABRT handler of the program's may
 * take the thread back into the call abort interrupted (siglongjmp), what that thread
 * holds stays. The process dies with its sockets, and those with records held unread are
 * reset, as the kernel resets them (a hunt: a FIN, also after an uncaught exception); not
 * where such a handler may take it elsewhere (another hunt: one that longjmps, and the
 * program read everything and closed with a reset).
 */
void beforeAbort(Process *built) noexcept
{
	if (!built || built->inVforkChild())
		return;
	Process &p = *built;
	struct sigaction action = {};
	const bool dies = sigaction(SIGABRT, nullptr, &action) == 0 && !(action.sa_flags & SA_SIGINFO) &&
			  (action.sa_handler == SIG_DFL || action.sa_handler == SIG_IGN);
	p.handOverAtImageEnd(dies ? Process::ImageEnd::Never : Process::ImageEnd::MayReturn);
	if (dies)
		p.buffered.imageEnds();
}

} /* namespace */

TLSTUNE_EXPORT void _exit(int status)
{
	if (Process *p = builtProcess())
		p->drainBeforeImageEnds();
	libc()._exit(status);
	__builtin_unreachable();
}

TLSTUNE_EXPORT void _Exit(int status)
{
	if (Process *p = builtProcess())
		p->drainBeforeImageEnds();
	libc()._exit(status);
	__builtin_unreachable();
}

/*
 * A main thread that leaves by pthread_exit leaves the process to its other threads, and
 * the process ends with the last of them: the shim's flusher must not be that one (it
 * waited up to a second for more work before it ended).
 */
TLSTUNE_EXPORT void pthread_exit(void *value)
{
	Process *p = builtProcess();
	if (p && gettid() == p->pid)
		p->coalescer.mainThreadLeft();
	libc().pthread_exit(value);
	__builtin_unreachable();
}

/* quick_exit runs the at_quick_exit handlers, not atexit's nor the library's destructor. */
TLSTUNE_EXPORT void quick_exit(int status)
{
	if (Process *p = builtProcess())
		p->drainBeforeImageEnds();
	if (libc().quick_exit)
		libc().quick_exit(status);
	libc()._exit(status);
	__builtin_unreachable();
}

/*
 * The program's own abort() and failed assert() (glibc's __assert_fail calls its abort
 * through an internal alias, so it is caught here). Not glibc's heap checks, which abort
 * from inside: the heap is broken there, and the shim stays out.
 */
TLSTUNE_EXPORT void abort(void)
{
	beforeAbort(builtProcess());
	if (libc().abort)
		libc().abort();
	/* Unresolved only if it came first of all: abort's own way out, then. */
	signal(SIGABRT, SIG_DFL);
	raise(SIGABRT);
	libc()._exit(127);
	__builtin_unreachable();
}

TLSTUNE_EXPORT void __assert_fail(const char *assertion, const char *file, unsigned line,
				  const char *function)
{
	beforeAbort(builtProcess());
	if (libc().assert_fail)
		libc().assert_fail(assertion, file, line, function);
	abort();
}

TLSTUNE_EXPORT int execve(const char *path, char *const argv[], char *const envp[])
{
	ImageMayEnd ending;
	return libc().execve(path, argv, envp);
}

TLSTUNE_EXPORT int execv(const char *path, char *const argv[])
{
	ImageMayEnd ending;
	return libc().execv(path, argv);
}

TLSTUNE_EXPORT int execvp(const char *file, char *const argv[])
{
	ImageMayEnd ending;
	return libc().execvp(file, argv);
}

TLSTUNE_EXPORT int execvpe(const char *file, char *const argv[], char *const envp[])
{
	ImageMayEnd ending;
	return libc().execvpe(file, argv, envp);
}

TLSTUNE_EXPORT int fexecve(int fd, char *const argv[], char *const envp[])
{
	ImageMayEnd ending;
	return libc().fexecve(fd, argv, envp);
}

TLSTUNE_EXPORT int execveat(int dirfd, const char *path, char *const argv[], char *const envp[],
			    int flags)
{
	if (!libc().execveat) {
		errno = ENOSYS;
		return -1;
	}
	ImageMayEnd ending;
	return libc().execveat(dirfd, path, argv, envp, flags);
}

TLSTUNE_EXPORT int execl(const char *path, const char *arg, ...)
{
	COLLECT_ARGUMENTS(arg, argv, rest)
	va_end(rest);
	ImageMayEnd ending;
	return libc().execv(path, argv);
}

TLSTUNE_EXPORT int execlp(const char *file, const char *arg, ...)
{
	COLLECT_ARGUMENTS(arg, argv, rest)
	va_end(rest);
	ImageMayEnd ending;
	return libc().execvp(file, argv);
}

TLSTUNE_EXPORT int execle(const char *path, const char *arg, ...)
{
	COLLECT_ARGUMENTS(arg, argv, rest)
	char *const *envp = va_arg(rest, char *const *);
	va_end(rest);
	ImageMayEnd ending;
	return libc().execve(path, argv, envp);
}
