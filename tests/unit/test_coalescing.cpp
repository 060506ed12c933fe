/* PendingWrites and the Coalescer over real socketpairs: what goes out when, and what not. */

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <climits>
#include <csignal>
#include <fcntl.h>
#include <future>
#include <linux/sockios.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <thread>
#include <string>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>
#include <vector>

#include "core/write/coalescer.h"
#include "core/write/coalescing_bio.h"
#include "core/write/pending_writes.h"

using namespace tlstune;

namespace {

/* Atomic: a test's appender thread sends too. */
std::atomic<int> g_sends{0};

ssize_t countingSend(int fd, const void *data, size_t length, int flags)
{
	g_sends++;
	return ::send(fd, data, length, flags);
}

int libcPoll(struct pollfd *fds, unsigned long nfds, int timeout)
{
	return ::poll(fds, nfds, timeout);
}

const SocketCalls kCalls = { countingSend, libcPoll };

class Pair : public ::testing::Test {
protected:
	void SetUp() override
	{
		ASSERT_EQ(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds_), 0);
		g_sends = 0;
	}
	void TearDown() override
	{
		close(fds_[0]);
		close(fds_[1]);
	}

	/* What the peer has received so far, without waiting. */
	std::string received()
	{
		std::string out;
		char buffer[65536];
		ssize_t n;
		while ((n = recv(fds_[1], buffer, sizeof(buffer), MSG_DONTWAIT)) > 0)
			out.append(buffer, static_cast<size_t>(n));
		return out;
	}

	PendingWrites::Result append(PendingWrites &writes, const std::string &record)
	{
		bool dirty = false;
		return writes.append(record.data(), record.size(), &dirty);
	}

	/* What the filter BIO does: append, and list a connection that was clean before. */
	PendingWrites::Result write(Coalescer &coalescer, PendingWrites &writes, const std::string &record)
	{
		bool becameDirty = false;
		const PendingWrites::Result result = writes.append(record.data(), record.size(), &becameDirty);
		if (becameDirty) {
			EXPECT_TRUE(coalescer.dirtied(&writes));
		}
		return result;
	}

	int fds_[2];
	PendingWrites::Counters counters_;
};

} /* namespace */

TEST_F(Pair, RecordsWaitUntilFlushedThenGoOutInOrderInOneSend)
{
	PendingWrites writes(fds_[0], 1024, kCalls, &counters_);
	bool dirty = false;
	ASSERT_EQ(writes.append("one ", 4, &dirty), PendingWrites::Result::Done);
	EXPECT_TRUE(dirty);
	ASSERT_EQ(writes.append("two ", 4, &dirty), PendingWrites::Result::Done);
	EXPECT_FALSE(dirty) << "only the first record makes it dirty";
	EXPECT_EQ(counters_.dirty.load(), 1);
	EXPECT_EQ(received(), "");
	EXPECT_EQ(writes.pending(), 8u);

	EXPECT_EQ(writes.sendAsOwner(), PendingWrites::Result::Done);
	EXPECT_EQ(received(), "one two ");
	EXPECT_EQ(g_sends, 1);
	EXPECT_FALSE(writes.dirty());
	EXPECT_EQ(counters_.dirty.load(), 0);
	EXPECT_EQ(counters_.records.load(), 2u);
}

TEST_F(Pair, ARecordThatWouldPassTheLimitSendsWhatIsPendingFirst)
{
	PendingWrites writes(fds_[0], 10, kCalls, &counters_);
	ASSERT_EQ(append(writes, "abcdef"), PendingWrites::Result::Done);
	ASSERT_EQ(append(writes, "ghijkl"), PendingWrites::Result::Done);
	EXPECT_EQ(received(), "abcdef");
	EXPECT_EQ(writes.pending(), 6u);
}

TEST_F(Pair, AFullNonBlockingSocketSaysAgainAndKeepsEveryByte)
{
	ASSERT_EQ(fcntl(fds_[0], F_SETFL, O_NONBLOCK), 0);
	PendingWrites writes(fds_[0], 64 * 1024, kCalls, &counters_);
	const std::string record(1000, 'x');
	size_t accepted = 0;
	PendingWrites::Result result = PendingWrites::Result::Done;
	/* Bounded: a socketpair holds a few hundred KiB at most. */
	for (int i = 0; i < 100000 && result == PendingWrites::Result::Done; i++) {
		result = append(writes, record);
		if (result == PendingWrites::Result::Done)
			accepted += record.size();
	}
	/* Refused: for OpenSSL to retry (Again), or to write itself, nothing pending (NoRoom). */
	ASSERT_TRUE(result == PendingWrites::Result::Again || result == PendingWrites::Result::NoRoom);
	std::string got;
	for (int i = 0; i < 100000 && got.size() < accepted; i++) {
		got += received();
		writes.send();
	}
	EXPECT_EQ(got, std::string(accepted, 'x'));
	EXPECT_FALSE(writes.dirty());
}

TEST_F(Pair, ABrokenConnectionReportsItsErrorToEveryLaterWrite)
{
	PendingWrites writes(fds_[0], 1024, kCalls, &counters_);
	ASSERT_EQ(append(writes, "lost"), PendingWrites::Result::Done);
	close(fds_[1]);
	fds_[1] = open("/dev/null", O_RDONLY | O_CLOEXEC); /* for TearDown */
	EXPECT_EQ(writes.trySend(), PendingWrites::Result::Failed);
	EXPECT_EQ(writes.error(), EPIPE);
	EXPECT_FALSE(writes.dirty());
	errno = 0;
	EXPECT_EQ(append(writes, "more"), PendingWrites::Result::Failed);
	EXPECT_EQ(errno, EPIPE);
}

TEST_F(Pair, ADetachedSocketNumberIsNeverWrittenAgain)
{
	PendingWrites writes(fds_[0], 1024, kCalls, &counters_);
	writes.detach();
	errno = 0;
	EXPECT_EQ(append(writes, "late"), PendingWrites::Result::Failed);
	EXPECT_EQ(errno, EBADF);
	EXPECT_EQ(g_sends, 0);
}

TEST_F(Pair, TheCoalescerSendsBeforeAWaitAndBeforeAClose)
{
	Coalescer coalescer(1024, std::chrono::milliseconds(100), kCalls);
	PendingWrites *writes = coalescer.open(fds_[0]);
	ASSERT_NE(writes, nullptr);
	ASSERT_EQ(write(coalescer, *writes, "before a wait"), PendingWrites::Result::Done);
	coalescer.flushAll();
	EXPECT_EQ(received(), "before a wait");

	ASSERT_EQ(write(coalescer, *writes, "before a close"), PendingWrites::Result::Done);
	coalescer.closing(fds_[0], fds_[0]);
	EXPECT_EQ(received(), "before a close");
	EXPECT_EQ(writes->fd(), -1);
	coalescer.release(writes);
}

TEST_F(Pair, ACloseReachesOnlyTheConnectionsOnItsFds)
{
	int other[2];
	ASSERT_EQ(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, other), 0);
	Coalescer coalescer(1024, std::chrono::milliseconds(100), kCalls);
	PendingWrites *mine = coalescer.open(fds_[0]);
	PendingWrites *theirs = coalescer.open(other[0]);
	ASSERT_EQ(write(coalescer, *mine, "mine"), PendingWrites::Result::Done);
	ASSERT_EQ(write(coalescer, *theirs, "theirs"), PendingWrites::Result::Done);

	/* (The flusher may send the bytes any time: only who is detached is asserted.) */
	const int unrelated = std::max(fds_[1], other[1]) + 100;
	coalescer.closing(unrelated, unrelated);
	EXPECT_EQ(mine->fd(), fds_[0]);
	EXPECT_EQ(theirs->fd(), other[0]);

	coalescer.closing(other[0], other[0]);
	EXPECT_EQ(theirs->fd(), -1);
	EXPECT_FALSE(theirs->dirty());
	char buffer[16] = {};
	EXPECT_EQ(read(other[1], buffer, sizeof(buffer)), 6) << "sent before the close";
	EXPECT_EQ(mine->fd(), fds_[0]) << "its own fd was not closed";

	/* Exit reaches every connection, without detaching: an exec may fail. */
	coalescer.drainAll();
	EXPECT_EQ(received(), "mine");
	EXPECT_EQ(mine->fd(), fds_[0]);
	coalescer.release(mine);
	coalescer.release(theirs);
	close(other[0]);
	close(other[1]);
}

TEST_F(Pair, AConnectionFreedWithBytesListedLeavesTheList)
{
	Coalescer coalescer(1024, std::chrono::milliseconds(100), kCalls);
	PendingWrites *writes = coalescer.open(fds_[0]);
	ASSERT_EQ(write(coalescer, *writes, "last words"), PendingWrites::Result::Done);
	coalescer.release(writes);
	EXPECT_EQ(received(), "last words");
	EXPECT_EQ(coalescer.counters().dirty.load(), 0);
	coalescer.flushAll(); /* AddressSanitizer: the freed connection is not visited */
	PendingWrites *next = coalescer.open(fds_[0]);
	ASSERT_EQ(write(coalescer, *next, "next"), PendingWrites::Result::Done);
	coalescer.flushAll();
	EXPECT_EQ(received(), "next");
	coalescer.release(next);
}

/*
 * Freed while its socket is full and stays full: the drain runs out (kDrainTimeoutMs),
 * the bytes are dropped, and no count says that something is left to send (the flusher
 * passed over nothing every 200 us for ever).
 */
TEST_F(Pair, AConnectionFreedWithBytesItsSocketNeverTookLeavesNothingToSend)
{
	ASSERT_EQ(fcntl(fds_[0], F_SETFL, O_NONBLOCK), 0);
	Coalescer coalescer(1024, std::chrono::milliseconds(100), kCalls);
	PendingWrites *writes = coalescer.open(fds_[0]);
	ASSERT_EQ(write(coalescer, *writes, "held"), PendingWrites::Result::Done);
	/* The socket filled behind the shim's back; bounded: a socketpair holds a few hundred KiB. */
	const std::string filler(4096, 'f');
	for (int i = 0; i < 100000 && ::write(fds_[0], filler.data(), filler.size()) > 0; i++) {
	}
	coalescer.release(writes);
	EXPECT_EQ(coalescer.counters().dirty.load(), 0);
	EXPECT_FALSE(coalescer.anyPending());
}

TEST_F(Pair, TheFlusherSendsWhatNobodyElseDoes)
{
	/* The program just stops: nothing of ours runs in its thread any more. */
	Coalescer coalescer(1024, std::chrono::microseconds(200), kCalls);
	PendingWrites *writes = coalescer.open(fds_[0]);
	ASSERT_EQ(write(coalescer, *writes, "by the flusher"), PendingWrites::Result::Done);
	struct pollfd readable = { fds_[1], POLLIN, 0 };
	ASSERT_EQ(::poll(&readable, 1, 30000), 1) << "within the bound of a stalled test, not a timing claim";
	EXPECT_EQ(received(), "by the flusher");
	coalescer.release(writes);
}

TEST_F(Pair, OnceTheMainThreadLeftTheFlusherEndsAsSoonAsItHasNothingToSend)
{
	/* An idle flusher waits an hour here: only mainThreadLeft can end it within the test. */
	Coalescer coalescer(1024, std::chrono::microseconds(200), kCalls, std::chrono::hours(1));
	PendingWrites *writes = coalescer.open(fds_[0]);
	ASSERT_EQ(write(coalescer, *writes, "before pthread_exit"), PendingWrites::Result::Done);
	struct pollfd readable = { fds_[1], POLLIN, 0 };
	ASSERT_EQ(::poll(&readable, 1, 30000), 1) << "within the bound of a stalled test, not a timing claim";
	EXPECT_EQ(received(), "before pthread_exit");
	EXPECT_TRUE(coalescer.flusherRunning()) << "idle, waiting for more";
	coalescer.mainThreadLeft();
	const auto bound = std::chrono::steady_clock::now() + std::chrono::seconds(30);
	while (coalescer.flusherRunning() && std::chrono::steady_clock::now() < bound)
		std::this_thread::yield();
	EXPECT_FALSE(coalescer.flusherRunning());
	coalescer.release(writes);
}

TEST_F(Pair, AfterAPauseOfTheDelayAHeaderAndItsBodyGoOutAtOnce)
{
	/* Issue 22: a request, a sleep the shim cannot see, the next request. */
	Coalescer coalescer(1024, std::chrono::seconds(10), kCalls);
	PendingWrites *writes = coalescer.open(fds_[0]);
	std::vector<bool> quiet;
	for (int i = 0; i < 3; i++)
		quiet.push_back(coalescer.quietWrite(writes));
	EXPECT_EQ(quiet, (std::vector<bool>{ true, true, false })) << "a burst is held from its third write";
	writes->setLastWrite(std::chrono::steady_clock::now() - std::chrono::seconds(20));
	quiet.clear();
	for (int i = 0; i < 3; i++)
		quiet.push_back(coalescer.quietWrite(writes));
	EXPECT_EQ(quiet, (std::vector<bool>{ true, true, false })) << "the pause began a new run";
	coalescer.release(writes);
}

TEST_F(Pair, AForkedChildDropsItsCopyOfThePendingBytes)
{
	Coalescer coalescer(1024, std::chrono::milliseconds(100), kCalls);
	PendingWrites *writes = coalescer.open(fds_[0]);
	ASSERT_EQ(write(coalescer, *writes, "once"), PendingWrites::Result::Done);
	coalescer.lockForFork();
	const pid_t child = fork();
	if (child == 0) {
		coalescer.unlockInChild();
		coalescer.drainAll();
		_exit(writes->dirty() ? 1 : 0);
	}
	coalescer.unlockInParent();
	int status = -1;
	ASSERT_EQ(waitpid(child, &status, 0), child);
	EXPECT_EQ(status, 0);
	EXPECT_EQ(received(), "") << "the child sent nothing";
	coalescer.drainAll();
	EXPECT_EQ(received(), "once");
	coalescer.release(writes);
}

namespace {

PendingWrites::Result appendRecord(PendingWrites &writes, const std::string &record)
{
	bool dirty = false;
	return writes.append(record.data(), record.size(), &dirty);
}

/* A TCP connection over 127.0.0.1: [0] writes, [1] reads. Small buffers fill fast. */
class TcpPair : public ::testing::Test {
protected:
	void SetUp() override
	{
		const int listener = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
		ASSERT_GE(listener, 0);
		struct sockaddr_in address = {};
		address.sin_family = AF_INET;
		address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
		socklen_t length = sizeof(address);
		ASSERT_EQ(bind(listener, reinterpret_cast<sockaddr *>(&address), length), 0);
		ASSERT_EQ(listen(listener, 1), 0);
		ASSERT_EQ(getsockname(listener, reinterpret_cast<sockaddr *>(&address), &length), 0);
		fds_[0] = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
		const int small = 16 * 1024;
		setsockopt(fds_[0], SOL_SOCKET, SO_SNDBUF, &small, sizeof(small));
		ASSERT_EQ(connect(fds_[0], reinterpret_cast<sockaddr *>(&address), length), 0);
		fds_[1] = accept4(listener, nullptr, nullptr, SOCK_CLOEXEC);
		ASSERT_GE(fds_[1], 0);
		setsockopt(fds_[1], SOL_SOCKET, SO_RCVBUF, &small, sizeof(small));
		close(listener);
	}
	void TearDown() override
	{
		if (fds_[0] >= 0)
			close(fds_[0]);
		if (fds_[1] >= 0)
			close(fds_[1]);
	}

	/* Records of 1,000 numbered bytes until the socket is full; returns what was accepted. */
	std::string fill(PendingWrites &writes)
	{
		EXPECT_EQ(fcntl(fds_[0], F_SETFL, O_NONBLOCK), 0);
		std::string accepted;
		for (int i = 0; i < 100000; i++) {
			const std::string record = std::to_string(i) + ":" + std::string(994, 'r') + "\n";
			const PendingWrites::Result result = appendRecord(writes, record.substr(0, 1000));
			if (result != PendingWrites::Result::Done)
				break;
			accepted += record.substr(0, 1000);
		}
		return accepted;
	}

	/* Everything the peer gets until end of file; a stall of 30 s fails the test instead. */
	std::string readToEnd()
	{
		std::string out;
		char buffer[65536];
		for (;;) {
			struct pollfd readable = { fds_[1], POLLIN, 0 };
			if (::poll(&readable, 1, 30000) != 1) {
				ADD_FAILURE() << "the peer stopped getting bytes after " << out.size();
				return out;
			}
			const ssize_t n = read(fds_[1], buffer, sizeof(buffer));
			if (n <= 0)
				return out;
			out.append(buffer, static_cast<size_t>(n));
		}
	}

	/* Exactly length bytes (the connection stays open). */
	std::string readExactly(size_t length)
	{
		std::string out;
		char buffer[65536];
		while (out.size() < length) {
			struct pollfd readable = { fds_[1], POLLIN, 0 };
			if (::poll(&readable, 1, 30000) != 1) {
				ADD_FAILURE() << "the peer stopped getting bytes after " << out.size();
				return out;
			}
			const ssize_t n = read(fds_[1], buffer, std::min(sizeof(buffer), length - out.size()));
			if (n <= 0)
				return out;
			out.append(buffer, static_cast<size_t>(n));
		}
		return out;
	}

	int fds_[2] = { -1, -1 };
	PendingWrites::Counters counters_;
};

} /* namespace */

/*
 * Nagle's algorithm holds a small segment while another is unacknowledged; the peer here
 * acknowledges late (TCP_QUICKACK off), as a reader that only reads does. The tail of a
 * burst sent later than the program's writes is pushed out with what the kernel queued
 * (nagle_push.h); without the push it waited for the peer's delayed acknowledgement
 * (8.6 ms for write_burst --latency, against 20 us without tlstune). Skipped where the
 * acknowledgement came before the second write could be held.
 */
size_t unsent(int fd)
{
	int queued = -1;
	EXPECT_EQ(ioctl(fd, SIOCOUTQNSD, &queued), 0);
	return static_cast<size_t>(queued);
}

void ackLate(int fd)
{
	const int off = 0;
	ASSERT_EQ(setsockopt(fd, IPPROTO_TCP, TCP_QUICKACK, &off, sizeof(off)), 0);
}

/*
 * The peer went away with bytes unread (a reset): a send made later than the program's
 * writes would take the error from the socket, which reports it once, and the program's
 * next read would see an end of stream. Such a send leaves it there: what is held is
 * dropped, as the kernel dropped what it held, and the connection's writes go to the
 * kernel, whose error the first of them meets.
 */
TEST_F(TcpPair, ALaterSendLeavesTheResetToTheProgramsNextCall)
{
	PendingWrites writes(fds_[0], 1024, kCalls, &counters_);
	bool dirty = false;
	ASSERT_EQ(writes.append("held", 4, &dirty), PendingWrites::Result::Done);
	const struct linger now = { 1, 0 };
	ASSERT_EQ(setsockopt(fds_[1], SOL_SOCKET, SO_LINGER, &now, sizeof(now)), 0);
	close(fds_[1]);
	fds_[1] = -1;
	struct pollfd reset = { fds_[0], POLLIN, 0 };
	ASSERT_EQ(poll(&reset, 1, 10000), 1);
	ASSERT_TRUE(reset.revents & POLLERR);
	const int sendsBefore = g_sends;

	EXPECT_EQ(writes.send(), PendingWrites::Result::Done);
	EXPECT_EQ(g_sends, sendsBefore) << "nothing was sent";
	EXPECT_FALSE(writes.dirty());
	EXPECT_TRUE(writes.writesDirect());
	EXPECT_EQ(writes.error(), 0);
	EXPECT_EQ(writes.appendOverflow("more", 4, &dirty), PendingWrites::Result::Done);
	EXPECT_FALSE(writes.dirty()) << "held plaintext encrypted afterwards is dropped too";
	errno = 0;
	EXPECT_EQ(::send(fds_[0], "y", 1, MSG_NOSIGNAL), -1);
	EXPECT_EQ(errno, ECONNRESET) << "the kernel still holds the reset for the program";
}

TEST_F(TcpPair, ATailSentAfterTheProgramsWritesIsPushedPastNagle)
{
	ackLate(fds_[1]);
	ASSERT_EQ(send(fds_[0], "first", 5, 0), 5);
	ASSERT_EQ(send(fds_[0], "second", 6, 0), 6);
	if (unsent(fds_[0]) == 0)
		GTEST_SKIP() << "the peer acknowledged the first write at once";
	PendingWrites writes(fds_[0], 1024, kCalls, &counters_);
	ASSERT_EQ(appendRecord(writes, "tail"), PendingWrites::Result::Done);
	ASSERT_EQ(writes.trySend(), PendingWrites::Result::Done);
	EXPECT_EQ(unsent(fds_[0]), 0u);
	EXPECT_EQ(readExactly(15), "firstsecondtail");
	int noDelay = -1;
	socklen_t length = sizeof(noDelay);
	ASSERT_EQ(getsockopt(fds_[0], IPPROTO_TCP, TCP_NODELAY, &noDelay, &length), 0);
	EXPECT_EQ(noDelay, 0) << "the program's setting stays";
}

/* A corked socket keeps what the program asked to wait: no push. */
TEST_F(TcpPair, ACorkedSocketIsNotPushed)
{
	const int on = 1, off = 0;
	ASSERT_EQ(setsockopt(fds_[0], IPPROTO_TCP, TCP_CORK, &on, sizeof(on)), 0);
	PendingWrites writes(fds_[0], 1024, kCalls, &counters_);
	ASSERT_EQ(appendRecord(writes, "held by the cork"), PendingWrites::Result::Done);
	ASSERT_EQ(writes.trySend(), PendingWrites::Result::Done);
	EXPECT_EQ(unsent(fds_[0]), 16u);
	ASSERT_EQ(setsockopt(fds_[0], IPPROTO_TCP, TCP_CORK, &off, sizeof(off)), 0);
	EXPECT_EQ(readExactly(16), "held by the cork");
}

TEST_F(TcpPair, AWriterBlockedOnAStalledPeerHoldsNoLockAndShutdownFreesIt)
{
	signal(SIGPIPE, SIG_IGN);
	PendingWrites writes(fds_[0], 64 * 1024 * 1024, kCalls, &counters_);
	const std::string block(1024 * 1024, 'b');
	/* Past any room the socket has: what a record of held plaintext does (appendOverflow). */
	for (int i = 0; i < 4; i++) {
		bool dirty = false;
		ASSERT_EQ(writes.appendOverflow(block.data(), block.size(), &dirty), PendingWrites::Result::Done);
	}
	std::thread owner([&] {
		EXPECT_EQ(writes.sendAsOwner(), PendingWrites::Result::Failed);
		EXPECT_EQ(errno, EPIPE);
	});
	/* The owner's send has begun: the first bytes reached the peer. */
	struct pollfd readable = { fds_[1], POLLIN, 0 };
	ASSERT_EQ(::poll(&readable, 1, 30000), 1);

	/* Each of these waited for the owner's lock before (issue 11): they return now. */
	auto others = std::async(std::launch::async, [&] {
		writes.send();
		writes.pending();
		writes.error();
		return shutdown(fds_[0], SHUT_RDWR);
	});
	ASSERT_EQ(others.wait_for(std::chrono::seconds(30)), std::future_status::ready)
		<< "a send, pending() or shutdown waited for the blocked writer";
	EXPECT_EQ(others.get(), 0);
	owner.join();
	signal(SIGPIPE, SIG_DFL);
}

/*
 * A writer waiting for room on a socket that filled after all leaves its bytes in the
 * buffer: a close meanwhile hands them all over (its drain waits while the peer reads)
 * and detaches, and the writer then finds nothing left. Taken out to be sent unlocked,
 * they were the writer's alone, and a close between the two found nothing to hand over.
 */
TEST_F(TcpPair, ACloseWhileTheWriterWaitsForRoomHandsItsBytesOver)
{
	Coalescer coalescer(16 * 1024, std::chrono::milliseconds(100), kCalls);
	PendingWrites *writes = coalescer.open(fds_[0]);
	const std::string block(1024 * 1024, 'b');
	for (int i = 0; i < 4; i++) {
		bool dirty = false;
		ASSERT_EQ(writes->appendOverflow(block.data(), block.size(), &dirty), PendingWrites::Result::Done);
	}
	std::thread owner([&] { EXPECT_EQ(writes->sendAsOwner(), PendingWrites::Result::Done); });
	/* The owner's first send has gone out: it waits for room now, or soon. */
	struct pollfd readable = { fds_[1], POLLIN, 0 };
	ASSERT_EQ(::poll(&readable, 1, 30000), 1);
	std::size_t received = 0;
	std::thread reader([&] {
		char buffer[64 * 1024];
		for (ssize_t n; (n = ::read(fds_[1], buffer, sizeof(buffer))) > 0;)
			received += static_cast<std::size_t>(n);
	});
	coalescer.closing(fds_[0], fds_[0]);
	EXPECT_FALSE(writes->dirty()) << "the close handed everything over";
	close(fds_[0]);
	fds_[0] = -1;
	owner.join();
	reader.join();
	EXPECT_EQ(received, 4u * block.size());
	coalescer.release(writes);
}

/*
 * Issue 22: what is held can always go to the kernel at once, because a batch holds at
 * most half the room the socket has when it begins. A new connection's batch is the
 * limit; a full socket's is smaller (no room for a batch of the limit); once the peer has
 * read everything, it is the limit again (the loop is bounded by a deadline, not a wait).
 */
TEST_F(TcpPair, ABatchIsAtMostHalfTheRoomTheSocketHasWhenItBegins)
{
	const size_t limit = 4096;
	PendingWrites writes(fds_[0], limit, kCalls, &counters_);
	EXPECT_EQ(writes.batchRoom(), limit) << "a new connection";
	ASSERT_EQ(fcntl(fds_[0], F_SETFL, O_NONBLOCK), 0);
	const std::string block(4096, 'f');
	size_t sent = 0;
	for (int i = 0; i < 100000; i++) {
		const ssize_t n = ::send(fds_[0], block.data(), block.size(), MSG_NOSIGNAL);
		if (n < 0)
			break;
		sent += static_cast<size_t>(n);
	}
	EXPECT_LT(writes.batchRoom(), limit) << "a full socket";
	EXPECT_EQ(readExactly(sent).size(), sent);
	const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
	while (writes.batchRoom() < limit && std::chrono::steady_clock::now() < deadline) {
		struct pollfd writable = { fds_[0], POLLOUT, 0 };
		::poll(&writable, 1, 100);
	}
	EXPECT_EQ(writes.batchRoom(), limit) << "the peer took everything";
}

/* A full socket: the owner's send keeps the batch (at most the limit) and nothing more is taken. */
TEST_F(TcpPair, AFullSocketHoldsNoMoreThanTheLimitAndTheOwnerSendsItLater)
{
	const size_t limit = 8 * 1024;
	PendingWrites writes(fds_[0], limit, kCalls, &counters_);
	const std::string accepted = fill(writes);
	EXPECT_LE(writes.pending(), limit);
	const size_t inKernel = accepted.size() - writes.pending();
	std::string received = readExactly(inKernel);
	EXPECT_EQ(writes.sendAsOwner(), PendingWrites::Result::Done) << "room again";
	received += readExactly(accepted.size() - inKernel);
	EXPECT_TRUE(received == accepted) << "in order, nothing lost or repeated";
}

/* close, shutdown, SSL_free and exit hand what is held to the kernel in the calling thread. */
TEST_F(TcpPair, EveryWayOutHandsTheHeldBytesToTheKernelAtOnce)
{
	const int sink = fds_[0];
	Coalescer coalescer(16 * 1024, std::chrono::milliseconds(100), kCalls);
	for (int way = 0; way < 4; way++) {
		PendingWrites *writes = coalescer.open(sink);
		ASSERT_EQ(writes->batchRoom(), 16u * 1024);
		const std::string record = "way " + std::to_string(way) + "\n";
		ASSERT_EQ(appendRecord(*writes, record), PendingWrites::Result::Done);
		ASSERT_TRUE(writes->dirty());
		if (way == 0)
			coalescer.shuttingDown(sink);
		else if (way == 1)
			coalescer.release(writes);
		else if (way == 2)
			coalescer.drainAll();
		else
			coalescer.closing(sink, sink);
		EXPECT_EQ(readExactly(record.size()), record) << way;
		if (way != 1)
			coalescer.release(writes);
	}
}


/*
 * A shutdown's hand-over and the end of holding are one hold of the lock: a record after
 * it is not appended (NoRoom: it goes to the socket, whose answer the write reports, as
 * without the shim), and one the hand-over found went out. A shutdown that failed lets
 * the connection hold again.
 */
TEST_F(TcpPair, AfterAShutdownsHandOverRecordsGoToTheSocketUntilTheShutdownFails)
{
	const int sink = fds_[0];
	Coalescer coalescer(16 * 1024, std::chrono::milliseconds(100), kCalls);
	PendingWrites *writes = coalescer.open(sink);
	ASSERT_EQ(appendRecord(*writes, "before\n"), PendingWrites::Result::Done);
	coalescer.shuttingDown(sink);
	EXPECT_EQ(readExactly(7), "before\n");
	EXPECT_TRUE(writes->writesDirect());
	EXPECT_EQ(appendRecord(*writes, "after\n"), PendingWrites::Result::NoRoom);
	EXPECT_FALSE(writes->dirty());
	coalescer.shutdownFailed(sink);
	EXPECT_FALSE(writes->writesDirect());
	ASSERT_EQ(appendRecord(*writes, "again\n"), PendingWrites::Result::Done);
	coalescer.closing(sink, sink);
	EXPECT_EQ(readExactly(6), "again\n");
	EXPECT_EQ(appendRecord(*writes, "closed\n"), PendingWrites::Result::Failed) << "detached with the hand-over";
	coalescer.release(writes);
}

/*
 * A shutdown that finds the connection at rest takes no lock (writeOutAtRest) and sends
 * nothing; a record after it is the socket's to answer (NoRoom), as after a locked one.
 */
TEST_F(Pair, AShutdownOfAConnectionAtRestSendsNothingAndLetsTheSocketAnswerWhatFollows)
{
	Coalescer coalescer(16 * 1024, std::chrono::milliseconds(100), kCalls);
	PendingWrites *writes = coalescer.open(fds_[0]);
	ASSERT_EQ(append(*writes, "held\n"), PendingWrites::Result::Done);
	ASSERT_EQ(writes->send(), PendingWrites::Result::Done);
	const int sends = g_sends;
	coalescer.shuttingDown(fds_[0]);
	EXPECT_EQ(g_sends, sends);
	EXPECT_TRUE(writes->writesDirect());
	EXPECT_EQ(append(*writes, "after\n"), PendingWrites::Result::NoRoom);
	EXPECT_FALSE(writes->dirty());
	coalescer.shutdownFailed(fds_[0]);
	EXPECT_EQ(append(*writes, "again\n"), PendingWrites::Result::Done);
	EXPECT_EQ(received(), "held\n");
	coalescer.release(writes);
}

/*
 * The same racing a writer whose records go out one by one: the shutdown sees a record
 * and sends it first, or the writer sees the shutdown and writes to the socket itself
 * (NoRoom). When it returns nothing is held, so nothing can follow the kernel's FIN. The
 * window is a few instructions wide: this mostly finds data races (the thread sanitizer
 * leg) and a lock-free path that touches what the lock guards.
 */
TEST_F(Pair, AShutdownRacingAWriterLeavesNothingHeldBehindIt)
{
	Coalescer coalescer(16 * 1024, std::chrono::milliseconds(100), kCalls);
	int heldAfter = 0, lost = 0;
	for (int round = 0; round < 400; round++) {
		PendingWrites *writes = coalescer.open(fds_[0]);
		std::atomic<bool> writing{false};
		int appended = 0;
		std::thread writer([&] {
			for (int i = 0; i < 200; i++) {
				if (append(*writes, "record\n") != PendingWrites::Result::Done)
					break;
				appended++;
				writing.store(true);
				writes->send();
			}
			writing.store(true);
		});
		while (!writing.load())
			std::this_thread::yield();
		coalescer.shuttingDown(fds_[0]);
		heldAfter += writes->dirty() ? 1 : 0;
		writer.join();
		lost += received().size() == static_cast<size_t>(appended) * 7 ? 0 : 1;
		coalescer.shutdownFailed(fds_[0]);
		coalescer.release(writes);
	}
	EXPECT_EQ(heldAfter, 0) << "rounds where a record was held after the shutdown returned";
	EXPECT_EQ(lost, 0);
}

#ifdef BIO_CTRL_GET_KTLS_SEND /* OpenSSL 3: 1.1.1 has no kernel TLS ask */
namespace {

int g_kernelTlsAsks = 0;

/* Counts the asks for kernel TLS that reach the socket BIO. */
long countKernelTlsAsks(BIO *, int operation, const char *, size_t, int command, long, int result, size_t *)
{
	if (operation == BIO_CB_CTRL && command == BIO_CTRL_GET_KTLS_SEND)
		g_kernelTlsAsks++;
	/* Before the call, go on; after it, its own result. */
	return (operation & BIO_CB_RETURN) ? result : 1;
}

/* The write path of the real libssl, as runtime/symbols.cpp resolves it. */
OpenSslApi linkedWritePath()
{
	OpenSslApi api;
	api.SSL_get_wbio = ::SSL_get_wbio;
	api.SSL_set0_wbio = ::SSL_set0_wbio;
	api.BIO_get_new_index = ::BIO_get_new_index;
	api.BIO_meth_new = ::BIO_meth_new;
	api.BIO_meth_set_write = ::BIO_meth_set_write;
	api.BIO_meth_set_read = ::BIO_meth_set_read;
	api.BIO_meth_set_ctrl = ::BIO_meth_set_ctrl;
	api.BIO_meth_set_destroy = ::BIO_meth_set_destroy;
	api.BIO_new = ::BIO_new;
	api.BIO_up_ref = ::BIO_up_ref;
	api.BIO_push = ::BIO_push;
	api.BIO_next = ::BIO_next;
	api.BIO_get_data = ::BIO_get_data;
	api.BIO_set_data = ::BIO_set_data;
	api.BIO_set_init = ::BIO_set_init;
	api.BIO_write = ::BIO_write;
	api.BIO_read = ::BIO_read;
	api.BIO_ctrl = ::BIO_ctrl;
	api.BIO_set_flags = ::BIO_set_flags;
	api.BIO_clear_flags = ::BIO_clear_flags;
	api.BIO_copy_next_retry = ::BIO_copy_next_retry;
	api.BIO_method_type = ::BIO_method_type;
	return api;
}

} /* namespace */

/*
 * libssl 3 asks its write BIO for kernel TLS at every record (ten times a request in
 * nginx's HTTP/2). The filter goes only over a socket BIO without it, so it answers "no"
 * itself until a BIO_set_ktls has passed it; from then on the socket BIO answers.
 */
TEST_F(Pair, TheFilterAnswersForKernelTlsUntilOneIsSetThroughIt)
{
	/* As in the shim, the filter's method and its api live as long as the process. */
	static const OpenSslApi api = linkedWritePath();
	static Coalescer coalescer(1024, std::chrono::milliseconds(100), kCalls);
	static CoalescingBio filter;
	ASSERT_TRUE(filter.init(api, &coalescer));
	SSL_CTX *ctx = SSL_CTX_new(TLS_client_method());
	SSL *ssl = SSL_new(ctx);
	ASSERT_EQ(SSL_set_fd(ssl, fds_[0]), 1);
	BIO *socket = SSL_get_wbio(ssl);
	BIO_set_callback_ex(socket, countKernelTlsAsks); /* unseen by the filter: its api has no getter */
	ASSERT_NE(filter.attached(api, ssl), nullptr);
	BIO *top = SSL_get_wbio(ssl);
	ASSERT_NE(top, socket) << "the filter is on top";
	g_kernelTlsAsks = 0;

	EXPECT_EQ(BIO_ctrl(top, BIO_CTRL_GET_KTLS_SEND, 0, nullptr), 0);
	EXPECT_EQ(g_kernelTlsAsks, 0) << "answered by the filter";

	/* BIO_set_ktls (libssl's internal ctrl 72) with key material of zeros: a socketpair refuses it. */
	alignas(16) unsigned char noKeys[512] = {};
	BIO_ctrl(top, 72, 1, noKeys);
	EXPECT_EQ(BIO_ctrl(top, BIO_CTRL_GET_KTLS_SEND, 0, nullptr), 0);
	EXPECT_EQ(g_kernelTlsAsks, 1) << "once kernel TLS may be on, the socket BIO answers";
	SSL_free(ssl);
	SSL_CTX_free(ctx);
}
#endif
