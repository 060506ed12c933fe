#pragma once

#include <cstdio>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <spawn.h>
#include <sys/epoll.h>
#include <sys/select.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <time.h>

namespace tlstune {

/* The next definitions (libc's) of the libc functions the shim interposes. */
struct LibcApi {
	int (*poll)(struct pollfd *, nfds_t, int) = nullptr;
	int (*poll_chk)(struct pollfd *, nfds_t, int, size_t) = nullptr;
	int (*ppoll)(struct pollfd *, nfds_t, const struct timespec *, const sigset_t *) = nullptr;
	int (*ppoll_chk)(struct pollfd *, nfds_t, const struct timespec *, const sigset_t *,
			 size_t) = nullptr;
	int (*select)(int, fd_set *, fd_set *, fd_set *, struct timeval *) = nullptr;
	int (*pselect)(int, fd_set *, fd_set *, fd_set *, const struct timespec *,
		       const sigset_t *) = nullptr;
	int (*epoll_create)(int) = nullptr;
	int (*epoll_create1)(int) = nullptr;
	int (*epoll_ctl)(int, int, int, struct epoll_event *) = nullptr;
	int (*epoll_wait)(int, struct epoll_event *, int, int) = nullptr;
	int (*epoll_pwait)(int, struct epoll_event *, int, int, const sigset_t *) = nullptr;
	int (*epoll_pwait2)(int, struct epoll_event *, int, const struct timespec *,
			    const sigset_t *) = nullptr; /* glibc 2.35+ */

	ssize_t (*read)(int, void *, size_t) = nullptr;
	ssize_t (*read_chk)(int, void *, size_t, size_t) = nullptr;
	ssize_t (*readv)(int, const struct iovec *, int) = nullptr;
	ssize_t (*recv)(int, void *, size_t, int) = nullptr;
	ssize_t (*recv_chk)(int, void *, size_t, size_t, int) = nullptr;
	ssize_t (*recvfrom)(int, void *, size_t, int, struct sockaddr *, socklen_t *) = nullptr;
	ssize_t (*recvfrom_chk)(int, void *, size_t, size_t, int, struct sockaddr *,
				socklen_t *) = nullptr;
	ssize_t (*recvmsg)(int, struct msghdr *, int) = nullptr;
	ssize_t (*sendmsg)(int, const struct msghdr *, int) = nullptr;
	ssize_t (*write)(int, const void *, size_t) = nullptr;
	ssize_t (*writev)(int, const struct iovec *, int) = nullptr;
	ssize_t (*send)(int, const void *, size_t, int) = nullptr;
	ssize_t (*sendto)(int, const void *, size_t, int, const struct sockaddr *, socklen_t) = nullptr;
	ssize_t (*sendfile)(int, int, off_t *, size_t) = nullptr;
	ssize_t (*splice)(int, loff_t *, int, loff_t *, size_t, unsigned) = nullptr;
	int (*sendmmsg)(int, struct mmsghdr *, unsigned, int) = nullptr;
	int (*recvmmsg)(int, struct mmsghdr *, unsigned, int, struct timespec *) = nullptr;
	int (*setsockopt)(int, int, int, const void *, socklen_t) = nullptr;
	int (*ioctl)(int, unsigned long, void *) = nullptr;
	int (*close)(int) = nullptr;
	int (*dup)(int) = nullptr;
	int (*dup2)(int, int) = nullptr;
	int (*dup3)(int, int, int) = nullptr;
	int (*pidfd_getfd)(int, int, unsigned) = nullptr; /* glibc 2.36+ */
	int (*close_range)(unsigned, unsigned, int) = nullptr; /* glibc 2.34+ */
	void (*closefrom)(int) = nullptr;                       /* glibc 2.34+ */
	int (*fclose)(FILE *) = nullptr;
	FILE *(*freopen)(const char *, const char *, FILE *) = nullptr;
	FILE *(*freopen64)(const char *, const char *, FILE *) = nullptr;
	int (*shutdown)(int, int) = nullptr;
	int (*fcntl)(int, int, ...) = nullptr;
	int (*fcntl64)(int, int, ...) = nullptr; /* glibc 2.28+ */

	void (*_exit)(int) = nullptr;
	void (*quick_exit)(int) = nullptr;
	void (*pthread_exit)(void *) = nullptr;
	void (*abort)() = nullptr;
	void (*assert_fail)(const char *, const char *, unsigned, const char *) = nullptr;
	int (*execve)(const char *, char *const[], char *const[]) = nullptr;
	int (*execv)(const char *, char *const[]) = nullptr;
	int (*execvp)(const char *, char *const[]) = nullptr;
	int (*execvpe)(const char *, char *const[], char *const[]) = nullptr;
	int (*fexecve)(int, char *const[], char *const[]) = nullptr;
	int (*execveat)(int, const char *, char *const[], char *const[], int) = nullptr; /* glibc 2.34+ */

	int (*prctl)(int, unsigned long, unsigned long, unsigned long, unsigned long) = nullptr;
	int (*unshare)(int) = nullptr;
	int (*setns)(int, int) = nullptr;
	long (*syscall)(long, long, long, long, long, long, long) = nullptr;

	int (*clone)(int (*)(void *), void *, int, void *, pid_t *, void *, pid_t *) = nullptr;
	int (*pthread_create)(pthread_t *, const pthread_attr_t *, void *(*)(void *), void *) = nullptr;
	pid_t (*fork)() = nullptr;
	pid_t (*vfork)() = nullptr;
	int (*posix_spawn)(pid_t *, const char *, const posix_spawn_file_actions_t *,
			   const posix_spawnattr_t *, char *const[], char *const[]) = nullptr;
	int (*posix_spawnp)(pid_t *, const char *, const posix_spawn_file_actions_t *,
			    const posix_spawnattr_t *, char *const[], char *const[]) = nullptr;
	FILE *(*popen)(const char *, const char *) = nullptr;
	int (*system)(const char *) = nullptr;
};

} /* namespace tlstune */
