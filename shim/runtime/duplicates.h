#pragma once

#include <cerrno>

#include "runtime.h"

namespace tlstune {

/*
 * After a dup of a socket in a process with TLS connections: waits on the new number see
 * what a connection holds for that socket (issue 12). One fstat per dup, and only there.
 * Not in a vfork child, which must change no state of the shim's.
 */
inline void noteDuplicate(Process &p, int from, int to) noexcept
{
	if (to < 0 || p.stats.connections.load(std::memory_order_relaxed) == 0 || p.inVforkChild())
		return;
	const int savedErrno = errno;
	ino_t ino;
	if (streamInode(from, &ino))
		p.buffered.duplicated(to, ino);
	errno = savedErrno;
}

} /* namespace tlstune */
