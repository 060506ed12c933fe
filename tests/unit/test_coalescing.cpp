/* PendingWrites and the Coalescer over real socketpairs: what goes out when, and what not. */

#include <gtest/gtest.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <fcntl.h>
#include <string>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "core/coalescer.h"
#include "core/pending_writes.h"

using namespace tlstune;

namespace {

int g_sends = 0;

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

	EXPECT_EQ(writes.flush(0), PendingWrites::Result::Done);
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
	ASSERT_EQ(result, PendingWrites::Result::Again) << "the record is refused, for OpenSSL to retry";
	EXPECT_EQ(writes.flush(MSG_DONTWAIT), PendingWrites::Result::Again);

	std::string got;
	for (int i = 0; i < 100000 && got.size() < accepted; i++) {
		got += received();
		writes.flush(MSG_DONTWAIT);
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
	EXPECT_EQ(writes.tryFlush(MSG_DONTWAIT | MSG_NOSIGNAL), PendingWrites::Result::Failed);
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

TEST_F(Pair, DrainGivesUpOnAPeerThatNeverReads)
{
	ASSERT_EQ(fcntl(fds_[0], F_SETFL, O_NONBLOCK), 0);
	PendingWrites writes(fds_[0], 1024 * 1024, kCalls, &counters_);
	const std::string record(64 * 1024, 'y');
	for (int i = 0; i < 16; i++)
		ASSERT_EQ(append(writes, record), PendingWrites::Result::Done);
	EXPECT_EQ(writes.drain(50), PendingWrites::Result::Failed);
	EXPECT_EQ(errno, ETIMEDOUT);
	EXPECT_FALSE(writes.dirty()) << "bounded: what could not go is dropped";
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
	coalescer.closing(fds_[0], fds_[0], true);
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
	coalescer.closing(unrelated, unrelated, true);
	EXPECT_EQ(mine->fd(), fds_[0]);
	EXPECT_EQ(theirs->fd(), other[0]);

	coalescer.closing(other[0], other[0], true);
	EXPECT_EQ(theirs->fd(), -1);
	EXPECT_FALSE(theirs->dirty());
	char buffer[16] = {};
	EXPECT_EQ(read(other[1], buffer, sizeof(buffer)), 6) << "sent before the close";
	EXPECT_EQ(mine->fd(), fds_[0]) << "its own fd was not closed";

	/* A wide range (close_range, exit) reaches it too, without detaching at exit. */
	coalescer.closing(0, INT_MAX, false);
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
