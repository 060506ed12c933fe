#include "pipe_signal.h"

#include <cerrno>
#include <csignal>
#include <cstring>
#include <pthread.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "core/raw_syscalls.h"

namespace tlstune {

void raisePipeSignal() noexcept
{
	const int savedErrno = errno;
	siginfo_t info;
	std::memset(&info, 0, sizeof(info));
	info.si_signo = SIGPIPE;
	info.si_code = SI_USER;
	info.si_pid = getpid();
	info.si_uid = getuid();
	/* The kernel lets a thread queue a signal of any code to itself. */
	RawSyscalls raw;
	if (syscall(SYS_rt_tgsigqueueinfo, getpid(), gettid(), SIGPIPE, &info) != 0)
		pthread_kill(pthread_self(), SIGPIPE); /* refused (a sandbox): SI_TKILL then */
	errno = savedErrno;
}

} /* namespace tlstune */
