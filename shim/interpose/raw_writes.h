#pragma once

#include "core/known_fds.h"

namespace tlstune {

/*
 * The program is about to write to fd itself (write, send, a raw system call; caller: the
 * call's return address): what the shim holds for fd goes to the kernel first
 * (raw_writes.cpp). One load or two for a number the shim does not know.
 */
void programWritesKnown(int fd, const void *caller) noexcept;
inline void programWrites(int fd, const void *caller) noexcept
{
	if (knownFds().mayHave(fd) || copiedFds().mayHave(fd))
		programWritesKnown(fd, caller);
}

} /* namespace tlstune */
