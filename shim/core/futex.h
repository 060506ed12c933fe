#pragma once

#include <atomic>
#include <cerrno>
#include <cstdint>
#include <ctime>
#include <linux/futex.h>
#include <sys/syscall.h>
#include <unistd.h>

namespace tlstune {

/*
 * The futex calls of the shim's own locks and gates, which run inside the program's calls:
 * the program's errno is kept (a wait that found the word changed answers EAGAIN, one cut
 * short ETIMEDOUT or EINTR; SSL_write takes a lock after its send failed, with that errno
 * to report).
 */
template <typename Word>
void futexWait(std::atomic<Word> *word, Word expected, const struct timespec *timeout = nullptr) noexcept
{
	static_assert(sizeof(Word) == 4, "a futex word is 32 bits");
	const int saved = errno;
	syscall(SYS_futex, word, FUTEX_WAIT_PRIVATE, expected, timeout, nullptr, 0);
	errno = saved;
}

template <typename Word>
void futexWake(std::atomic<Word> *word, int waiters) noexcept
{
	static_assert(sizeof(Word) == 4, "a futex word is 32 bits");
	const int saved = errno;
	syscall(SYS_futex, word, FUTEX_WAKE_PRIVATE, waiters, nullptr, nullptr, 0);
	errno = saved;
}

} /* namespace tlstune */
