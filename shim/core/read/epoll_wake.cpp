#include "epoll_wake.h"

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fcntl.h>
#include <sys/eventfd.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "core/raw_syscalls.h"

namespace tlstune {

namespace {

/* The wake's data: what no registration of a program's is likely to carry. */
constexpr unsigned long long kWakeData = 0x746c7374756e6577ULL; /* "tlstunew" */

bool sameFile(int fd, dev_t dev, ino_t ino) noexcept
{
	struct stat st;
	return fstat(fd, &st) == 0 && st.st_dev == dev && st.st_ino == ino;
}

/*
 * The size of this process's fd table (FDSize in /proc/self/status), or 0 if unknown. Raw
 * system calls, as readKernelList's (core/read/epoll_sets.cpp).
 */
long fdTableSize() noexcept
{
	RawSyscalls raw;
	const int savedErrno = errno;
	const int file = static_cast<int>(syscall(SYS_openat, AT_FDCWD, "/proc/self/status", O_RDONLY | O_CLOEXEC));
	long size = 0;
	if (file >= 0) {
		char text[8192];
		long used = 0;
		for (long n; used < static_cast<long>(sizeof(text)) - 1 &&
			     (n = syscall(SYS_read, file, text + used, sizeof(text) - 1 - used)) > 0;)
			used += n;
		text[used] = '\0';
		if (const char *line = std::strstr(text, "\nFDSize:"))
			size = std::strtol(line + 8, nullptr, 10);
		syscall(SYS_close, file);
	}
	errno = savedErrno;
	return size > 0 ? size : 0;
}

/*
 * fd moved out of the numbers the program's next open takes (the lowest free one), to a
 * free number in the top eighth of the process's fd table: a one-shot loop's re-arm made
 * the program's next descriptor one higher than without the shim (a hunt: 6 against 5).
 * Never past the table: the kernel would grow it, and in a process with threads wait for
 * an RCU grace period first (a hunt: 10 to 22 ms, once, when the wake went to 960 of a
 * table of 64; then 6 to 16 ms when 56 to 63 were taken and it went to 64). A table of
 * unknown size (no /proc) has the 64 every process starts with. No free number there:
 * it stays where it is.
 */
int outOfTheWay(int fd) noexcept
{
	struct rlimit limit;
	if (getrlimit(RLIMIT_NOFILE, &limit) != 0)
		return fd;
	rlim_t top = static_cast<rlim_t>(fdTableSize());
	if (top == 0)
		top = 64;
	if (limit.rlim_cur < top)
		top = limit.rlim_cur;
	const int last = static_cast<int>(top) - 1;
	const int from = static_cast<int>(top - top / 8);
	for (int n = last; n >= from && n > fd; n--) {
		/* A free number: F_DUPFD takes the lowest free one from there, this one. */
		if (fcntl(n, F_GETFD) >= 0 || errno != EBADF)
			continue;
		const int moved = fcntl(fd, F_DUPFD_CLOEXEC, n);
		if (moved < 0)
			return fd;
		close(fd);
		return moved;
	}
	return fd;
}

} /* namespace */

EpollWake::~EpollWake()
{
	if (fd_ >= 0 && sameFile(fd_, dev_, ino_))
		close(fd_);
}

int EpollWake::descriptor() noexcept
{
	if (fd_ >= 0 && sameFile(fd_, dev_, ino_))
		return fd_;
	/* Readable for ever: nobody reads it. */
	fd_ = eventfd(1, EFD_CLOEXEC | EFD_NONBLOCK);
	if (fd_ >= 0)
		fd_ = outOfTheWay(fd_);
	struct stat st;
	if (fd_ >= 0 && fstat(fd_, &st) == 0) {
		dev_ = st.st_dev;
		ino_ = st.st_ino;
	} else if (fd_ >= 0) {
		close(fd_);
		fd_ = -1;
	}
	return fd_;
}

void EpollWake::wake(int epfd, EpollCtl ctl) noexcept
{
	const int savedErrno = errno;
	std::lock_guard<std::mutex> lock(mutex_);
	const int fd = descriptor();
	struct epoll_event event = {};
	event.events = EPOLLIN;
	event.data.u64 = kWakeData;
	/*
	 * Counted before it is added: the waiter the ADD wakes must find it (idle() false), or
	 * the wake's event would reach the program. EEXIST: it is there already, and a waiter
	 * will see it; one about to settle sees this generation and leaves it.
	 */
	generation_.fetch_add(1, std::memory_order_acq_rel);
	if (fd >= 0)
		ctl(epfd, EPOLL_CTL_ADD, fd, &event);
	errno = savedErrno;
}

int EpollWake::strip(struct epoll_event *events, int count, bool *woken) const noexcept
{
	*woken = false;
	int kept = 0;
	for (int i = 0; i < count; i++) {
		if (events[i].data.u64 == kWakeData && (events[i].events & EPOLLIN))
			*woken = true;
		else
			events[kept++] = events[i];
	}
	return kept;
}

void EpollWake::settle(int epfd, EpollCtl ctl, unsigned long seen) noexcept
{
	const int savedErrno = errno;
	std::lock_guard<std::mutex> lock(mutex_);
	/* ENOENT: another waiter of the set took it out first. */
	if (generation_.load(std::memory_order_relaxed) == seen && fd_ >= 0 && sameFile(fd_, dev_, ino_))
		ctl(epfd, EPOLL_CTL_DEL, fd_, nullptr);
	errno = savedErrno;
}

} /* namespace tlstune */
