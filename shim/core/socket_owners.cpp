#include "socket_owners.h"

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <dirent.h>
#include <fcntl.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/types.h>
#include <unistd.h>

namespace tlstune {

namespace {

bool sameFile(const struct stat &a, int fd)
{
	struct stat b;
	return fstat(fd, &b) == 0 && a.st_dev == b.st_dev && a.st_ino == b.st_ino;
}

} /* namespace */

bool socketNamedElsewhere(int fd, const std::vector<int> &except, int (*closeFd)(int))
{
	const int savedErrno = errno;
	struct stat socket;
	const int directory = open("/proc/self/fd", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (directory < 0 || fstat(fd, &socket) != 0) {
		if (directory >= 0)
			closeFd(directory);
		errno = savedErrno;
		return true;
	}
	bool named = false, readable = true;
	/* getdents64 rather than readdir: no allocation, in the shim's thread beside the program. */
	alignas(struct dirent64) char buffer[4096];
	while (!named) {
		const ssize_t got = getdents64(directory, buffer, sizeof(buffer));
		if (got <= 0) {
			readable = got == 0;
			break;
		}
		for (ssize_t at = 0; at < got && !named;) {
			const auto *entry = reinterpret_cast<const struct dirent64 *>(buffer + at);
			at += entry->d_reclen;
			char *end = nullptr;
			const long number = std::strtol(entry->d_name, &end, 10);
			if (end == entry->d_name || *end != '\0')
				continue; /* "." and ".." */
			const int other = static_cast<int>(number);
			if (other == fd || other == directory ||
			    std::find(except.begin(), except.end(), other) != except.end())
				continue;
			named = sameFile(socket, other);
		}
	}
	closeFd(directory);
	errno = savedErrno;
	return named || !readable;
}

int unreadBytes(int fd)
{
	int bytes = 0;
	/* The system call itself: the shim's ioctl adds what it read ahead for the program. */
	if (syscall(SYS_ioctl, fd, FIONREAD, &bytes) != 0)
		return -1;
	return bytes;
}

} /* namespace tlstune */
