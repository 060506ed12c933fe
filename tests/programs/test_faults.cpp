/*
 * Faults a program meets, with and without the shim: the same outcome both ways. Signals
 * interrupting a wait, sockets numbered above FD_SETSIZE, fork() while OpenSSL holds
 * read-ahead data, TLS from a library constructor before main() (and before the shim's
 * own constructor), a peer that resets mid-download.
 */

#include <gtest/gtest.h>

#include <csignal>

#include "process.h"
#include "tls_fixture.h"

using namespace testsupport;

namespace {

constexpr int kTimeoutMs = 120000;

class Waits : public ::testing::TestWithParam<const char *> {};

/* 50 lines, then a wait with no timeout for data that never comes, cut by SIGALRM. */
std::string interruptedWait(const char *how, const std::vector<std::string> &more = {})
{
	std::string out;
	for (bool withShim : { false, true }) {
		ExampleServer server({ "--burst", "50" });
		std::vector<std::string> argv = { examplePath("poll_reader"), "127.0.0.1", server.portText(),
						  "--lines", "50", "--wait", how, "--interrupt" };
		argv.insert(argv.end(), more.begin(), more.end());
		const Captured run = runProgram(argv, withShim, {}, kTimeoutMs);
		EXPECT_EQ(run.status, 0) << run.err;
		if (withShim) {
			EXPECT_EQ(run.out, out) << run.err;
		}
		out = run.out;
	}
	return out;
}

} /* namespace */

TEST_P(Waits, ASignalInterruptsTheWaitWithEintrAsWithoutTheShim)
{
	RecordProperty("fault", std::string("a signal (SIGALRM, no SA_RESTART) during ") + GetParam());
	EXPECT_EQ(interruptedWait(GetParam()), "lines 50\ninterrupted: -1 EINTR\n");
}

/* select-dtablesize: nfds getdtablesize(), a plain fd_set at a page's end (the shim read past it). */
INSTANTIATE_TEST_SUITE_P(Faults, Waits,
			 ::testing::Values("poll", "poll_chk", "ppoll", "ppoll_chk", "select", "pselect",
					   "epoll", "epoll_pwait", "select-dtablesize"));

class HighFds : public ::testing::TestWithParam<const char *> {};

TEST_P(HighFds, ASocketAboveFdSetSizeReadsAndWaitsAsWithoutTheShim)
{
	RecordProperty("fault", std::string("the socket at fd 3000, above FD_SETSIZE, with ") + GetParam());
	/* fd 3000: above FD_SETSIZE (1024); select's sets allocated for it (a hunt's stalled). */
	EXPECT_EQ(interruptedWait(GetParam(), { "--high-fd", "3000" }), "lines 50\ninterrupted: -1 EINTR\n");
}

INSTANTIATE_TEST_SUITE_P(Faults, HighFds,
			 ::testing::Values("poll", "ppoll", "epoll", "epoll_pwait", "select", "pselect"));

/* 200 lines in one segment: after the first read, read-ahead holds the rest in OpenSSL. */
std::string readAll(const std::vector<std::string> &more, bool withShim)
{
	ExampleServer server({ "--burst", "200" });
	std::vector<std::string> argv = { examplePath("poll_reader"), "127.0.0.1", server.portText(), "--lines",
					  "200" };
	argv.insert(argv.end(), more.begin(), more.end());
	const Captured run = runProgram(argv, withShim, {}, kTimeoutMs);
	EXPECT_EQ(run.status, 0) << run.err;
	return run.out;
}

class RawWaits : public ::testing::TestWithParam<const char *> {};

/* A wait made through libc's syscall() is the wrapper's wait (a read hunt's stalled). */
TEST_P(RawWaits, AWaitThroughSyscallSeesWhatOpenSslHolds)
{
	RecordProperty("fault", std::string("the wait made by syscall(): ") + GetParam());
	for (bool withShim : { false, true })
		EXPECT_EQ(readAll({ "--wait", GetParam() }, withShim), "lines 200\n") << withShim;
}

INSTANTIATE_TEST_SUITE_P(Faults, RawWaits,
			 ::testing::Values("syscall-poll", "syscall-select", "syscall-epoll"));

class RawCopies : public ::testing::TestWithParam<const char *> {};

/* A copy made through syscall() or pidfd_getfd is waited on as dup's is (a read hunt's stalled). */
TEST_P(RawCopies, AWaitOnACopyMadePastLibcSeesWhatOpenSslHolds)
{
	RecordProperty("fault", std::string("poll on a copy of the socket made by ") + GetParam());
	for (bool withShim : { false, true })
		EXPECT_EQ(readAll({ "--wait-on-copy", GetParam() }, withShim), "lines 200\n") << withShim;
}

INSTANTIATE_TEST_SUITE_P(Faults, RawCopies, ::testing::Values("dup", "syscall-dup", "syscall-fcntl", "pidfd", "pidfd-libc"));

class Forks : public ::testing::TestWithParam<const char *> {};

TEST_P(Forks, AChildForkedWithReadAheadDataReadsTheRest)
{
	RecordProperty("fault", std::string("fork() while read-ahead holds data; the child waits in ") +
					GetParam());
	/* 200 lines in one segment: after 10, read-ahead holds the rest in OpenSSL's buffers. */
	for (bool withShim : { false, true }) {
		ExampleServer server({ "--burst", "200" });
		const Captured run = runProgram({ examplePath("poll_reader"), "127.0.0.1", server.portText(),
						  "--lines", "200", "--wait", GetParam(), "--fork-after", "10" },
						withShim, {}, kTimeoutMs);
		EXPECT_EQ(run.status, 0) << run.out << run.err;
		EXPECT_EQ(run.out, "lines 200\n") << (withShim ? "with" : "without") << " the shim";
	}
}

INSTANTIATE_TEST_SUITE_P(Faults, Forks, ::testing::Values("poll", "select", "epoll"));

TEST(Faults, TlsFromALibraryConstructorBeforeMainWorksThroughTheShim)
{
	RecordProperty("fault", "TLS from a library constructor, before main() and the shim's own");
	std::string outputs[2];
	for (bool withShim : { false, true }) {
		ExampleServer server({ "--echo", "--connections", "2" });
		const Captured run = runProgram({ examplePath("constructor_client") }, withShim,
						{ "EXCHANGE_PORT=" + server.portText(),
						  "SSL_CERT_FILE=" + certificate().cert, "TLSTUNE_STATS=1" },
						kTimeoutMs);
		EXPECT_EQ(run.status, 0) << run.err;
		if (withShim) {
			/* Both exchanges went through the shim: tuned, cached, coalesced. */
			EXPECT_NE(run.err.find("contexts_tuned=2 connections=2 "), std::string::npos) << run.err;
			if (caCacheRunsHere()) {
				EXPECT_NE(run.err.find("ca_hits=1 ca_misses=1 "), std::string::npos) << run.err;
			}
			EXPECT_EQ(run.err.find("records_held=0 "), std::string::npos) << run.err;
		}
		outputs[withShim] = run.out;
	}
	EXPECT_EQ(outputs[1], outputs[0]);
	EXPECT_EQ(outputs[0], "constructor: verify 0, sent 2300, echoed 2300, same bytes yes\n"
			      "main: verify 0, sent 1600, echoed 1600, same bytes yes\n");
}

class Resets : public ::testing::TestWithParam<const char *> {};

TEST_P(Resets, APeerResetMidDownloadEndsAsWithoutTheShim)
{
	RecordProperty("fault", std::string("the peer resets mid-download, TLS ") + GetParam());
	/* The bytes that arrive before the reset vary with timing; how it ends, and that they
	 * are the start of what was sent, do not. */
	for (bool withShim : { false, true }) {
		ExampleServer server({ "--send", "8000000", "--reset-after", "1000000", "--seed", "9",
				       "--tls", GetParam() });
		const Captured run = runProgram({ examplePath("bulk_download"), "127.0.0.1", server.portText(),
						  "--seed", "9" },
						withShim, {}, kTimeoutMs);
		EXPECT_EQ(run.status, 3) << run.err;
		EXPECT_EQ(run.out, "ended without close_notify: SSL_get_error 5, errno Connection reset by "
				   "peer, error queue []; what arrived is the pattern's start: yes\n")
			<< (withShim ? "with" : "without") << " the shim";
		EXPECT_EQ(server.process().readLine(kTimeoutMs), "reset");
	}
}

INSTANTIATE_TEST_SUITE_P(Faults, Resets, ::testing::Values("1.2", "1.3"));

class ExitPaths : public ::testing::TestWithParam<const char *> {};

TEST_P(ExitPaths, WhatWasWrittenArrivesHoweverTheProcessEnds)
{
	RecordProperty("fault", std::string("ten short writes, then the process ends by ") + GetParam());
	/* Lines of 7 bytes, "line 0\n" on; the vfork case writes twenty. */
	const std::string bytes = std::string(GetParam()) == "vfork" ? "150" : "70";
	std::string without;
	for (bool withShim : { false, true }) {
		SCOPED_TRACE(withShim ? "with the shim" : "without the shim");
		ExampleServer server({ "--sink" });
		const Captured run = runProgram({ examplePath("exit_paths"), server.portText(), GetParam() },
						withShim, {}, kTimeoutMs);
		const bool aborts = std::string(GetParam()) == "abort" || std::string(GetParam()) == "assert";
		EXPECT_EQ(run.status, aborts ? 128 + SIGABRT : 0) << run.err;
		const std::string received = server.process().readLine(kTimeoutMs);
		EXPECT_EQ(received.rfind("received " + bytes + " sha256 ", 0), 0u) << received;
		if (withShim) {
			EXPECT_EQ(received, without);
		}
		without = received;
		EXPECT_EQ(server.process().wait(kTimeoutMs), 0);
	}
}

INSTANTIATE_TEST_SUITE_P(Faults, ExitPaths,
			 ::testing::Values("exit", "_exit", "_Exit", "quick_exit", "exit_group", "abort", "assert", "execl", "execv",
					   "execvp", "atexit", "vfork"));
