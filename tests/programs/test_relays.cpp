/*
 * socat and stunnel4 as TLS relays through the shim, in client mode (plain -> TLS) and
 * server mode (TLS -> plain), each direction: the bytes arrive unchanged.
 * The endpoints around the relay run without the shim.
 */

#include <gtest/gtest.h>

#include "process.h"
#include "servers.h"
#include "tls_fixture.h"

using namespace testsupport;

namespace {

constexpr unsigned long long kBytes = 16ull << 20;
constexpr unsigned long long kSeed = 21;
constexpr int kTimeoutMs = 120000;

enum class Program { Socat, Stunnel };
enum class Mode { Client, Server };   /* the relay's TLS role */
enum class Direction { Upload, Download };

struct Case {
	Program program;
	Mode mode;
	Direction direction;
};

std::string name(const ::testing::TestParamInfo<Case> &info)
{
	return std::string(info.param.program == Program::Socat ? "Socat" : "Stunnel") +
	       (info.param.mode == Mode::Client ? "Client" : "Server") +
	       (info.param.direction == Direction::Upload ? "Upload" : "Download");
}

std::string loopback(int port)
{
	return "127.0.0.1:" + std::to_string(port);
}

Command plain(const std::vector<std::string> &argv)
{
	Command command;
	command.argv = argv;
	return command;
}

/* The relay's own summary line: the shim was there and tuned its reads. */
void expectTuned(const std::string &log)
{
	EXPECT_NE(log.find("tlstune: stats: contexts_tuned=1 "), std::string::npos) << log;
	EXPECT_EQ(log.find("socket_reads=0 "), std::string::npos) << log;
}

class Relays : public ::testing::TestWithParam<Case> {
protected:
	void SetUp() override
	{
		expected_ = writePattern(dir_.file("data"), kBytes, kSeed);
	}

	/* The relay under the shim: listens on listenPort, forwards to targetPort. */
	std::unique_ptr<Daemon> relay(int listenPort, int targetPort)
	{
		Command command;
		command.env = shimEnv({ "TLSTUNE_STATS=1" });
		const Case c = GetParam();
		if (c.program == Program::Socat) {
			const std::string listen = c.mode == Mode::Client
				? "TCP-LISTEN:" + std::to_string(listenPort) + ",bind=127.0.0.1,reuseaddr"
				: "OPENSSL-LISTEN:" + std::to_string(listenPort) +
					  ",bind=127.0.0.1,reuseaddr,verify=0,cert=" + certificate().cert +
					  ",key=" + certificate().key;
			const std::string target = c.mode == Mode::Client
				? "OPENSSL:" + loopback(targetPort) + ",verify=0"
				: "TCP:" + loopback(targetPort);
			command.argv = { "socat", "-d", "-d", listen, target };
			return std::unique_ptr<Daemon>(new Daemon(command, "listening on"));
		}
		std::string config = "foreground = yes\npid =\ndebug = notice\n[relay]\n"
				     "accept = " + loopback(listenPort) + "\nconnect = " + loopback(targetPort) + "\n";
		config += c.mode == Mode::Client ? "client = yes\n"
						 : "cert = " + certificate().cert + "\nkey = " + certificate().key + "\n";
		writeFile(dir_.file("stunnel.conf"), config);
		command.argv = { "stunnel4", dir_.file("stunnel.conf") };
		return std::unique_ptr<Daemon>(new Daemon(command, "Configuration successful"));
	}

	TempDir dir_;
	std::string expected_;
};

} /* namespace */

TEST_P(Relays, PassTheBytesUnchanged)
{
	const Case c = GetParam();
	const int relayPort = freePort();
	const std::string out = dir_.file("out");
	const std::string data = "OPEN:" + dir_.file("data");
	const std::string create = "CREATE:" + out;
	std::string received;

	if (c.mode == Mode::Client) {
		/* plain socat -> relay -> examples/tls_server */
		ExampleServer server(c.direction == Direction::Upload
			? std::vector<std::string>{ "--sink" }
			: std::vector<std::string>{ "--send", std::to_string(kBytes), "--seed", std::to_string(kSeed) });
		auto relayed = relay(relayPort, server.port());
		const std::string relayAddress = "TCP:" + loopback(relayPort);
		if (c.direction == Direction::Upload) {
			ASSERT_EQ(run(plain({ "socat", "-u", data, relayAddress }), kTimeoutMs), 0);
			received = server.process().readLine(kTimeoutMs);
			EXPECT_EQ(received, "received " + std::to_string(kBytes) + " sha256 " + expected_);
			countCheckedBytes(kBytes);
		} else {
			ASSERT_EQ(run(plain({ "socat", "-u", relayAddress, create }), kTimeoutMs), 0);
			EXPECT_EQ(fileSha256(out), expected_);
		}
		EXPECT_EQ(server.process().wait(kTimeoutMs), 0);
		expectTuned(relayed->stop());
	} else {
		/* plain socat TLS client -> relay -> plain socat listener */
		const int plainPort = freePort();
		const std::string listen = "TCP-LISTEN:" + std::to_string(plainPort) + ",bind=127.0.0.1,reuseaddr";
		Daemon endpoint(plain({ "socat", "-d", "-d", "-u",
					c.direction == Direction::Upload ? listen : data,
					c.direction == Direction::Upload ? create : listen }),
				"listening on");
		auto relayed = relay(relayPort, plainPort);
		const std::string tls = "OPENSSL:" + loopback(relayPort) + ",verify=0";
		if (c.direction == Direction::Upload)
			ASSERT_EQ(run(plain({ "socat", "-u", data, tls }), kTimeoutMs), 0);
		else
			ASSERT_EQ(run(plain({ "socat", "-u", tls, create }), kTimeoutMs), 0);
		EXPECT_EQ(endpoint.process().wait(kTimeoutMs), 0);
		EXPECT_EQ(fileSha256(out), expected_);
		expectTuned(relayed->stop());
	}
}

INSTANTIATE_TEST_SUITE_P(
	Programs, Relays,
	::testing::Values(Case{ Program::Socat, Mode::Client, Direction::Upload },
			  Case{ Program::Socat, Mode::Client, Direction::Download },
			  Case{ Program::Socat, Mode::Server, Direction::Upload },
			  Case{ Program::Socat, Mode::Server, Direction::Download },
			  Case{ Program::Stunnel, Mode::Client, Direction::Upload },
			  Case{ Program::Stunnel, Mode::Client, Direction::Download },
			  Case{ Program::Stunnel, Mode::Server, Direction::Upload },
			  Case{ Program::Stunnel, Mode::Server, Direction::Download }),
	name);

/*
 * Interactive line traffic through socat at both ends, both under the shim: a client that
 * relays its stdin (a FIFO the test types into) to an OPENSSL connection, and an
 * OPENSSL-LISTEN server that runs cat. Each line comes back before the next is typed, so
 * nothing waits in either socat's buffers for more input.
 */
TEST(SocatInteractive, EachLineComesBackBeforeTheNextIsTyped)
{
	TempDir dir;
	const int port = freePort();
	Command server;
	server.argv = { "socat", "-d", "-d",
			"OPENSSL-LISTEN:" + std::to_string(port) + ",bind=127.0.0.1,reuseaddr,verify=0,cert=" +
				certificate().cert + ",key=" + certificate().key,
			"EXEC:cat" };
	server.env = shimEnv({ "TLSTUNE_STATS=1" });
	Daemon echo(server, "listening on");

	Fifo typed(dir.file("stdin"));
	Command client;
	client.argv = { "socat", "STDIO", "OPENSSL:" + loopback(port) + ",verify=0" };
	client.env = shimEnv({ "TLSTUNE_STATS=1" });
	client.stdinPath = typed.path();
	client.stderrPath = dir.file("client.log");
	Process relay(client);
	for (int i = 0; i < 20; i++) {
		const std::string line = "command " + std::to_string(i) + " " + std::string(i * 7, 'x');
		typed.write(line + "\n");
		ASSERT_EQ(relay.readLine(kTimeoutMs), line);
	}
	typed.closeWriter();
	EXPECT_EQ(relay.wait(kTimeoutMs), 0);
	expectTuned(readFile(dir.file("client.log")));
	EXPECT_NE(echo.stop().find("tlstune: stats: contexts_tuned=1 "), std::string::npos);
}
