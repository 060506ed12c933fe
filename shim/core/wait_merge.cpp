#include "wait_merge.h"

#include <cerrno>
#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <fcntl.h>
#include <sys/syscall.h>
#include <unistd.h>

namespace tlstune {

bool parseEpollFdinfoLine(const char *line, EpollRegistration *out) noexcept
{
	/* "tfd:        5 events:       19 data:                5  pos:0 ino:3d1a sdev:8" */
	int fd;
	unsigned events;
	unsigned long long data;
	unsigned long ino;
	if (std::sscanf(line, "tfd: %d events: %x data: %llx pos:%*d ino:%lx", &fd, &events, &data,
			&ino) != 4)
		return false;
	*out = { fd, events, data, ino };
	return true;
}

int mergeEpollEvent(struct epoll_event *events, int ready, int maxevents,
		    const EpollRegistration &registration, bool *delivered) noexcept
{
	const uint32_t readable = registration.events & (EPOLLIN | EPOLLRDNORM);
	*delivered = true;
	for (int i = 0; i < ready; i++) {
		if (events[i].data.u64 == registration.data) {
			events[i].events |= readable;
			return ready;
		}
	}
	if (ready >= maxevents) {
		*delivered = false;
		return ready;
	}
	events[ready].events = readable;
	events[ready].data.u64 = registration.data;
	return ready + 1;
}

int bufferedRegistrations(const BufferedFds &buffered, int epfd, EpollRegistration *out,
			  int max) noexcept
{
	int savedErrno = errno;
	char path[64];
	std::snprintf(path, sizeof(path), "/proc/self/fdinfo/%d", epfd);
	/*
	 * Raw syscalls: the shim's own read() wrapper would take this for a socket read when
	 * a program's BIO waits inside SSL_read.
	 */
	int fd = static_cast<int>(syscall(SYS_openat, AT_FDCWD, path, O_RDONLY | O_CLOEXEC));
	if (fd < 0) {
		errno = savedErrno;
		return 0;
	}

	int found = 0;
	char buffer[4096];
	size_t used = 0;
	for (;;) {
		ssize_t n = syscall(SYS_read, fd, buffer + used, sizeof(buffer) - 1 - used);
		if (n <= 0)
			break;
		used += static_cast<size_t>(n);
		buffer[used] = '\0';

		char *start = buffer;
		for (char *end; (end = std::strchr(start, '\n')); start = end + 1) {
			*end = '\0';
			EpollRegistration registration;
			if (found < max && parseEpollFdinfoLine(start, &registration) &&
			    (registration.events & (EPOLLIN | EPOLLRDNORM)) &&
			    buffered.holds(registration.fd, registration.ino))
				out[found++] = registration;
		}
		used = static_cast<size_t>(buffer + used - start);
		std::memmove(buffer, start, used);
		if (used == sizeof(buffer) - 1)
			used = 0; /* a line longer than any fdinfo line: drop it */
	}
	syscall(SYS_close, fd);
	errno = savedErrno;
	return found;
}

void disarmOneShot(int epfd, const EpollRegistration &registration) noexcept
{
	int savedErrno = errno;
	struct epoll_event event = {};
	event.events = registration.events & (EPOLLONESHOT | EPOLLET | EPOLLWAKEUP);
	event.data.u64 = registration.data;
	epoll_ctl(epfd, EPOLL_CTL_MOD, registration.fd, &event);
	errno = savedErrno;
}

} /* namespace tlstune */
