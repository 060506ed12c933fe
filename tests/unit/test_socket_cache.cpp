/*
 * The queue of bytes the shim read ahead of a socket (issue 23), over real socketpairs:
 * one kernel read fills it, every read takes from it first and in order, a peek leaves
 * it, and a close, even one that comes while a fill is in the kernel, leaves nothing for
 * the number's next file.
 */

#include <gtest/gtest.h>

#include <cerrno>
#include <cstring>
#include <fcntl.h>
#include <atomic>
#include <string>
#include <thread>
#include <vector>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include "core/read/socket_cache.h"

using namespace tlstune;

namespace {

struct Pair {
	int fds[2] = { -1, -1 };
	Pair() { EXPECT_EQ(socketpair(AF_UNIX, SOCK_STREAM, 0, fds), 0); }
	~Pair()
	{
		for (int fd : fds) {
			if (fd >= 0)
				close(fd);
		}
	}
	void send(const std::string &bytes) const
	{
		ASSERT_EQ(write(fds[1], bytes.data(), bytes.size()), static_cast<ssize_t>(bytes.size()));
	}
};

/* The kernel's read of a fill, as the shim makes it for read(2). */
ssize_t kernelRead(int fd, const struct iovec *iov, int iovcnt, void * /*context*/)
{
	return readv(fd, iov, iovcnt);
}

std::string take(SocketCache &cache, int fd, std::size_t len, bool peek = false)
{
	std::string out(len, '\0');
	out.resize(static_cast<std::size_t>(cache.take(fd, &out[0], len, peek)));
	return out;
}

} /* namespace */

TEST(SocketCache, OneKernelReadFillsTheQueueAndReadsTakeItInOrder)
{
	Pair pair;
	SocketCache cache;
	EXPECT_FALSE(cache.used());
	pair.send("HEADEbody one|body two|");
	char header[5];
	ASSERT_EQ(cache.fill(pair.fds[0], header, sizeof(header), 4096, kernelRead, nullptr), 5);
	EXPECT_EQ(std::string(header, 5), "HEADE");
	EXPECT_TRUE(cache.used());
	EXPECT_EQ(cache.queued(pair.fds[0]), 18u) << "the rest of what the kernel had";

	char none;
	EXPECT_EQ(recv(pair.fds[0], &none, 1, MSG_DONTWAIT), -1) << "the socket itself is empty";
	EXPECT_EQ(take(cache, pair.fds[0], 9), "body one|");
	EXPECT_EQ(take(cache, pair.fds[0], 100), "body two|");
	EXPECT_EQ(cache.queued(pair.fds[0]), 0u);
	EXPECT_EQ(take(cache, pair.fds[0], 100), "") << "read empty: the next read is the kernel's";
}

TEST(SocketCache, APeekLeavesTheBytesAndAnIovecTakesAcrossItsParts)
{
	Pair pair;
	SocketCache cache;
	pair.send("abcdefgh");
	char first;
	ASSERT_EQ(cache.fill(pair.fds[0], &first, 1, 64, kernelRead, nullptr), 1);
	EXPECT_EQ(take(cache, pair.fds[0], 3, true), "bcd");
	EXPECT_EQ(cache.queued(pair.fds[0]), 7u);

	char a[2], b[10];
	struct iovec parts[2] = { { a, sizeof(a) }, { b, sizeof(b) } };
	EXPECT_EQ(cache.take(pair.fds[0], parts, 2), 7);
	EXPECT_EQ(std::string(a, 2) + std::string(b, 5), "bcdefgh");
}

TEST(SocketCache, ACopyTheKernelWouldRefuseTakesNothingAndAPartialOneTakesItsPart)
{
	Pair pair;
	SocketCache cache;
	pair.send("abcdefgh");
	char first;
	ASSERT_EQ(cache.fill(pair.fds[0], &first, 1, 64, kernelRead, nullptr), 1);
	char out[8];
	struct iovec part = { out, sizeof(out) };
	auto refused = [](const struct iovec *, int, const char *, std::size_t) -> ssize_t {
		errno = EFAULT;
		return -1;
	};
	errno = 0;
	EXPECT_EQ(cache.take(pair.fds[0], &part, 1, false, false, refused), -1);
	EXPECT_EQ(errno, EFAULT);
	EXPECT_EQ(cache.queued(pair.fds[0]), 7u) << "the queue as it was";
	auto threeOnly = [](const struct iovec *to, int, const char *from, std::size_t) -> ssize_t {
		std::memcpy(to[0].iov_base, from, 3);
		return 3;
	};
	EXPECT_EQ(cache.take(pair.fds[0], &part, 1, false, false, threeOnly), 3);
	EXPECT_EQ(std::string(out, 3), "bcd");
	EXPECT_EQ(take(cache, pair.fds[0], 100), "efgh") << "what the copy did not take is next";
}

TEST(SocketCache, AFillThatGetsNoMoreThanItsAskQueuesNothing)
{
	Pair pair;
	SocketCache cache;
	pair.send("12345");
	char buffer[5];
	ASSERT_EQ(cache.fill(pair.fds[0], buffer, sizeof(buffer), 4096, kernelRead, nullptr), 5);
	EXPECT_EQ(cache.queued(pair.fds[0]), 0u);
	ASSERT_EQ(fcntl(pair.fds[0], F_SETFL, O_NONBLOCK), 0);
	errno = 0;
	EXPECT_EQ(cache.fill(pair.fds[0], buffer, sizeof(buffer), 4096, kernelRead, nullptr), -1);
	EXPECT_EQ(errno, EAGAIN) << "the kernel's answer, errno kept";
}

TEST(SocketCache, AClosedNumberKeepsNothingForItsNextFile)
{
	Pair pair;
	SocketCache cache;
	pair.send("abcdefgh");
	char first;
	ASSERT_EQ(cache.fill(pair.fds[0], &first, 1, 64, kernelRead, nullptr), 1);
	const int number = pair.fds[0];
	cache.closed(number, number);
	EXPECT_EQ(cache.queued(number), 0u);
	EXPECT_EQ(take(cache, number, 8), "");
}

TEST(SocketCache, AFillAcrossACloseOfItsNumberQueuesNothing)
{
	Pair pair;
	SocketCache cache;
	pair.send("abcdefgh");
	struct Closing {
		SocketCache *cache;
	} closing = { &cache };
	/* Another thread's close while the fill's read is in the kernel. */
	auto readThenClose = [](int fd, const struct iovec *iov, int iovcnt, void *context) -> ssize_t {
		const ssize_t n = readv(fd, iov, iovcnt);
		static_cast<Closing *>(context)->cache->closed(fd, fd);
		return n;
	};
	char first;
	ASSERT_EQ(cache.fill(pair.fds[0], &first, 1, 64, readThenClose, &closing), 1);
	EXPECT_EQ(cache.queued(pair.fds[0]), 0u);
}

TEST(SocketCache, NumbersPastTheTableAreTheKernelsAlone)
{
	Pair pair;
	SocketCache cache;
	pair.send("abcdefgh");
	char first;
	/* The read goes to the socket; the number it is asked for is past the table. */
	auto readPair = [](int, const struct iovec *iov, int iovcnt, void *context) -> ssize_t {
		return readv(*static_cast<int *>(context), iov, iovcnt);
	};
	ASSERT_EQ(cache.fill(SocketCache::kNumbers, &first, 1, 64, readPair, &pair.fds[0]), 1);
	EXPECT_EQ(cache.queued(SocketCache::kNumbers), 0u);
	char rest[16];
	EXPECT_EQ(read(pair.fds[0], rest, sizeof(rest)), 7) << "the rest stayed in the kernel";
}

/*
 * For ThreadSanitizer: the table, its chunks and the free list are shared; each thread
 * fills, takes and closes its own sockets' queues, over and over, and keeps its bytes in
 * order.
 */
TEST(SocketCache, ManyThreadsEachWithTheirOwnSockets)
{
	SocketCache cache;
	std::atomic<int> wrong{ 0 };
	std::vector<std::thread> threads;
	for (int t = 0; t < 8; t++) {
		threads.emplace_back([&] {
			for (int round = 0; round < 50; round++) {
				Pair pair;
				const std::string sent = "0123456789abcdefghij";
				pair.send(sent);
				char first[3];
				std::string got;
				if (cache.fill(pair.fds[0], first, sizeof(first), 64, kernelRead, nullptr) == 3)
					got.assign(first, 3);
				got += take(cache, pair.fds[0], 7);
				got += take(cache, pair.fds[0], 100);
				if (got != sent)
					wrong++;
				cache.closed(pair.fds[0], pair.fds[0]);
			}
		});
	}
	for (std::thread &thread : threads)
		thread.join();
	EXPECT_EQ(wrong.load(), 0);
}
