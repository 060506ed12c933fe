/*
 * Readiness for sockets that move, pipes, peeks and plaintext after TLS (issue 12):
 * examples/readiness_cases run with and without the shim, each polling before it reads.
 * The polls time out after 2 s: a stall fails the test instead of hanging it.
 */

#include <gtest/gtest.h>

#include <openssl/crypto.h>
#include <unistd.h>

#include "process.h"
#include "tls_fixture.h"

using namespace testsupport;

namespace {

constexpr int kTimeoutMs = 120000;

/* PROGRAM CASE ARGS..., with and without the shim: each run's output. */
std::vector<Captured> bothWaysOf(const char *program, const std::vector<std::string> &arguments,
			       const std::vector<std::string> &server = {})
{
	std::vector<Captured> runs;
	for (bool withShim : { false, true }) {
		std::vector<std::string> argv = { examplePath(program) };
		argv.insert(argv.end(), arguments.begin(), arguments.end());
		if (server.empty()) {
			runs.push_back(runProgram(argv, withShim, {}, kTimeoutMs));
			continue;
		}
		ExampleServer peer(server);
		argv.push_back(peer.portText());
		runs.push_back(runProgram(argv, withShim, {}, kTimeoutMs));
	}
	return runs;
}

/* readiness_cases CASE ARGS... both ways. */
std::vector<Captured> bothWays(const std::vector<std::string> &arguments,
			       const std::vector<std::string> &server = {})
{
	return bothWaysOf("readiness_cases", arguments, server);
}

/* A case whose server is a forked child of the program: it needs the certificate. */
std::vector<std::string> withIdentity(const char *which, const std::vector<std::string> &more = {})
{
	std::vector<std::string> arguments = { which };
	arguments.insert(arguments.end(), more.begin(), more.end());
	arguments.insert(arguments.end(), { "--cert", certificate().cert, "--key", certificate().key });
	return arguments;
}

/* Both runs end well and print what is expected. */
void expectBothWays(const std::vector<Captured> &runs, const std::string &out)
{
	for (const Captured &run : runs) {
		EXPECT_EQ(run.status, 0) << run.err;
		EXPECT_EQ(run.out, out);
	}
}

} /* namespace */

TEST(Readiness, AConnectionMovedToADupOfItsFdStaysReadable)
{
	RecordProperty("fault", "dup, SSL_set_fd to the new number, close of the old one, poll");
	expectBothWays(bothWays({ "moved" }, { "--burst", "20" }), "lines 20\n");
}

class Duplicates : public ::testing::TestWithParam<const char *> {};

/* The program waits on a duplicate of the fd OpenSSL reads: the kernel's readiness is the socket's. */
TEST_P(Duplicates, AWaitOnADuplicateSeesWhatOpenSslHolds)
{
	RecordProperty("fault", std::string("a wait on a duplicate of the connection's fd: ") + GetParam());
	expectBothWays(bothWays({ "duplicate", GetParam() }, { "--burst", "20" }), "lines 20\n");
}

/*
 * dup-first: made before the process's first SSL, which the shim then knew nothing of;
 * dup-first-late: after 100 other copies (the shim remembered 64 before 4408b76);
 * original and original-first: OpenSSL reads the copy and the program waits on the number
 * it was made from (a hunt: 10 stalls in 10; the shim noted only the copy's number), the
 * second with the copy made before any OpenSSL call. scm-rights-moved and scm-rights-dup2:
 * the connection reads the copy it sent itself, under the copy's number or its own (a hunt:
 * it read past what the shim had queued, "wrong version number", every byte lost).
 */
INSTANTIATE_TEST_SUITE_P(Readiness, Duplicates,
			 ::testing::Values("dup", "dup-first", "dup-first-late", "fcntl", "dup2-select", "scm-rights",
					   "scm-rights-mmsg", "scm-rights-moved", "scm-rights-dup2", "original",
					   "original-first"));

class ClosedNumbers : public ::testing::TestWithParam<const char *> {};

/*
 * The connection's number closed while a copy keeps the socket: the kernel's readiness is
 * the socket's, and it resets only at the last close. The shim dropped the readiness and
 * made the close abortive (a hunt: a stall, then the peer reset, 1.9 of 2 MB lost).
 */
TEST_P(ClosedNumbers, ACopyKeepsTheSocketReadableAndItsCloseOrderly)
{
	RecordProperty("fault", std::string("the connection's fd closed while a copy keeps the socket: ") + GetParam());
	expectBothWays(bothWays({ "duplicate", GetParam() }, { "--burst", "20" }), "lines 20\nlinger 0\n");
}

INSTANTIATE_TEST_SUITE_P(Readiness, ClosedNumbers, ::testing::Values("restore", "close-first"));

TEST(Readiness, TlsOverAPipePairIsReadableAndLosesNothing)
{
	RecordProperty("fault", "TLS over a pipe pair (SSL_set_rfd, SSL_set_wfd), a recv of no bytes (the shim answered 0)");
	expectBothWays(bothWays(withIdentity("pipes")),
		       "recv of no bytes -1 ENOTSOCK, recvmsg -1 ENOTSOCK\nlines 5\nserver got bye\n");
}

TEST(Readiness, APeekNeverSaysClosedWhileOpenSslHoldsRecords)
{
	RecordProperty("fault", "recv(MSG_PEEK | MSG_DONTWAIT) after the peer's FIN, records unread");
	expectBothWays(bothWays({ "peek" }, { "--burst", "3", "--hangup" }), "peek 1\nfionread positive\n");
}

/*
 * A loop that peeks for a whole record header before each SSL_read reads the raw stream:
 * the peek reads the shim's queue, then the kernel's. With OpenSSL's read-ahead it was
 * told 1 byte while OpenSSL held the records, and spun (a hunt, 20 runs of 20).
 */
TEST(Readiness, ALoopThatPeeksForARecordHeaderReadsAsWithout)
{
	RecordProperty("fault", "poll, recv(MSG_PEEK) of 5 bytes, SSL_read once they are a record header");
	expectBothWays(bothWays({ "header-peek" }, { "--burst", "20" }), "lines 20\nno spin\n");
}

/*
 * What OpenSSL shows of what it read is its own: with OpenSSL's read-ahead the shim
 * turned on, SSL_has_pending said 1 after the first line of a burst and BIO_number_read
 * counted whole 64 KiB reads; the shim's queue leaves OpenSSL reading a header and a body
 * per record, as without it.
 */
TEST(Readiness, WhatOpenSslShowsOfWhatItReadIsAsWithout)
{
	RecordProperty("fault", "SSL_has_pending, SSL_pending and BIO_number_read while the rest of a burst is unread");
	const std::vector<Captured> runs = bothWays({ "openssl-view" }, { "--burst", "20" });
	EXPECT_EQ(runs[0].status, 0) << runs[0].err;
	EXPECT_EQ(runs[0].out.rfind("lines 1 has_pending 0 pending 0 bio_read ", 0), 0u) << runs[0].out;
	EXPECT_EQ(runs[1].status, 0) << runs[1].err;
	EXPECT_EQ(runs[1].out, runs[0].out);
}

/*
 * The same peek in an edge-triggered loop, which drains with SSL_read to WANT_READ at each
 * event. A lost edge stalls it (lines below 20); events whose peek finds less than a header
 * spin it. Read-ahead alone does not: the drain leaves OpenSSL no whole record, and the
 * socket's queue starts at a record (with TLSTUNE_READINESS=off, read-ahead and no
 * readiness, it reads 20 lines where header-peek reads 1).
 */
TEST(Readiness, AnEdgeTriggeredLoopThatPeeksReadsAsWithout)
{
	RecordProperty("fault", "EPOLLIN|EPOLLET, recv(MSG_PEEK) of 5 bytes at each event, then SSL_read until WANT_READ");
	expectBothWays(bothWays({ "edge-peek" }, { "--burst", "20" }), "lines 20\nno spin\n");
}

/*
 * A server that peeks at a new connection's first bytes (a TLS handshake or plaintext?)
 * before it makes its connection on the socket; its process has a connection already, so
 * the peek is noted.
 */
TEST(Readiness, AServerThatSniffsBeforeItsHandshakeReadsAsWithout)
{
	RecordProperty("fault", "recv(MSG_PEEK) of 5 bytes of a new TCP connection, then SSL_set_fd and SSL_accept on it");
	expectBothWays(bothWays(withIdentity("sniff")), "sniffed tls\nlines 20\n");
}

/*
 * A peek is no reason to stop reading ahead: it reads the shim's queue first. (When
 * OpenSSL's read-ahead held the records, a peek turned it off, and a peek made before the
 * connection was forgotten at the first call: SSL_set_fd's hook kept it until 4efd1fd.)
 */
TEST(Readiness, AServerThatSniffsBeforeItsHandshakeStillReadsAhead)
{
	RecordProperty("fault", "read-ahead on a server connection made on a socket the program peeked at first");
	std::vector<std::string> arguments = withIdentity("sniff");
	arguments.insert(arguments.begin(), examplePath("readiness_cases"));
	const Captured run = runProgram(arguments, true, { "TLSTUNE_LOG=info" }, kTimeoutMs);
	EXPECT_EQ(run.status, 0) << run.err;
	EXPECT_EQ(run.out, "sniffed tls\nlines 20\n");
	/* The client's line and the forked server's (its own rate limit): both read ahead. */
	const std::string tuned = "tlstune: connection tuned: read-ahead on, ";
	const std::size_t first = run.err.find(tuned);
	EXPECT_NE(first, std::string::npos) << run.err;
	EXPECT_NE(run.err.find(tuned, first + 1), std::string::npos) << run.err;
	EXPECT_EQ(run.err.find("read-ahead off: the program peeks"), std::string::npos) << run.err;
}

TEST(Readiness, ABlockingPeekAnswersAtOnceWhileOpenSslHoldsRecords)
{
	RecordProperty("fault", "recv(MSG_PEEK) without MSG_DONTWAIT, records unread, the connection open");
	expectBothWays(bothWays({ "blocking-peek" }, { "--burst", "3" }), "blocking peek 1\n");
}

/*
 * The shim answered such waits from what OpenSSL holds with a probe of its own: the
 * program's timeout was neither judged nor written back, and its pollfd array was read
 * before the kernel could refuse it (a fault in the shim where the kernel says EFAULT).
 */
TEST(Readiness, WaitsJudgeTheirArgumentsAsTheKernelDoes)
{
	RecordProperty("fault", "select's time left, invalid timeouts, an unreadable pollfd array, a read set of "
				"nfds bits ending at an unreadable page (the shim read its whole word: SIGSEGV), "
				"records unread");
	std::vector<Captured> runs = bothWays({ "wait-arguments" }, { "--burst", "3" });
	/* A kernel before 5.11 has no epoll_pwait2: ENOSYS both ways, the same answer. */
	const std::string noCall = "epoll_pwait2 invalid -1 ENOSYS";
	for (Captured &run : runs) {
		const std::size_t at = run.out.find(noCall);
		if (at != std::string::npos)
			run.out.replace(at, noCall.size(), "epoll_pwait2 invalid -1 EINVAL");
	}
	expectBothWays(runs,
		       "select 1 time left below 5 s\n"
		       "select invalid -1 EINVAL\n"
		       "select invalid -1 EINVAL\n"
		       "pselect invalid -1 EINVAL\n"
		       "ppoll invalid -1 EINVAL\n"
		       "epoll_pwait2 invalid -1 EINVAL\n"
		       "poll unreadable -1 EFAULT\n"
		       "ppoll unreadable -1 EFAULT\n"
		       "select short set -1 EFAULT\n"
		       "poll 1\n");
}

/* The probe the shim makes when a connection holds records ran with the program's mask: EINTR. */
TEST(Readiness, WaitsWithASignalMaskAnswerTheHeldSocketBeforeASignalTheMaskLetsIn)
{
	RecordProperty("fault", "ppoll, pselect and epoll_pwait with a mask unblocking a pending signal, records unread");
	for (const char *how : { "ppoll", "pselect", "epoll_pwait" }) {
		SCOPED_TRACE(how);
		expectBothWays(bothWays({ "masked-wait", how }, { "--burst", "3" }),
			       std::string(how) + " 1 handler did not run in the wait\n");
	}
}

/*
 * A buffer BIO over the socket is not tuned (a review: its handshake hung on read-ahead's
 * 64 KiB ask); it stalls the program after its first line both ways, as it holds the rest
 * itself. A source BIO of the program's own that reads once per call (as curl's does) is.
 */
TEST(Readiness, AFilterReadBioIsLeftAsItIsAndAProgramsOwnSourceIsServed)
{
	RecordProperty("fault", "a buffer BIO, or a BIO of the program's own, as the connection's read BIO");
	expectBothWays(bothWays({ "read-bio", "buffer" }, { "--burst", "20" }), "lines 1\n");
	expectBothWays(bothWays({ "read-bio", "read-once" }, { "--burst", "20" }), "lines 20\n");
}

class StopTls : public ::testing::TestWithParam<const char *> {};

/*
 * Plaintext after close_notify on the same socket (StopTLS: FTP's CCC). Over TCP the
 * shim reads ahead, and the plaintext came in with the alert: OpenSSL's own read-ahead
 * kept it (the program waited for it, 2 s, "plain none"); the shim's queue hands it to
 * the program's recv, as the kernel does.
 */
TEST_P(StopTls, PlaintextAfterCloseNotifyReachesTheProgram)
{
	RecordProperty("fault", std::string("plaintext after close_notify on the same socket (StopTLS), over ") +
					(*GetParam() ? GetParam() : "a UNIX socketpair"));
	std::vector<std::string> arguments = withIdentity("stoptls");
	if (*GetParam())
		arguments.insert(arguments.begin() + 1, GetParam());
	expectBothWays(bothWays(arguments), "lines 2\nplain PLAIN\nempty wakeups 0\n");
}

INSTANTIATE_TEST_SUITE_P(Readiness, StopTls, ::testing::Values("", "tcp"));

TEST(Readiness, AnSslBioTheShimCannotFollowReadsAsWithoutIt)
{
	RecordProperty("fault", "BIO_new_ssl, poll, BIO_read: OpenSSL's SSL BIO reads past the shim");
	expectBothWays(bothWays({ "ssl-bio" }, { "--burst", "20" }), "lines 20\n");
}

TEST(Readiness, ReadAheadAnswersWhatTheProgramSet)
{
	RecordProperty("fault", "SSL_get_read_ahead answered 1 where the program set nothing; a callback inside "
				"SSL_read must see and own the program's mode (a draft that set SSL_MODE_RELEASE_BUFFERS "
				"there showed it)");
	expectBothWays(bothWays({ "read-ahead-setting" }, { "--burst", "20", "--line-length", "4000" }),
		       "context 0\nnew 0\nafter a read 0, context 0\nrelease buffers 0\nset 0, then 1\n"
		       "cleared 0, then 0\ninside a read 0\nset inside a read 1, after it 1\n"
		       "inside a read after the program cleared it 0\nset by the program 1\n"
		       "cleared by the program 0\ncontext set by the program 1\n");
}

TEST(Readiness, AWriteWhileOpenSslHoldsHalfARecordLeavesTheSocketsReadinessToTheKernel)
{
	RecordProperty("fault", "half a record held, SSL_write, poll: readable at once (a poll loop that answers each "
				"WANT_READ with a write spun)");
	expectBothWays(bothWays(withIdentity("half-record")), "poll after a write 0\nread 1000\n");
}

TEST(Readiness, AReaderCancelledWhileItWaitsForTheRestOfARecordLeavesNothingReadable)
{
	RecordProperty("fault", "pthread_cancel of a thread blocked in SSL_read on half a record, then poll: "
				"the shim reported the half it read ahead readable");
	/* As in test_unwinding_cases: its sigaltstack interceptor misreads a cancelled thread's stack. */
	if (sanitizerBuild() && !threadSanitizerBuild())
		GTEST_SKIP() << "AddressSanitizer misreads a cancelled thread's stack";
	expectBothWays(bothWays(withIdentity("cancel-half-record")), "poll after the cancel 0\n");
}

TEST(Readiness, ADrainAfterShutdownWaitsForTheFinAsWithoutTheShim)
{
	RecordProperty("fault", "SSL_shutdown, then poll + recv(MSG_DONTWAIT) until the peer's FIN: empty wake-ups");
	/* The drain reads the rest of the burst itself: OpenSSL's read-ahead kept it (a drain of 0 bytes). */
	const std::vector<Captured> runs = bothWays({ "drain" }, { "--burst", "20" });
	EXPECT_EQ(runs[0].status, 0) << runs[0].err;
	EXPECT_EQ(runs[0].out.rfind("fin\nno spin\ndrained ", 0), 0u) << runs[0].out;
	EXPECT_NE(runs[0].out, "fin\nno spin\ndrained 0\n");
	EXPECT_EQ(runs[1].status, 0) << runs[1].err;
	EXPECT_EQ(runs[1].out, runs[0].out);
}

TEST(Readiness, AReconnectOnTheSameNumberSeesOnlyTheNewRegistration)
{
	RecordProperty("fault", "records held, a new socket dup2ed onto the number, SSL_clear, SSL_connect, "
				"EPOLL_CTL_ADD again: the old registration's data, a spin");
	for (bool withShim : { false, true }) {
		ExampleServer first({ "--burst", "20" });
		ExampleServer second({ "--burst", "20" });
		const Captured run = runProgram({ examplePath("readiness_cases"), "reconnect", first.portText(),
						  second.portText() },
						withShim, {}, kTimeoutMs);
		EXPECT_EQ(run.status, 0) << run.err;
		EXPECT_EQ(run.out, "events after the dup2 0\nevents after the handshake 0\nlines 20\nno spin\n")
			<< (withShim ? "with" : "without") << " the shim";
	}
}

TEST(Readiness, AWorkersReArmWakesTheThreadBlockedInTheWait)
{
	RecordProperty("fault", "EPOLLET|EPOLLONESHOT, a worker reads one record and re-arms with MOD while "
				"the main thread is blocked in epoll_wait: the kernel wakes it");
	expectBothWays(bothWays({ "rearm" }, { "--burst", "20" }), "lines 20\ntimeouts 0\n");
}

/*
 * Three threads blocked in one set's epoll_wait, then an ADD of a connection whose records
 * OpenSSL holds: the kernel, the file staying ready, wakes all three in turn; one-shot,
 * one. A hunt: the shim's wake woke one (two slept out their timeout, 20 runs in 20), and
 * a second waiter could be handed the wake's own event (data "tlstunew").
 */
TEST(Readiness, ThreadsBlockedInOneSetAreWokenAsTheKernelWakesThem)
{
	RecordProperty("fault", "three threads in epoll_wait on one set, then EPOLL_CTL_ADD of a held connection");
	const std::string told = "told 3, timed out 0, other 0\n";
	std::string level, oneshot;
	for (int round = 0; round < 5; round++) {
		level += told;
		oneshot += "told 1, timed out 2, other 0\n";
	}
	const std::vector<std::string> server = { "--burst", "20", "--connections", "5" };
	expectBothWays(bothWays({ "waiters", "level" }, server), level);
	expectBothWays(bothWays({ "waiters", "oneshot" }, server), oneshot);
	/*
	 * The first round's threads in their waits before the process's first connection: those
	 * waits went straight to the kernel, and the shim's wake reached the program (data
	 * "tlstunew": "told 0, timed out 0, other 3" in the first round).
	 */
	expectBothWays(bothWays({ "waiters", "level-first" }, server), level);
	expectBothWays(bothWays({ "waiters", "oneshot-first" }, server), oneshot);
}

class SharedWaits : public ::testing::TestWithParam<const char *> {};

/*
 * A thread begins a wait for the socket while another thread's SSL_read has read ahead
 * the records it does not return, and has not returned yet: the kernel would still hold
 * them and end the wait at once. The wait found no connection held yet and slept its 20 s
 * out (and, begun before such a read, it could sleep too: core/read/fill_gate.h).
 */
TEST_P(SharedWaits, AWaitBegunWhileAnotherThreadReadsSeesWhatItReadAhead)
{
	RecordProperty("fault", std::string("a wait begun inside another thread's SSL_read of the socket: ") + GetParam());
	expectBothWays(bothWaysOf("shared_waits", withIdentity(GetParam())), "reader 16384\nwait readable\nwaiter 32768\n");
}

INSTANTIATE_TEST_SUITE_P(Readiness, SharedWaits, ::testing::Values("poll", "ppoll", "select", "pselect", "epoll"));

class SharedWaitsBegunFirst : public ::testing::TestWithParam<const char *> {};

/*
 * A thread is in the wait before the records arrive, another thread blocked in SSL_read
 * on one CPU with it; the reader, of higher priority, reads first: the kernel still held
 * two records when the woken waiter looked again, and ended its wait. With the shim it
 * found them read ahead and slept its 20 s out (epoll: 5 runs in 6 before
 * core/read/epoll_waiters.h; poll and select count themselves in: fill_gate.h).
 */
TEST_P(SharedWaitsBegunFirst, AWaitBegunBeforeAnotherThreadReadsEndsAsTheKernelsWould)
{
	RecordProperty("fault", std::string("a wait begun before another thread's SSL_read of the socket: ") + GetParam());
	std::vector<std::string> arguments = withIdentity(GetParam());
	arguments.insert(arguments.end(), { "--early", "yes" });
	expectBothWays(bothWaysOf("shared_waits", arguments), "reader 16384\nwait readable\nwaiter 32768\n");
}

INSTANTIATE_TEST_SUITE_P(Readiness, SharedWaitsBegunFirst, ::testing::Values("poll", "select", "epoll"));

/*
 * The same, the epoll wait begun before the process's first connection (its contexts
 * made): it slept its 20 s out in 4 runs of 5 before such waits counted themselves in.
 */
TEST(Readiness, AnEpollWaitBegunBeforeTheFirstConnectionEndsAsTheKernelsWould)
{
	RecordProperty("fault", "an epoll wait begun before the first connection, another thread's SSL_read");
	std::vector<std::string> arguments = withIdentity("epoll");
	arguments.insert(arguments.end(), { "--early", "connection" });
	expectBothWays(bothWaysOf("shared_waits", arguments), "reader 16384\nwait readable\nwaiter 32768\n");
}

/*
 * A thread pool on EPOLLONESHOT (3 workers on 4 TCP connections, maxevents 1), each worker
 * reading one record and re-arming with MOD, DEL and ADD, MOD with new data, or every
 * other time for EPOLLOUT alone: every byte, no connection told to two workers at once or
 * of an arm it no longer has, no wait timed out. A one-shot connection stops reading
 * ahead at its first arm (below); what it read ahead before, during its handshake, the
 * shim still reports, and the races the wait tickets close (EpollSets::delivered) are
 * left there: hunts' echo servers found them (two workers on one connection in 6 runs of
 * 40; an output arm made after a claim lost, its connection stalled, 8 runs of 10). The
 * unit tests make them (EpollMerged); this checks each mode end to end.
 */
TEST(Readiness, AOneShotThreadPoolGetsEveryByteAndEachArmOnce)
{
	RecordProperty("fault", "EPOLLONESHOT, three workers waiting on one set, re-arming by MOD, by DEL and ADD, or with new data");
	for (const char *how : { "mod", "deladd", "newdata", "output" }) {
		SCOPED_TRACE(how);
		std::vector<std::string> arguments = withIdentity("workers");
		arguments.insert(arguments.begin() + 1, how);
		expectBothWays(bothWays(arguments), "bytes 2560000, twice 0\ntimeouts 0\n");
	}
}

/*
 * The kernel is the one reporter of a one-shot arm: a connection whose fd the program arms
 * EPOLLONESHOT reads no further ahead (core/read/unseen_waits.h; hunts: pools of four to
 * eight workers still had two workers on one connection, or one told of an arm it had
 * not made, in 1 to 2 runs of 100 while the shim reported what OpenSSL read ahead), and
 * says so at TLSTUNE_LOG=info.
 */
TEST(Readiness, AOneShotArmedConnectionStopsReadingAhead)
{
	RecordProperty("fault", "read-ahead on connections a thread pool arms EPOLLONESHOT");
	std::vector<std::string> arguments = withIdentity("workers");
	arguments.insert(arguments.begin(), examplePath("readiness_cases"));
	arguments.insert(arguments.begin() + 2, "mod");
	const Captured run = runProgram(arguments, true, { "TLSTUNE_LOG=info" }, kTimeoutMs);
	EXPECT_EQ(run.status, 0) << run.err;
	EXPECT_EQ(run.out, "bytes 2560000, twice 0\ntimeouts 0\n");
	EXPECT_NE(run.err.find("tlstune: read-ahead off: the connection's fd is armed EPOLLONESHOT"), std::string::npos)
		<< run.err;
}

/*
 * A one-shot arm made while OpenSSL holds records the shim read ahead (each connection's
 * first record read before its first arm) has one reporter, the shim: its kernel arm goes
 * without EPOLLIN until they are gone (core/read/epoll_sets.h; hunts: 32 short connections
 * in an eight-worker pool had two workers on one connection in 4 runs of 300, a dup of
 * each socket registered in 3 of 100, while the kernel's arm asked for input too). Every
 * byte both ways, no arm told twice; and with the shim the set's fdinfo shows the first
 * arm without EPOLLIN (1 with an arm left whole, as without the shim).
 */
TEST(Readiness, AOneShotArmMadeWhileRecordsAreHeldIsReportedOnce)
{
	RecordProperty("fault", "a one-shot arm made while OpenSSL holds records the shim read ahead");
	std::vector<std::string> arguments = withIdentity("workers");
	arguments.insert(arguments.begin() + 1, "held");
	expectBothWays(bothWays(arguments), "bytes 2560000, twice 0\ntimeouts 0\n");
	arguments.insert(arguments.begin(), examplePath("readiness_cases"));
	arguments.insert(arguments.end(), { "--show-first-arm", "1" });
	const Captured run = runProgram(arguments, true, {}, kTimeoutMs);
	EXPECT_EQ(run.status, 0) << run.err;
	EXPECT_EQ(run.out, "first arm's input with the kernel 0\nbytes 2560000, twice 0\ntimeouts 0\n");
}

/*
 * What OpenSSL holds of a connection the shim never read ahead for is not reported: a
 * poll after part of a record answered readable at once, for ever (a level-triggered
 * loop leaving the rest for later spun), and a one-shot pool reading 1,000 bytes of each
 * 2,000-byte record was told of the rest, where without the shim it waited (a hunt).
 */
TEST(Readiness, TheRestOfARecordOnAConnectionNotReadAheadIsNotReported)
{
	RecordProperty("fault", "a poll after part of a record, read-ahead set by the program");
	for (const char *readAhead : { "on", "off" }) {
		SCOPED_TRACE(readAhead);
		std::vector<std::string> arguments = withIdentity("rest-of-record");
		arguments.insert(arguments.begin() + 1, readAhead);
		expectBothWays(bothWays(arguments), "pending 1900\npoll after part of a record 0\n");
	}
}

/*
 * A thread's blocking SSL_read asleep when the peer closes without close_notify: an end
 * of stream. The fill before it (a read that does not block, in a process with threads)
 * found nothing and left EAGAIN in errno, which OpenSSL's socket BIO reads when a read
 * returns 0: it answered SSL_ERROR_WANT_READ on a blocking socket (a hunt, 10 runs of 10).
 */
TEST(Readiness, AnEndOfStreamMetAsleepInAThreadIsNoWantRead)
{
	RecordProperty("fault", "a thread's blocking SSL_read asleep, then the peer's FIN without close_notify");
	expectBothWays(bothWays(withIdentity("eof-in-thread")), "second read 0 want-read no errno 0\n");
}

class ClosingUnread : public ::testing::TestWithParam<const char *> {};

TEST_P(ClosingUnread, ResetsTheConnectionAsTheKernelDoes)
{
	RecordProperty("fault", "a close with records unread: the kernel resets, a FIN came instead");
	std::vector<std::string> arguments = withIdentity("close-unread");
	arguments.insert(arguments.begin() + 1, GetParam());
	expectBothWays(bothWays(arguments), "server saw reset\n");
}

/*
 * written-last: the peer had not acknowledged the last line at the close; a FIN came, to
 * keep it. longjmp, throw: the SSL_read that read the lines ahead was left by its message
 * callback, and recorded nothing (a hunt). copy-last, abort, exec: the last close was a
 * copy's, or the image's end (another hunt: a FIN).
 */
INSTANTIATE_TEST_SUITE_P(Readiness, ClosingUnread,
			 ::testing::Values("close-first", "free-first", "written-last", "longjmp", "throw", "copy-last",
					   "free-copy", "copy-exit", "abort", "exec"));

TEST(Readiness, AnAbortWhoseHandlerGoesBackLeavesTheCloseToTheProgram)
{
	RecordProperty("fault", "abort() with a SIGABRT handler that siglongjmps, then every line read and a close: "
				"the shim had made the socket reset at its close");
	if (threadSanitizerBuild())
		GTEST_SKIP() << "ThreadSanitizer takes what follows a siglongjmp out of a handler for the handler";
	std::vector<std::string> arguments = withIdentity("close-unread");
	arguments.insert(arguments.begin() + 1, "abort-handled");
	expectBothWays(bothWays(arguments), "lines 20\nserver saw fin\n");
}

TEST(Readiness, AConnectionClosedWithPartOfARecordsPlaintextUnreadEndsWithAFin)
{
	RecordProperty("fault", "one record, 10 bytes of it read, SSL_free, close: the shim reset the connection "
				"although the kernel held nothing unread");
	expectBothWays(bothWays({ "close-unread", "one-record", "--cert", certificate().cert, "--key", certificate().key }),
		       "server saw fin\n");
}

TEST(Readiness, AConnectionAForkedChildReadsToTheEndIsNotReset)
{
	RecordProperty("fault", "records held, fork, the parent closes, the child reads the rest and closes last");
	expectBothWays(bothWays({ "close-unread", "forked", "--cert", certificate().cert, "--key", certificate().key }),
		       "server saw fin\n");
}

TEST(Readiness, ANestedSetIsReadyWhileTheSetInsideItHasAConnectionToReport)
{
	RecordProperty("fault", "the connection in an epoll set inside another; the outer set is waited on");
	expectBothWays(bothWays({ "nested" }, { "--burst", "20" }), "lines 20\n");
}

TEST(Readiness, ANestedSetMadeBeforeTheFirstConnectionIsReadyAsWell)
{
	RecordProperty("fault", "both sets made before the first SSL (the shim reads their lists from the kernel): "
				"the inner one's was never read, and the outer set stalled");
	expectBothWays(bothWays({ "nested", "early" }, { "--burst", "20" }), "lines 20\n");
}

TEST(Readiness, ACopyOfASetsFdIsThatSet)
{
	RecordProperty("fault", "a dup of the inner set's fd in the outer set, or waited on by poll: the shim knew "
				"sets by their first number only, and both stalled");
	expectBothWays(bothWays({ "nested", "copy" }, { "--burst", "20" }), "lines 20\n");
	expectBothWays(bothWays({ "nested", "poll-copy" }, { "--burst", "20" }), "lines 20\n");
	/* The inner set's number closed while a copy keeps it (a hunt: the outer wait stalled). */
	expectBothWays(bothWays({ "nested", "moved-inner" }, { "--burst", "20" }), "lines 20\n");
}

TEST(Readiness, AnEpollSetWaitedOnByPollOrSelectIsReadyWhileItHasAConnectionToReport)
{
	RecordProperty("fault", "the connection in an epoll set; poll or select waits on the set's fd");
	expectBothWays(bothWays({ "nested", "poll" }, { "--burst", "20" }), "lines 20\n");
	expectBothWays(bothWays({ "nested", "select" }, { "--burst", "20" }), "lines 20\n");
}

/*
 * Waits the shim cannot see (issue 23): examples/unseen_waits. A connection the shim
 * cannot follow does not read ahead, so the kernel keeps what it would have kept.
 */
TEST(UnseenWaits, APollOfARingMadeBeforeTheConnectionSeesTheSocketsBytes)
{
	RecordProperty("fault", "syscall(SYS_io_uring_setup), as libuv does, then IORING_OP_POLL_ADD before each read");
	const std::vector<Captured> runs = bothWaysOf("unseen_waits", { "ring" }, { "--burst", "20" });
	if (runs[0].out == "no ring\n")
		GTEST_SKIP() << "this kernel makes no io_uring instance";
	expectBothWays(runs, "lines 20\n");
}

TEST(UnseenWaits, APollOfALiburingRingSeesTheSocketsBytes)
{
	RecordProperty("fault", "io_uring_queue_init (liburing makes the ring past libc), then a POLL_ADD before each read");
	if (access(examplePath("liburing_waits").c_str(), X_OK) != 0)
		GTEST_SKIP() << "built without liburing's headers (Debian's liburing-dev)";
	std::vector<Captured> runs;
	for (bool withShim : { false, true }) {
		ExampleServer peer({ "--burst", "20" });
		runs.push_back(runProgram({ examplePath("liburing_waits"), peer.portText() }, withShim, {}, kTimeoutMs));
	}
	if (runs[0].out == "no ring\n")
		GTEST_SKIP() << "this kernel makes no io_uring instance";
	expectBothWays(runs, "lines 20\n");
}

TEST(UnseenWaits, ACopyOfTheSocketSentToAnotherProcessIsReadableThere)
{
	RecordProperty("fault", "after the handshake a copy of the socket goes to a helper process (SCM_RIGHTS), "
				"which polls it before each read");
	expectBothWays(bothWaysOf("unseen_waits", { "sent-away" }, { "--burst", "20" }), "lines 20\n");
}

TEST(UnseenWaits, ACopySentBeforeTheHandshakeOfAConnectionOnItsOwnBioIsReadableThere)
{
	RecordProperty("fault", "a BIO of the program's own (its socket learnt from its reads); a copy of the socket "
				"goes to a helper process before the handshake");
	expectBothWays(bothWaysOf("unseen_waits", { "sent-away", "own-bio" }, { "--burst", "20" }), "lines 20\n");
}

TEST(UnseenWaits, ASocketsReceiveLowWaterMarkDecidesItsReadiness)
{
	RecordProperty("fault", "SO_RCVLOWAT of a few records, set before or after the handshake, then poll "
				"with a timeout of 0 before each read; the socket named by SSL_set_fd or learnt "
				"from the reads of a BIO of the program's own");
	for (const std::vector<std::string> &args : std::vector<std::vector<std::string>>{
		     { "rcvlowat", "before" }, { "rcvlowat", "after" }, { "rcvlowat", "before", "own-bio" },
		     { "rcvlowat", "after", "own-bio" } }) {
		SCOPED_TRACE(args.size() > 2 ? args[1] + " own-bio" : args[1]);
		const std::vector<Captured> runs = bothWaysOf("unseen_waits", args, { "--burst", "20" });
		for (const Captured &run : runs)
			EXPECT_EQ(run.status, 0) << run.err;
		/* The kernel's count of ready polls depends on the records' sizes: the same both ways. */
		EXPECT_EQ(runs[1].out, runs[0].out);
		EXPECT_NE(runs[0].out.find("lines 20\n"), std::string::npos) << runs[0].out;
		EXPECT_EQ(runs[0].out.find("ready 19\n"), std::string::npos) << "the mark made no poll wait";
	}
}

TEST(UnseenWaits, TlsOverARawModePseudoTerminalIsReadableAndLosesNothing)
{
	RecordProperty("fault", "TLS over a raw-mode pty (SSL_set_rfd and SSL_set_wfd on the slave), poll before each read");
	expectBothWays(bothWays(withIdentity("pty")),
		       "recv of no bytes -1 ENOTSOCK, recvmsg -1 ENOTSOCK\nlines 5\nserver got bye\n");
}

/* Programs that touch their socket, or another fd, around OpenSSL calls: examples/raw_socket_cases. */
TEST(RawSocket, AReadOfNoBytesAnswersZeroWhileOpenSslHoldsRecords)
{
	RecordProperty("fault", "recv of 0 bytes, MSG_DONTWAIT and blocking, a MSG_PEEK|MSG_TRUNC count without a buffer "
				"(the shim wrote into it: SIGSEGV), the same by recvfrom and recvmsg with an "
				"address buffer (the shim left its length as given), MSG_PEEK|MSG_ERRQUEUE (the shim "
				"answered 1 byte), a read of the error queue (it quieted the connection), a "
				"blocking recvmsg of no bytes with a control buffer (it waited), the same by recvmmsg "
				"(it waited), then poll before each read");
	expectBothWays(bothWaysOf("raw_socket_cases", { "empty-recv" }, { "--burst", "20" }),
		       "empty recv 0 0\ncounted without a buffer some\n"
		       "recvfrom 0 length 0, peek some length 0, count some length 0\nrecvmsg 0 name length 0\n"
		       "error queue peeks -1 EAGAIN -1 EAGAIN\nerror queue read -1 EAGAIN\n"
		       "recvmsg with room for control 0 control length 0\n"
		       "recvmmsg of no bytes 2 lengths 0 0\nlines 20\n");
}

TEST(RawSocket, ACallbackReadingAPipeInsideOpenSslCallsLeavesTheConnectionsSocket)
{
	RecordProperty("fault", "a message callback reads a byte of a non-blocking pipe inside each OpenSSL call");
	expectBothWays(bothWaysOf("raw_socket_cases", { "callback-read" }, { "--burst", "20" }),
		       "pipe 0 socket 1\nlines 20\n");
}

TEST(RawSocket, AConnectionOverABioPairReadsAsOpenSslReadsIt)
{
	RecordProperty("fault", "a BIO pair the program fills from the socket as the pair's read request asks: "
				"read-ahead there asked for the pair's whole buffer");
	expectBothWays(bothWaysOf("raw_socket_cases", { "bio-pair" }, { "--burst", "20" }), "first request 5\nlines 20\n");
}

TEST(RawSocket, ReadingASetsListFromProcIntoAFreedNumberDoesNotHang)
{
	RecordProperty("fault", "an epoll set from before the first connection read from /proc into a number "
				"it had registered: the shim's close of that file took the sets' lock again");
	expectBothWays(bothWaysOf("raw_socket_cases", { "proc-list-reuse" }), "epoll_ctl 0\n");
}

TEST(RawSocket, ACloseOfTheHighestNumberEnds)
{
	RecordProperty("fault", "close(INT_MAX) with a registration the shim keeps: an int loop spun for ever");
	expectBothWays(bothWaysOf("raw_socket_cases", { "close-int-max" }), "close -1 EBADF\n");
}

TEST(RawSocket, AMessageTheKernelRefusesIsRefusedNotAFault)
{
	RecordProperty("fault", "sendmsg with an unreadable message or a short control header: the shim read "
				"them before the kernel and faulted");
	expectBothWays(bothWaysOf("raw_socket_cases", { "sendmsg-refused" }),
		       "bad pointer -1 EFAULT\nshort header -1 EINVAL\n");
}

TEST(RawSocket, ACloseThatFailsLeavesTheSocketsCloseAsItWas)
{
	RecordProperty("fault", "dup2 from a bad fd, dup3 onto itself, close_range with a bad flag onto a socket "
				"whose records OpenSSL holds: each left it abortive, and the program's later close reset "
				"the connection and lost its upload");
	expectBothWays(bothWaysOf("raw_socket_cases", { "failed-closes" }, { "--burst", "20" }),
		       "dup2 -1 EBADF linger 0\ndup3 -1 EINVAL linger 0\nclose_range -1 EINVAL linger 0\nlines 20\n");
}

TEST(RawSocket, AWaitThroughSyscallWritesTheTimeLeftAndRefusesABadMaskSize)
{
	RecordProperty("fault", "syscall(SYS_ppoll), which the shim routes to its ppoll: the kernel writes the time "
				"left back and refuses a signal mask of another size");
	expectBothWays(bothWaysOf("raw_socket_cases", { "raw-ppoll" }),
		       "ppoll 0 time left 0.000000000\nbad mask size -1 EINVAL\n");
}

TEST(RawSocket, AUnixSocketClosedWithRecordsUnreadResetsThePeer)
{
	RecordProperty("fault", "a server over a UNIX socketpair reads 10 bytes of three records and closes: "
				"read ahead, the close was an end of file and the client died by SIGPIPE");
	expectBothWays(bothWaysOf("raw_socket_cases", withIdentity("unix-close")), "read -1 error 5 errno 104\n");
}

TEST(RawSocket, AResetAfterQueuedBytesComesAfterThemOnce)
{
	RecordProperty("fault", "plaintext after close_notify read ahead, then the peer's reset: a read into "
				"memory the process may not write (the shim's copy: SIGSEGV), a read of no bytes "
				"and a peek that went on in the kernel took the reset, and the reads after saw an "
				"end of stream");
	expectBothWays(bothWaysOf("raw_socket_cases", withIdentity("after-notify", { "reset" })),
		       "unwritable -1 EFAULT\nempty 0 \npeek 5 HELLO\nread 5 HELLO\nthen -1 ECONNRESET\nthen 0 \n");
}

TEST(RawSocket, AReadPartlyQueuedGoesOnInTheKernelAsOneRead)
{
	RecordProperty("fault", "plaintext after close_notify read ahead, then MSG_PEEK|MSG_WAITALL, readv and "
				"recvmsg with MSG_WAITALL: each stopped at the end of the queue");
	expectBothWays(bothWaysOf("raw_socket_cases", withIdentity("after-notify", { "waitall" })),
		       "peek 7 HELLOWO\nreadv 7 HELLOWO\nwaitall 6 RLDAGA\n");
}

TEST(RawSocket, ANumberClosedByOneThreadAndTakenByAnothersSocketKeepsTheNewConnections)
{
	RecordProperty("fault", "four threads dialling, reading 3 lines, freeing and closing, 400 connections: the "
				"old connection's close dropped what the shim had read ahead for a new socket "
				"that took the number meanwhile, and its handshake or read stalled (1 to 3 in "
				"every run)");
	expectBothWays(bothWaysOf("raw_socket_cases", withIdentity("reconnecting-threads")),
		       "connections 400 failed 0\n");
}

TEST(RawSocket, ALingeringCloseAfterSslFreeDeliversTheWholeResponse)
{
	RecordProperty("fault", "20 pipelined requests, one read, 200 KiB to a client that reads later, SSL_free, "
				"shutdown(SHUT_WR), a drain, close: a reset threw the unsent response away");
	expectBothWays(bothWaysOf("raw_socket_cases", withIdentity("lingering-close")),
		       "client got 204800 of 204800, then close_notify\n");
}
