#include "epoll_wake.h"

#include <cerrno>
#include <fcntl.h>
#include <sys/eventfd.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

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
 * fd moved out of the numbers the program's next open takes (the lowest free one), to the
 * top of the first 1,024 or of a lower limit: a one-shot loop's re-arm made the program's
 * next descriptor one higher than without the shim (a hunt: 6 against 5). Not higher: the
 * kernel grows a process's fd table to the highest number in use.
 */
int outOfTheWay(int fd) noexcept
{
	constexpr rlim_t kTop = 1024, kBelowTop = 64;
	struct rlimit limit;
	if (getrlimit(RLIMIT_NOFILE, &limit) != 0 || limit.rlim_cur <= 2 * kBelowTop)
		return fd;
	const rlim_t top = limit.rlim_cur < kTop ? limit.rlim_cur : kTop;
	const int moved = fcntl(fd, F_DUPFD_CLOEXEC, static_cast<int>(top - kBelowTop));
	if (moved < 0)
		return fd;
	close(fd);
	return moved;
}

} /* namespace */

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
