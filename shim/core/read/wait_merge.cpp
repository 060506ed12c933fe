#include "wait_merge.h"

#include <cerrno>

namespace tlstune {

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

void disarmOneShot(EpollCtl realCtl, int epfd, const EpollRegistration &registration) noexcept
{
	int savedErrno = errno;
	struct epoll_event event = {};
	event.events = registration.events & (EPOLLONESHOT | EPOLLET | EPOLLWAKEUP);
	event.data.u64 = registration.data;
	realCtl(epfd, EPOLL_CTL_MOD, registration.fd, &event);
	errno = savedErrno;
}

} /* namespace tlstune */
