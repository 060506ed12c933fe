/*
 * Python's own TLS clients through the shim, against small local servers the test starts:
 * line protocols answering each command (IMAP, SMTP, FTP with TLS data connections) and
 * asyncio's streams (memory BIOs).
 * Each runs without and with the shim and must print the same thing.
 */

#include <gtest/gtest.h>

#include "process.h"
#include "tls_fixture.h"

using namespace testsupport;

namespace {

const std::string kPrograms = std::string(TLSTUNE_SOURCE_ROOT) + "/tests/programs/";

/* A python server from this directory; its first line says "port N". */
struct PythonServer {
	explicit PythonServer(const std::vector<std::string> &arguments)
		: process(command(arguments)), port(process.readLine(30000).substr(5)) {}

	static Command command(const std::vector<std::string> &arguments)
	{
		Command c;
		c.argv = { "/usr/bin/python3" };
		c.argv.insert(c.argv.end(), arguments.begin(), arguments.end());
		return c;
	}

	Process process;
	std::string port;
};

std::string client(std::vector<std::string> arguments, bool withShim)
{
	arguments.insert(arguments.begin(), { "/usr/bin/python3", kPrograms + "python_clients.py" });
	const Captured run = runProgram(arguments, withShim);
	EXPECT_EQ(run.status, 0) << run.err;
	return run.out;
}

class PythonProtocols : public ::testing::Test {};

} /* namespace */

TEST_F(PythonProtocols, ImaplibFetchesTheWholeMessage)
{
	std::string outputs[2];
	for (bool withShim : { false, true }) {
		PythonServer server({ kPrograms + "imap_server.py", certificate().cert, certificate().key, "2000" });
		outputs[withShim] = client({ "imap", certificate().cert, server.port }, withShim);
		EXPECT_EQ(server.process.wait(60000), 0);
	}
	EXPECT_EQ(outputs[1], outputs[0]);
	EXPECT_EQ(outputs[0].rfind("lines 2000 sha256 ", 0), 0u) << outputs[0];
}

TEST_F(PythonProtocols, SmtplibDeliversTheMessageIntact)
{
	for (bool withShim : { false, true }) {
		PythonServer server({ kPrograms + "smtp_server.py", certificate().cert, certificate().key });
		const std::string sent = client({ "smtp", certificate().cert, server.port, "5000" }, withShim);
		EXPECT_EQ(server.process.readLine(60000) + "\n", sent) << withShim;
		EXPECT_EQ(server.process.wait(60000), 0);
	}
}

TEST_F(PythonProtocols, FtplibStoresAndFetchesTheFileIntact)
{
	TempDir dir;
	const std::string expected = writePattern(dir.file("data"), 4u << 20, 23);
	for (bool withShim : { false, true }) {
		TempDir served;
		PythonServer server({ kPrograms + "ftp_server.py", certificate().cert, certificate().key,
				      served.path() });
		EXPECT_EQ(client({ "ftp", certificate().cert, server.port, dir.file("data") }, withShim),
			  "stored " + expected + " fetched " + expected + "\n") << withShim;
		EXPECT_EQ(server.process.readLine(60000), "received 4194304 sha256 " + expected);
		countCheckedBytes(2 * 4194304); /* stored, then fetched back */
		EXPECT_EQ(server.process.wait(60000), 0);
	}
}

TEST_F(PythonProtocols, AsyncioStreamsEchoEveryLine)
{
	for (bool withShim : { false, true }) {
		ExampleServer server({ "--echo" });
		EXPECT_EQ(client({ "asyncio", certificate().cert, server.portText(), "10000" }, withShim),
			  "lines 10000 same\n") << withShim;
	}
}
