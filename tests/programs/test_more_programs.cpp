/*
 * More of the programs a user puts tlstune in front of: openssl s_client and s_server,
 * nginx itself as the TLS server for downloads and for curl's uploads, and wget, which
 * is built on GnuTLS and must be left exactly as it is. Bytes are checked by sha256;
 * TLSTUNE_STATS shows whether the shim tuned the program.
 */

#include <gtest/gtest.h>

#include <algorithm>

#include <unistd.h>

#include "servers.h"
#include "tls_fixture.h"

using namespace testsupport;

namespace {

constexpr unsigned long long kBytes = 64ull << 20;
constexpr int kTimeoutMs = 120000;

class MorePrograms : public ::testing::Test {
protected:
	void SetUp() override
	{
		expected_ = writePattern(dir_.file("data"), kBytes, 17);
	}

	/* Runs argv with its stdout in `out` and its stderr returned. */
	int runTo(const std::vector<std::string> &argv, const std::vector<std::string> &env,
		  std::string *errors)
	{
		Command command;
		command.argv = argv;
		command.env = env;
		command.stdoutPath = dir_.file("out");
		command.stderrPath = dir_.file("err");
		int status = run(command, kTimeoutMs);
		*errors = readFile(command.stderrPath);
		return status;
	}

	/* curl trusting the test certificate, failing on an HTTP error; URLs to follow. */
	static std::vector<std::string> curl()
	{
		return { "curl", "--silent", "--show-error", "--fail", "--cacert", certificate().cert,
			 "--max-time", "120" };
	}

	TempDir dir_;
	std::string expected_;
};

} /* namespace */

TEST_F(MorePrograms, OpensslSClientReadsThroughTheShim)
{
	ExampleServer server({ "--send", std::to_string(kBytes), "--seed", "17" });
	std::string errors;
	ASSERT_EQ(runTo({ "openssl", "s_client", "-connect", "127.0.0.1:" + server.portText(), "-quiet",
			  "-ign_eof" },
			shimEnv({ "TLSTUNE_STATS=1" }), &errors),
		  0)
		<< errors;
	EXPECT_EQ(fileSha256(dir_.file("out")), expected_);
	EXPECT_NE(errors.find("tlstune: stats: contexts_tuned=1 connections=1"), std::string::npos) << errors;
}

TEST_F(MorePrograms, OpensslSServerServesThroughTheShim)
{
	const int port = freePort();
	Command command;
	command.argv = { "openssl", "s_server", "-accept", "127.0.0.1:" + std::to_string(port), "-cert",
			 certificate().cert, "-key", certificate().key, "-WWW", "-naccept", "1" };
	command.env = shimEnv({ "TLSTUNE_STATS=1" });
	command.cwd = dir_.path();
	Daemon server(command, "ACCEPT");

	std::vector<std::string> argv = curl();
	argv.push_back("https://127.0.0.1:" + std::to_string(port) + "/data");
	std::string errors;
	ASSERT_EQ(runTo(argv, {}, &errors), 0) << errors;
	EXPECT_EQ(fileSha256(dir_.file("out")), expected_);
	/* -naccept 1: it exits by itself, through exit(), where the stats line is printed. */
	const std::string log = server.process().readAll(kTimeoutMs);
	EXPECT_EQ(server.process().wait(kTimeoutMs), 0);
	EXPECT_NE(log.find("tlstune: stats: contexts_tuned=1 connections=1"), std::string::npos) << log;
}

TEST_F(MorePrograms, NginxServesThroughTheShim)
{
	for (const char *tls : { "1.2", "1.3" }) {
		Nginx nginx(dir_.path(), tls, shimEnv({ "TLSTUNE_STATS=1" }));
		std::vector<std::string> argv = curl();
		for (int i = 0; i < 4; i++)
			argv.insert(argv.end(), { "--output", dir_.file("out" + std::to_string(i)),
						  nginx.url("/data") });
		std::string errors;
		ASSERT_EQ(runTo(argv, {}, &errors), 0) << tls << ": " << errors;
		for (int i = 0; i < 4; i++)
			EXPECT_EQ(fileSha256(dir_.file("out" + std::to_string(i))), expected_) << tls;

		const std::string log = nginx.stop();
		/* The worker served the connection; the master made the context. */
		EXPECT_NE(log.find("tlstune: stats: contexts_tuned="), std::string::npos) << log;
		EXPECT_NE(log.find("connections=1 "), std::string::npos) << log;
	}
}

/*
 * lighttpd corks each response, writes its header alone and then the file in records of
 * 16 KiB, and uncorks (issue 22 names it): a large file and a page of 20,000 bytes, then
 * 50 pages more on the same keep-alive connection, the same bytes both ways. Then five
 * connections of one page each, where nothing is held: lighttpd's handshake ends in the
 * SSL_read that reads the request (a TLS 1.3 server writes its session tickets there),
 * and its response was held until its next epoll_wait, for nothing (5 of 5, each waking
 * the shim's thread).
 */
TEST_F(MorePrograms, LighttpdServesTheSameBytesThroughTheShim)
{
	const std::string page = writePattern(dir_.file("page"), 20000, 5);
	for (bool withShim : { false, true }) {
		SCOPED_TRACE(withShim ? "with the shim" : "without the shim");
		Lighttpd lighttpd(dir_.path(), withShim ? shimEnv({ "TLSTUNE_STATS=1" }) : std::vector<std::string>{});
		std::vector<std::string> argv = curl();
		argv.insert(argv.end(), { "--output", dir_.file("large"), lighttpd.url("/data") });
		for (int i = 0; i < 51; i++)
			argv.insert(argv.end(), { "--output", dir_.file("page" + std::to_string(i)), lighttpd.url("/page") });
		std::string errors;
		ASSERT_EQ(runTo(argv, {}, &errors), 0) << errors;
		EXPECT_EQ(fileSha256(dir_.file("large")), expected_);
		for (int i = 0; i < 51; i++)
			EXPECT_EQ(fileSha256(dir_.file("page" + std::to_string(i))), page) << "page " << i;
		const std::string log = lighttpd.stop();
		if (withShim) {
			EXPECT_NE(log.find("tlstune: stats: contexts_tuned=1 connections=1 "), std::string::npos)
				<< log;
		}

		Lighttpd another(dir_.path(), withShim ? shimEnv({ "TLSTUNE_STATS=1" }) : std::vector<std::string>{});
		for (int i = 0; i < 5; i++) {
			std::vector<std::string> one = curl();
			one.insert(one.end(), { "--output", dir_.file("alone"), another.url("/page") });
			ASSERT_EQ(runTo(one, {}, &errors), 0) << errors;
			EXPECT_EQ(fileSha256(dir_.file("alone")), page) << "connection " << i;
		}
		const std::string anotherLog = another.stop();
		if (withShim) {
			EXPECT_NE(anotherLog.find(" connections=5 "), std::string::npos) << anotherLog;
			EXPECT_NE(anotherLog.find(" records_held=0 held_sends=0 "), std::string::npos) << anotherLog;
		}
	}
}

TEST_F(MorePrograms, CurlUploadsToNginxBothThroughTheShim)
{
	for (const char *tls : { "1.2", "1.3" }) {
		Nginx nginx(dir_.path(), tls, shimEnv({ "TLSTUNE_STATS=1" }));
		/* Four PUTs in one curl, on one keep-alive connection. */
		std::vector<std::string> argv = curl();
		for (int i = 0; i < 4; i++)
			argv.insert(argv.end(), { "--upload-file", dir_.file("data"),
						  nginx.url("/uploads/" + std::string(tls) + "-" + std::to_string(i)) });
		std::string errors;
		ASSERT_EQ(runTo(argv, shimEnv({ "TLSTUNE_STATS=1" }), &errors), 0) << tls << ": " << errors;
		EXPECT_NE(errors.find("tlstune: stats: contexts_tuned=1 connections=1 "), std::string::npos)
			<< errors;
		for (int i = 0; i < 4; i++)
			EXPECT_EQ(fileSha256(dir_.file("uploads/" + std::string(tls) + "-" + std::to_string(i))),
				  expected_)
				<< tls;
		const std::string log = nginx.stop();
		EXPECT_NE(log.find("connections=1 "), std::string::npos) << log;
	}
}

TEST_F(MorePrograms, WgetOnGnuTlsIsUntouched)
{
	Nginx nginx(dir_.path(), "1.3");
	std::string errors;
	ASSERT_EQ(runTo({ "wget", "-q", "-O", "-", "--ca-certificate=" + certificate().cert,
			  nginx.url("/data") },
			shimEnv({ "TLSTUNE_STATS=1", "TLSTUNE_VERBOSE=1", "TLSTUNE_LOG=debug" }), &errors),
		  0)
		<< errors;
	EXPECT_EQ(fileSha256(dir_.file("out")), expected_);
	/*
	 * No OpenSSL to tune and no call with work: nothing set up (issue 24), so not even the
	 * debug line, no settings line, no stats line.
	 */
	EXPECT_EQ(errors.find("tlstune:"), std::string::npos) << errors;
}

/*
 * curl's IMAPS client, the seed's stall: it polls before reading the tagged OK that
 * read-ahead already moved into OpenSSL. With the shim it finishes; with read-ahead and
 * no readiness layer it waits until its --max-time.
 */
class CurlImaps : public ::testing::Test {
protected:
	int fetch(const std::vector<std::string> &env, int maxTime, std::string *out)
	{
		Command command;
		command.argv = { "/usr/bin/python3", std::string(TLSTUNE_SOURCE_ROOT) + "/tests/programs/imap_server.py",
				 certificate().cert, certificate().key, "300" };
		Process server(command);
		const std::string line = server.readLine(30000);
		EXPECT_EQ(line.rfind("port ", 0), 0u) << line;
		Command curl;
		curl.argv = { "curl", "--silent", "--cacert", certificate().cert, "--max-time",
			      std::to_string(maxTime), "-u", "user:pass",
			      "imaps://127.0.0.1:" + line.substr(5) + "/INBOX;MAILINDEX=1" };
		curl.env = env;
		return run(curl, 120000, out);
	}
};

TEST_F(CurlImaps, FinishesWithoutTheShim)
{
	std::string out;
	EXPECT_EQ(fetch({}, 60, &out), 0);
	EXPECT_EQ(std::count(out.begin(), out.end(), '\n'), 300);
}

TEST_F(CurlImaps, FinishesThroughTheShim)
{
	std::string out;
	EXPECT_EQ(fetch(shimEnv(), 60, &out), 0);
	EXPECT_EQ(std::count(out.begin(), out.end(), '\n'), 300) << out.substr(0, 200);
	EXPECT_NE(out.find("line 000299 of the message"), std::string::npos);
}

TEST_F(CurlImaps, StallsWithReadAheadAndNoReadinessLayer)
{
	std::string out;
	EXPECT_EQ(fetch(shimEnv({ "TLSTUNE_READINESS=off" }), 5, &out), 28) << "curl's timeout";
}

/*
 * PHP loads its extensions with RTLD_DEEPBIND, so libcurl's SSL_new, SSL_read, poll and
 * recv bind straight to libssl and libc, past the shim, while libssl's own SSL_CTX_new
 * calls SSL_CTX_new_ex through its PLT. With read-ahead on the context, nothing reported
 * the records OpenSSL held and the GET hung (3 of 3). Issue 23: such connections are not
 * tuned, and the GET ends as without the shim, with the same bytes.
 */
TEST_F(MorePrograms, PhpCurlGetsThroughAPreloadItBindsPast)
{
	if (access("/usr/bin/php", X_OK) != 0)
		GTEST_SKIP() << "php-cli is not installed";
	const std::string script =
		"$c = curl_init($argv[1]); curl_setopt($c, CURLOPT_CAINFO, $argv[2]);"
		"curl_setopt($c, CURLOPT_RETURNTRANSFER, true); curl_setopt($c, CURLOPT_TIMEOUT, 60);"
		"$body = curl_exec($c); if ($body === false) { fwrite(STDERR, curl_error($c)); exit(1); }"
		"echo hash('sha256', $body), \"\\n\";";
	for (const char *tls : { "1.2", "1.3" }) {
		Nginx nginx(dir_.path(), tls);
		std::string outputs[2];
		for (bool withShim : { false, true }) {
			std::string errors;
			const int status = runTo({ "/usr/bin/php", "-r", script, nginx.url("/data"), certificate().cert },
						 withShim ? shimEnv({ "TLSTUNE_STATS=1" }) : std::vector<std::string>{},
						 &errors);
			EXPECT_EQ(status, 0) << tls << (withShim ? " with" : " without") << " the shim: " << errors;
			outputs[withShim] = readFile(dir_.file("out"));
		}
		EXPECT_EQ(outputs[0], expected_ + "\n") << tls;
		EXPECT_EQ(outputs[1], outputs[0]) << tls;
		nginx.stop();
	}
}
