/*
 * A read of the program's own that the shim's queue answered in part goes on in the
 * kernel as the kernel's one read would have (core/read/read_on.h), over real sockets:
 * it takes what the kernel holds behind, no more, waits for the rest with MSG_WAITALL,
 * and leaves an error that came after the bytes for the next read.
 */

#include <gtest/gtest.h>

#include <arpa/inet.h>
#include <cerrno>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <string>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <thread>
#include <unistd.h>

#include "core/read/read_on.h"

using namespace tlstune;

namespace {

int kernelIoctl(int fd, unsigned long request, void *argument)
{
	return ioctl(fd, request, argument);
}

const KernelReads kKernel = { kernelIoctl, ::poll, ::recvmsg, ::fcntl };

struct Pair {
	int fds[2] = { -1, -1 };
	Pair() { EXPECT_EQ(socketpair(AF_UNIX, SOCK_STREAM, 0, fds), 0); }
	~Pair()
	{
		close(fds[0]);
		close(fds[1]);
	}
	void send(const std::string &bytes) const
	{
		ASSERT_EQ(write(fds[1], bytes.data(), bytes.size()), static_cast<ssize_t>(bytes.size()));
	}
};

/* A read of 10 bytes whose first 3 the queue answered ("abc"): what the kernel added. */
std::string readOn(int fd, int flags, std::size_t *added)
{
	char buffer[10] = { 'a', 'b', 'c' };
	struct iovec parts[2] = { { buffer, 4 }, { buffer + 4, 6 } };
	*added = readOnInKernel(fd, parts, 2, 3, flags, kKernel);
	return std::string(buffer, 3 + *added);
}

} /* namespace */

TEST(ReadOn, TakesWhatTheKernelHoldsBehindAndNoMore)
{
	Pair pair;
	pair.send("defghijklm");
	std::size_t added = 0;
	EXPECT_EQ(readOn(pair.fds[0], 0, &added), "abcdefghij");
	EXPECT_EQ(added, 7u);
	char rest[8];
	EXPECT_EQ(recv(pair.fds[0], rest, sizeof(rest), MSG_DONTWAIT), 3) << "the rest stays in the kernel";
}

TEST(ReadOn, APeekLeavesTheKernelsBytesAndAReadOfAnEmptySocketAddsNothing)
{
	Pair pair;
	std::size_t added = 1;
	EXPECT_EQ(readOn(pair.fds[0], 0, &added), "abc") << "a read that has bytes does not wait";
	pair.send("de");
	EXPECT_EQ(readOn(pair.fds[0], MSG_PEEK, &added), "abcde");
	char rest[8];
	EXPECT_EQ(recv(pair.fds[0], rest, sizeof(rest), MSG_DONTWAIT), 2);
}

TEST(ReadOn, WaitsForTheRestWithMsgWaitall)
{
	Pair pair;
	pair.send("de");
	std::thread writer([&] { pair.send("fghij"); });
	std::size_t added = 0;
	EXPECT_EQ(readOn(pair.fds[0], MSG_WAITALL, &added), "abcdefghij");
	writer.join();
}

TEST(ReadOn, AWaitallOfAnEndedStreamEndsWithWhatItHas)
{
	Pair pair;
	pair.send("de");
	shutdown(pair.fds[1], SHUT_WR);
	std::size_t added = 0;
	EXPECT_EQ(readOn(pair.fds[0], MSG_WAITALL, &added), "abcde");
}

TEST(ReadOn, LeavesTheResetThatCameAfterTheQueuedBytesForTheNextRead)
{
	const int listener = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	struct sockaddr_in address = {};
	address.sin_family = AF_INET;
	address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	socklen_t length = sizeof(address);
	ASSERT_EQ(bind(listener, reinterpret_cast<sockaddr *>(&address), sizeof(address)), 0);
	ASSERT_EQ(listen(listener, 1), 0);
	ASSERT_EQ(getsockname(listener, reinterpret_cast<sockaddr *>(&address), &length), 0);
	const int client = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	ASSERT_EQ(connect(client, reinterpret_cast<sockaddr *>(&address), sizeof(address)), 0);
	const int server = accept(listener, nullptr, nullptr);
	ASSERT_GE(server, 0);
	const struct linger abortive = { 1, 0 };
	ASSERT_EQ(setsockopt(server, SOL_SOCKET, SO_LINGER, &abortive, sizeof(abortive)), 0);
	ASSERT_EQ(close(server), 0);
	struct pollfd reset = { client, POLLIN, 0 };
	ASSERT_EQ(poll(&reset, 1, 10000), 1) << "the reset never came";
	for (int flags : { static_cast<int>(MSG_PEEK), 0 }) {
		std::size_t added = 1;
		EXPECT_EQ(readOn(client, flags, &added), "abc");
	}
	char byte;
	errno = 0;
	EXPECT_EQ(recv(client, &byte, 1, 0), -1);
	EXPECT_EQ(errno, ECONNRESET) << "the reset is the next read's";
	close(client);
	close(listener);
}
