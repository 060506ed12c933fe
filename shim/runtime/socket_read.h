#pragma once

#include <sys/types.h>

#include "runtime.h"

namespace tlstune {

/*
 * A read syscall of the host returned n on fd. When this thread is inside an OpenSSL
 * call, that is the connection's socket: learn it and count the read.
 */
inline void noteRead(int fd, ssize_t n) noexcept
{
	/* Inside an OpenSSL call there is a connection: a process without one pays a load. */
	if (!ConnectionSlot::anyMade() || !CallScope::noteSocketRead(fd, n) || n < 0)
		return;
	Process &p = process();
	if (!p.config.stats)
		return;
	Stats &stats = p.stats;
	Stats::add(stats.socketReads, 1);
	Stats::add(stats.socketReadBytes, static_cast<uint64_t>(n));
}

} /* namespace tlstune */
