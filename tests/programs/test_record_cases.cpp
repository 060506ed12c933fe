/*
 * examples/record_cases with and without the shim, the shim in each TLSTUNE_COALESCE mode:
 * the same output, exit status and bytes at the server (issue 14, record merging). And the
 * connections over datagrams the shim leaves alone: DTLS and QUIC.
 */

#include <gtest/gtest.h>

#include <unistd.h>

#include "process.h"
#include "tls_fixture.h"

using namespace testsupport;

namespace {

constexpr int kTimeoutMs = 60000;

/*
 * Runs the case without the shim, then with it in each mode; the client's output and
 * status, and the server's lines (serverLines of them), are the same every time.
 */
void expectTheSameEveryWay(const std::string &name, const std::vector<std::string> &server,
			   int serverLines)
{
	std::string firstOut, firstServer;
	int firstStatus = -1;
	for (const char *mode : { "none", "off", "syscalls", "records" }) {
		SCOPED_TRACE(mode);
		const bool withShim = std::string(mode) != "none";
		ExampleServer peer(server);
		/* A long delay: the writes after a round trip are still held, not quiet. */
		const Captured run = runProgram({ examplePath("record_cases"), peer.portText(), name }, withShim,
						{ std::string("TLSTUNE_COALESCE=") + (withShim ? mode : "off"),
						  "TLSTUNE_COALESCE_DELAY=20ms" },
						kTimeoutMs);
		std::string lines;
		for (int i = 0; i < serverLines; i++)
			lines += peer.process().readLine(kTimeoutMs) + "\n";
		EXPECT_EQ(peer.process().wait(kTimeoutMs), 0);
		if (!withShim) {
			firstOut = run.out;
			firstServer = lines;
			firstStatus = run.status;
			EXPECT_EQ(run.status, 0) << run.err;
			continue;
		}
		EXPECT_EQ(run.status, firstStatus) << run.err;
		EXPECT_EQ(run.out, firstOut);
		EXPECT_EQ(lines, firstServer);
	}
}

} /* namespace */

TEST(RecordCases, AKeyUpdateRequestedMidBurstGoesOutBeforeTheHeldRecords)
{
	RecordProperty("fault", "TLS 1.3 KeyUpdate (update_requested) from the peer mid-burst");
	expectTheSameEveryWay("key-update", { "--echo", "--key-update" }, 0);
}

TEST(RecordCases, ARenegotiationRequestedMidBurstIsFollowed)
{
	RecordProperty("fault", "a TLS 1.2 server requests renegotiation while plaintext is held");
	expectTheSameEveryWay("renegotiate", { "--tls", "1.2", "--echo", "--renegotiate" }, 0);
}

/*
 * OpenSSL 3.0's own read-ahead took records around a renegotiation's handshake for
 * unexpected ones (a hunt: "unexpected record" or a stall, 16 runs in 20, with a reader
 * and a writer thread under the program's lock; 4 runs in 8 against a server that
 * renegotiated three times). The shim's read-ahead leaves OpenSSL's off: the connection
 * reads ahead throughout, and renegotiates as without the shim.
 */
TEST(RecordCases, AConnectionThatRenegotiatesReadsAheadThroughout)
{
	ExampleServer peer({ "--tls", "1.2", "--echo", "--renegotiate" });
	const Captured run = runProgram({ examplePath("record_cases"), peer.portText(), "renegotiate" }, true,
					{ "TLSTUNE_LOG=info" }, kTimeoutMs);
	EXPECT_EQ(run.status, 0) << run.err;
	EXPECT_EQ(run.out.rfind("echoed ", 0), 0u) << run.out;
	EXPECT_NE(run.err.find("tlstune: connection tuned: read-ahead on"), std::string::npos) << run.err;
	EXPECT_EQ(run.err.find("read-ahead off"), std::string::npos) << run.err;
	EXPECT_EQ(peer.process().wait(kTimeoutMs), 0);
}

TEST(RecordCases, ThreeRenegotiationsMidStreamRunAsWithout)
{
	RecordProperty("fault", "a TLS 1.2 server that requests three renegotiations while the client reads and writes");
	expectTheSameEveryWay("renegotiate", { "--tls", "1.2", "--echo", "--renegotiate", "--renegotiations", "3" }, 0);
}

TEST(RecordCases, AConnectionOnAnSslDupRunsAsWithout)
{
	/* SSL_dup copied the shim's state with the ex_data: freeing both freed it twice. */
	RecordProperty("fault", "SSL_dup of a new SSL, the original freed, the copy connected");
	expectTheSameEveryWay("dup", { "--echo" }, 0);
}

TEST(RecordCases, WritesThroughAnSslBioAndSslWriteArriveInTheirOrder)
{
	/* The SSL BIO writes past SSL_write: its lines overtook held ones (a hunt's 12354). */
	RecordProperty("fault", "SSL_write and BIO_write on BIO_f_ssl over one SSL, by turns");
	expectTheSameEveryWay("ssl-bio", { "--tls", "1.2", "--sink" }, 1);
}

TEST(RecordCases, ErrnoAfterAWriteThatSucceededIsOpenSsls)
{
	expectTheSameEveryWay("errno", { "--tls", "1.2", "--sink" }, 1);
}

TEST(RecordCases, WithoutAutoRetryEachTicketIsAWantRead)
{
	/* With read-ahead OpenSSL went on past the tickets to the data: no WANT_READ. */
	RecordProperty("fault", "SSL_MODE_AUTO_RETRY cleared on a TLS 1.3 client");
	expectTheSameEveryWay("no-retry", { "--echo" }, 0);
}

TEST(RecordCases, CloseNotifyReceivedWhilePlaintextIsHeld)
{
	RecordProperty("fault", "close_notify from the peer while plaintext is held");
	expectTheSameEveryWay("close-notify", { "--sink", "--close-after", "100" }, 1);
}

TEST(RecordCases, AReaderAndAWriterThreadUnderTheProgramsLock)
{
	expectTheSameEveryWay("locked", { "--echo" }, 0);
}

TEST(RecordCases, AResetMeetsHeldPlaintextAndTheFailingCallCarriesOpenSslsErrors)
{
	RecordProperty("fault", "the peer resets while plaintext is held: SSL_get_error and the error queue");
	expectTheSameEveryWay("reset", { "--tls", "1.2", "--sink", "--reset-after", "100" }, 1);
}

TEST(RecordCases, AConnectionClearedAfterAFailureStartsCleanOnANewSocket)
{
	RecordProperty("fault", "SSL_clear and SSL_set_fd after a reset met held plaintext");
	expectTheSameEveryWay("reuse", { "--tls", "1.2", "--sink", "--reset-after", "100", "--connections", "2" },
			      2);
}

TEST(RecordCases, QueriesOnAnotherThreadWhileTheShimEncryptsHeldLines)
{
	expectTheSameEveryWay("queries", { "--sink" }, 1);
}

/*
 * DTLS over UDP through a socket BIO (SSL_set_fd): each record is a datagram of its own,
 * as without the shim (a hunt: the filter merged 30 records into 3 datagrams of up to 15
 * KiB, past the program's MTU; with the don't-fragment bit set, EMSGSIZE and SIGPIPE).
 */
TEST(RecordCases, DtlsOverUdpKeepsADatagramPerRecord)
{
	RecordProperty("fault", "DTLS client with SSL_set_fd on a UDP socket, 30 writes of 100 B");
	const Certificate &identity = certificate();
	std::string outputs[2];
	for (bool withShim : { false, true }) {
		SCOPED_TRACE(withShim ? "with the shim" : "without the shim");
		const Captured run = runProgram({ examplePath("dtls_datagrams"), "--cert", identity.cert, "--key",
						  identity.key },
						withShim, {}, kTimeoutMs);
		EXPECT_EQ(run.status, 0) << run.err;
		outputs[withShim] = run.out;
	}
	EXPECT_EQ(outputs[0], "datagrams 31 messages 30 bytes 3000\n") << "a datagram per message, and close_notify's";
	EXPECT_EQ(outputs[1], outputs[0]);
}

/*
 * A QUIC connection (OpenSSL 3.5) beside an idle TLS one: the QUIC calls leave the error
 * queue as OpenSSL does (a hunt: the shim's question after SSL_connect put "no stream" on
 * it, and the TLS connection's next SSL_get_error said SSL_ERROR_SSL for WANT_READ).
 */
TEST(RecordCases, AQuicConnectionLeavesTheErrorQueueAsOpenSslDoes)
{
	RecordProperty("fault", "OSSL_QUIC_client_method: SSL_connect, then SSL_read of another TLS connection");
	const std::string program = examplePath("quic_stream");
	if (access(program.c_str(), X_OK) != 0)
		GTEST_SKIP() << "QUIC's server side is OpenSSL 3.5's";
	const Certificate &identity = certificate();
	std::string outputs[2];
	for (bool withShim : { false, true }) {
		SCOPED_TRACE(withShim ? "with the shim" : "without the shim");
		const Captured run = runProgram({ program, "--cert", identity.cert, "--key", identity.key }, withShim, {},
						kTimeoutMs);
		EXPECT_EQ(run.status, 0) << run.err;
		outputs[withShim] = run.out;
	}
	EXPECT_NE(outputs[0].find("error queue after connect: empty\ntls read after quic: error 2\necho 30 bytes"),
		  std::string::npos)
		<< outputs[0];
	EXPECT_EQ(outputs[1], outputs[0]);
}
