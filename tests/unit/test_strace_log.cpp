#include <gtest/gtest.h>

#include <sstream>

#include "strace_log.h"

using namespace tlstune;

namespace {

std::vector<Syscall> parse(const std::string &text)
{
	std::istringstream in(text);
	return parseStraceLog(in);
}

} /* namespace */

TEST(StraceLog, ReadsSizesTargetsAndResults)
{
	auto calls = parse(
		"4242  recvfrom(5<TCP:[127.0.0.1:40000->127.0.0.1:9443]>, \"\"..., 5, 0, NULL, NULL) = 5\n"
		"4242  recvfrom(5<TCP:[127.0.0.1:40000->127.0.0.1:9443]>, \"\"..., 16408, 0, NULL, NULL) = 16408\n"
		"4242  write(1</dev/null>, \"\"..., 4096) = 4096\n"
		"4242  read(5<TCPv6:[[::1]:40000->[::1]:9443]>, 0x7ffd1c3b2000, 5) = -1 EAGAIN (Resource temporarily unavailable)\n");
	ASSERT_EQ(calls.size(), 4u);
	EXPECT_EQ(calls[0].pid, 4242);
	EXPECT_EQ(calls[0].name, "recvfrom");
	EXPECT_EQ(calls[0].fd, 5);
	EXPECT_EQ(calls[0].target, "TCP:[127.0.0.1:40000->127.0.0.1:9443]");
	EXPECT_EQ(calls[0].requested, 5);
	EXPECT_EQ(calls[1].result, 16408);
	EXPECT_TRUE(calls[2].isWrite());
	EXPECT_EQ(calls[2].target, "/dev/null");
	EXPECT_EQ(calls[3].requested, 5);
	EXPECT_EQ(calls[3].result, -1);
}

TEST(StraceLog, JoinsUnfinishedCalls)
{
	auto calls = parse(
		"10 recvfrom(7<TCP:[127.0.0.1:1->127.0.0.1:2]>,  <unfinished ...>\n"
		"11 write(2</dev/pts/0>, \"\"..., 10) = 10\n"
		"10 <... recvfrom resumed>\"\"..., 65652, 0, NULL, NULL) = 65652\n");
	ASSERT_EQ(calls.size(), 2u);
	EXPECT_EQ(calls[1].name, "recvfrom");
	EXPECT_EQ(calls[1].requested, 65652);
	EXPECT_EQ(calls[1].result, 65652);
}

/* strace pads a resumed call's result to its column: two processes reading at once. */
TEST(StraceLog, ReadsTheResultOfAPaddedResumedCall)
{
	auto calls = parse(
		"7234  read(4<TCP:[127.0.0.1:1->127.0.0.1:2]>,  <unfinished ...>\n"
		"7235  write(4<TCP:[127.0.0.1:2->127.0.0.1:1]>, \"\"..., 297) = 297\n"
		"7234  <... read resumed>\"\"..., 5)       = 5\n"
		"7234  read(4<TCP:[127.0.0.1:1->127.0.0.1:2]>, 0x55d0, 16401) = -1 EAGAIN (Resource temporarily unavailable)\n");
	ASSERT_EQ(calls.size(), 3u);
	EXPECT_EQ(calls[1].name, "read");
	EXPECT_EQ(calls[1].requested, 5);
	EXPECT_EQ(calls[1].result, 5);
	EXPECT_EQ(calls[2].requested, 16401);
	EXPECT_EQ(calls[2].result, -1);
}

TEST(StraceLog, SummarisesTheSocketsOfOnePort)
{
	auto calls = parse(
		"1 recvfrom(5<TCP:[127.0.0.1:40000->127.0.0.1:9443]>, \"\"..., 5, 0, NULL, NULL) = 5\n"
		"1 recvfrom(5<TCP:[127.0.0.1:40000->127.0.0.1:9443]>, \"\"..., 16408, 0, NULL, NULL) = 16408\n"
		"1 recvfrom(6<TCP:[127.0.0.1:40001->127.0.0.1:8080]>, \"\"..., 5, 0, NULL, NULL) = 5\n"
		"1 sendto(5<TCP:[127.0.0.1:40000->127.0.0.1:9443]>, \"\"..., 100, 0, NULL, 0) = 100\n");
	SocketTraffic traffic = trafficOnPort(calls, 9443);
	EXPECT_EQ(traffic.reads, 2u);
	EXPECT_EQ(traffic.headerReads, 1u);
	EXPECT_EQ(traffic.readBytes, 16413u);
	EXPECT_EQ(traffic.writes, 1u);
	EXPECT_EQ(traffic.writeBytes, 100u);
	EXPECT_EQ(tcpTraffic(calls).size(), 2u);
	EXPECT_EQ(trafficOnPort(calls, 40000).reads, 2u); /* the local end counts too */
}

TEST(StraceLog, IgnoresWhatIsNotASyscallLine)
{
	auto calls = parse("+++ exited with 0 +++\n--- SIGCHLD {si_signo=SIGCHLD} ---\n\n");
	EXPECT_TRUE(calls.empty());
}
