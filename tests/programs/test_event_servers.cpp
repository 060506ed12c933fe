/*
 * Event-driven servers, with and without the shim: an edge-triggered server that leaves
 * data unread on purpose under backpressure, the handshake that takes the first record
 * with it, and nginx proxying to an upstream that stalls. Same bytes both ways, and no
 * core spinning while the program waits.
 *
 * The CPU bounds separate a process that sleeps (a few ms) from one that spins through
 * the whole observation window (all of it): they are not timing thresholds.
 */

#include <gtest/gtest.h>

#include <fcntl.h>
#include <memory>
#include <poll.h>
#include <sys/stat.h>
#include <unistd.h>

#include "servers.h"
#include "tls_fixture.h"

using namespace testsupport;

namespace {

constexpr int kTimeoutMs = 120000;
/* How long a stalled program is watched, and the CPU it may use meanwhile (a spin uses all). */
constexpr int kWindowMs = 1500;
constexpr long kIdleCpuMs = 300;

/* The CPU time (user + system) the process has used, in ms. */
long cpuMs(pid_t pid)
{
	const std::string stat = readFile("/proc/" + std::to_string(pid) + "/stat");
	const size_t end = stat.rfind(')');
	if (end == std::string::npos)
		return -1;
	/* Fields after the command name: state is field 3; utime and stime are 14 and 15. */
	unsigned long utime = 0, stime = 0;
	if (std::sscanf(stat.c_str() + end + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %lu %lu",
			&utime, &stime) != 2)
		return -1;
	return static_cast<long>((utime + stime) * 1000 / static_cast<unsigned long>(sysconf(_SC_CLK_TCK)));
}

/* The CPU pid uses while the test looks on for kWindowMs (an observation, not a wait for it). */
long cpuOverWindow(pid_t pid)
{
	const long before = cpuMs(pid);
	poll(nullptr, 0, kWindowMs);
	return cpuMs(pid) - before;
}

struct StallRun {
	std::string sent;     /* the client's "sent N sha256 H" */
	std::string received; /* the server's "received N sha256 H ..." */
	std::string drained;  /* sha256 of what the consumer took */
	long stalledCpuMs = -1;
};

/* et_server between write_burst and this test as its consumer, which stalls, then drains. */
StallRun stallEtServer(bool withShim)
{
	TempDir dir;
	const std::string sinkPath = dir.file("sink");
	EXPECT_EQ(mkfifo(sinkPath.c_str(), 0600), 0);
	/* Open first: the server opens its end non-blocking, which needs a reader. */
	const int sink = open(sinkPath.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
	EXPECT_GE(sink, 0);

	Command server;
	server.argv = { examplePath("et_server"), "--cert", certificate().cert, "--key", certificate().key,
			"--sink", sinkPath };
	if (withShim)
		server.env = shimEnv();
	Process serverProcess(server);
	const std::string port = serverProcess.readLine(kTimeoutMs).substr(5);

	Command client;
	client.argv = { examplePath("write_burst"), port, "--writes", "1024", "--size", "16384",
			"--seed", "3" };
	if (withShim)
		client.env = shimEnv();
	Process clientProcess(client);

	StallRun run;
	EXPECT_EQ(serverProcess.readLine(kTimeoutMs), "stalled");
	run.stalledCpuMs = cpuOverWindow(serverProcess.pid());

	/* The consumer drains: everything the client sent must come through. */
	std::string drained;
	char buffer[65536];
	for (;;) {
		struct pollfd pfd = { sink, POLLIN, 0 };
		if (poll(&pfd, 1, kTimeoutMs) != 1)
			break;
		ssize_t n = read(sink, buffer, sizeof(buffer));
		if (n <= 0)
			break;
		drained.append(buffer, static_cast<size_t>(n));
	}
	close(sink);
	run.sent = clientProcess.readAll(kTimeoutMs);
	EXPECT_EQ(clientProcess.wait(kTimeoutMs), 0);
	run.received = serverProcess.readLine(kTimeoutMs);
	EXPECT_EQ(serverProcess.wait(kTimeoutMs), 0);
	writeFile(dir.file("drained"), drained);
	run.drained = fileSha256(dir.file("drained"));
	return run;
}

} /* namespace */

TEST(EdgeTriggered, AServerUnderBackpressureSleepsAndGetsEveryByte)
{
	const std::string expected = patternSha256(1024ull * 16384, 3);
	for (bool withShim : { false, true }) {
		SCOPED_TRACE(withShim ? "with the shim" : "without the shim");
		const StallRun run = stallEtServer(withShim);
		EXPECT_EQ(run.sent, "sent 16777216 sha256 " + expected + "\n");
		EXPECT_EQ(run.received.rfind("received 16777216 sha256 " + expected, 0), 0u) << run.received;
		EXPECT_EQ(run.drained, expected);
		EXPECT_LT(run.stalledCpuMs, kIdleCpuMs) << "the server spun while it left data unread";
		countCheckedBytes(16777216ull);
	}
}

TEST(EdgeTriggered, TheHandshakeThatTookTheFirstRecordStillGetsItsEvent)
{
	const std::vector<std::string> argv = { examplePath("et_handshake"), "--cert", certificate().cert,
						"--key", certificate().key };
	const Captured without = runProgram(argv, false, {}, kTimeoutMs);
	EXPECT_EQ(without.status, 0) << without.err;
	EXPECT_EQ(without.out, "greeting * OK ready\r\n");

	const Captured with = runProgram(argv, true, {}, kTimeoutMs);
	EXPECT_EQ(with.status, 0) << with.err;
	EXPECT_EQ(with.out, without.out);

	/* Read-ahead without the readiness layer: the kernel dropped the edge, and it stalls. */
	const Captured bare = runProgram(argv, true, { "TLSTUNE_READINESS=off" }, kTimeoutMs);
	EXPECT_EQ(bare.status, 3) << bare.err;
	EXPECT_EQ(bare.out, "no event for the greeting\n");
}

class NginxProxy : public ::testing::TestWithParam<const char *> {
protected:
	void SetUp() override { SKIP_IN_SANITIZER_BUILD(); }
};

TEST_P(NginxProxy, AStalledUpstreamLeavesTheWorkerIdleAndLosesNothing)
{
	TempDir dir;
	constexpr unsigned long long kBytes = 16ull << 20;
	const std::string expected = writePattern(dir.file("body"), kBytes, 5);
	for (bool withShim : { false, true }) {
		SCOPED_TRACE(withShim ? "with the shim" : "without the shim");
		Fifo release(dir.file(withShim ? "release-shim" : "release"));
		Command upstreamCommand;
		upstreamCommand.argv = { "/usr/bin/python3",
					 std::string(TLSTUNE_SOURCE_ROOT) + "/tests/programs/stalled_upstream.py" };
		upstreamCommand.stdinPath = release.path();
		Process upstream(upstreamCommand);
		const std::string upstreamPort = upstream.readLine(kTimeoutMs).substr(5);

		Nginx nginx(dir.path(), GetParam(), withShim ? shimEnv() : std::vector<std::string>{},
			    "location /proxy/ { proxy_pass http://127.0.0.1:" + upstreamPort +
				    "; proxy_request_buffering off; client_max_body_size 0; }");
		Command curl;
		curl.argv = { "curl", "--silent", "--show-error", "--fail", "--cacert", certificate().cert,
			      "--max-time", "120", "-T", dir.file("body"), nginx.url("/proxy/body") };
		Process upload(curl);
		ASSERT_EQ(upstream.readLine(kTimeoutMs), "accepted");
		const long stalledCpu = cpuOverWindow(nginx.worker());

		release.write("go\n");
		EXPECT_EQ(upload.readAll(kTimeoutMs), expected);
		EXPECT_EQ(upload.wait(kTimeoutMs), 0);
		EXPECT_EQ(upstream.readLine(kTimeoutMs), "body " + std::to_string(kBytes) + " sha256 " + expected);
		EXPECT_EQ(upstream.wait(kTimeoutMs), 0);
		EXPECT_LT(stalledCpu, kIdleCpuMs) << "the nginx worker spun while its upstream stalled";
		countCheckedBytes(2 * kBytes);
	}
}

INSTANTIATE_TEST_SUITE_P(Tls, NginxProxy, ::testing::Values("1.2", "1.3"));

TEST_P(NginxProxy, ManyIdleConnectionsWhileOthersUploadLoseNothing)
{
	TempDir dir;
	constexpr unsigned long long kBytes = 16ull << 20;
	constexpr int kIdle = 1000;
	const std::string expected = writePattern(dir.file("body"), kBytes, 9);
	for (bool withShim : { false, true }) {
		SCOPED_TRACE(withShim ? "with the shim" : "without the shim");
		Nginx nginx(dir.path(), GetParam(), withShim ? shimEnv() : std::vector<std::string>{}, "",
			    kIdle + 256);
		Fifo release(dir.file(withShim ? "idle-shim" : "idle"));
		Command idleCommand;
		idleCommand.argv = { "/usr/bin/python3", std::string(TLSTUNE_SOURCE_ROOT) + "/tools/lib/idle_clients.py",
				     std::to_string(kIdle), std::to_string(nginx.port()) };
		idleCommand.stdinPath = release.path();
		Process idle(idleCommand);
		ASSERT_EQ(idle.readLine(kTimeoutMs), "idle " + std::to_string(kIdle));

		std::vector<std::unique_ptr<Process>> uploads;
		for (int i = 0; i < 4; i++) {
			Command curl;
			curl.argv = { "curl", "--silent", "--show-error", "--fail", "--cacert", certificate().cert,
				      "--max-time", "120", "-T", dir.file("body"),
				      nginx.url("/uploads/" + std::string(withShim ? "with-" : "without-") +
						std::to_string(i)) };
			uploads.emplace_back(new Process(curl));
		}
		for (int i = 0; i < 4; i++) {
			EXPECT_EQ(uploads[i]->wait(kTimeoutMs), 0);
			EXPECT_EQ(fileSha256(dir.file("uploads/" + std::string(withShim ? "with-" : "without-") +
						      std::to_string(i))),
				  expected);
		}
		release.closeWriter();
		EXPECT_EQ(idle.wait(kTimeoutMs), 0);
	}
}
