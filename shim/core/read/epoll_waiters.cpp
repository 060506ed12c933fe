#include "epoll_waiters.h"

namespace tlstune {

EpollWaiters g_epollWaiters;

void EpollWaiters::forkedChild() noexcept
{
	/* Every wait counts into both: none in all, none in a slot (no other thread runs here). */
	if (total_.load(std::memory_order_relaxed) == 0)
		return;
	total_.store(0, std::memory_order_relaxed);
	for (auto &waiting : slots_)
		waiting.store(0, std::memory_order_relaxed);
}

} /* namespace tlstune */
