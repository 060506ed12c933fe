#pragma once

#include <vector>

namespace tlstune {

/*
 * Whether the process has a descriptor for fd's socket other than fd and the ones in
 * except (the shim's own duplicates): /proc/self/fd, each entry compared by device and
 * inode. True when that cannot be read, which keeps the socket as it is. No allocation.
 */
bool socketNamedElsewhere(int fd, const std::vector<int> &except, int (*closeFd)(int));

/* Bytes the peer sent that nobody read yet: the socket's receive queue (SIOCINQ). */
int unreadBytes(int fd);

} /* namespace tlstune */
