/*
 * Leaving an OpenSSL call other than by its return, through the shim's frames:
 * examples/unwinding_cases run with and without the shim against tls_server. The
 * library's own static copy of the unwinder aborted every one of them (a personality
 * routine of the library's ran inside libgcc_s's unwinding), and a cancellation point
 * under a noexcept frame of the shim's called std::terminate. A longjmp out of a call left
 * the shim's record of it behind: the next call spun or crashed on it.
 */

#include <gtest/gtest.h>

#include "process.h"
#include "tls_fixture.h"

using namespace testsupport;

namespace {

constexpr int kTimeoutMs = 120000;

struct CaseRun {
	Captured program;
	std::string received; /* the server's "received N sha256 H" */
};

/* received: the server's lines, one per connection. program: unwinding_cases or its static build. */
CaseRun runCase(const std::string &name, bool withShim, int connections = 1,
		const std::string &program = "unwinding_cases")
{
	ExampleServer peer({ "--tls", "1.2", "--sink", "--connections", std::to_string(connections) });
	CaseRun run;
	/* Leaving OpenSSL half way leaks what the call had made, with or without the shim. */
	run.program = runProgram({ examplePath(program), name, peer.portText() }, withShim,
				 { "TSAN_OPTIONS=report_signal_unsafe=0", "ASAN_OPTIONS=detect_leaks=0" }, kTimeoutMs);
	for (int i = 0; i < connections; i++)
		run.received += peer.process().readLine(kTimeoutMs) + "\n";
	return run;
}

/*
 * AddressSanitizer reports the stack a cancellation unwound from a writer's loop, at the
 * thread's end, without the shim too (its sigaltstack interceptor).
 */
#define SKIP_CANCELLATION_UNDER_ADDRESS_SANITIZER()                                                \
	do {                                                                                       \
		if (sanitizerBuild() && !threadSanitizerBuild())                                   \
			GTEST_SKIP() << "AddressSanitizer misreads a cancelled thread's stack";      \
	} while (0)

} /* namespace */

TEST(Unwinding, ACancelledReaderLeavesTheConnectionToTheOtherThreads)
{
	RecordProperty("fault", "pthread_cancel of a thread blocked in SSL_read, then writes and a shutdown");
	for (bool withShim : { false, true }) {
		SCOPED_TRACE(withShim ? "with the shim" : "without the shim");
		const CaseRun run = runCase("cancel-reader", withShim);
		EXPECT_EQ(run.program.status, 0) << run.program.err;
		EXPECT_EQ(run.program.out, "joined canceled\nwrote 60 shutdown 0\n");
		EXPECT_EQ(run.received.rfind("received 90 ", 0), 0u) << run.received;
	}
}

TEST(Unwinding, ACancelledWriterLosesNoAcceptedByte)
{
	SKIP_CANCELLATION_UNDER_ADDRESS_SANITIZER();
	RecordProperty("fault", "pthread_cancel of a thread writing short lines in a loop");
	for (bool withShim : { false, true }) {
		SCOPED_TRACE(withShim ? "with the shim" : "without the shim");
		const CaseRun run = runCase("cancel-writer", withShim);
		ASSERT_EQ(run.program.status, 0) << run.program.err;
		ASSERT_EQ(run.program.out.rfind("joined canceled\naccepted ", 0), 0u) << run.program.out;
		ASSERT_EQ(run.received.rfind("received ", 0), 0u) << run.received;
		const long accepted = std::stol(run.program.out.substr(25));
		const long got = std::stol(run.received.substr(9));
		/* The write the cancellation interrupted may have gone out already: one line more. */
		EXPECT_TRUE(got == accepted || got == accepted + 14) << "accepted " << accepted << ", received " << got;
	}
}

TEST(Unwinding, AnExceptionFromAVerifyCallbackReachesTheProgramsCatch)
{
	RecordProperty("fault", "a C++ exception thrown by a verify callback through SSL_connect");
	for (bool withShim : { false, true }) {
		SCOPED_TRACE(withShim ? "with the shim" : "without the shim");
		const CaseRun run = runCase("throw-callback", withShim);
		EXPECT_EQ(run.program.status, 0) << run.program.err;
		EXPECT_EQ(run.program.out, "caught rejected by policy\n");
	}
}

/*
 * Its unwinder is its own static copy, which made the context the shim's frames are asked
 * about: libgcc_s, which answers for them, aborted (it had never unwound anything itself).
 */
TEST(Unwinding, AnExceptionFromAVerifyCallbackReachesTheCatchOfAProgramWithItsOwnUnwinder)
{
	RecordProperty("fault", "a C++ exception thrown by a verify callback through SSL_connect, -static-libgcc");
	SKIP_IN_SANITIZER_BUILD(); /* the sanitizers' runtimes bring libgcc_s, which then unwinds */
	for (bool withShim : { false, true }) {
		SCOPED_TRACE(withShim ? "with the shim" : "without the shim");
		const CaseRun run = runCase("throw-callback", withShim, 1, "unwinding_cases_static");
		EXPECT_EQ(run.program.status, 0) << run.program.err;
		EXPECT_EQ(run.program.out, "caught rejected by policy\n");
	}
}

namespace {

/* The server's lines both ways: the same bytes of each connection. */
void expectTheSameBytes(const std::string &name, const std::string &out)
{
	std::string received[2];
	for (bool withShim : { false, true }) {
		SCOPED_TRACE(withShim ? "with the shim" : "without the shim");
		const CaseRun run = runCase(name, withShim, 2);
		EXPECT_EQ(run.program.status, 0) << run.program.err;
		EXPECT_EQ(run.program.out, out);
		received[withShim] = run.received;
	}
	EXPECT_EQ(received[0], received[1]);
}

} /* namespace */

TEST(Unwinding, ALongjmpOutOfAVerifyCallbackLeavesTheNextConnectionAlone)
{
	RecordProperty("fault", "longjmp out of a verify callback in SSL_connect, then a second connection");
	expectTheSameBytes("longjmp-callback", "callback bailed out\nshutdown 0\nend\n");
}

TEST(Unwinding, ASiglongjmpOutOfABlockedReadLeavesTheConnectionAndTheNextAlone)
{
	RecordProperty("fault", "siglongjmp from a SIGALRM handler out of a blocked SSL_read, twice");
	expectTheSameBytes("siglongjmp-read", "round 0: read timed out\nshutdown 0\nround 1: read timed out\nshutdown 0\n");
}

TEST(Unwinding, ThreadsCancelledInWaitsOfAProgramWithoutAnUnwinderEndAsWithout)
{
	RecordProperty("fault", "pthread_cancel of threads in poll, epoll_wait, select, read; no libgcc_s loaded");
	SKIP_IN_SANITIZER_BUILD(); /* the sanitizers' runtimes need libgcc_s themselves */
	for (bool withShim : { false, true }) {
		SCOPED_TRACE(withShim ? "with the shim" : "without the shim");
		const Captured run = runProgram({ examplePath("cancelled_waits") }, withShim, {}, kTimeoutMs);
		EXPECT_EQ(run.status, 0) << run.err;
		EXPECT_EQ(run.out, "unwinder before: no\npoll canceled\nepoll_wait canceled\nselect canceled\n"
				   "read canceled\n");
	}
}
