/*
 * The readiness layer without LD_PRELOAD: the buffered set, the connection state machine,
 * the poll/select/epoll merging over real sockets and a real epoll instance, and the
 * whole chain against real OpenSSL with read-ahead on.
 */

#include <gtest/gtest.h>

#include <sys/eventfd.h>
#include <sys/mman.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <future>
#include <memory>
#include <set>
#include <sys/wait.h>
#include <tuple>
#include <vector>
#include <fcntl.h>
#include <sys/syscall.h>
#include <thread>
#include <openssl/err.h>
#include <sys/socket.h>
#include <unistd.h>

#include "core/read/buffered_fds.h"
#include "core/read/connection.h"
#include "core/read/epoll_sets.h"
#include "core/known_fds.h"
#include "core/openssl_api.h"
#include "core/read/unseen_waits.h"
#include "core/read/wait_merge.h"
#include "tls_fixture.h"

using namespace tlstune;

namespace {

struct SocketPair {
	int fds[2] = { -1, -1 };
	SocketPair() { EXPECT_EQ(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds), 0); }
	~SocketPair()
	{
		for (int fd : fds)
			if (fd >= 0)
				close(fd);
	}
	void closeFirst()
	{
		close(fds[0]);
		fds[0] = -1;
	}
};

ino_t inodeOf(int fd)
{
	ino_t ino = 0;
	EXPECT_TRUE(streamInode(fd, &ino));
	return ino;
}

const int kOwner = 0; /* any address serves as a connection's identity */

/* The epoll sets of a process that has none: poll and select merge held sockets only. */
EpollSets &noSets()
{
	static EpollSets sets;
	return sets;
}

/* A connection that read from fd and holds data, as after a call that left records. */
void holdData(Connection &connection, BufferedFds &buffered, int fd)
{
	connection.noteSocketRead(fd);
	connection.afterCall(buffered, true);
	ASSERT_TRUE(buffered.holds(fd));
}

} /* namespace */

/* Issue 24: the close family's one-load answer never misses a number with state. */
TEST(KnownFds, EveryNumberWithStateIsKnownAndOthersAreNot)
{
	KnownFds known;
	EXPECT_FALSE(known.mayHave(7));
	known.note(7);
	known.note(64);
	EXPECT_TRUE(known.mayHave(7));
	EXPECT_TRUE(known.mayHave(64));
	EXPECT_FALSE(known.mayHave(8)) << "a neighbour in the same word";
	EXPECT_FALSE(known.mayHave(65));
	known.forget(7);
	EXPECT_FALSE(known.mayHave(7));
	EXPECT_TRUE(known.mayHave(64));
	EXPECT_FALSE(known.mayHave(KnownFds::kNumbers)) << "beyond the map: none noted there";
	EXPECT_FALSE(known.mayHave(-1));
}

TEST(KnownFds, TheStateMakersNoteTheirNumbers)
{
	SocketPair pair;
	BufferedFds buffered;
	int owner = 0;
	buffered.set(&owner, pair.fds[0], 1, true);
	EXPECT_TRUE(knownFds().mayHave(pair.fds[0]));
	buffered.forget(&owner);
}

TEST(FdBitmap, FindsTheHighestNumberBelowABound)
{
	FdBitmap bits;
	EXPECT_EQ(bits.highestBelow(FdBitmap::kNumbers), -1);
	bits.note(3);
	bits.note(64);
	bits.note(130);
	EXPECT_EQ(bits.highestBelow(FdBitmap::kNumbers + 100), 130) << "a bound beyond the map is the map's end";
	EXPECT_EQ(bits.highestBelow(131), 130);
	EXPECT_EQ(bits.highestBelow(130), 64) << "the bound itself is not below it";
	EXPECT_EQ(bits.highestBelow(64), 3);
	EXPECT_EQ(bits.highestBelow(3), -1);
	EXPECT_EQ(bits.highestBelow(0), -1);
	bits.note(FdBitmap::kNumbers - 1);
	EXPECT_EQ(bits.highestBelow(FdBitmap::kNumbers), FdBitmap::kNumbers - 1);
}

TEST(FdBitmap, AnswersForARangeAndForgetsOne)
{
	FdBitmap bits;
	EXPECT_FALSE(bits.anyIn(0, 1000));
	bits.note(70);
	bits.note(200);
	EXPECT_TRUE(bits.anyIn(70, 70));
	EXPECT_FALSE(bits.anyIn(71, 199)) << "between the two";
	EXPECT_TRUE(bits.anyIn(0, 1000));
	EXPECT_FALSE(bits.anyIn(900, FdBitmap::kNumbers)) << "none noted past the map";
	bits.forgetIn(71, 1000);
	EXPECT_FALSE(bits.anyIn(71, 1000));
	EXPECT_TRUE(bits.mayHave(70)) << "below the range: kept";
	bits.forgetIn(70, 70);
	EXPECT_FALSE(bits.anyIn(0, FdBitmap::kNumbers - 1));
}

/* A signal handler's close(-1) that took the shim's locks hung a thread holding them. */
TEST(FdBitmap, NeverHasANegativeNumberAndHasNumbersPastTheMapOnceOneIsNoted)
{
	FdBitmap bits;
	bits.note(-1);
	EXPECT_FALSE(bits.mayHave(-1));
	EXPECT_FALSE(bits.mayHave(FdBitmap::kNumbers + 5));
	EXPECT_FALSE(bits.anyIn(-5, -1));
	EXPECT_FALSE(bits.anyIn(FdBitmap::kNumbers, INT32_MAX));
	bits.note(FdBitmap::kNumbers + 5);
	EXPECT_TRUE(bits.mayHave(FdBitmap::kNumbers + 7)) << "one bit for every number past the map";
	EXPECT_FALSE(bits.mayHave(-1));
	EXPECT_TRUE(bits.anyIn(0, INT32_MAX));
	EXPECT_FALSE(bits.anyIn(0, FdBitmap::kNumbers - 1));
	bits.forget(FdBitmap::kNumbers + 5);
	EXPECT_TRUE(bits.mayHave(FdBitmap::kNumbers + 5)) << "kept: another may be there";
}

TEST(BufferedFds, HoldsWhatWasSetUntilForgotten)
{
	SocketPair pair;
	BufferedFds buffered;
	EXPECT_TRUE(buffered.empty());
	EXPECT_FALSE(buffered.holds(pair.fds[0]));

	buffered.set(&kOwner, pair.fds[0], inodeOf(pair.fds[0]), true);
	EXPECT_FALSE(buffered.empty());
	EXPECT_TRUE(buffered.holds(pair.fds[0]));
	EXPECT_FALSE(buffered.holds(pair.fds[1]));

	buffered.set(&kOwner, pair.fds[0], inodeOf(pair.fds[0]), false);
	EXPECT_TRUE(buffered.empty());

	buffered.set(&kOwner, pair.fds[0], inodeOf(pair.fds[0]), true);
	buffered.forget(&kOwner);
	EXPECT_TRUE(buffered.empty());
	EXPECT_FALSE(buffered.holds(pair.fds[0]));
}

TEST(BufferedFds, AClosedFdNumberIsForgotten)
{
	SocketPair old;
	BufferedFds buffered;
	const int number = old.fds[0];
	buffered.set(&kOwner, number, inodeOf(number), true);
	old.closeFirst();
	buffered.closed(number, number); /* what the close() wrapper does */
	EXPECT_FALSE(buffered.holds(number));
	EXPECT_TRUE(buffered.empty());

	SocketPair reused; /* the lowest free number: the one just closed */
	ASSERT_EQ(reused.fds[0], number);
	EXPECT_FALSE(buffered.holds(number)) << "reused by another socket";
}

/* Whether the socket's close will be abortive (SO_LINGER 0): the kernel's reset. */
bool resetsAtClose(int fd)
{
	struct linger setting = {};
	socklen_t length = sizeof(setting);
	return getsockopt(fd, SOL_SOCKET, SO_LINGER, &setting, &length) == 0 && setting.l_onoff && !setting.l_linger;
}

TEST(BufferedFds, ADuplicateIsReadableWhileTheConnectionHoldsDataUntilItIsClosed)
{
	SocketPair pair;
	BufferedFds buffered;
	const int socket = pair.fds[0];
	const int duplicate = dup(socket);
	buffered.duplicated(duplicate);
	EXPECT_FALSE(buffered.holds(duplicate)) << "nothing held yet";
	EXPECT_TRUE(buffered.empty()) << "a copy needs no close of its own";
	buffered.set(&kOwner, socket, inodeOf(socket), true);
	EXPECT_TRUE(buffered.holds(duplicate));
	EXPECT_EQ(buffered.highestHeld(FdBitmap::kNumbers), std::max(socket, duplicate));
	EXPECT_EQ(buffered.highestHeld(std::min(socket, duplicate)), -1);
	close(duplicate);
	EXPECT_FALSE(buffered.holds(duplicate)) << "closed";
	EXPECT_EQ(buffered.highestHeld(FdBitmap::kNumbers), socket);
	SocketPair reused; /* the lowest free number: the copy's */
	ASSERT_EQ(reused.fds[0], duplicate);
	EXPECT_FALSE(buffered.holds(duplicate)) << "its number names another file now";
	EXPECT_TRUE(dup2(socket, duplicate) == duplicate);
	EXPECT_TRUE(buffered.holds(duplicate)) << "and the socket again, with no new note";
	buffered.closing(socket, socket);
	EXPECT_FALSE(resetsAtClose(socket)) << "the copy keeps the socket";
	const int original = dup(socket); /* SocketPair closes its number */
	close(socket);
	buffered.closed(socket, socket);
	buffered.closing(duplicate, duplicate);
	EXPECT_TRUE(resetsAtClose(duplicate)) << "the socket's last close, with bytes queued";
	buffered.forget(&kOwner);
	EXPECT_TRUE(buffered.empty());
	close(duplicate);
	ASSERT_EQ(dup2(original, socket), socket);
	close(original);
}

TEST(BufferedFds, ACopyMadeBeforeItsSocketHoldsAnythingIsSeenByTheFileItNames)
{
	SocketPair pair;
	BufferedFds buffered;
	const int early = dup(pair.fds[1]); /* a copy of the other end first */
	buffered.duplicated(early);
	ASSERT_EQ(dup2(pair.fds[0], early), early); /* then, under the same number, of this one */
	buffered.set(&kOwner, pair.fds[0], inodeOf(pair.fds[0]), true);
	EXPECT_TRUE(buffered.holds(early));
	EXPECT_FALSE(buffered.holds(pair.fds[1]));
	buffered.set(&kOwner, pair.fds[0], inodeOf(pair.fds[0]), false);
	EXPECT_FALSE(buffered.holds(early)) << "nothing held";
	close(early);
}


/*
 * The connection's number closed while a copy keeps the socket, then the copy: the
 * socket's last close resets it (the records are unread) and the entry goes with it (a
 * hunt: an epoll registration the kernel had dropped was reported at once, for ever).
 */
/*
 * A connection holding records on socket, whose number the program closes behind a copy
 * of it (dup, then close): the copy, which keeps the socket open.
 */
int closedBehindACopy(BufferedFds &buffered, int socket)
{
	const int copy = dup(socket);
	buffered.duplicated(copy);
	buffered.set(&kOwner, socket, inodeOf(socket), true);
	buffered.closing(socket, socket);
	EXPECT_FALSE(resetsAtClose(socket)) << "the copy keeps the socket open";
	close(socket);
	buffered.closed(socket, socket);
	return copy;
}

TEST(BufferedFds, AConnectionKeptByACopyGoesAtTheCopysCloseWithTheKernelsReset)
{
	SocketPair pair;
	BufferedFds buffered;
	const ino_t ino = inodeOf(pair.fds[0]);
	const int copy = closedBehindACopy(buffered, pair.fds[0]);
	EXPECT_TRUE(buffered.holdsInode(ino)) << "the kernel's readiness is the socket's";
	EXPECT_TRUE(knownFds().mayHave(copy)) << "the copy's close must reach the shim";
	buffered.closing(copy, copy);
	EXPECT_TRUE(resetsAtClose(copy)) << "the last close, with records unread";
	close(copy);
	buffered.closed(copy, copy);
	EXPECT_FALSE(buffered.holdsInode(ino)) << "the socket is gone";
	EXPECT_TRUE(buffered.empty());
	buffered.forget(&kOwner);
}

/* An exec leaves held sockets to an image that cannot read OpenSSL's buffers; a failed one takes that back. */
TEST(BufferedFds, AnEndingImageResetsHeldSocketsAndAnExecThatFailsTakesItBack)
{
	SocketPair pair;
	BufferedFds buffered;
	const int socket = pair.fds[0];
	buffered.set(&kOwner, socket, inodeOf(socket), true);
	AbortiveCloses made;
	buffered.imageEnds(&made);
	EXPECT_TRUE(resetsAtClose(socket)) << "closed by the image's end, or the next one's, with records unread";
	ASSERT_EQ(made.count, 1);
	buffered.closeFailed(made);
	EXPECT_FALSE(resetsAtClose(socket)) << "the exec failed: the program goes on with its socket";
	EXPECT_TRUE(buffered.holds(socket));
	buffered.forget(&kOwner);
	buffered.closing(socket, socket);
	EXPECT_TRUE(buffered.empty());
}

TEST(BufferedFds, ClosingARangeLeavesTheOthers)
{
	BufferedFds buffered;
	const int a = 0, b = 0, c = 0;
	buffered.set(&a, 10, 0, true);
	buffered.set(&b, 20, 0, true);
	buffered.set(&c, 30, 0, true);
	buffered.closed(15, 25);
	EXPECT_TRUE(buffered.holds(10));
	EXPECT_FALSE(buffered.holds(20));
	EXPECT_TRUE(buffered.holds(30));
}

TEST(Connection, RegistersAgainAfterAClosingDroppedItsEntry)
{
	SocketPair pair;
	BufferedFds buffered;
	Connection connection;
	connection.setReadAheadByShim(true);
	holdData(connection, buffered, pair.fds[0]);

	buffered.closed(pair.fds[0], pair.fds[0]); /* say, dup2 onto it, then dup2 back */
	EXPECT_FALSE(buffered.holds(pair.fds[0]));
	connection.afterCall(buffered, true);
	EXPECT_TRUE(buffered.holds(pair.fds[0]));
}

TEST(Connection, LearnsNoDevice)
{
	const int file = open("/dev/null", O_RDONLY | O_CLOEXEC);
	ASSERT_GE(file, 0);
	Connection connection;
	connection.setReadAheadByShim(true);
	connection.noteSocketRead(file);
	EXPECT_EQ(connection.fd(), -1);
	close(file);
}

TEST(Connection, FollowsTheFdTheProgramMovesItTo)
{
	SocketPair pair;
	BufferedFds buffered;
	Connection connection;
	connection.setReadAheadByShim(true);
	holdData(connection, buffered, pair.fds[0]);

	const int moved = dup(pair.fds[0]);
	connection.rebind(buffered, moved); /* SSL_set_fd(ssl, moved) */
	buffered.closed(pair.fds[0], pair.fds[0]);
	EXPECT_TRUE(buffered.holds(moved));
	EXPECT_FALSE(buffered.holds(pair.fds[0]));

	connection.rebind(buffered, -1); /* a BIO of the program's own: learnt from reads */
	EXPECT_TRUE(buffered.empty());
	close(moved);
}

TEST(Connection, LearnsPipesToo)
{
	int pipeFds[2];
	ASSERT_EQ(pipe(pipeFds), 0);
	Connection connection;
	connection.setReadAheadByShim(true);
	connection.noteSocketRead(pipeFds[0]);
	EXPECT_EQ(connection.fd(), pipeFds[0]);
	close(pipeFds[0]);
	close(pipeFds[1]);
}

/* A connection is reported while its socket's queue holds bytes, once its socket is known. */
TEST(Connection, ReportsWhatItsSocketsQueueHolds)
{
	SocketPair pair;
	BufferedFds buffered;
	Connection connection;
	connection.setReadAheadByShim(true);
	connection.afterCall(buffered, true);
	EXPECT_FALSE(connection.buffered()) << "no socket learnt yet";

	connection.noteSocketRead(pair.fds[0]);
	connection.afterCall(buffered, true);
	EXPECT_TRUE(buffered.holds(pair.fds[0]));
	connection.afterCall(buffered, false);
	EXPECT_FALSE(connection.buffered());
	EXPECT_TRUE(buffered.empty());
}

TEST(PollMerged, PassesTheProgramsTimeoutWhenNothingIsBuffered)
{
	SocketPair pair;
	BufferedFds buffered;
	struct pollfd pfd = { pair.fds[0], POLLIN, 0 };
	int calls = 0;
	bool zero = true;
	int n = pollMerged(buffered, noSets(), &pfd, 1, [&](bool z) {
		calls++;
		zero = z;
		return 0;
	});
	EXPECT_EQ(n, 0);
	EXPECT_EQ(calls, 1);
	EXPECT_FALSE(zero);
}

/*
 * A poll for another socket while one is buffered: the kernel reads the array first (a
 * pointer it cannot read is its EFAULT, not a fault in the shim), then the wait is the
 * program's own when nothing is ready.
 */
TEST(PollMerged, LetsTheKernelReadTheArrayFirst)
{
	RecordProperty("fault", "poll with an unreadable pollfd array while a connection holds records");
	SocketPair pair, other;
	BufferedFds buffered;
	buffered.set(&kOwner, pair.fds[0], inodeOf(pair.fds[0]), true);
	const long page = sysconf(_SC_PAGESIZE);
	void *unreadable = mmap(nullptr, page, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	ASSERT_NE(unreadable, MAP_FAILED);
	auto *fds = static_cast<struct pollfd *>(unreadable);
	std::vector<bool> asked;
	int n = pollMerged(buffered, noSets(), fds, 1, [&](bool z) {
		asked.push_back(z);
		return poll(fds, 1, 0);
	});
	const int error = errno;
	EXPECT_EQ(n, -1);
	EXPECT_EQ(error, EFAULT);
	EXPECT_EQ(asked, std::vector<bool>({ true }));
	munmap(unreadable, page);

	struct pollfd quiet = { other.fds[0], POLLIN, 0 };
	asked.clear();
	n = pollMerged(buffered, noSets(), &quiet, 1, [&](bool z) {
		asked.push_back(z);
		return 0;
	});
	EXPECT_EQ(n, 0);
	EXPECT_EQ(asked, std::vector<bool>({ true, false })) << "the probe, then the program's own wait";
}

TEST(WaitTimeouts, RefusedAsTheKernelRefusesThem)
{
	const struct timespec fine = { 1, 999999999 }, negative = { -1, 0 }, badNanoseconds = { 0, 1000000000 },
			      negativeNanoseconds = { 0, -1 };
	EXPECT_FALSE(refusedTimeout(static_cast<const struct timespec *>(nullptr)));
	EXPECT_FALSE(refusedTimeout(&fine));
	EXPECT_TRUE(refusedTimeout(&negative));
	EXPECT_TRUE(refusedTimeout(&badNanoseconds));
	EXPECT_TRUE(refusedTimeout(&negativeNanoseconds));
	const struct timeval carried = { 0, 2000000 }, negativeSeconds = { -1, 0 }, negativeMicros = { 0, -1 };
	EXPECT_FALSE(refusedTimeout(&carried)) << "glibc carries whole seconds of tv_usec over";
	EXPECT_TRUE(refusedTimeout(&negativeSeconds));
	EXPECT_TRUE(refusedTimeout(&negativeMicros));
}

TEST(WaitTimeouts, SelectsTimeLeftIsWhatTheKernelWritesBack)
{
	auto left = [](struct timeval asked, long long elapsedNs) {
		const struct timeval t = timeLeft(asked, std::chrono::nanoseconds(elapsedNs));
		return static_cast<long long>(t.tv_sec) * 1000000 + t.tv_usec;
	};
	EXPECT_EQ(left({ 5, 0 }, 2500), 4999997) << "truncated to microseconds, as the kernel's";
	EXPECT_EQ(left({ 5, 0 }, 0), 4999999) << "a wait takes time";
	EXPECT_EQ(left({ 0, 2000000 }, 1000), 1999999) << "tv_usec carried over";
	EXPECT_EQ(left({ 0, 10 }, 20000), 0) << "never below zero";
	EXPECT_EQ(left({ 0, 0 }, 1000), 0);
	const struct timeval forever = timeLeft({ 1LL << 50, 7 }, std::chrono::seconds(1));
	EXPECT_EQ(forever.tv_sec, 1LL << 50);
	EXPECT_EQ(forever.tv_usec, 7);
}

TEST(WaitTimeouts, AnEpollWaitMadeAgainWaitsWhatIsLeft)
{
	EXPECT_EQ(timeLeftMs(500, std::chrono::milliseconds(200)), 300);
	EXPECT_EQ(timeLeftMs(500, std::chrono::microseconds(199500)), 301) << "rounded up: never sooner than the kernel";
	EXPECT_EQ(timeLeftMs(500, std::chrono::seconds(1)), 0) << "never below zero";
	EXPECT_EQ(timeLeftMs(-1, std::chrono::seconds(1)), -1) << "infinite stays";
	EXPECT_EQ(timeLeftMs(0, std::chrono::seconds(1)), 0);
	EXPECT_EQ(timeLeftMs(500, std::chrono::nanoseconds(0)), 500) << "a first round: the whole timeout";
	const struct timespec left = timeLeftSpec({ 2, 100 }, std::chrono::nanoseconds(1000000200));
	EXPECT_EQ(left.tv_sec, 0);
	EXPECT_EQ(left.tv_nsec, 999999900);
	const struct timespec none = timeLeftSpec({ 0, 5 }, std::chrono::seconds(1));
	EXPECT_EQ(none.tv_sec, 0);
	EXPECT_EQ(none.tv_nsec, 0);
	const struct timespec forever = timeLeftSpec({ 1LL << 50, 7 }, std::chrono::seconds(1));
	EXPECT_EQ(forever.tv_sec, 1LL << 50);
}

TEST(PollMerged, ReportsABufferedSocketReadableAtOnce)
{
	SocketPair pair;
	BufferedFds buffered;
	buffered.set(&kOwner, pair.fds[0], inodeOf(pair.fds[0]), true);
	ASSERT_EQ(write(pair.fds[1], "x", 1), 1); /* make the peer socket readable too */

	struct pollfd pfds[3] = {
		{ pair.fds[0], POLLIN, 0 },  /* buffered, socket empty */
		{ pair.fds[1], POLLOUT, 0 }, /* writable: the real poll reports it */
		{ pair.fds[0], POLLOUT, 0 }, /* asks only for output: left alone */
	};
	bool zero = false;
	int n = pollMerged(buffered, noSets(), pfds, 3, [&](bool z) {
		zero = z;
		return poll(pfds, 3, z ? 0 : -1);
	});
	EXPECT_TRUE(zero);
	EXPECT_EQ(n, 3);
	EXPECT_EQ(pfds[0].revents, POLLIN);
	EXPECT_EQ(pfds[1].revents, POLLOUT);
	EXPECT_EQ(pfds[2].revents, POLLOUT);
}

TEST(SelectMerged, ReportsABufferedSocketReadableAtOnce)
{
	SocketPair pair;
	BufferedFds buffered;
	buffered.set(&kOwner, pair.fds[0], inodeOf(pair.fds[0]), true);

	fd_set readable;
	FD_ZERO(&readable);
	FD_SET(pair.fds[0], &readable);
	FD_SET(pair.fds[1], &readable);
	const int nfds = std::max(pair.fds[0], pair.fds[1]) + 1;
	int n = selectMerged(buffered, noSets(), nfds, &readable, [&](bool zero) {
		struct timeval none = { 0, 0 };
		EXPECT_TRUE(zero);
		return select(nfds, &readable, nullptr, nullptr, &none);
	});
	EXPECT_EQ(n, 1);
	EXPECT_TRUE(FD_ISSET(pair.fds[0], &readable));
	EXPECT_FALSE(FD_ISSET(pair.fds[1], &readable));
}

TEST(SelectMerged, ReadsAndWritesNoBitBeyondNfds)
{
	RecordProperty("fault", "an fd_set allocated for nfds only, at the end of a page (OpenSSH, perl)");
	SocketPair pair;
	BufferedFds buffered;
	buffered.set(&kOwner, pair.fds[0], inodeOf(pair.fds[0]), true);
	ASSERT_LT(std::max(pair.fds[0], pair.fds[1]), __NFDBITS) << "one word of bits";
	/* One word of bits, the last of a page whose next page cannot be touched. */
	const long page = sysconf(_SC_PAGESIZE);
	char *pages = static_cast<char *>(mmap(nullptr, 2 * page, PROT_READ | PROT_WRITE,
					       MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
	ASSERT_NE(pages, MAP_FAILED);
	ASSERT_EQ(mprotect(pages + page, page, PROT_NONE), 0);
	fd_set *small = reinterpret_cast<fd_set *>(pages + page - sizeof(__fd_mask));
	__FDS_BITS(small)[0] = static_cast<__fd_mask>(1) << pair.fds[0] | static_cast<__fd_mask>(1) << pair.fds[1];
	const int nfds = std::max(pair.fds[0], pair.fds[1]) + 1;
	const int n = selectMerged(buffered, noSets(), nfds, small, [&](bool zero) {
		EXPECT_TRUE(zero);
		/* The real select with a whole set of the test's own, as the kernel reads nfds bits. */
		fd_set whole;
		FD_ZERO(&whole);
		__FDS_BITS(&whole)[0] = __FDS_BITS(small)[0];
		struct timeval none = { 0, 0 };
		const int ready = select(nfds, &whole, nullptr, nullptr, &none);
		__FDS_BITS(small)[0] = __FDS_BITS(&whole)[0];
		return ready;
	});
	EXPECT_EQ(n, 1);
	EXPECT_EQ(__FDS_BITS(small)[0], static_cast<__fd_mask>(1) << pair.fds[0]);
	munmap(pages, 2 * page);
}

TEST(BufferedFdsQuiet, AnEmptyRawReadQuietsTheFdUntilTheConnectionsNextCall)
{
	RecordProperty("fault", "after SSL_shutdown, a non-blocking poll and raw recv drain: a million empty wake-ups");
	SocketPair pair;
	BufferedFds buffered;
	Connection connection;
	connection.setReadAheadByShim(true);
	connection.noteSocketRead(pair.fds[0]);
	connection.afterCall(buffered, true);
	ASSERT_TRUE(buffered.holds(pair.fds[0]));
	buffered.quieted(pair.fds[0]);
	EXPECT_FALSE(buffered.holds(pair.fds[0])) << "the program found the socket empty";
	connection.afterCall(buffered, true);
	EXPECT_TRUE(buffered.holds(pair.fds[0])) << "its next OpenSSL call, still holding data";
	buffered.forget(&connection);
}

TEST(EpollFdinfo, ParsesTheKernelsLines)
{
	EpollRegistration r;
	ASSERT_TRUE(parseEpollFdinfoLine(
		"tfd:        5 events:       19 data:     7f00deadbeef  pos:0 ino:3d1a sdev:8", &r));
	EXPECT_EQ(r.fd, 5);
	EXPECT_EQ(r.events, 0x19u);
	EXPECT_EQ(r.data, 0x7f00deadbeefull);
	EXPECT_EQ(r.ino, 0x3d1aul);
	EXPECT_FALSE(parseEpollFdinfoLine("pos:\t0", &r));
	EXPECT_FALSE(parseEpollFdinfoLine("flags:\t02", &r));
}

class EpollMerged : public ::testing::Test {
protected:
	/* What the shim's wrappers do: the kernel's call, then the table's. */
	void SetUp() override
	{
		epfd_ = epoll_create1(EPOLL_CLOEXEC);
		sets_.created(epfd_);
	}
	void TearDown() override
	{
		for (int fd : alwaysReady_) {
			control(EPOLL_CTL_DEL, fd, 0, 0);
			close(fd);
		}
		for (auto &pair : held_) {
			if (pair->fds[0] >= 0)
				closeFd(pair->fds[0]);
			pair->fds[0] = -1;
		}
		closeFd(epfd_);
	}

	void control(int op, int fd, uint32_t events, uint64_t data)
	{
		struct epoll_event event = {};
		event.events = events;
		event.data.u64 = data;
		ASSERT_EQ(epoll_ctl(epfd_, op, fd, &event), 0);
		sets_.changed(epfd_, op, fd, &event);
	}
	void add(int fd, uint32_t events, uint64_t data) { control(EPOLL_CTL_ADD, fd, events, data); }
	void closeFd(int fd)
	{
		sets_.closing(fd, fd);
		ASSERT_EQ(close(fd), 0);
		buffered_.closed(fd, fd);
		sets_.closed(fd, fd);
	}
	/* A wait on epfd (the fixture's set by default), as the shim's epoll_wait runs it. */
	int waitOn(int epfd, struct epoll_event *events, int max)
	{
		/* Never blocks: the tests' sockets are idle, so the program's timeout is 0 too. */
		return epollMerged(buffered_, sets_, ::epoll_ctl, epfd, events, max,
				   [&](bool, int room, std::chrono::nanoseconds, struct epoll_event *into) {
					   return epoll_wait(epfd, into, room, 0);
				   });
	}
	int wait(struct epoll_event *events, int max) { return waitOn(epfd_, events, max); }
	/* OpenSSL holds data for the socket fd (of the connection owner), since that arrival. */
	void hold(int fd, unsigned long long arrival = 0, const void *owner = &kOwner)
	{
		buffered_.set(owner, fd, inodeOf(fd), true, arrival);
	}
	/*
	 * The fixture's socket holds data: the table matches the kernel's (when says at what
	 * point), and a wait reports one registration, the one with data.
	 */
	void expectOneReportedWhenHeld(uint64_t data, const char *when)
	{
		hold(pair_.fds[0]);
		expectTableMatchesKernel(when);
		struct epoll_event events[4];
		ASSERT_EQ(wait(events, 4), 1) << when;
		EXPECT_EQ(events[0].data.u64, data) << when;
	}
	/* The registrations the shim would report for the buffered sockets, against the kernel's. */
	void expectTableMatchesKernel(const char *when)
	{
		EpollRegistration ours[16], kernel[16];
		int n = sets_.claim(epfd_, buffered_, ours, 16);
		for (int i = 0; i < n; i++)
			sets_.unclaim(epfd_, ours[i]);
		int k = kernelRegistrations(buffered_, epfd_, kernel, 16);
		/* The kernel's mask always has EPOLLERR and EPOLLHUP, asked for or not. */
		auto key = [](const EpollRegistration &r) {
			return std::make_tuple(r.fd, r.events & ~static_cast<unsigned>(EPOLLERR | EPOLLHUP),
					       r.data, r.ino);
		};
		std::multiset<std::tuple<int, unsigned, unsigned long long, unsigned long>> a, b;
		for (int i = 0; i < n; i++)
			a.insert(key(ours[i]));
		for (int i = 0; i < k; i++)
			b.insert(key(kernel[i]));
		EXPECT_EQ(a, b) << when;
	}

	/*
	 * pair's one-shot arm of data: the kernel reports it to a slow wait (into stale; the
	 * wait's ticket, and the count as it returned), another wait claims it, the claim's
	 * disarm, and the program's next arm. A pool's state when the slow wait's thread
	 * looks at last.
	 */
	void staleReportAfterAClaim(SocketPair &pair, uint64_t data, struct epoll_event *stale, unsigned long *slow,
				    unsigned long *slowReturned)
	{
		add(pair.fds[0], EPOLLIN | EPOLLONESHOT, data);
		ASSERT_EQ(write(pair.fds[1], "x", 1), 1);
		*slow = sets_.beginWait();
		ASSERT_EQ(epoll_wait(epfd_, stale, 4, 0), 1) << "the kernel reports the first arm to the slow wait";
		*slowReturned = sets_.returned();
		EpollRegistration claimed[4];
		ASSERT_EQ(sets_.claim(epfd_, buffered_, claimed, 4), 1);
		sets_.disarm(epfd_, claimed[0], ::epoll_ctl);
		control(EPOLL_CTL_MOD, pair.fds[0], EPOLLIN | EPOLLONESHOT, data);
	}

	/* count sockets in the set, data firstData on, each a connection of its own holding data. */
	void addHeld(int count, uint64_t firstData)
	{
		for (int i = 0; i < count; i++)
			add(heldPair().fds[0], EPOLLIN, firstData + i);
	}
	/* A socket of a connection of its own holding data, not in the set. */
	SocketPair &heldPair()
	{
		held_.push_back(std::make_unique<SocketPair>());
		owners_.emplace_back();
		hold(held_.back()->fds[0], 0, &owners_.back());
		return *held_.back();
	}
	/* count eventfds in the set, data firstData on, readable for ever: nobody reads them. */
	void addAlwaysReady(int count, uint64_t firstData)
	{
		for (int i = 0; i < count; i++) {
			alwaysReady_.push_back(eventfd(1, EFD_CLOEXEC));
			ASSERT_GE(alwaysReady_.back(), 0);
			add(alwaysReady_.back(), EPOLLIN, firstData + i);
		}
	}

	/* dup(fd), noted as the shim's dup wrappers note it (copiedFds). */
	int copyOf(int fd)
	{
		const int copy = dup(fd);
		noteCopy(fd, copy);
		return copy;
	}
	void noteCopy(int from, int to)
	{
		copies_.note(from);
		copies_.note(to);
	}

	int epfd_ = -1;
	FdBitmap copies_; /* the process's copiedFds() */
	BufferedFds buffered_{ &copies_ };
	EpollSets sets_{ &copies_ };
	SocketPair pair_;
	std::vector<std::unique_ptr<SocketPair>> held_;
	std::deque<int> owners_; /* the held connections' owners: addresses that stay put */
	std::vector<int> alwaysReady_;
};

TEST_F(EpollMerged, ReturnsTheDataTheProgramRegistered)
{
	add(pair_.fds[0], EPOLLIN | EPOLLRDHUP, 0x1234567890abcdefull);
	hold(pair_.fds[0]);
	struct epoll_event events[4];
	ASSERT_EQ(wait(events, 4), 1);
	EXPECT_EQ(events[0].data.u64, 0x1234567890abcdefull);
	EXPECT_EQ(events[0].events, static_cast<uint32_t>(EPOLLIN));
}

TEST_F(EpollMerged, JoinsAnEventTheKernelReportedToo)
{
	add(pair_.fds[0], EPOLLIN | EPOLLOUT, 7);
	hold(pair_.fds[0]);
	struct epoll_event events[4];
	ASSERT_EQ(wait(events, 4), 1);
	EXPECT_EQ(events[0].data.u64, 7u);
	EXPECT_EQ(events[0].events, static_cast<uint32_t>(EPOLLIN | EPOLLOUT));
}

/*
 * With the shim's wake in the set and room for one event, every wait joins the kernel's
 * flags to the held connection's (a hunt: the wake took the kernel's one place every
 * other wait, which then gave EPOLLIN alone where the kernel gives EPOLLIN|EPOLLOUT).
 */
TEST_F(EpollMerged, JoinsTheKernelsEventInEveryWaitOfOneWhileTheWakeIsInTheSet)
{
	RecordProperty("fault", "epoll_wait(maxevents=1) on a held connection registered for EPOLLIN|EPOLLOUT, the shim's wake in the set");
	add(pair_.fds[0], EPOLLIN | EPOLLOUT, 7);
	hold(pair_.fds[0]);
	sets_.wake().wake(epfd_, ::epoll_ctl);
	for (int i = 0; i < 4; i++) {
		struct epoll_event events[1];
		ASSERT_EQ(wait(events, 1), 1) << "wait " << i;
		EXPECT_EQ(events[0].data.u64, 7u) << "wait " << i;
		EXPECT_EQ(events[0].events, static_cast<uint32_t>(EPOLLIN | EPOLLOUT)) << "wait " << i;
	}
}

TEST_F(EpollMerged, AddsNothingForAnFdNotRegisteredOrNotAskingForInput)
{
	add(pair_.fds[1], EPOLLIN, 1);
	add(pair_.fds[0], EPOLLOUT, 2);
	hold(pair_.fds[0]);
	struct epoll_event events[4];
	ASSERT_EQ(wait(events, 4), 1); /* only the kernel's EPOLLOUT */
	EXPECT_EQ(events[0].data.u64, 2u);
	EXPECT_EQ(events[0].events, static_cast<uint32_t>(EPOLLOUT));
}

TEST_F(EpollMerged, OneShotFiresOnce)
{
	add(pair_.fds[0], EPOLLIN | EPOLLONESHOT, 9);
	hold(pair_.fds[0]);
	struct epoll_event events[4];
	ASSERT_EQ(wait(events, 4), 1);
	EXPECT_EQ(wait(events, 4), 0);
}

/*
 * A one-shot arm made while OpenSSL holds records the shim read ahead goes to the kernel
 * without input: the shim alone reports it (a hunt: both reported a short connection's
 * first arms, and a worker was told of an arm of a connection it had closed), until
 * OpenSSL holds them no more; then an arm not reported yet is the kernel's as made.
 */
TEST_F(EpollMerged, AOneShotArmMadeWhileRecordsAreHeldIsTheShimsAloneUntilTheyAreGone)
{
	const int fd = pair_.fds[0];
	ASSERT_EQ(write(pair_.fds[1], "x", 1), 1); /* the socket has bytes too */
	hold(fd);
	struct epoll_event arm = {};
	arm.events = EPOLLIN | EPOLLONESHOT;
	arm.data.u64 = 9;
	ASSERT_EQ(sets_.control(epfd_, EPOLL_CTL_ADD, fd, &arm, ::epoll_ctl, &buffered_), 0);
	struct epoll_event events[4];
	EXPECT_EQ(epoll_wait(epfd_, events, 4, 0), 0) << "the kernel's arm asks for no input";
	ASSERT_EQ(wait(events, 4), 1);
	EXPECT_EQ(events[0].data.u64, 9u);
	EXPECT_EQ(wait(events, 4), 0) << "reported once";
	buffered_.set(&kOwner, fd, inodeOf(fd), false);
	sets_.released(inodeOf(fd));
	EXPECT_EQ(epoll_wait(epfd_, events, 4, 0), 0) << "reported already: nothing given back";

	hold(fd);
	ASSERT_EQ(sets_.control(epfd_, EPOLL_CTL_MOD, fd, &arm, ::epoll_ctl, &buffered_), 0);
	EXPECT_EQ(epoll_wait(epfd_, events, 4, 0), 0);
	buffered_.set(&kOwner, fd, inodeOf(fd), false);
	sets_.released(inodeOf(fd));
	ASSERT_EQ(epoll_wait(epfd_, events, 4, 0), 1) << "not reported yet: the kernel's, with input";
	EXPECT_EQ(events[0].data.u64, 9u);
	EXPECT_TRUE(events[0].events & EPOLLIN);
}

/* An arm asking for output too stays the kernel's whole: it would fire for output alone. */
TEST_F(EpollMerged, AOneShotArmAskingForMoreThanInputIsTheKernelsAsMade)
{
	const int fd = pair_.fds[0];
	ASSERT_EQ(write(pair_.fds[1], "x", 1), 1);
	hold(fd);
	struct epoll_event arm = {};
	arm.events = EPOLLIN | EPOLLOUT | EPOLLONESHOT;
	arm.data.u64 = 9;
	ASSERT_EQ(sets_.control(epfd_, EPOLL_CTL_ADD, fd, &arm, ::epoll_ctl, &buffered_), 0);
	struct epoll_event events[4];
	ASSERT_EQ(epoll_wait(epfd_, events, 4, 0), 1);
	EXPECT_EQ(events[0].events & (EPOLLIN | EPOLLOUT), static_cast<uint32_t>(EPOLLIN | EPOLLOUT));
}

TEST_F(EpollMerged, RespectsMaxevents)
{
	add(pair_.fds[0], EPOLLIN, 1);
	add(pair_.fds[1], EPOLLOUT, 2);
	hold(pair_.fds[0]);
	struct epoll_event events[1];
	EXPECT_EQ(wait(events, 1), 1);
}

/*
 * Many held connections, served fairly: all of them by one wait with room for them (a wait
 * of 128 served 64 of 80), and in turn by waits of 16, as the kernel's rotating ready list
 * serves every ready file (the same first 16 every time starved the rest).
 */
TEST_F(EpollMerged, ManyHeldConnectionsAreServedInTurn)
{
	constexpr int kConnections = 100;
	addHeld(kConnections, 1000);
	struct epoll_event events[128];
	EXPECT_EQ(wait(events, 128), kConnections) << "room for every one";

	std::set<uint64_t> served;
	for (int round = 0; round < (kConnections + 15) / 16; round++) {
		const int ready = wait(events, 16);
		ASSERT_EQ(ready, 16);
		for (int i = 0; i < ready; i++)
			served.insert(events[i].data.u64);
	}
	EXPECT_EQ(served.size(), static_cast<size_t>(kConnections)) << "each within 7 waits of 16";
}

TEST_F(EpollMerged, EdgeTriggeredGetsOneEventPerArrival)
{
	add(pair_.fds[0], EPOLLIN | EPOLLOUT | EPOLLET | EPOLLRDHUP, 5);
	hold(pair_.fds[0], 1);
	struct epoll_event events[4];
	ASSERT_EQ(wait(events, 4), 1); /* the kernel's first EPOLLOUT edge, and the arrival */
	EXPECT_EQ(events[0].events, static_cast<uint32_t>(EPOLLIN | EPOLLOUT));
	EXPECT_EQ(wait(events, 4), 0) << "a server that left the data unread is not woken again";
	EXPECT_EQ(wait(events, 4), 0);

	hold(pair_.fds[0], 2); /* a call read more from the socket */
	ASSERT_EQ(wait(events, 4), 1);
	EXPECT_EQ(events[0].events, static_cast<uint32_t>(EPOLLIN));
	EXPECT_EQ(wait(events, 4), 0);
}

TEST_F(EpollMerged, ModPollsAgainAsTheKernelDoesEdgeTriggeredToo)
{
	RecordProperty("fault", "EPOLLET|EPOLLONESHOT re-armed with EPOLL_CTL_MOD after one record");
	for (uint32_t flags : { static_cast<uint32_t>(EPOLLET), static_cast<uint32_t>(EPOLLET | EPOLLONESHOT) }) {
		SCOPED_TRACE(flags);
		add(pair_.fds[0], EPOLLIN | flags, 7);
		hold(pair_.fds[0], 1);
		struct epoll_event events[4];
		ASSERT_EQ(wait(events, 4), 1);
		EXPECT_EQ(wait(events, 4), 0);
		control(EPOLL_CTL_MOD, pair_.fds[0], EPOLLIN | flags, 7);
		ASSERT_EQ(wait(events, 4), 1) << "the MOD found the connection ready";
		EXPECT_EQ(events[0].data.u64, 7u);
		EXPECT_EQ(wait(events, 4), 0);
		/* Interest off, then on again (backpressure): the kernel re-polls on the second MOD. */
		control(EPOLL_CTL_MOD, pair_.fds[0], flags, 7);
		EXPECT_EQ(wait(events, 4), 0);
		control(EPOLL_CTL_MOD, pair_.fds[0], EPOLLIN | flags, 7);
		ASSERT_EQ(wait(events, 4), 1);
		control(EPOLL_CTL_DEL, pair_.fds[0], 0, 0);
	}
}

TEST_F(EpollMerged, AnAlwaysReadyFdDoesNotStarveAHeldConnection)
{
	RecordProperty("fault", "epoll_wait(maxevents=1) with an always-readable eventfd next to the socket");
	addAlwaysReady(1, 100);
	add(pair_.fds[0], EPOLLIN, 1);
	hold(pair_.fds[0], 1);
	struct epoll_event events[1];
	int socketTurns = 0, eventfdTurns = 0;
	for (int i = 0; i < 6; i++) {
		ASSERT_EQ(wait(events, 1), 1);
		socketTurns += events[0].data.u64 == 1;
		eventfdTurns += events[0].data.u64 == 100;
	}
	EXPECT_EQ(socketTurns, 3) << "served in turn";
	EXPECT_EQ(eventfdTurns, 3);
}

/*
 * The wait after one the kernel's events filled serves the held connection first, and the
 * kernel's events take the room it leaves, as the kernel's own wait would have filled it
 * (a hunt: 10 ready eventfds and a held connection, the second epoll_wait(64) returned
 * the connection alone, and the third all 11).
 */
TEST_F(EpollMerged, TheHeldConnectionsTurnLeavesTheRestOfTheRoomToTheKernel)
{
	constexpr int kReady = 3;
	addAlwaysReady(kReady, 100);
	add(pair_.fds[0], EPOLLIN, 1);
	hold(pair_.fds[0], 1);
	struct epoll_event events[8];
	ASSERT_EQ(wait(events, kReady), kReady) << "the kernel's events fill the wait";
	ASSERT_EQ(wait(events, 8), kReady + 1) << "the held connection, and the kernel's events in the room left";
	std::set<uint64_t> reported;
	for (int i = 0; i < kReady + 1; i++)
		reported.insert(events[i].data.u64);
	EXPECT_EQ(reported, (std::set<uint64_t>{ 1, 100, 101, 102 }));
	EXPECT_EQ(wait(events, 8), kReady + 1) << "and every wait with room after it";
}

/*
 * Held connections the kernel's events crowded out are the next wait's: each of four is
 * served within a few waits of 2 beside two always-ready eventfds (a hunt: two of them
 * waited 22 waits, since the turn had moved past them).
 */
TEST_F(EpollMerged, HeldConnectionsCrowdedOutAreServedNext)
{
	constexpr int kHeld = 4;
	addHeld(kHeld, 0);
	addAlwaysReady(2, 100);
	std::vector<int> served(kHeld);
	struct epoll_event events[2];
	for (int round = 0; round < 8; round++) {
		const int ready = wait(events, 2);
		ASSERT_EQ(ready, 2);
		for (int i = 0; i < ready; i++)
			if (events[i].data.u64 < kHeld)
				served[events[i].data.u64]++;
	}
	EXPECT_EQ(served, std::vector<int>(kHeld, 2)) << "each served twice in 8 waits of 2";
}

TEST_F(EpollMerged, ANewSslOnTheSameSocketGetsItsOwnEdge)
{
	add(pair_.fds[0], EPOLLIN | EPOLLET, 1);
	struct epoll_event events[4];
	{
		Connection first;
		first.setReadAheadByShim(true);
		first.noteSocketRead(pair_.fds[0]);
		first.afterCall(buffered_, true);
		ASSERT_EQ(wait(events, 4), 1);
		buffered_.forget(&first); /* SSL_free */
	}
	Connection second; /* SSL_new on the same fd */
	second.setReadAheadByShim(true);
	second.noteSocketRead(pair_.fds[0]);
	second.afterCall(buffered_, true);
	EXPECT_EQ(wait(events, 4), 1) << "its first arrival is not the old connection's";
	buffered_.forget(&second);
}

TEST_F(EpollMerged, LevelTriggeredStaysReadableWhileHeld)
{
	add(pair_.fds[0], EPOLLIN, 5);
	hold(pair_.fds[0], 1);
	struct epoll_event events[4];
	for (int i = 0; i < 3; i++)
		ASSERT_EQ(wait(events, 4), 1);
}

TEST_F(EpollMerged, AnEdgeNotDeliveredForMaxeventsComesNextTime)
{
	add(pair_.fds[1], EPOLLOUT, 2); /* the kernel fills the one slot */
	add(pair_.fds[0], EPOLLIN | EPOLLET, 1);
	hold(pair_.fds[0], 1);
	struct epoll_event events[1];
	ASSERT_EQ(wait(events, 1), 1);
	EXPECT_EQ(events[0].data.u64, 2u);
	control(EPOLL_CTL_DEL, pair_.fds[1], 0, 0);
	ASSERT_EQ(wait(events, 1), 1);
	EXPECT_EQ(events[0].data.u64, 1u);
	EXPECT_EQ(wait(events, 1), 0);
}

TEST_F(EpollMerged, OneShotReArmedByModFiresAgain)
{
	add(pair_.fds[0], EPOLLIN | EPOLLONESHOT, 9);
	hold(pair_.fds[0]);
	struct epoll_event events[4];
	ASSERT_EQ(wait(events, 4), 1);
	EXPECT_EQ(wait(events, 4), 0);
	expectTableMatchesKernel("fired");
	control(EPOLL_CTL_MOD, pair_.fds[0], EPOLLIN | EPOLLONESHOT, 10);
	ASSERT_EQ(wait(events, 4), 1);
	EXPECT_EQ(events[0].data.u64, 10u);
	EXPECT_EQ(wait(events, 4), 0);
}

TEST_F(EpollMerged, OneShotTheKernelFiredIsNotReportedAgain)
{
	add(pair_.fds[0], EPOLLIN | EPOLLOUT | EPOLLONESHOT, 9);
	struct epoll_event events[4];
	ASSERT_EQ(wait(events, 4), 1); /* EPOLLOUT, from the kernel: now disarmed */
	hold(pair_.fds[0]);
	EXPECT_EQ(wait(events, 4), 0);
	expectTableMatchesKernel("fired by the kernel");
}

/*
 * Two waits on one set, as two worker threads: the kernel reports a one-shot arm to one
 * whose records are not yet taken in while the other claims the same arm for the records
 * OpenSSL holds. One of them reports it, never both (a hunt: a connection handed to two
 * workers at once, 18 runs of 30); the claimer's own kernel event stays, and so does the
 * kernel's report of an arm the program made again (MOD) after the claim.
 */
TEST_F(EpollMerged, OneShotArmClaimedByOneWaitIsNotReportedByAnother)
{
	add(pair_.fds[0], EPOLLIN | EPOLLONESHOT, 9);
	ASSERT_EQ(write(pair_.fds[1], "x", 1), 1); /* the kernel has data too */
	hold(pair_.fds[0]);
	struct epoll_event slow[4];
	ASSERT_EQ(epoll_wait(epfd_, slow, 4, 0), 1) << "the kernel fired the arm for one wait";
	EpollRegistration claimed[4];
	ASSERT_EQ(sets_.claim(epfd_, buffered_, claimed, 4), 1) << "the other claims it meanwhile";
	EXPECT_EQ(sets_.delivered(epfd_, slow, 1), 0) << "the first wait's event goes";

	/* The claimer's own kernel event for the arm it claimed stays. */
	control(EPOLL_CTL_MOD, pair_.fds[0], EPOLLIN | EPOLLONESHOT, 10);
	ASSERT_EQ(sets_.claim(epfd_, buffered_, claimed, 4), 1);
	struct epoll_event own[4];
	ASSERT_EQ(epoll_wait(epfd_, own, 4, 0), 1);
	EXPECT_EQ(sets_.delivered(epfd_, own, 1, claimed, 1), 1);

	/* Armed again after a claim: the kernel's report of the new arm stays. */
	control(EPOLL_CTL_MOD, pair_.fds[0], EPOLLIN | EPOLLONESHOT, 11);
	ASSERT_EQ(sets_.claim(epfd_, buffered_, claimed, 4), 1);
	control(EPOLL_CTL_MOD, pair_.fds[0], EPOLLIN | EPOLLONESHOT, 12);
	struct epoll_event rearmed[4];
	ASSERT_EQ(epoll_wait(epfd_, rearmed, 4, 0), 1);
	EXPECT_EQ(sets_.delivered(epfd_, rearmed, 1), 1);
	EXPECT_EQ(rearmed[0].data.u64, 12u);
}

/*
 * A wait that began before another claimed an arm and disarmed it in the kernel may take
 * in the kernel's report of that arm only after the program armed the registration again
 * (its worker read, then MOD, or DEL and ADD): the report may be the old arm's, and two
 * workers would have the connection at once (a hunt: 6 runs of 40). It goes, and the
 * kernel is given the program's arm again, so that a wait begun after reports it once.
 */
TEST_F(EpollMerged, AReportToAWaitBegunBeforeAClaimedArmsDisarmGoesAndTheArmIsMadeAgain)
{
	for (const bool byDeleteAndAdd : { false, true }) {
		SCOPED_TRACE(byDeleteAndAdd ? "DEL and ADD" : "MOD");
		SocketPair &pair = heldPair();
		/* Data of its own: the first round's registration may outlive its close (detached). */
		const uint64_t data = byDeleteAndAdd ? 19 : 9;
		add(pair.fds[0], EPOLLIN | EPOLLONESHOT, data);
		ASSERT_EQ(write(pair.fds[1], "x", 1), 1); /* the kernel has data too */
		const unsigned long slow = sets_.beginWait();
		EpollRegistration claimed[4];
		ASSERT_EQ(sets_.claim(epfd_, buffered_, claimed, 4), 1);
		sets_.disarm(epfd_, claimed[0], ::epoll_ctl);
		struct epoll_event events[4];
		EXPECT_EQ(epoll_wait(epfd_, events, 4, 0), 0) << "disarmed in the kernel";
		/* Its data as before: the kernel's report names the registration by it. */
		if (byDeleteAndAdd) {
			control(EPOLL_CTL_DEL, pair.fds[0], 0, 0);
			add(pair.fds[0], EPOLLIN | EPOLLONESHOT, data);
		} else {
			control(EPOLL_CTL_MOD, pair.fds[0], EPOLLIN | EPOLLONESHOT, data);
		}

		ASSERT_EQ(epoll_wait(epfd_, events, 4, 0), 1);
		EXPECT_EQ(sets_.delivered(epfd_, events, 1, nullptr, 0, slow, ::epoll_ctl), 0)
			<< "the slow wait's report goes";
		const unsigned long after = sets_.beginWait();
		EXPECT_LT(slow, after);
		ASSERT_EQ(epoll_wait(epfd_, events, 4, 0), 1) << "the kernel has the arm again";
		EXPECT_EQ(sets_.delivered(epfd_, events, 1, nullptr, 0, after, ::epoll_ctl), 1);
		EXPECT_EQ(events[0].data.u64, data);
		EXPECT_EQ(epoll_wait(epfd_, events, 4, 0), 0) << "reported once";
		closeFd(pair.fds[0]);
		pair.fds[0] = -1;
	}
}

/*
 * The arm the program makes after a claim may ask for output alone (a server with a write
 * pending): a report of it to a wait begun before the claim's disarm goes like any, and
 * the kernel is given that arm again (a hunt: it was not, for an arm without input, and
 * the connection stalled for good, 8 runs of 10).
 */
TEST_F(EpollMerged, AnOutputArmMadeAfterAClaimIsMadeAgainWhenAnOlderWaitsReportOfItGoes)
{
	SocketPair &pair = heldPair();
	add(pair.fds[0], EPOLLIN | EPOLLONESHOT, 60);
	const unsigned long slow = sets_.beginWait();
	EpollRegistration claimed[4];
	ASSERT_EQ(sets_.claim(epfd_, buffered_, claimed, 4), 1);
	sets_.disarm(epfd_, claimed[0], ::epoll_ctl);
	control(EPOLL_CTL_MOD, pair.fds[0], EPOLLOUT | EPOLLONESHOT, 60);
	struct epoll_event events[4];
	ASSERT_EQ(epoll_wait(epfd_, events, 4, 0), 1) << "writable";
	EXPECT_EQ(sets_.delivered(epfd_, events, 1, nullptr, 0, slow, ::epoll_ctl, sets_.returned()), 0);
	const unsigned long after = sets_.beginWait();
	ASSERT_EQ(epoll_wait(epfd_, events, 4, 0), 1) << "the output arm is the kernel's again";
	EXPECT_EQ(sets_.delivered(epfd_, events, 1, nullptr, 0, after, ::epoll_ctl, sets_.returned()), 1);
	EXPECT_EQ(events[0].events & EPOLLOUT, static_cast<uint32_t>(EPOLLOUT));
	control(EPOLL_CTL_DEL, pair.fds[0], 0, 0);
}

/*
 * A wait that returned before a claimed arm's disarm has that arm's report, or an older
 * one's: it goes, and a claim of the arm the program made since keeps its mark for that
 * arm's own report to another wait (a hunt: the old report used the mark up, and the new
 * arm went to a worker by the claim and to another by the kernel, 1 run in 30).
 */
TEST_F(EpollMerged, AReportToAWaitReturnedBeforeADisarmLeavesTheNextClaimsMark)
{
	SocketPair &pair = heldPair();
	struct epoll_event stale[4];
	unsigned long slow = 0, slowReturned = 0;
	ASSERT_NO_FATAL_FAILURE(staleReportAfterAClaim(pair, 70, stale, &slow, &slowReturned));
	EpollRegistration claimed[4];
	ASSERT_EQ(sets_.claim(epfd_, buffered_, claimed, 4), 1) << "a claim of the second arm";

	EXPECT_EQ(sets_.delivered(epfd_, stale, 1, nullptr, 0, slow, ::epoll_ctl, slowReturned), 0);
	const unsigned long other = sets_.beginWait();
	struct epoll_event events[4];
	ASSERT_EQ(epoll_wait(epfd_, events, 4, 0), 1) << "the kernel reports the second arm too";
	EXPECT_EQ(sets_.delivered(epfd_, events, 1, nullptr, 0, other, ::epoll_ctl, sets_.returned()), 0)
		<< "the claim reports it";
	control(EPOLL_CTL_DEL, pair.fds[0], 0, 0);
}

/*
 * A wait read as returning after a claimed arm's disarm, with the old arm's report
 * (descheduled between the kernel's report and the shim's look): taken out, the kernel
 * given the program's new arm again, although another wait already has that arm's
 * report. The copy's report, after that one, goes: an arm is reported once (a hunt: eight
 * workers on two cores, a worker told of an arm it had not made in 3 to 5 runs of 100).
 */
TEST_F(EpollMerged, TheShimsCopyOfAnArmAnotherWaitAlreadyReportedGoes)
{
	SocketPair &pair = heldPair();
	struct epoll_event stale[4];
	unsigned long slow = 0, slowReturned = 0;
	ASSERT_NO_FATAL_FAILURE(staleReportAfterAClaim(pair, 80, stale, &slow, &slowReturned));
	const unsigned long other = sets_.beginWait();
	struct epoll_event second[4];
	ASSERT_EQ(epoll_wait(epfd_, second, 4, 0), 1) << "the second arm's report, to another wait";
	const unsigned long otherReturned = sets_.returned();

	EXPECT_EQ(sets_.delivered(epfd_, stale, 1, nullptr, 0, slow, ::epoll_ctl, sets_.returned()), 0)
		<< "read as returned after the disarm: taken out, the arm given to the kernel again";
	EXPECT_EQ(sets_.delivered(epfd_, second, 1, nullptr, 0, other, ::epoll_ctl, otherReturned), 1);
	const unsigned long later = sets_.beginWait();
	struct epoll_event copy[4];
	ASSERT_EQ(epoll_wait(epfd_, copy, 4, 0), 1) << "the copy the shim made";
	EXPECT_EQ(sets_.delivered(epfd_, copy, 1, nullptr, 0, later, ::epoll_ctl, sets_.returned()), 0)
		<< "reported already";
	control(EPOLL_CTL_DEL, pair.fds[0], 0, 0);
}

/*
 * The kernel reported an arm to a slow wait as another wait claimed it; the program then
 * armed the registration again with new data (a MOD), or closed the connection and gave
 * its data to a new one. The slow wait's report carries the old arm's data, which names
 * no registration as it was: it goes (hunts: 14 runs of 30 with new data, 3 of 30 with a
 * closed connection's data, where two registrations of one data made the set read from
 * the kernel, which reported the old arm).
 */
TEST_F(EpollMerged, AClaimedArmsReportToAWaitBegunBeforeItsDisarmGoesOnceItsDataNamesAnotherArm)
{
	for (const bool closedAndReused : { false, true }) {
		SCOPED_TRACE(closedAndReused ? "closed, its data given to a new connection" : "armed again with new data");
		const uint64_t data = closedAndReused ? 40 : 30;
		SocketPair &pair = heldPair();
		add(pair.fds[0], EPOLLIN | EPOLLONESHOT, data);
		ASSERT_EQ(write(pair.fds[1], "x", 1), 1);
		const unsigned long slow = sets_.beginWait();
		struct epoll_event stale[4];
		ASSERT_EQ(epoll_wait(epfd_, stale, 4, 0), 1) << "the kernel reports the arm to the slow wait";
		EpollRegistration claimed[4];
		ASSERT_EQ(sets_.claim(epfd_, buffered_, claimed, 4), 1) << "another wait claims it meanwhile";
		sets_.disarm(epfd_, claimed[0], ::epoll_ctl);

		int armedFd = pair.fds[0];
		uint64_t armedData = data + 1;
		SocketPair fresh;
		if (closedAndReused) {
			closeFd(pair.fds[0]);
			pair.fds[0] = -1;
			add(fresh.fds[0], EPOLLIN | EPOLLONESHOT, data);
			ASSERT_EQ(write(fresh.fds[1], "y", 1), 1);
			armedFd = fresh.fds[0], armedData = data;
		} else {
			control(EPOLL_CTL_MOD, pair.fds[0], EPOLLIN | EPOLLONESHOT, armedData);
		}
		EXPECT_EQ(sets_.delivered(epfd_, stale, 1, nullptr, 0, slow, ::epoll_ctl), 0) << "the old arm's report goes";
		EXPECT_TRUE(sets_.exact(epfd_));

		const unsigned long after = sets_.beginWait();
		struct epoll_event events[4];
		ASSERT_EQ(epoll_wait(epfd_, events, 4, 0), 1) << "the arm the program made";
		EXPECT_EQ(sets_.delivered(epfd_, events, 1, nullptr, 0, after, ::epoll_ctl), 1);
		EXPECT_EQ(events[0].data.u64, armedData);
		EXPECT_EQ(epoll_wait(epfd_, events, 4, 0), 0) << "reported once";
		control(EPOLL_CTL_DEL, armedFd, 0, 0);
	}
}

/*
 * The shim disarms a claimed arm in the kernel as the kernel's own report would, but not
 * an arm the program made again before that (another thread's MOD): it stands.
 */
TEST_F(EpollMerged, AClaimedArmIsDisarmedInTheKernelUnlessTheProgramArmedItAgain)
{
	add(pair_.fds[0], EPOLLIN | EPOLLONESHOT, 9);
	ASSERT_EQ(write(pair_.fds[1], "x", 1), 1);
	hold(pair_.fds[0]);
	EpollRegistration claimed[4];
	ASSERT_EQ(sets_.claim(epfd_, buffered_, claimed, 4), 1);
	control(EPOLL_CTL_MOD, pair_.fds[0], EPOLLIN | EPOLLONESHOT, 9);
	sets_.disarm(epfd_, claimed[0], ::epoll_ctl);
	struct epoll_event events[4];
	EXPECT_EQ(epoll_wait(epfd_, events, 4, 0), 1) << "the program's arm stands";
}

/* Of two kernel reports, only the claimed arm's goes: the other stays, first, and the count says one. */
TEST_F(EpollMerged, OnlyTheClaimedArmsReportLeavesAWaitsEvents)
{
	SocketPair other;
	add(pair_.fds[0], EPOLLIN | EPOLLONESHOT, 9);
	add(other.fds[0], EPOLLIN | EPOLLONESHOT, 20);
	ASSERT_EQ(write(pair_.fds[1], "x", 1), 1);
	ASSERT_EQ(write(other.fds[1], "y", 1), 1);
	hold(pair_.fds[0]);
	struct epoll_event slow[4];
	ASSERT_EQ(epoll_wait(epfd_, slow, 4, 0), 2);
	EpollRegistration claimed[4];
	ASSERT_EQ(sets_.claim(epfd_, buffered_, claimed, 4), 1);
	ASSERT_EQ(sets_.delivered(epfd_, slow, 2), 1);
	EXPECT_EQ(slow[0].data.u64, 20u);
	control(EPOLL_CTL_DEL, other.fds[0], 0, 0);
}

/* What a call that filled wakes (EpollWaiters): the sets registering its socket, by any of their numbers. */
TEST_F(EpollMerged, SetsOfNamesTheSetsThatRegisterASocketAndTheirCopies)
{
	const int other = epoll_create1(EPOLL_CLOEXEC);
	ASSERT_GE(other, 0);
	sets_.created(other);
	const int copy = dup(epfd_);
	ASSERT_GE(copy, 0);
	sets_.aliased(epfd_, copy);
	add(pair_.fds[0], EPOLLIN, 1);
	int found[8];
	ASSERT_EQ(sets_.setsOf(pair_.fds[0], inodeOf(pair_.fds[0]), found, 8), 2);
	EXPECT_EQ(std::multiset<int>(found, found + 2), std::multiset<int>({ epfd_, copy }));
	EXPECT_EQ(sets_.setsOf(pair_.fds[1], inodeOf(pair_.fds[1]), found, 8), 0) << "registered in no set";
	hold(pair_.fds[0]);
	expectOneReportedWhenHeld(1, "its file learnt");
	EXPECT_EQ(sets_.setsOf(pair_.fds[0], inodeOf(pair_.fds[0]), found, 1), 1) << "at most max";
	closeFd(copy);
	closeFd(other);
}

/*
 * Woken by the shim with nothing to report (another thread's reads woke the set), a wait
 * waits again for what is left of the program's timeout, not all of it (a hunt: a 500 ms
 * wait lasted 3.4 s while the wakes came).
 */
TEST_F(EpollMerged, AWaitWokenWithNothingToReportWaitsWhatIsLeftOfItsTimeout)
{
	add(pair_.fds[0], EPOLLIN, 1);
	heldPair(); /* held, in no set: this wait has nothing of the shim's to report */
	sets_.wake().wake(epfd_, ::epoll_ctl);
	std::vector<long long> elapsed;
	struct epoll_event events[4];
	const int ready = epollMerged(buffered_, sets_, ::epoll_ctl, epfd_, events, 4,
				      [&](bool zero, int room, std::chrono::nanoseconds since, struct epoll_event *into) {
					      if (!zero)
						      elapsed.push_back(since.count());
					      return epoll_wait(epfd_, into, room, 0);
				      });
	EXPECT_EQ(ready, 0);
	ASSERT_EQ(elapsed.size(), 2u) << "the wake's round, then one more";
	EXPECT_EQ(elapsed[0], 0) << "the first round waits the whole timeout";
	EXPECT_GT(elapsed[1], 0) << "the round made again knows the time gone";
}

/* A set with a set that registers the socket: the kernel reports it ready with it. */
TEST_F(EpollMerged, SetsOfNamesASetThatHasSuchASet)
{
	const int inner = epoll_create1(EPOLL_CLOEXEC);
	ASSERT_GE(inner, 0);
	sets_.created(inner);
	struct epoll_event event = {};
	event.events = EPOLLIN;
	event.data.u64 = 9;
	ASSERT_EQ(epoll_ctl(inner, EPOLL_CTL_ADD, pair_.fds[0], &event), 0);
	sets_.changed(inner, EPOLL_CTL_ADD, pair_.fds[0], &event);
	int found[8];
	ASSERT_EQ(sets_.setsOf(pair_.fds[0], inodeOf(pair_.fds[0]), found, 8), 1);
	EXPECT_EQ(found[0], inner);
	add(inner, EPOLLIN, 2);
	ASSERT_EQ(sets_.setsOf(pair_.fds[0], inodeOf(pair_.fds[0]), found, 8), 2);
	EXPECT_EQ(std::multiset<int>(found, found + 2), std::multiset<int>({ inner, epfd_ }));
	control(EPOLL_CTL_DEL, inner, 0, 0);
	closeFd(inner);
}

/*
 * What the shim must not wake: a set asking nothing of input (a fill), one another process
 * shares (a fill, a re-arm).
 */
TEST_F(EpollMerged, SetsOfLeavesSetsThatWantNoInputOrThatAnotherProcessShares)
{
	add(pair_.fds[0], EPOLLRDHUP | EPOLLOUT, 1);
	int found[8];
	EXPECT_EQ(sets_.setsOf(pair_.fds[0], inodeOf(pair_.fds[0]), found, 8), 0) << "asks for no input";
	control(EPOLL_CTL_MOD, pair_.fds[0], EPOLLIN, 1);
	ASSERT_EQ(sets_.setsOf(pair_.fds[0], inodeOf(pair_.fds[0]), found, 8), 1);
	EXPECT_TRUE(sets_.ownedHere(epfd_));
	sets_.lockForFork();
	sets_.forked();
	sets_.unlockAfterFork();
	EXPECT_EQ(sets_.setsOf(pair_.fds[0], inodeOf(pair_.fds[0]), found, 8), 0)
		<< "made before a fork: the other process would get the shim's wake";
	EXPECT_FALSE(sets_.ownedHere(epfd_)) << "nor a re-arm's";
}

TEST_F(EpollMerged, TableFollowsAddModDel)
{
	hold(pair_.fds[0]);
	add(pair_.fds[0], EPOLLIN | EPOLLET, 1);
	expectTableMatchesKernel("added");
	control(EPOLL_CTL_MOD, pair_.fds[0], EPOLLIN | EPOLLRDHUP, 2);
	expectTableMatchesKernel("modified");
	control(EPOLL_CTL_DEL, pair_.fds[0], 0, 0);
	expectTableMatchesKernel("deleted");
	EXPECT_EQ(sets_.registrations(epfd_), 0u);
	EXPECT_TRUE(sets_.exact(epfd_));
}

/*
 * Changes of a registration whose file is not looked up yet (pending: no wait has had
 * held data to report since it was added) are the kernel's too, a MOD to one-shot included.
 */
TEST_F(EpollMerged, ARegistrationChangedBeforeItsFileIsLearntIsWhatTheLastChangeMade)
{
	add(pair_.fds[0], EPOLLOUT, 1);
	control(EPOLL_CTL_MOD, pair_.fds[0], EPOLLIN, 2);
	control(EPOLL_CTL_DEL, pair_.fds[0], 0, 0);
	EXPECT_EQ(sets_.registrations(epfd_), 0u);
	add(pair_.fds[0], EPOLLIN, 3);
	control(EPOLL_CTL_MOD, pair_.fds[0], EPOLLIN | EPOLLONESHOT, 4);
	EXPECT_EQ(sets_.registrations(epfd_), 1u);
	hold(pair_.fds[0], 1);
	expectTableMatchesKernel("added, deleted, added again, made one-shot");
	struct epoll_event events[4];
	ASSERT_EQ(wait(events, 4), 1);
	EXPECT_EQ(events[0].data.u64, 4u);
	EXPECT_EQ(wait(events, 4), 0) << "fired: disarmed until MOD";
	EXPECT_TRUE(sets_.exact(epfd_));
}

TEST_F(EpollMerged, ManyRegistrationsAddedAndDeletedLeaveOnlyTheLiveOnes)
{
	std::vector<int> copies;
	for (int i = 0; i < 200; i++) {
		copies.push_back(copyOf(pair_.fds[0]));
		ASSERT_GE(copies.back(), 0);
		add(copies.back(), EPOLLIN, 100 + i);
	}
	for (int i = 0; i < 200; i++) {
		if (i != 150)
			control(EPOLL_CTL_DEL, copies[i], 0, 0);
	}
	EXPECT_EQ(sets_.registrations(epfd_), 1u);
	expectOneReportedWhenHeld(250, "199 of 200 copies deleted before any wait");
	for (int copy : copies)
		closeFd(copy);
	/* The kernel's rule: the file is open through pair_.fds[0], so its registration lives. */
	EXPECT_EQ(sets_.registrations(epfd_), 1u);
	expectOneReportedWhenHeld(250, "every copy closed, the file open");
}

/*
 * The kernel keys a registration by file and number: when the number names the file
 * again (a dup2 of a copy over it, a shell's restore), EPOLL_CTL_DEL and MOD reach it
 * (a hunt: a deleted registration went on being reported with its old data).
 */
TEST_F(EpollMerged, ARegistrationWhoseNumberNamesItsFileAgainIsDeletedAndModified)
{
	const int number = pair_.fds[0];
	for (bool learnt : { false, true }) {
		SCOPED_TRACE(learnt ? "its file learnt by a wait first" : "pending");
		add(number, EPOLLIN, 1);
		if (learnt) {
			hold(number);
			struct epoll_event events[4];
			ASSERT_EQ(wait(events, 4), 1);
			buffered_.set(&kOwner, number, inodeOf(number), false);
		}
		const int copy = copyOf(number);
		ASSERT_GE(copy, 0);
		/* dup2(copy, number): the number is closed and made the same file again. */
		sets_.closing(number, number);
		ASSERT_EQ(dup2(copy, number), number);
		buffered_.closed(number, number);
		sets_.closed(number, number);
		closeFd(copy);
		control(EPOLL_CTL_MOD, number, EPOLLIN, 2);
		expectOneReportedWhenHeld(2, "modified through the number again");
		control(EPOLL_CTL_DEL, number, 0, 0);
		expectTableMatchesKernel("deleted through the number again");
		struct epoll_event events[4];
		EXPECT_EQ(wait(events, 4), 0);
		EXPECT_EQ(sets_.registrations(epfd_), 0u);
		EXPECT_TRUE(sets_.exact(epfd_));
		buffered_.set(&kOwner, number, inodeOf(number), false);
	}
}

TEST_F(EpollMerged, TableFollowsADupRegisteredToo)
{
	int copy = copyOf(pair_.fds[0]);
	ASSERT_GE(copy, 0);
	add(pair_.fds[0], EPOLLIN, 1);
	add(copy, EPOLLIN, 2);
	hold(pair_.fds[0]);
	expectTableMatchesKernel("the fd and its dup");
	struct epoll_event events[4];
	EXPECT_EQ(wait(events, 4), 2);
	closeFd(copy);
}

TEST_F(EpollMerged, ARegistrationLivesOnThroughADupAfterItsFdCloses)
{
	const int original = copyOf(pair_.fds[0]);
	ASSERT_GE(original, 0);
	add(original, EPOLLIN, 3);
	closeFd(original); /* the file stays open through pair_.fds[0]: the kernel keeps it */
	expectOneReportedWhenHeld(3, "closed, alive through a dup");
}

TEST_F(EpollMerged, ARegistrationLivesOnThroughADupAfterAWideCloseRange)
{
	/* Added with no syscall; the wide close learns its file from the set's side first. */
	const int original = fcntl(pair_.fds[0], F_DUPFD_CLOEXEC, 500);
	ASSERT_GE(original, 500);
	noteCopy(pair_.fds[0], original);
	add(original, EPOLLIN, 5);
	sets_.closing(400, 1000);
	ASSERT_EQ(syscall(SYS_close_range, 400u, 1000u, 0u), 0);
	buffered_.closed(400, 1000);
	sets_.closed(400, 1000);
	expectOneReportedWhenHeld(5, "closed by a wide close_range, alive through a dup");
}

TEST_F(EpollMerged, AFileLearntAtTheFirstWaitKeepsItsOneShotState)
{
	add(pair_.fds[0], EPOLLIN | EPOLLONESHOT, 6);
	hold(pair_.fds[0], 1);
	struct epoll_event events[4];
	ASSERT_EQ(wait(events, 4), 1) << "the wait learns the file, then reports it";
	EXPECT_EQ(wait(events, 4), 0) << "fired: disarmed until MOD";
	control(EPOLL_CTL_MOD, pair_.fds[0], EPOLLIN | EPOLLONESHOT, 7);
	ASSERT_EQ(wait(events, 4), 1);
	EXPECT_EQ(events[0].data.u64, 7u);
	expectTableMatchesKernel("a one-shot learnt at its first wait, then re-armed");
}

TEST_F(EpollMerged, AReusedFdNumberIsNotTheOldRegistration)
{
	int number = pair_.fds[0];
	add(number, EPOLLIN, 4);
	pair_.fds[0] = -1;
	closeFd(number);
	SocketPair other; /* the lowest free number: the one just closed */
	ASSERT_EQ(other.fds[0], number);
	hold(number);
	expectTableMatchesKernel("reused");
	struct epoll_event events[4];
	EXPECT_EQ(wait(events, 4), 0);
}

TEST_F(EpollMerged, ASetChangedByAForkedChildIsReadFromTheKernel)
{
	add(pair_.fds[0], EPOLLIN, 1);
	add(pair_.fds[1], EPOLLIN, 2);
	sets_.lockForFork();
	pid_t child = fork();
	ASSERT_GE(child, 0);
	sets_.forked();
	sets_.unlockAfterFork();
	if (child == 0) {
		/* The child shares the set: its change is the parent's too. */
		_exit(epoll_ctl(epfd_, EPOLL_CTL_DEL, pair_.fds[0], nullptr) == 0 ? 0 : 1);
	}
	int status = 0;
	ASSERT_EQ(waitpid(child, &status, 0), child);
	ASSERT_EQ(status, 0);
	EXPECT_FALSE(sets_.exact(epfd_));
	hold(pair_.fds[0]);
	const int other = 1;
	hold(pair_.fds[1], 0, &other);
	expectTableMatchesKernel("after the child's DEL");
	struct epoll_event events[4];
	ASSERT_EQ(wait(events, 4), 1);
	EXPECT_EQ(events[0].data.u64, 2u);
}

TEST_F(EpollMerged, ASetTheShimNeverSawIsReadFromTheKernel)
{
	int unknown = epoll_create1(EPOLL_CLOEXEC); /* not through sets_.created */
	struct epoll_event event = {};
	event.events = EPOLLIN | EPOLLET;
	event.data.u64 = 8;
	ASSERT_EQ(epoll_ctl(unknown, EPOLL_CTL_ADD, pair_.fds[0], &event), 0);
	sets_.changed(unknown, EPOLL_CTL_ADD, pair_.fds[0], &event);
	hold(pair_.fds[0], 1);
	struct epoll_event events[4];
	auto waitUnknown = [&] { return waitOn(unknown, events, 4); };
	ASSERT_EQ(waitUnknown(), 1);
	EXPECT_EQ(events[0].data.u64, 8u);
	EXPECT_EQ(waitUnknown(), 0) << "one event per arrival there too";
	closeFd(unknown);
}

/*
 * A thread's MOD reached the table before the ADD another thread had made (the table
 * follows each epoll_ctl after the kernel's): the set is read from the kernel from then on.
 * An edge-triggered one-shot re-armed there after one record is reported again, as the
 * kernel re-polls on MOD (a hunt: a server whose accepting thread added connections while
 * its worker re-armed them stalled with connections holding records, 4 runs of 4).
 */
TEST_F(EpollMerged, AnEdgeTriggeredOneShotReArmedInASetReadFromTheKernelIsReportedAgain)
{
	const unsigned kEdgeOneShot = EPOLLIN | EPOLLET | EPOLLONESHOT;
	struct epoll_event event = {};
	event.events = kEdgeOneShot;
	event.data.u64 = 5;
	ASSERT_EQ(epoll_ctl(epfd_, EPOLL_CTL_ADD, pair_.fds[0], &event), 0); /* its table change comes late */
	control(EPOLL_CTL_MOD, pair_.fds[0], kEdgeOneShot, 5);
	sets_.changed(epfd_, EPOLL_CTL_ADD, pair_.fds[0], &event);
	EXPECT_FALSE(sets_.exact(epfd_));
	hold(pair_.fds[0], 1);
	struct epoll_event events[4];
	ASSERT_EQ(wait(events, 4), 1);
	/* As a worker does: one record read, then the re-arm, with no wait between. */
	for (int rearm = 0; rearm < 3; rearm++) {
		control(EPOLL_CTL_MOD, pair_.fds[0], kEdgeOneShot, 5);
		ASSERT_EQ(wait(events, 4), 1) << "re-armed, rearm " << rearm;
		EXPECT_EQ(events[0].data.u64, 5u);
	}
	EXPECT_EQ(wait(events, 4), 0) << "fired";
}

TEST_F(EpollMerged, ClosedRegistrationsDoNotPileUp)
{
	/* A server closing connections without EPOLL_CTL_DEL, as nginx does. */
	for (int i = 0; i < 3000; i++) {
		SocketPair connection;
		add(connection.fds[0], EPOLLIN | EPOLLET, static_cast<uint64_t>(i));
		closeFd(connection.fds[0]);
		connection.fds[0] = -1;
	}
	EXPECT_LT(sets_.registrations(epfd_), 1100u);
	EXPECT_TRUE(sets_.exact(epfd_));
}

TEST_F(EpollMerged, AClosedFileThatCanBeNoConnectionsLeavesNoRegistration)
{
	/*
	 * eventfds share one inode: kept detached, each close walked those closed before
	 * (issue 24). A pipe can carry TLS, so a pipe's registration outlives its fd like a
	 * socket's while a copy keeps the file.
	 */
	const size_t before = sets_.registrations(epfd_);
	for (int i = 0; i < 3000; i++) {
		const int counter = eventfd(0, EFD_CLOEXEC);
		ASSERT_GE(counter, 0);
		add(counter, EPOLLIN | (i % 2 ? EPOLLONESHOT : 0u), static_cast<uint64_t>(i));
		closeFd(counter);
	}
	EXPECT_EQ(sets_.registrations(epfd_), before);
	EXPECT_TRUE(sets_.exact(epfd_));

	int pipeFds[2];
	ASSERT_EQ(pipe(pipeFds), 0);
	const int copy = copyOf(pipeFds[0]);
	ASSERT_GE(copy, 0);
	add(pipeFds[0], EPOLLIN, 9);
	closeFd(pipeFds[0]);
	EXPECT_EQ(sets_.registrations(epfd_), before + 1) << "the pipe's registration, alive through its copy";
	close(copy);
	close(pipeFds[1]);
}

TEST_F(EpollMerged, EachSetOfAnFdGetsItsOwnEdge)
{
	const int other = epoll_create1(EPOLL_CLOEXEC);
	sets_.created(other);
	struct epoll_event event = {};
	event.events = EPOLLIN | EPOLLET;
	event.data.u64 = 20;
	ASSERT_EQ(epoll_ctl(other, EPOLL_CTL_ADD, pair_.fds[0], &event), 0);
	sets_.changed(other, EPOLL_CTL_ADD, pair_.fds[0], &event);
	add(pair_.fds[0], EPOLLIN | EPOLLET, 10);
	hold(pair_.fds[0], 1);

	struct epoll_event events[4];
	auto waitOther = [&] { return waitOn(other, events, 4); };
	ASSERT_EQ(wait(events, 4), 1);
	EXPECT_EQ(events[0].data.u64, 10u);
	ASSERT_EQ(waitOther(), 1) << "the other set was not told yet";
	EXPECT_EQ(events[0].data.u64, 20u);
	EXPECT_EQ(wait(events, 4), 0);
	EXPECT_EQ(waitOther(), 0);
	closeFd(other);
}

TEST_F(EpollMerged, ANestedSetIsReportedByTheOuterOneWhileItHasAConnectionToReport)
{
	/* The kernel reports a set inside another ready while it has events; so does the shim. */
	const int outer = epoll_create1(EPOLL_CLOEXEC);
	sets_.created(outer);
	struct epoll_event event = {};
	event.events = EPOLLIN;
	event.data.u64 = 30;
	ASSERT_EQ(epoll_ctl(outer, EPOLL_CTL_ADD, epfd_, &event), 0);
	sets_.changed(outer, EPOLL_CTL_ADD, epfd_, &event);
	add(pair_.fds[0], EPOLLIN | EPOLLET, 10);
	hold(pair_.fds[0], 1);

	struct epoll_event events[4];
	ASSERT_EQ(waitOn(outer, events, 4), 1);
	EXPECT_EQ(events[0].data.u64, 30u);
	EXPECT_EQ(waitOn(outer, events, 4), 1) << "level-triggered: still ready";
	ASSERT_EQ(wait(events, 4), 1) << "the inner set reports the connection";
	EXPECT_EQ(events[0].data.u64, 10u);
	EXPECT_EQ(waitOn(outer, events, 4), 0) << "the inner set told its edge: nothing to report";
	hold(pair_.fds[0], 2);
	EXPECT_EQ(waitOn(outer, events, 4), 1) << "a new arrival";
	closeFd(outer);
}

TEST_F(EpollMerged, PollAndSelectOnASetsOwnFdSeeWhatTheSetWouldReport)
{
	/* The kernel reports an epoll fd readable while the set has events (a hunt: 1 line of 20). */
	add(pair_.fds[0], EPOLLIN | EPOLLET, 10);
	struct pollfd pfd = { epfd_, POLLIN, 0 };
	auto pollSet = [&] {
		pfd.revents = 0;
		return pollMerged(buffered_, sets_, &pfd, 1, [&](bool) { return poll(&pfd, 1, 0); });
	};
	auto selectSet = [&] {
		fd_set readable;
		FD_ZERO(&readable);
		FD_SET(epfd_, &readable);
		struct timeval zero = { 0, 0 };
		return selectMerged(buffered_, sets_, epfd_ + 1, &readable,
				    [&](bool) { return select(epfd_ + 1, &readable, nullptr, nullptr, &zero); });
	};
	hold(pair_.fds[1], 1);
	EXPECT_EQ(pollSet(), 0) << "a held socket the set does not have";
	hold(pair_.fds[0], 1);
	ASSERT_EQ(pollSet(), 1);
	EXPECT_EQ(pfd.revents, POLLIN);
	EXPECT_EQ(selectSet(), 1);
	EXPECT_EQ(pollSet(), 1) << "asking tells the set nothing";
	struct epoll_event events[4];
	ASSERT_EQ(wait(events, 4), 1);
	EXPECT_EQ(pollSet(), 0) << "edge-triggered: that arrival was told";
	EXPECT_EQ(selectSet(), 0);
	hold(pair_.fds[0], 2);
	EXPECT_EQ(pollSet(), 1) << "a new arrival";
}

/*
 * A wait that returns with a one-shot's first report while the shim records the arm must
 * not take the process for one without one-shots (its fast path passes the report on
 * unseen, and a claim then reports the arm again): the arm is counted before the kernel
 * has it, checked here from inside the kernel's call.
 */
namespace {
EpollSets *g_announcing = nullptr;
bool g_announcedInCall = false;
int ctlThatLooks(int epfd, int op, int fd, struct epoll_event *event)
{
	g_announcedInCall = !g_announcing->noOneShots();
	return ::epoll_ctl(epfd, op, fd, event);
}
} /* namespace */

TEST(EpollSetsThreads, AOneShotArmIsCountedBeforeTheKernelHasIt)
{
	EpollSets sets;
	g_announcing = &sets;
	const int epfd = epoll_create1(EPOLL_CLOEXEC);
	ASSERT_GE(epfd, 0);
	sets.created(epfd);
	SocketPair pair;
	struct epoll_event event = {};
	event.events = EPOLLIN | EPOLLONESHOT;
	event.data.u64 = 5;
	ASSERT_EQ(sets.control(epfd, EPOLL_CTL_ADD, pair.fds[0], &event, ctlThatLooks), 0);
	EXPECT_TRUE(g_announcedInCall);
	EXPECT_FALSE(sets.noOneShots()) << "recorded";
	ASSERT_EQ(sets.control(epfd, EPOLL_CTL_DEL, pair.fds[0], nullptr, ::epoll_ctl), 0);
	EXPECT_TRUE(sets.noOneShots()) << "counted once";
	close(epfd);
}

TEST(EpollSetsThreads, WaitsAndChangesOnOneSetAtOnce)
{
	/* For ThreadSanitizer: epoll_ctl and waits on one set while connections gain and lose data. */
	BufferedFds buffered;
	EpollSets sets;
	const int epfd = epoll_create1(EPOLL_CLOEXEC);
	sets.created(epfd);
	std::atomic<int> wrong{0};
	std::vector<std::thread> threads;
	for (int t = 0; t < 6; t++) {
		threads.emplace_back([&, t] {
			SocketPair pair;
			const ino_t ino = inodeOf(pair.fds[0]);
			int owner = 0;
			struct epoll_event event = {};
			for (int i = 0; i < 200; i++) {
				event.events = EPOLLIN | (t % 2 ? static_cast<uint32_t>(EPOLLET) : 0u);
				event.data.u64 = static_cast<uint64_t>(t);
				wrong += epoll_ctl(epfd, EPOLL_CTL_ADD, pair.fds[0], &event) != 0;
				sets.changed(epfd, EPOLL_CTL_ADD, pair.fds[0], &event);
				buffered.set(&owner, pair.fds[0], ino, true, static_cast<unsigned long long>(i));
				struct epoll_event events[8];
				int n = epollMerged(buffered, sets, ::epoll_ctl, epfd, events, 8,
						    [&](bool, int room, std::chrono::nanoseconds, struct epoll_event *into) {
							    return epoll_wait(epfd, into, room, 0);
						    });
				wrong += n < 0;
				buffered.set(&owner, pair.fds[0], ino, false);
				wrong += epoll_ctl(epfd, EPOLL_CTL_DEL, pair.fds[0], nullptr) != 0;
				sets.changed(epfd, EPOLL_CTL_DEL, pair.fds[0], nullptr);
			}
		});
	}
	for (std::thread &thread : threads)
		thread.join();
	EXPECT_EQ(wrong.load(), 0);
	EXPECT_EQ(sets.registrations(epfd), 0u);
	close(epfd);
}

/*
 * The chain against real OpenSSL: read-ahead takes several records in one read. The
 * server's bytes pass through the test (serverWire -> clientWire), so it can hand the
 * client part of a record.
 */
class RealOpenSsl : public ::testing::Test {
protected:
	void SetUp() override
	{
		api_.SSL_has_pending = ::SSL_has_pending;
		api_.SSL_want = ::SSL_want;
		api_.CRYPTO_get_ex_new_index = ::CRYPTO_get_ex_new_index;
		api_.SSL_get_ex_data = ::SSL_get_ex_data;
		api_.SSL_set_ex_data = ::SSL_set_ex_data;
		ASSERT_TRUE(slot_.init(api_, &read_));

		const auto &certificate = testsupport::certificate();
		serverCtx_ = SSL_CTX_new(TLS_server_method());
		ASSERT_EQ(SSL_CTX_use_certificate_chain_file(serverCtx_, certificate.cert.c_str()), 1);
		ASSERT_EQ(SSL_CTX_use_PrivateKey_file(serverCtx_, certificate.key.c_str(), SSL_FILETYPE_PEM), 1);
		clientCtx_ = SSL_CTX_new(TLS_client_method());
		/* As the shim's tuning does (its read-ahead's records are the ones it reports). */
		SSL_CTX_set_read_ahead(clientCtx_, 1);

		for (int fd : { serverWire_.fds[0], serverWire_.fds[1], clientWire_.fds[0], clientWire_.fds[1] })
			fcntl(fd, F_SETFL, O_NONBLOCK);
		server_ = SSL_new(serverCtx_);
		client_ = SSL_new(clientCtx_);
		ASSERT_NE(connectionOf(), nullptr);
		connectionOf()->setReadAheadByShim(true);
		SSL_set_fd(server_, serverWire_.fds[0]);
		SSL_set_fd(client_, clientSocket());
		SSL_set_accept_state(server_);
		SSL_set_connect_state(client_);
		/* Both ends in one thread: step each until both are done (bounded). */
		bool serverDone = false, clientDone = false;
		for (int step = 0; step < 100 && !(serverDone && clientDone); step++) {
			serverDone = serverDone || SSL_do_handshake(server_) == 1;
			forwardToClient(SIZE_MAX);
			clientDone = clientDone || call([&] { return SSL_do_handshake(client_); }) == 1;
			forward(clientWire_.fds[0], serverWire_.fds[1]);
		}
		ASSERT_TRUE(serverDone && clientDone);
		ERR_clear_error();
	}
	void TearDown() override
	{
		SSL_free(client_); /* runs the ex_data free callback */
		SSL_free(server_);
		SSL_CTX_free(clientCtx_);
		SSL_CTX_free(serverCtx_);
	}

	int clientSocket() const { return clientWire_.fds[1]; }

	/* Moves what `from` has to `to`. */
	static void forward(int from, int to)
	{
		char buffer[65536];
		for (ssize_t n; (n = ::read(from, buffer, sizeof(buffer))) > 0;)
			ASSERT_EQ(::write(to, buffer, static_cast<size_t>(n)), n);
	}
	/* Hands the client at most n of the bytes the server has written. */
	void forwardToClient(size_t n)
	{
		char buffer[65536];
		for (ssize_t got; (got = ::read(serverWire_.fds[1], buffer, sizeof(buffer))) > 0;)
			held_.append(buffer, static_cast<size_t>(got));
		const size_t now = std::min(n, held_.size());
		if (now) {
			ASSERT_EQ(::write(clientWire_.fds[0], held_.data(), now), static_cast<ssize_t>(now));
			held_.erase(0, now);
		}
	}

	/* What the shim's wrapper does around a call on the client. */
	template <typename Call>
	int call(Call real)
	{
		Connection *connection = slot_.of(api_, client_);
		CallScope scope(connection);
		int result = real();
		connection->afterCall(buffered_, SSL_has_pending(client_) == 1);
		return result;
	}

	/* The read syscalls OpenSSL makes go to the client's socket: note them as the shim does. */
	int readClient(char *buffer, int size)
	{
		return call([&] {
			int n = SSL_read(client_, buffer, size);
			CallScope::noteSocketRead(clientSocket());
			return n;
		});
	}
	Connection *connectionOf() { return slot_.of(api_, client_); }

	bool pollSaysReadable()
	{
		struct pollfd pfd = { clientSocket(), POLLIN, 0 };
		return pollMerged(buffered_, noSets(), &pfd, 1, [&](bool) { return poll(&pfd, 1, 0); }) == 1;
	}

	OpenSslApi api_;
	ConnectionSlot slot_;
	BufferedFds buffered_;
	SocketCache cache_;
	ReadState read_{ &buffered_, &cache_ };
	SocketPair serverWire_, clientWire_;
	std::string held_;
	SSL_CTX *serverCtx_ = nullptr, *clientCtx_ = nullptr;
	SSL *server_ = nullptr, *client_ = nullptr;
};

TEST_F(RealOpenSsl, FreeingTheSslForgetsItsBufferedFd)
{
	for (const char *line : { "a\n", "b\n" })
		ASSERT_GT(SSL_write(server_, line, 2), 0);
	forwardToClient(SIZE_MAX);
	char buffer[8];
	ASSERT_EQ(readClient(buffer, sizeof(buffer)), 2);
	ASSERT_FALSE(buffered_.empty());
	SSL_free(client_);
	client_ = nullptr;
	EXPECT_TRUE(buffered_.empty());
}

TEST(BufferedFds, ManyThreadsEachWithTheirOwnConnections)
{
	/* For ThreadSanitizer: the set is shared, each thread's connections are its own. */
	BufferedFds buffered;
	std::vector<std::thread> threads;
	std::atomic<int> wrong{0};
	for (int t = 0; t < 8; t++) {
		threads.emplace_back([&] {
			SocketPair pair;
			const ino_t ino = inodeOf(pair.fds[0]);
			int owner = 0;
			for (int i = 0; i < 300; i++) {
				buffered.set(&owner, pair.fds[0], ino, true);
				struct pollfd pfd = { pair.fds[0], POLLIN, 0 };
				int n = pollMerged(buffered, noSets(), &pfd, 1, [&](bool) { return poll(&pfd, 1, 0); });
				wrong += n != 1 || pfd.revents != POLLIN;
				buffered.set(&owner, pair.fds[0], ino, false);
				wrong += buffered.holds(pair.fds[0]);
			}
		});
	}
	for (std::thread &thread : threads)
		thread.join();
	EXPECT_EQ(wrong.load(), 0);
	EXPECT_TRUE(buffered.empty());
}

/*
 * EpollWake: a woken set reports the wake to every wait, which strips it from what the
 * program sees, until a wait that found nothing to report settles it; a wake made since
 * that wait looked keeps it. The program's own events stay, in order.
 */
TEST(EpollWake, AWokenSetStaysReadyUntilAWaitSettlesItUnlessWokenSince)
{
	EpollWake wake;
	EXPECT_TRUE(wake.idle());
	const int epfd = epoll_create1(EPOLL_CLOEXEC);
	const int own = eventfd(1, EFD_CLOEXEC);
	ASSERT_GE(epfd, 0);
	ASSERT_GE(own, 0);
	struct epoll_event interest = {};
	interest.events = EPOLLIN;
	interest.data.u64 = 7;
	ASSERT_EQ(epoll_ctl(epfd, EPOLL_CTL_ADD, own, &interest), 0);

	wake.wake(epfd, ::epoll_ctl);
	wake.wake(epfd, ::epoll_ctl); /* already there: one wake */
	EXPECT_FALSE(wake.idle());
	struct epoll_event events[4];
	for (int wait = 0; wait < 2; wait++) {
		const int ready = epoll_wait(epfd, events, 4, 0);
		ASSERT_EQ(ready, 2) << "the program's eventfd and the wake, wait " << wait;
		bool woken = false;
		ASSERT_EQ(wake.strip(events, ready, &woken), 1);
		EXPECT_TRUE(woken);
		EXPECT_EQ(events[0].data.u64, 7u);
	}
	const unsigned long looked = wake.generation();
	wake.wake(epfd, ::epoll_ctl);
	wake.settle(epfd, ::epoll_ctl, looked);
	ASSERT_EQ(epoll_wait(epfd, events, 4, 0), 2) << "woken again since the wait looked: it stays";
	wake.settle(epfd, ::epoll_ctl, wake.generation());
	ASSERT_EQ(epoll_wait(epfd, events, 4, 0), 1) << "settled: the wake is out of the set";
	bool woken = true;
	EXPECT_EQ(wake.strip(events, 1, &woken), 1);
	EXPECT_FALSE(woken);
	EXPECT_FALSE(wake.idle()) << "a process that ever woke a set strips every wait's events";
	close(own);
	close(epfd);
}

/* The wake's eventfd takes no number the program's next open would have taken. */
TEST(EpollWake, ItsDescriptorLeavesTheLowestFreeNumberToTheProgram)
{
	/* The lowest free number: none is free below it. */
	const int epfd = epoll_create1(EPOLL_CLOEXEC);
	ASSERT_GE(epfd, 0);
	EpollWake wake;
	wake.wake(epfd, ::epoll_ctl);
	const int next = eventfd(0, EFD_CLOEXEC);
	EXPECT_EQ(next, epfd + 1) << "the program's next descriptor, as without the wake";
	struct epoll_event events[2];
	ASSERT_EQ(epoll_wait(epfd, events, 2, 0), 1) << "the wake is in the set all the same";
	close(next);
	close(epfd);
}

namespace {

/* FDSize in /proc/self/status: how many numbers the process's fd table has room for. */
long fdTableSize()
{
	FILE *status = std::fopen("/proc/self/status", "r");
	long size = -1;
	char line[256];
	while (status && std::fgets(line, sizeof(line), status)) {
		if (std::strncmp(line, "FDSize:", 7) == 0)
			size = std::strtol(line + 7, nullptr, 10);
	}
	if (status)
		std::fclose(status);
	return size;
}

/* A wake made in a child with a thread; its exit status: 0, or which step failed. */
int wakeInAChild(bool topTaken)
{
	const pid_t child = fork();
	if (child < 0)
		return -1;
	if (child == 0) {
		/* A thread: the table is shared, as in the servers that met the wait. */
		std::promise<void> done;
		std::thread beside([ended = done.get_future()] { ended.wait(); });
		const int epfd = epoll_create1(EPOLL_CLOEXEC);
		const long before = fdTableSize();
		if (epfd < 0 || before <= 0)
			_exit(2);
		for (long n = before - before / 8; topTaken && n < before; n++)
			dup2(epfd, static_cast<int>(n));
		EpollWake wake;
		wake.wake(epfd, ::epoll_ctl);
		const long after = fdTableSize();
		struct epoll_event events[2];
		const bool inTheSet = epoll_wait(epfd, events, 2, 0) == 1;
		done.set_value();
		beside.join();
		_exit(after != before ? 3 : !inTheSet ? 4 : 0);
	}
	int status = -1;
	if (waitpid(child, &status, 0) != child || !WIFEXITED(status))
		return -1;
	return WEXITSTATUS(status);
}

} /* namespace */

/*
 * The wake's eventfd goes near the top of the fd table, never past it: a table that grows
 * in a process with threads waits for an RCU grace period first (a hunt: 10 to 22 ms at a
 * server's second request, when the wake went to 960 of a table of 64; 6 to 16 ms when
 * the program held 56 to 63 and it went to 64). Both, each in a child: its table is made
 * for the descriptors open at the fork, where this process's may have grown already (it
 * never shrinks).
 */
TEST(EpollWake, ItsDescriptorNeverGrowsTheFdTable)
{
	const char *codes = "2: no /proc/self/status, 3: the table grew, 4: the wake is not in the set";
	EXPECT_EQ(wakeInAChild(false), 0) << "a table of free numbers; " << codes;
	EXPECT_EQ(wakeInAChild(true), 0) << "the top eighth of the table taken; " << codes;
}

/*
 * Issue 24: before its first connection a process's epoll_ctl records nothing. A set made
 * then is read from the kernel once, when it first matters, and known whole from then on:
 * what the program registered before is found, and later changes are recorded.
 */
TEST(EpollSetsGate, ASetMadeBeforeAnyConnectionIsReadFromTheKernelOnceAndThenFollowed)
{
	BufferedFds buffered;
	EpollSets sets;
	const int epfd = epoll_create1(EPOLL_CLOEXEC);
	sets.created(epfd, false);
	SocketPair early, late;
	struct epoll_event event = {};
	event.events = EPOLLIN;
	event.data.u64 = 7;
	/* Unrecorded: the shim's epoll_ctl skips the table while the gate is closed. */
	ASSERT_EQ(epoll_ctl(epfd, EPOLL_CTL_ADD, early.fds[0], &event), 0);
	EXPECT_EQ(sets.registrations(epfd), 0u);

	int owner = 0;
	buffered.set(&owner, early.fds[0], inodeOf(early.fds[0]), true, 1);
	EpollRegistration claimed[4];
	ASSERT_EQ(sets.claim(epfd, buffered, claimed, 4), 1);
	EXPECT_EQ(claimed[0].fd, early.fds[0]);
	EXPECT_EQ(claimed[0].data, 7u);
	EXPECT_TRUE(sets.exact(epfd)) << "known whole after one read of the kernel's list";
	EXPECT_EQ(sets.registrations(epfd), 1u);

	event.data.u64 = 8;
	ASSERT_EQ(epoll_ctl(epfd, EPOLL_CTL_ADD, late.fds[0], &event), 0);
	sets.changed(epfd, EPOLL_CTL_ADD, late.fds[0], &event);
	EXPECT_EQ(sets.registrations(epfd), 2u);
	EXPECT_TRUE(sets.exact(epfd));
	close(epfd);
}

/* A copy of a set's fd is the set: its changes are the set's, and it keeps the set when the first number closes. */
TEST(EpollSets, ACopyOfASetsFdIsTheSetAndOutlivesTheFirstNumber)
{
	BufferedFds buffered;
	EpollSets sets;
	const int epfd = epoll_create1(EPOLL_CLOEXEC);
	sets.created(epfd);
	const int copy = dup(epfd);
	sets.aliased(epfd, copy);
	SocketPair pair;
	struct epoll_event event = {};
	event.events = EPOLLIN;
	event.data.u64 = 7;
	ASSERT_EQ(epoll_ctl(copy, EPOLL_CTL_ADD, pair.fds[0], &event), 0);
	sets.changed(copy, EPOLL_CTL_ADD, pair.fds[0], &event);
	EXPECT_EQ(sets.registrations(epfd), 1u) << "the change through the copy is the set's";
	EXPECT_TRUE(sets.exact(epfd));

	close(epfd);
	sets.closed(epfd, epfd);
	EXPECT_EQ(sets.registrations(copy), 1u) << "the kernel's set lives on in the copy";
	EXPECT_EQ(sets.highestSet(), copy);
	int owner = 0;
	buffered.set(&owner, pair.fds[0], inodeOf(pair.fds[0]), true, 1);
	EpollRegistration claimed[4];
	ASSERT_EQ(sets.claim(copy, buffered, claimed, 4), 1);
	EXPECT_EQ(claimed[0].data, 7u);
	buffered.forget(&owner);
	close(copy);
	sets.closed(copy, copy);
	EXPECT_TRUE(sets.empty());
}

/* The first change recorded on such a set reads its list first: nothing made before is lost. */
TEST(EpollSetsGate, TheFirstRecordedChangeOfAnUnreadSetKeepsWhatCameBefore)
{
	EpollSets sets;
	const int epfd = epoll_create1(EPOLL_CLOEXEC);
	sets.created(epfd, false);
	SocketPair a, b;
	struct epoll_event event = {};
	event.events = EPOLLIN | EPOLLONESHOT;
	ASSERT_EQ(epoll_ctl(epfd, EPOLL_CTL_ADD, a.fds[0], &event), 0);
	event.events = EPOLLIN;
	ASSERT_EQ(epoll_ctl(epfd, EPOLL_CTL_ADD, b.fds[0], &event), 0);
	sets.changed(epfd, EPOLL_CTL_ADD, b.fds[0], &event);
	EXPECT_EQ(sets.registrations(epfd), 2u);
	EXPECT_TRUE(sets.exact(epfd));
	ASSERT_EQ(epoll_ctl(epfd, EPOLL_CTL_DEL, a.fds[0], nullptr), 0);
	sets.changed(epfd, EPOLL_CTL_DEL, a.fds[0], nullptr);
	EXPECT_EQ(sets.registrations(epfd), 1u);
	close(epfd);
}

TEST(UnseenWaits, ASocketSentAwayIsNoLongerFollowedAndOthersStillAre)
{
	UnseenWaits unseen;
	EXPECT_EQ(unseen.generation(), 0u);
	EXPECT_TRUE(unseen.follows(7));
	unseen.noteUnfollowed(7);
	const unsigned afterFirst = unseen.generation();
	EXPECT_NE(afterFirst, 0u);
	EXPECT_FALSE(unseen.follows(7));
	EXPECT_TRUE(unseen.follows(8));
	EXPECT_TRUE(unseen.follows(0)) << "a connection whose socket is not known yet";
	unseen.noteUnfollowed(7);
	EXPECT_EQ(unseen.generation(), afterFirst) << "the same file again changes nothing to ask";
}

TEST(UnseenWaits, AOneShotArmOfANewNumberMakesConnectionsLookOnce)
{
	UnseenWaits unseen;
	const int fd = FdBitmap::kNumbers - 3; /* the process's bitmap: a number no other test arms */
	EXPECT_FALSE(oneShotFds().mayHave(fd));
	unseen.noteOneShot(fd);
	const unsigned afterFirst = unseen.generation();
	EXPECT_NE(afterFirst, 0u);
	EXPECT_TRUE(oneShotFds().mayHave(fd));
	EXPECT_FALSE(oneShotFds().mayHave(fd - 1));
	unseen.noteOneShot(fd);
	EXPECT_EQ(unseen.generation(), afterFirst) << "a pool re-arms after every event: nothing new to ask";
	EXPECT_TRUE(unseen.follows(7)) << "files are another matter";
}

TEST(UnseenWaits, ARingOrMoreFilesThanItKeepsStopsEveryConnection)
{
	UnseenWaits ring;
	ring.noteRing();
	EXPECT_FALSE(ring.follows(8));
	EXPECT_FALSE(ring.follows(0));

	UnseenWaits many;
	for (ino_t ino = 1; ino <= UnseenWaits::kKept; ino++)
		many.noteUnfollowed(ino);
	EXPECT_TRUE(many.follows(UnseenWaits::kKept + 1));
	many.noteUnfollowed(UnseenWaits::kKept + 1);
	EXPECT_FALSE(many.follows(UnseenWaits::kKept + 2)) << "past what it keeps, nothing counts as followed";
}

TEST(UnseenWaits, NotesFromManyThreadsAreAllSeen)
{
	UnseenWaits unseen;
	std::vector<std::thread> noters;
	for (ino_t base : { 1000, 2000, 3000, 4000 }) {
		noters.emplace_back([&unseen, base] {
			for (ino_t i = 0; i < 50; i++)
				unseen.noteUnfollowed(base + i);
		});
	}
	std::thread reader([&unseen] {
		for (int i = 0; i < 1000; i++)
			(void)unseen.follows(static_cast<ino_t>(1000 + i % 50));
	});
	for (std::thread &noter : noters)
		noter.join();
	reader.join();
	for (ino_t base : { 1000, 2000, 3000, 4000 }) {
		for (ino_t i = 0; i < 50; i++)
			EXPECT_FALSE(unseen.follows(base + i)) << base + i;
	}
	EXPECT_TRUE(unseen.follows(5000));
}
