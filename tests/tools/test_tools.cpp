/* The user's tools: the tlstune wrapper, tlstune-check, the bench and tools/evidence. */

#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>
#include <unistd.h>

#include "core/config.h"
#include "core/log.h"
#include "tls_fixture.h"

using namespace testsupport;

namespace {

const std::string kWrapper = std::string(TLSTUNE_TOOLS_DIR) + "/tlstune";
const std::string kCheck = std::string(TLSTUNE_TOOLS_DIR) + "/tlstune-check";

Captured wrapper(const std::vector<std::string> &args, const std::vector<std::string> &env = {})
{
	Command command;
	command.argv = { kWrapper };
	command.argv.insert(command.argv.end(), args.begin(), args.end());
	command.env = env;
	return runCaptured(command, 60000);
}

Captured check(const std::vector<std::string> &args)
{
	Command command;
	command.argv = { kCheck };
	command.argv.insert(command.argv.end(), args.begin(), args.end());
	return runCaptured(command, 60000);
}

/* A python that makes one TLS context: a process that uses OpenSSL. */
const std::vector<std::string> kOpenSslUser = { "python3", "-c", "import ssl; ssl.create_default_context()" };

bool contains(const std::string &text, const std::string &part)
{
	return text.find(part) != std::string::npos;
}

/* The lines of text that contain part. */
size_t linesWith(const std::string &text, const std::string &part)
{
	std::istringstream lines(text);
	size_t count = 0;
	for (std::string line; std::getline(lines, line);)
		count += contains(line, part);
	return count;
}

} /* namespace */

TEST(Wrapper, HelpAndVersion)
{
	Captured version = wrapper({ "--version" });
	EXPECT_EQ(version.status, 0);
	EXPECT_EQ(version.out, "tlstune " TLSTUNE_VERSION "\nlibrary: " + shimPath() + "\n");
	Captured elsewhere = wrapper({ "--version" }, { "TLSTUNE_LIBRARY=/nonexistent/libtlstune.so" });
	EXPECT_EQ(elsewhere.status, 0);
	EXPECT_EQ(elsewhere.out, "tlstune " TLSTUNE_VERSION "\nlibrary: /nonexistent/libtlstune.so, "
				 "from TLSTUNE_LIBRARY; not found\n");
	Captured help = wrapper({ "--help" });
	EXPECT_EQ(help.status, 0);
	EXPECT_NE(help.out.find("Usage: tlstune [OPTION]... [--] COMMAND [ARG]..."), std::string::npos);
	EXPECT_NE(help.out.find("\n  or:  tlstune --stats PID\n"), std::string::npos) << help.out;
}

TEST(Wrapper, ItsOwnErrorsAre125AndTheCommandsAre126And127)
{
	Captured none = wrapper({});
	EXPECT_EQ(none.status, 125);
	EXPECT_NE(none.err.find("tlstune: no command given"), std::string::npos) << none.err;

	Captured unknown = wrapper({ "--frobnicate", "true" });
	EXPECT_EQ(unknown.status, 125);
	EXPECT_NE(unknown.err.find("unknown option '--frobnicate'"), std::string::npos) << unknown.err;

	Captured missing = wrapper({ "tlstune-no-such-command" });
	EXPECT_EQ(missing.status, 127);
	EXPECT_EQ(missing.err, "tlstune: tlstune-no-such-command: command not found\n");

	Captured notExecutable = wrapper({ TLSTUNE_SHIM_MAP });
	EXPECT_EQ(notExecutable.status, 126);
	EXPECT_NE(notExecutable.err.find("not an executable file"), std::string::npos);
}

TEST(Wrapper, OptionsBecomeVariablesAndTheStatusPassesThrough)
{
	SKIP_IN_SANITIZER_BUILD();
	Captured r = wrapper({ "--read-buffer=32K", "--no-read-ahead", "--no-ca-cache", "--no-coalesce",
			     "--stats", "--log=debug", "--", "sh", "-c",
			     "env | grep ^TLSTUNE_ | sort; exit 3" });
	EXPECT_EQ(r.status, 3);
	EXPECT_EQ(r.out, "TLSTUNE_CA_CACHE=off\nTLSTUNE_COALESCE=off\nTLSTUNE_LOG=debug\n"
			 "TLSTUNE_READ_AHEAD=off\nTLSTUNE_READ_BUFFER=32K\nTLSTUNE_STATS=1\n");

	std::vector<std::string> args = { "--verbose", "sh", "-c", "\"$@\"; true", "sh" };
	args.insert(args.end(), kOpenSslUser.begin(), kOpenSslUser.end());
	Captured verbose = wrapper(args);
	EXPECT_EQ(verbose.status, 0);
	/* Once, from python: sh loads the library too but makes no OpenSSL call. */
	EXPECT_EQ(verbose.err.rfind("tlstune: version " TLSTUNE_VERSION ", python3 pid ", 0), 0u)
		<< "the library is really loaded: " << verbose.err;
	EXPECT_EQ(linesWith(verbose.err, "tlstune: version"), 1u) << verbose.err;
	EXPECT_EQ(wrapper({ "--verbose", "true" }).err, "") << "no OpenSSL, no settings line";
}

TEST(Wrapper, ValuesFollowAsTheNextWordOrAfterAnEqualsSign)
{
	SKIP_IN_SANITIZER_BUILD();
	const std::vector<std::string> print = { "sh", "-c", "echo $TLSTUNE_READ_BUFFER $TLSTUNE_LOG" };
	for (const std::vector<std::string> &options :
	     { std::vector<std::string>{ "--read-buffer", "32826", "--log", "debug" },
	       std::vector<std::string>{ "--read-buffer=32826", "--log=debug" } }) {
		std::vector<std::string> args = options;
		args.insert(args.end(), print.begin(), print.end());
		Captured r = wrapper(args);
		EXPECT_EQ(r.status, 0) << r.err;
		EXPECT_EQ(r.out, "32826 debug\n") << options[0];
	}
}

TEST(Wrapper, BadValuesAreRejectedNamingTheOptionBeforeTheCommandRuns)
{
	struct Case {
		std::vector<std::string> args;
		const char *message;
	};
	const Case cases[] = {
		{ { "--read-buffer=abc" }, "tlstune: --read-buffer: 'abc' is not a size from 16K to 1M" },
		{ { "--read-buffer", "8K" }, "tlstune: --read-buffer: '8K' is not a size from 16K to 1M" },
		{ { "--read-buffer=2M" }, "tlstune: --read-buffer: '2M' is not a size from 16K to 1M" },
		{ { "--log=loud" }, "tlstune: --log: 'loud' is not one of off, error, warn, info, debug" },
		{ { "--log", "" }, "tlstune: --log: '' is not one of" },
	};
	for (const Case &c : cases) {
		std::vector<std::string> args = c.args;
		args.insert(args.end(), { "sh", "-c", "echo ran" });
		Captured r = wrapper(args);
		EXPECT_EQ(r.status, 125) << c.args[0];
		EXPECT_EQ(r.out, "") << "the command did not run";
		EXPECT_EQ(r.err.rfind(c.message, 0), 0u) << r.err;
		EXPECT_TRUE(contains(r.err, "Try 'tlstune --help'.")) << r.err;
	}
	for (const char *option : { "--read-buffer", "--log" }) {
		Captured r = wrapper({ option });
		EXPECT_EQ(r.status, 125);
		EXPECT_EQ(r.err.rfind(std::string("tlstune: ") + option + " needs a value\n", 0), 0u) << r.err;
	}
}

TEST(Wrapper, AShellBuiltinIsNotFoundAsEnvSays)
{
	Captured r = wrapper({ "cd", "/tmp" });
	EXPECT_EQ(r.status, 127);
	EXPECT_EQ(r.err, "tlstune: cd: command not found (cd is built into the shell, not a program: "
			 "try sh -c 'cd ...')\n");
	Captured path = wrapper({ "./tlstune-no-such-command" });
	EXPECT_EQ(path.status, 127);
	EXPECT_EQ(path.err, "tlstune: ./tlstune-no-such-command: command not found\n");
}

TEST(Wrapper, AWrongTlstuneLibraryIsNamed)
{
	Captured r = wrapper({ "true" }, { "TLSTUNE_LIBRARY=/nonexistent/libtlstune.so" });
	EXPECT_EQ(r.status, 125);
	EXPECT_EQ(r.err, "tlstune: TLSTUNE_LIBRARY is set to /nonexistent/libtlstune.so, which is not "
			 "a readable file\n");
}

TEST(Wrapper, AddsTheLibraryToLdPreloadOnceAndLast)
{
	SKIP_IN_SANITIZER_BUILD();
	const std::string print = "echo \"$LD_PRELOAD\"";
	EXPECT_EQ(wrapper({ "sh", "-c", print }).out, shimPath() + "\n");
	/* The loader complains about the missing other library on stderr; the order is ours. */
	EXPECT_EQ(wrapper({ "sh", "-c", print }, { "LD_PRELOAD=libother.so" }).out,
		  "libother.so:" + shimPath() + "\n");
	EXPECT_EQ(wrapper({ "sh", "-c", print }, { "LD_PRELOAD=libother.so " + shimPath() }).out,
		  "libother.so " + shimPath() + "\n");
	EXPECT_EQ(wrapper({ "sh", "-c", print }, { "LD_PRELOAD=" + shimPath() + ":libother.so" }).out,
		  shimPath() + ":libother.so\n");
}

TEST(Check, ShowsTheHeaderReadsGoAway)
{
	ExampleServer server({ "--send", std::to_string(4ull << 20), "--tls", "1.2", "--connections", "2" });
	Command command;
	TempDir logs;
	command.argv = { kCheck, "--library=" + preloadValue(), "--keep-logs", logs.path(), "--",
			 examplePath("bulk_download"), "127.0.0.1", server.portText() };
	if (sanitizerBuild())
		command.env.push_back("ASAN_OPTIONS=detect_leaks=0");
	std::string out;
	ASSERT_EQ(run(command, 120000, &out), 0) << out;

	EXPECT_NE(out.find("TCP peer 127.0.0.1:" + server.portText()), std::string::npos) << out;
	std::string::size_type headers = out.find("5-byte header reads");
	ASSERT_NE(headers, std::string::npos) << out;
	const std::string line = out.substr(headers, out.find('\n', headers) - headers);
	std::istringstream fields(line.substr(std::string("5-byte header reads").size()));
	unsigned long without = 0, with = 1;
	fields >> without >> with;
	EXPECT_GT(without, 200u) << line;
	EXPECT_LE(with, handshakeHeaderReads(1)) << line;
	EXPECT_NE(line.find("<- record header, then body"), std::string::npos) << line;
	EXPECT_NE(out.find("65652 x"), std::string::npos) << "four whole records per read\n" << out;
	for (const char *log : { "without.strace", "with.strace" })
		EXPECT_TRUE(contains(readFile(logs.file(log)), "TCP:[")) << log;
}

/*
 * Issue 25: both runs get the same standard input (the first run used to take it all:
 * 4 MB read without the shim, nothing with it, a fake win), the command's output stays
 * out of the report and is compared, and a command that never loads libssl is named.
 */
TEST(Check, BothRunsReadTheSameInputAndTheirOutputIsComparedNotShown)
{
	SKIP_IN_SANITIZER_BUILD(); /* python, uninstrumented, with the sanitizer's runtime preloaded */
	TempDir dir;
	const std::string input = dir.file("input");
	{
		std::ofstream out(input, std::ios::binary);
		for (int i = 0; i < 100000; i++)
			out << "line " << i << "\n";
	}
	TempDir logs;
	Command command;
	command.argv = { kCheck, "--library=" + preloadValue(), "--keep-logs", logs.path(), "--", "python3", "-c",
			 "import hashlib, sys; print(hashlib.sha256(sys.stdin.buffer.read()).hexdigest())" };
	command.stdinPath = input;
	const Captured run = runCaptured(command, 120000);
	EXPECT_EQ(run.status, 0) << run.err;
	EXPECT_EQ(linesWith(run.out, "standard output bytes"), 1u) << run.out;
	EXPECT_TRUE(contains(run.out, "the same bytes")) << run.out;
	EXPECT_FALSE(contains(run.out, "\n" + readFile(logs.file("without.out")))) << "the command's output is not in the report";
	EXPECT_EQ(readFile(logs.file("without.out")).size(), 65u) << "a sha256 and a newline";
	EXPECT_EQ(readFile(logs.file("with.out")), readFile(logs.file("without.out"))) << "the same input";
	EXPECT_TRUE(contains(run.out, "note: python3 never opened OpenSSL's libssl")) << run.out;

	const Captured tls = check({ "--library=" + preloadValue(), "--", kOpenSslUser[0], kOpenSslUser[1], kOpenSslUser[2] });
	EXPECT_FALSE(contains(tls.out, "never opened OpenSSL's libssl")) << tls.out;
}

/*
 * A server's connections add up under its own address, as a server listens on a port of
 * its choosing: each client's port is ephemeral and its own (three connections were three
 * peers). The listener takes a port below the kernel's ephemeral range, the first free.
 */
TEST(Check, AServersConnectionsAreOnePeer)
{
	SKIP_IN_SANITIZER_BUILD(); /* python's threads under ThreadSanitizer's preloaded runtime crash */
	Command command;
	command.argv = { kCheck, "--library=" + preloadValue(), "--", "python3", "-c",
			 "import socket, threading\n"
			 "listener = socket.socket()\n"
			 "listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)\n"
			 "for port in range(20000, 21000):\n"
			 "    try:\n"
			 "        listener.bind(('127.0.0.1', port)); break\n"
			 "    except OSError:\n"
			 "        pass\n"
			 "listener.listen()\n"
			 "def connect():\n"
			 "    for _ in range(3):\n"
			 "        client = socket.create_connection(('127.0.0.1', port))\n"
			 /* Open until the server closes: strace names a socket only while it exists. */
			 "        client.sendall(b'x'); client.recv(1); client.close()\n"
			 "thread = threading.Thread(target=connect); thread.start()\n"
			 "for _ in range(3):\n"
			 "    connection, _ = listener.accept(); connection.recv(1); connection.close()\n"
			 "thread.join()\n" };
	const Captured run = runCaptured(command, 120000);
	EXPECT_EQ(run.status, 0) << run.err;
	EXPECT_EQ(linesWith(run.out, "TCP peer 127.0.0.1:2"), 1u) << "the client's three connections\n" << run.out;
	EXPECT_EQ(linesWith(run.out, "TCP peer clients of 127.0.0.1:2"), 1u) << "the server's three\n" << run.out;
}

TEST(Check, ItsOwnErrorsAreOneLineAndNothingRuns)
{
	Captured missing = check({ "tlstune-no-such-command", "-x" });
	EXPECT_EQ(missing.status, 127);
	EXPECT_EQ(missing.err, "tlstune-check: tlstune-no-such-command: command not found\n");
	EXPECT_EQ(missing.out, "") << "no table";

	Captured builtin = check({ "cd", "/tmp" });
	EXPECT_EQ(builtin.status, 127);
	EXPECT_EQ(builtin.err, "tlstune-check: cd: command not found\n");

	Captured notExecutable = check({ TLSTUNE_SHIM_MAP });
	EXPECT_EQ(notExecutable.status, 126);
	EXPECT_TRUE(contains(notExecutable.err, "not an executable file")) << notExecutable.err;

	Captured noValue = check({ "--library" });
	EXPECT_EQ(noValue.status, 125);
	EXPECT_EQ(noValue.err.rfind("tlstune-check: --library needs a value\n", 0), 0u) << noValue.err;

	Captured noDir = check({ "--keep-logs", "/nonexistent/logs", "true" });
	EXPECT_EQ(noDir.status, 125);
	EXPECT_EQ(noDir.err.rfind("tlstune-check: --keep-logs: /nonexistent/logs is not a directory\n", 0), 0u)
		<< noDir.err;
	EXPECT_EQ(noDir.out, "");

	Captured noLibrary = check({ "--library=/nonexistent/libtlstune.so", "true" });
	EXPECT_EQ(noLibrary.status, 125);
	EXPECT_TRUE(contains(noLibrary.err, "cannot read the library /nonexistent/libtlstune.so")) << noLibrary.err;

	Captured unknown = check({ "--frobnicate", "true" });
	EXPECT_EQ(unknown.status, 125);
	EXPECT_TRUE(contains(unknown.err, "unknown option '--frobnicate'")) << unknown.err;

	Captured help = check({ "--help" });
	EXPECT_EQ(help.status, 0);
	EXPECT_EQ(help.err, "");
	for (const char *part : { "Usage: tlstune-check [--library PATH] [--keep-logs DIR]", "--library PATH",
				  "--keep-logs DIR", "127 when it is not found" })
		EXPECT_TRUE(contains(help.out, part)) << part << " not in\n" << help.out;
}

/* The stats line and the log levels, as a user of an OpenSSL program sees them. */
TEST(Messages, TheStatsLineSaysWhoseItIsAndWhenTheShimIsDisabled)
{
	SKIP_IN_SANITIZER_BUILD();
	ExampleServer server({ "--send", std::to_string(1 << 20), "--connections", "2" });
	const std::vector<std::string> download = { examplePath("bulk_download"), "127.0.0.1", server.portText() };

	const Captured on = runProgram(download, true, { "TLSTUNE_STATS=1" });
	EXPECT_EQ(on.status, 0) << on.err;
	EXPECT_EQ(linesWith(on.err, "tlstune: stats: "), 1u) << on.err;
	EXPECT_TRUE(contains(on.err, "tlstune: stats: contexts_tuned=1 connections=1 ")) << on.err;
	EXPECT_TRUE(contains(on.err, " records_held=")) << on.err;
	EXPECT_TRUE(contains(on.err, " held_sends=")) << on.err;
	EXPECT_TRUE(contains(on.err, " program=bulk_download pid=")) << on.err;

	const Captured off = runProgram(download, true, { "TLSTUNE_STATS=1", "TLSTUNE_DISABLE=1" });
	EXPECT_EQ(off.status, 0) << off.err;
	EXPECT_EQ(off.err.rfind("tlstune: stats: disabled by TLSTUNE_DISABLE, every call passed through: "
				"program=bulk_download pid=", 0), 0u) << off.err;
	EXPECT_EQ(linesWith(off.err, "tlstune:"), 1u) << off.err;
}

/*
 * Two copies of the library in one process (/etc/ld.so.preload and the wrapper's, or a
 * build tree's and the installed one): the first does the work, the second passes every
 * call through. One stats line, no false warning, the same bytes; the wrapper adds no copy
 * of its own to one already preloaded, and says so.
 */
TEST(Messages, TwoCopiesOfTheLibraryMakeOneStatsLineAndNoWarning)
{
	SKIP_IN_SANITIZER_BUILD();
	TempDir dir;
	const std::string copy = dir.file("libtlstune.so");
	std::filesystem::copy_file(shimPath(), copy);
	ExampleServer server({ "--send", std::to_string(1 << 20), "--connections", "2" });
	const std::vector<std::string> download = { examplePath("bulk_download"), "127.0.0.1", server.portText() };
	const Captured one = runProgram(download, false, { "TLSTUNE_STATS=1", "LD_PRELOAD=" + shimPath() });
	const Captured two = runProgram(download, false, { "TLSTUNE_STATS=1", "LD_PRELOAD=" + shimPath() + ":" + copy });
	EXPECT_EQ(two.status, 0) << two.err;
	EXPECT_EQ(two.out, one.out) << "the same bytes";
	EXPECT_EQ(linesWith(two.err, "tlstune:"), 1u) << two.err;
	EXPECT_TRUE(contains(two.err, "tlstune: stats: contexts_tuned=1 connections=1 ")) << two.err;

	const Captured wrapped = wrapper({ "sh", "-c", "echo \"$LD_PRELOAD\"" }, { "LD_PRELOAD=" + copy });
	EXPECT_EQ(wrapped.out, copy + "\n") << "no second copy";
	EXPECT_TRUE(contains(wrapped.err, "another copy of the library is preloaded already, " + copy)) << wrapped.err;
}

TEST(Messages, InfoShowsContextsTunedAndConnectionsFollowedWarnDoesNot)
{
	SKIP_IN_SANITIZER_BUILD();
	ExampleServer server({ "--send", std::to_string(1 << 20), "--connections", "3" });
	const std::vector<std::string> download = { examplePath("bulk_download"), "127.0.0.1", server.portText() };

	const Captured info = runProgram(download, true, { "TLSTUNE_LOG=info" });
	EXPECT_EQ(info.status, 0) << info.err;
	EXPECT_EQ(linesWith(info.err, "tlstune: new SSL_CTX: the connections tlstune follows read ahead, "
				      "65652 bytes a read (a server's: a record"), 1u)
		<< info.err;
	EXPECT_EQ(linesWith(info.err, "tlstune: connection tuned: read-ahead on, 65652 bytes a read"), 1u)
		<< info.err;
	EXPECT_EQ(linesWith(info.err, "tlstune: connection followed: OpenSSL reads fd "), 1u) << info.err;
	/* A connection left alone says why (socat clears SSL_MODE_AUTO_RETRY; a hunt asked). */
	std::vector<std::string> untuned = download;
	untuned.push_back("--no-read-ahead");
	const Captured why = runProgram(untuned, true, { "TLSTUNE_LOG=info" });
	EXPECT_EQ(why.status, 0) << why.err;
	EXPECT_EQ(linesWith(why.err, "tlstune: connection not tuned: the program set read-ahead itself"), 1u)
		<< why.err;

	const Captured warn = runProgram(download, true, {});
	EXPECT_EQ(warn.status, 0) << warn.err;
	EXPECT_EQ(warn.err, "");
}

TEST(Messages, ARateLimitLetsOneLineASecondThroughAndCountsTheRest)
{
	tlstune::RateLimit limit;
	const int64_t start = 5 * tlstune::RateLimit::kIntervalNs;
	uint64_t skipped = 99;
	EXPECT_TRUE(limit.allow(start, &skipped));
	EXPECT_EQ(skipped, 0u);
	EXPECT_FALSE(limit.allow(start + 1, &skipped));
	EXPECT_FALSE(limit.allow(start + tlstune::RateLimit::kIntervalNs - 1, &skipped));
	EXPECT_TRUE(limit.allow(start + tlstune::RateLimit::kIntervalNs, &skipped));
	EXPECT_EQ(skipped, 2u);
	EXPECT_FALSE(limit.allow(start + tlstune::RateLimit::kIntervalNs, &skipped));
}

/*
 * `tlstune --stats PID`: a running process's stats line, read from its memory (tools/stats).
 * The client is examples/write_burst --lines: it has made its context and connection once
 * the server has printed the first line it sent, and then waits in fgets() until stdin ends.
 */
namespace {

constexpr int kLiveTimeoutMs = 60000;

/* A process without the shim that waits (cat on a FIFO) until end() lets it go. */
class WaitingChild {
public:
	WaitingChild() : input_(dir_.file("stdin")), process_(command(input_)) {}
	std::string pid() const { return std::to_string(process_.pid()); }
	/* Its status once its input ends: 0 unless something stopped it. */
	int end()
	{
		input_.closeWriter();
		return process_.wait(kLiveTimeoutMs);
	}

private:
	static Command command(const Fifo &input)
	{
		Command cat;
		cat.argv = { "cat" };
		cat.stdinPath = input.path();
		return cat;
	}

	TempDir dir_;
	Fifo input_;
	Process process_;
};

Command liveClientCommand(const ExampleServer &server, const std::string &input, const std::string &errors,
			  const std::vector<std::string> &env)
{
	Command command;
	command.argv = { examplePath("write_burst"), server.portText(), "--lines" };
	command.stdinPath = input;
	command.stderrPath = errors;
	command.env = env;
	return command;
}

class LiveClient {
public:
	explicit LiveClient(const std::vector<std::string> &env)
		: input_(dir_.file("stdin")), server_({ "--lines" }),
		  client_(liveClientCommand(server_, input_.path(), dir_.file("stderr"), env))
	{
		input_.write("hello\n");
		ready_ = server_.process().readLine(kLiveTimeoutMs) == "line hello";
	}
	/* Its TLS work is done: the server has what it wrote. */
	bool ready() const { return ready_; }
	pid_t pid() const { return client_.pid(); }
	/* Ends it (stdin closed) and returns its status; errors() then has what it printed there. */
	int finish()
	{
		input_.closeWriter();
		const int status = client_.wait(kLiveTimeoutMs);
		server_.process().wait(kLiveTimeoutMs);
		return status;
	}
	std::string errors() const { return readFile(dir_.file("stderr")); }

private:
	TempDir dir_;
	Fifo input_;
	ExampleServer server_;
	Process client_;
	bool ready_ = false;
};

/* "tlstune: stats: a=1 b=2 program=P pid=N" -> its fields, in order; empty if it is not such a line. */
std::vector<std::pair<std::string, std::string>> statsFields(const std::string &line)
{
	std::vector<std::pair<std::string, std::string>> fields;
	const std::string prefix = "tlstune: stats:";
	if (line.rfind(prefix, 0) != 0)
		return fields;
	std::istringstream words(line.substr(prefix.size()));
	for (std::string word; words >> word;) {
		const std::string::size_type equals = word.find('=');
		if (equals == std::string::npos)
			return {};
		fields.emplace_back(word.substr(0, equals), word.substr(equals + 1));
	}
	return fields;
}

/* The one line of text that starts with "tlstune: stats: ". */
std::string statsLine(const std::string &text)
{
	std::istringstream lines(text);
	std::string found;
	for (std::string line; std::getline(lines, line);)
		if (line.rfind("tlstune: stats: ", 0) == 0)
			found = found.empty() ? line : "more than one stats line";
	return found;
}

uint64_t field(const std::vector<std::pair<std::string, std::string>> &fields, const std::string &name)
{
	for (const auto &entry : fields)
		if (entry.first == name)
			return std::stoull(entry.second);
	ADD_FAILURE() << "no field " << name;
	return 0;
}

} /* namespace */

TEST(LiveStats, ARunningProcessShowsItsCountersSoFarAsItsExitLineWill)
{
	SKIP_IN_SANITIZER_BUILD();
	LiveClient client(shimEnv({ "TLSTUNE_STATS=1" }));
	ASSERT_TRUE(client.ready());
	const std::string pid = std::to_string(client.pid());
	const Captured live = wrapper({ "--stats", pid });
	EXPECT_EQ(live.status, 0) << live.err;
	EXPECT_EQ(live.err, "");
	EXPECT_EQ(std::count(live.out.begin(), live.out.end(), '\n'), 1) << live.out;
	const auto now = statsFields(live.out.substr(0, live.out.find('\n')));
	ASSERT_FALSE(now.empty()) << live.out;
	EXPECT_GE(field(now, "contexts_tuned"), 1u) << live.out;
	EXPECT_GE(field(now, "connections"), 1u) << live.out;

	/* Asking changed nothing: the client goes on and ends as ever, with its exit line. */
	EXPECT_EQ(client.finish(), 0) << client.errors();
	const std::string exitLine = statsLine(client.errors());
	const auto atExit = statsFields(exitLine);
	ASSERT_FALSE(atExit.empty()) << client.errors();
	ASSERT_EQ(now.size(), atExit.size()) << live.out << exitLine;
	for (size_t i = 0; i < now.size(); i++) {
		EXPECT_EQ(now[i].first, atExit[i].first) << live.out << exitLine;
		if (now[i].first == "program" || now[i].first == "pid")
			EXPECT_EQ(now[i].second, atExit[i].second) << now[i].first;
		else
			EXPECT_GE(std::stoull(atExit[i].second), std::stoull(now[i].second)) << now[i].first;
	}
	EXPECT_EQ(now.back(), std::make_pair(std::string("pid"), pid));
	EXPECT_EQ(now[now.size() - 2], std::make_pair(std::string("program"), std::string("write_burst")));
}

/*
 * Two copies (/etc/ld.so.preload and the wrapper's): the first in the loader's order does
 * the work, whichever is mapped lower, and the line is that copy's.
 */
TEST(LiveStats, OfTwoCopiesTheWorkingOneIsRead)
{
	SKIP_IN_SANITIZER_BUILD();
	TempDir dir;
	const std::string copy = dir.file("libtlstune.so");
	std::filesystem::copy_file(shimPath(), copy);
	for (const std::string &preload : { shimPath() + ":" + copy, copy + ":" + shimPath() }) {
		LiveClient client({ "LD_PRELOAD=" + preload, "TLSTUNE_LOG=debug" });
		ASSERT_TRUE(client.ready()) << preload;
		const Captured live = wrapper({ "--stats", std::to_string(client.pid()) });
		EXPECT_EQ(live.status, 0) << live.err;
		const auto now = statsFields(live.out.substr(0, live.out.find('\n')));
		ASSERT_FALSE(now.empty()) << live.out;
		EXPECT_GE(field(now, "contexts_tuned"), 1u) << preload << ": " << live.out;
		EXPECT_GE(field(now, "connections"), 1u) << preload << ": " << live.out;
		EXPECT_EQ(client.finish(), 0);
		const std::string second = preload.substr(preload.find(':') + 1);
		EXPECT_EQ(linesWith(client.errors(), "tlstune: another copy of the library, " +
						     preload.substr(0, preload.find(':')) + ", came first"), 1u)
			<< second << " passes every call through\n" << client.errors();
	}
}

TEST(LiveStats, AProcessWithoutTheLibraryOrNoneAtAllIsSaidWithItsOwnStatus)
{
	/* The test's own child, without the shim. */
	WaitingChild plain;
	const std::string pid = plain.pid();
	const Captured none = wrapper({ "--stats", pid });
	EXPECT_EQ(none.status, 2) << none.err;
	EXPECT_EQ(none.out, "");
	EXPECT_TRUE(contains(none.err, "tlstune: process " + pid + " (")) << none.err;
	EXPECT_TRUE(contains(none.err, ") does not have libtlstune loaded: no file named libtlstune* is mapped in /proc/" +
					       pid + "/maps\n"))
		<< none.err;
	EXPECT_EQ(plain.end(), 0);

	/* pid_max itself is never given to a process. */
	std::ifstream in("/proc/sys/kernel/pid_max");
	long pidMax = 0;
	ASSERT_TRUE(in >> pidMax);
	const Captured gone = wrapper({ "--stats", std::to_string(pidMax) });
	EXPECT_EQ(gone.status, 1) << gone.err;
	EXPECT_EQ(gone.out, "");
	EXPECT_EQ(gone.err, "tlstune: no process with pid " + std::to_string(pidMax) + "\n");
}

TEST(LiveStats, AnotherUsersProcessIsPermissionDeniedSayingWhatItNeeds)
{
	if (geteuid() != 0 || !haveProgram("setpriv"))
		GTEST_SKIP() << "needs root, to ask as another user (nobody) about one of root's processes";
	WaitingChild plain;
	Command asNobody;
	asNobody.argv = { "setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", kWrapper, "--stats",
			  plain.pid() };
	const Captured denied = runCaptured(asNobody, kLiveTimeoutMs);
	EXPECT_EQ(denied.status, 3) << denied.err;
	EXPECT_EQ(denied.out, "");
	EXPECT_TRUE(contains(denied.err, ": Permission denied: reading a process's memory needs root, or the same "
					 "user as the process"))
		<< denied.err;
	EXPECT_TRUE(contains(denied.err, "ptrace_scope")) << denied.err;
	EXPECT_EQ(linesWith(denied.err, "tlstune:"), 1u) << denied.err;
	EXPECT_EQ(plain.end(), 0);
}

TEST(LiveStats, OnlyAProcessIdAloneAfterStatsIsOneAnythingElseIsACommand)
{
	SKIP_IN_SANITIZER_BUILD();
	/* Followed by a command, --stats is TLSTUNE_STATS=1 as ever; so is --stats -- 123. */
	const Captured command = wrapper({ "--stats", "sh", "-c", "echo $TLSTUNE_STATS" });
	EXPECT_EQ(command.status, 0) << command.err;
	EXPECT_EQ(command.out, "1\n");
	const Captured digitsCommand = wrapper({ "--stats", "--", "123" });
	EXPECT_EQ(digitsCommand.status, 127);
	EXPECT_EQ(digitsCommand.err, "tlstune: 123: command not found\n");
	const Captured withArgument = wrapper({ "--stats", "123", "x" });
	EXPECT_EQ(withArgument.status, 127);
	EXPECT_EQ(withArgument.err, "tlstune: 123: command not found\n");
	const Captured notDigits = wrapper({ "--stats", "12a" });
	EXPECT_EQ(notDigits.status, 127);
	EXPECT_EQ(notDigits.err, "tlstune: 12a: command not found\n");
}

TEST(Install, PutsTheLibraryToolsAndManPageInPlace)
{
	TempDir dest;
	Command install;
	install.argv = { "meson", "install", "-C", TLSTUNE_BUILD_ROOT, "--destdir", dest.path(),
			 "--no-rebuild", "--quiet" };
	install.stderrPath = dest.file("install.log");
	ASSERT_EQ(run(install, 120000), 0) << readFile(install.stderrPath);

	std::string found;
	Command list;
	list.argv = { "find", dest.path(), "-type", "f", "-printf", "%P\n" };
	run(list, 60000, &found);
	for (const char *file : { "bin/tlstune", "bin/tlstune-check", "/libtlstune.so", "man1/tlstune.1",
				  "man1/tlstune-check.1", "libexec/tlstune/tlstune-stats" })
		EXPECT_NE(found.find(file), std::string::npos) << file << " not in\n" << found;
	EXPECT_EQ(found.find("test-"), std::string::npos) << "tests are not installed\n" << found;

	/* The page names every variable the library reads. */
	std::string page;
	Command man;
	man.argv = { "find", dest.path(), "-name", "tlstune.1", "-exec", "cat", "{}", ";" };
	run(man, 60000, &page);
	for (const tlstune::OptionInfo &option : tlstune::optionTable())
		EXPECT_NE(page.find(std::string(".B ") + option.name + "\n"), std::string::npos) << option.name;
	for (const char *part : { ".B TLSTUNE_LIBRARY\n", ".SH TLSTUNE-CHECK OPTIONS", "keep\\-logs" })
		EXPECT_TRUE(contains(page, part)) << part;

	/* Staged: the wrapper looks where the prefix says, and says what to set. */
	std::string wrapperPath, libraryPath;
	std::istringstream files(found);
	for (std::string file; std::getline(files, file);) {
		if (file.size() >= 11 && file.compare(file.size() - 11, 11, "bin/tlstune") == 0)
			wrapperPath = dest.file(file);
		if (contains(file, "/libtlstune.so"))
			libraryPath = dest.file(file);
	}
	Command staged;
	staged.argv = { wrapperPath, "sh", "-c", "echo $LD_PRELOAD" };
	Captured unset = runCaptured(staged, 60000);
	EXPECT_EQ(unset.status, 125);
	EXPECT_TRUE(contains(unset.err, "tlstune: cannot find the library at ")) << unset.err;
	EXPECT_TRUE(contains(unset.err, "set TLSTUNE_LIBRARY to its path")) << unset.err;
	staged.env = { "TLSTUNE_LIBRARY=" + dest.file("nowhere.so") };
	Captured wrong = runCaptured(staged, 60000);
	EXPECT_EQ(wrong.status, 125);
	EXPECT_EQ(wrong.err, "tlstune: TLSTUNE_LIBRARY is set to " + dest.file("nowhere.so") +
				     ", which is not a readable file\n");
	/* A sanitizer build's library cannot go into sh without the sanitizer's runtime. */
	if (sanitizerBuild())
		return;
	staged.env = { "TLSTUNE_LIBRARY=" + libraryPath };
	Captured right = runCaptured(staged, 60000);
	EXPECT_EQ(right.status, 0) << right.err;
	EXPECT_EQ(right.out, libraryPath + "\n");
}

TEST(Install, IntoARealPrefixTheToolsFindTheLibraryThemselves)
{
	SKIP_IN_SANITIZER_BUILD();
	TempDir dir;
	const std::string prefix = dir.file("prefix"), tree = dir.file("tree");
	Command step;
	step.stderrPath = dir.file("log");
	step.argv = { "meson", "setup", tree, TLSTUNE_SOURCE_ROOT, "--prefix=" + prefix, "--buildtype=plain",
		      "-Dtests=false" };
	ASSERT_EQ(run(step, 300000), 0) << readFile(step.stderrPath);
	/* Only what is installed: the examples would double the build. */
	step.argv = { "ninja", "-C", tree, "shim/libtlstune.so", "tools/tlstune-check", "tools/tlstune-stats",
		      "tools/tlstune.1" };
	ASSERT_EQ(run(step, 900000), 0) << readFile(step.stderrPath);
	step.argv = { "meson", "install", "-C", tree, "--no-rebuild", "--quiet" };
	ASSERT_EQ(run(step, 300000), 0) << readFile(step.stderrPath);

	std::string library;
	Command find;
	find.argv = { "find", prefix, "-name", "libtlstune.so" };
	run(find, 60000, &library);
	library = library.substr(0, library.find('\n'));
	ASSERT_EQ(library.rfind(prefix + "/lib", 0), 0u) << library;

	Command installed;
	installed.argv = { prefix + "/bin/tlstune", "--version" };
	Captured version = runCaptured(installed, 60000);
	EXPECT_EQ(version.out, "tlstune " TLSTUNE_VERSION "\nlibrary: " + library + "\n");
	installed.argv = { prefix + "/bin/tlstune", "--verbose" };
	installed.argv.insert(installed.argv.end(), kOpenSslUser.begin(), kOpenSslUser.end());
	Captured verbose = runCaptured(installed, 60000);
	EXPECT_EQ(verbose.status, 0) << verbose.err;
	EXPECT_TRUE(contains(verbose.err, "tlstune: version " TLSTUNE_VERSION ", python3 pid ")) << verbose.err;
	/* --stats PID finds its tool in libexec: this test's own process has no library. */
	installed.argv = { prefix + "/bin/tlstune", "--stats", std::to_string(getpid()) };
	Captured stats = runCaptured(installed, 60000);
	EXPECT_EQ(stats.status, 2) << stats.err;
	EXPECT_TRUE(contains(stats.err, "does not have libtlstune loaded")) << stats.err;
	installed.argv = { prefix + "/bin/tlstune-check", "--help" };
	Captured help = runCaptured(installed, 60000);
	EXPECT_TRUE(contains(help.out, "(default: " + library + ";")) << help.out;
	EXPECT_TRUE(std::filesystem::exists(prefix + "/share/man/man1/tlstune.1"));
}

/* The numbers of a row of the demo's table: "| what | A unit | B unit | ratio |" -> A, B. */
static std::pair<double, double> demoRow(const std::string &table, const std::string &what)
{
	const size_t at = table.find("| " + what);
	if (at == std::string::npos)
		return { -1, -1 };
	const std::string line = table.substr(at, table.find('\n', at) - at);
	const size_t first = line.find('|', 2), second = line.find('|', first + 1);
	return { std::stod(line.substr(first + 1)), std::stod(line.substr(second + 1)) };
}

TEST(Demo, ShowsEachGainWithoutAndWithFromCountsNotTimes)
{
	SKIP_IN_SANITIZER_BUILD();
	TempDir cwd;
	Command demo;
	demo.argv = { std::string(TLSTUNE_SOURCE_ROOT) + "/tools/demo", "--runs", "1", "--size", "4",
		      "--build=" TLSTUNE_BUILD_ROOT };
	demo.cwd = cwd.path();
	demo.stderrPath = cwd.file("progress");
	std::string table;
	ASSERT_EQ(run(demo, 600000, &table), 0) << readFile(demo.stderrPath);
	/* Counted, not timed: read syscalls on the socket and records at the receiver, by strace. */
	const auto reads = demoRow(table, "read syscalls per MiB, curl downloading 4 MiB (TLS 1.3) |");
	EXPECT_GT(reads.second, 0) << table;
	EXPECT_LT(reads.second * 3, reads.first) << table;
	const auto records = demoRow(table, "100,000 SSL_write calls of 100 B: TLS records on the wire |");
	EXPECT_GE(records.first, 100000) << table;
	EXPECT_GT(records.second, 0) << table;
	EXPECT_LT(records.second * 20, records.first) << table;
	for (const char *row : { "| one-shot curl of a small file, CA file of ", "| python: a new context per request",
				 "| the same: the sender's CPU" })
		EXPECT_TRUE(contains(table, row)) << row << " not in\n" << table;
}

TEST(Measurements, AreWrittenFromAWholeFullRunOnlyWithTheirChartsBeside)
{
	TempDir run, to;
	Command update;
	update.argv = { std::string(TLSTUNE_SOURCE_ROOT) + "/tools/update-measurements", "--from", run.path(),
			"--to", to.path() };
	const std::string whole = "# tlstune-bench\n\n2026-12-02, 2 cores\n\n## Download time\n\n![a chart](ab.svg)\n\n"
				  "## Event-driven server\n\n| a | 1 | 2 |\n";
	struct Case {
		std::string report;
		int status;
		const char *message;
	};
	const Case cases[] = {
		{ "# tlstune-bench\n\n> **--quick: too few runs to compare.**\n" + whole, 1, "is a --quick run" },
		{ whole + "\n> **Failed: server row: no nginx worker pid in its log**\n", 1, "is not a whole run" },
		{ "# tlstune-bench\n\n## Download time\n", 1, "is not a whole run" },
		{ whole, 0, "wrote " },
	};
	for (const Case &c : cases) {
		writeFile(run.file("report.md"), c.report);
		writeFile(run.file("ab.svg"), "<svg/>");
		const Captured got = runCaptured(update, 60000);
		EXPECT_EQ(got.status, c.status) << got.err;
		EXPECT_TRUE(contains(got.err, c.message)) << got.err;
		EXPECT_EQ(std::filesystem::exists(to.file("measurements.md")), c.status == 0) << c.message;
	}
	const std::string page = readFile(to.file("measurements.md"));
	EXPECT_EQ(page.rfind("# Measurements\n", 0), 0u) << page;
	EXPECT_FALSE(contains(page, "# tlstune-bench")) << page;
	EXPECT_TRUE(contains(page, "](measurements/ab.svg)")) << page;
	EXPECT_TRUE(contains(page, "| a | 1 | 2 |")) << page;
	EXPECT_EQ(readFile(to.file("measurements/ab.svg")), "<svg/>");
}

TEST(Bench, HelpIsUsageOnStdoutAndSuccessAndBadOptionsStopBeforeAnyWork)
{
	for (const char *tool : { "tools/tlstune-bench", "tools/demo" }) {
		Command command;
		command.argv = { std::string(TLSTUNE_SOURCE_ROOT) + "/" + tool, "--help" };
		const Captured help = runCaptured(command, 30000);
		EXPECT_EQ(help.status, 0);
		EXPECT_EQ(help.out.rfind(std::string("usage: ") + tool, 0), 0u) << help.out;
		EXPECT_EQ(help.err, "");
	}
	struct Case {
		const char *tool;
		std::vector<std::string> args;
		const char *message;
	};
	const Case cases[] = {
		{ "tools/tlstune-bench", { "--no-such-option" }, "tlstune-bench: unknown option '--no-such-option'\n" },
		{ "tools/tlstune-bench", { "--pairs" }, "tlstune-bench: --pairs needs a value\n" },
		{ "tools/tlstune-bench", { "--pairs=" }, "tlstune-bench: --pairs needs a value\n" },
		{ "tools/tlstune-bench", { "--pairs", "2" }, "tlstune-bench: --pairs: '2' is not a whole number of 3 or more\n" },
		{ "tools/tlstune-bench", { "--quick", "--pairs=x" }, "tlstune-bench: --pairs: 'x' is not a whole number of 3 or more\n" },
		{ "tools/tlstune-bench", { "--out" }, "tlstune-bench: --out needs a value\n" },
		{ "tools/demo", { "--runs" }, "tools/demo: --runs needs a value\n" },
		{ "tools/demo", { "--runs=0" }, "tools/demo: --runs: '0' is not a whole number of 1 or more\n" },
		{ "tools/demo", { "--frobnicate" }, "tools/demo: unknown option '--frobnicate'\n" },
	};
	for (const Case &c : cases) {
		TempDir cwd;
		Command command;
		command.argv = { std::string(TLSTUNE_SOURCE_ROOT) + "/" + c.tool };
		command.argv.insert(command.argv.end(), c.args.begin(), c.args.end());
		command.cwd = cwd.path();
		const Captured wrong = runCaptured(command, 30000);
		EXPECT_EQ(wrong.status, 2) << c.tool << " " << c.args[0];
		EXPECT_EQ(wrong.out, "");
		EXPECT_EQ(wrong.err.rfind(std::string(c.message) + "usage: " + c.tool, 0), 0u) << wrong.err;
		EXPECT_TRUE(std::filesystem::is_empty(cwd.path())) << "no work before the error: " << c.tool;
	}
}

TEST(Bench, QuickRunsEndToEndIntoADirectoryOfTheCallersWithChartsThatSayWhatTheyShow)
{
	SKIP_IN_SANITIZER_BUILD();
	TempDir cwd;
	Command bench;
	/* --pairs before --quick: --quick does not undo it. --out is relative to where the user is. */
	bench.argv = { std::string(TLSTUNE_SOURCE_ROOT) + "/tools/tlstune-bench", "--pairs", "3", "--quick",
		       "--out", "results", "--build=" TLSTUNE_BUILD_ROOT };
	bench.cwd = cwd.path();
	bench.stderrPath = cwd.file("progress");
	std::string report;
	ASSERT_EQ(run(bench, 900000, &report), 0) << readFile(bench.stderrPath);
	const std::string out = cwd.file("results");

	EXPECT_EQ(readFile(out + "/report.md"), report);
	for (const char *part : { "> **--quick: too few runs to compare.** 3 pairs of 16 MiB",
				  "## Download time, 3 pairs alternating", "### TLS 1.2", "### TLS 1.3",
				  "x without-1.3", "+ with-1.3", "Per pair, with/without: median ratio",
				  "## Read buffer sweep, TLS 1.3: 4 transfers of 16 MiB, one run",
				  "| off (no read-ahead) |", "| 4 x 16,413 + 3 (default) |",
				  "| 8 x 16,413 + 3 |", "## CA cache",
				  "| python ssl.create_default_context() | 10 |",
				  "| C: GET, new context and connection | 10 |",
				  "| Debian's bundle, which the process's first context loaded too (the cache has it) |",
				  "## Syscall merging (TLSTUNE_COALESCE=syscalls): examples/write_burst to examples/tls_server, one run",
				  "encrypted and dropped (null BIO, no shim)",
				  "## Record merging: 10000 writes of 100 B", "| TLS records on the wire",
				  "| sender CPU in its writes, ms", "## Record merging by write size",
				  "## Record merging, a request-response loop",
				  "## Record merging, requests of a header and a body", "## Cold start",
				  "with SSL_CERT_FILE of the one server certificate (the floor)",
				  "## Cost where tlstune has no work", "| `close` of a regular file, in a process with an epoll set |",
				  "## Event-driven server", "| 500 idle TLS connections, 100 clients upload",
				  "| reverse proxy, upstream stalled for 3 s mid-upload",
				  "](ab.svg)", "](sweep.svg)", "](ca.svg)", "](cold.svg)", "](records.svg)",
				  "](server.svg)" })
		EXPECT_NE(report.find(part), std::string::npos) << part << " not in\n" << report;
	EXPECT_FALSE(contains(report, "median of 1 runs")) << report;
	EXPECT_FALSE(contains(report, out)) << "the report links its charts relatively";
	EXPECT_FALSE(contains(readFile(bench.stderrPath), "off records"));
	EXPECT_FALSE(contains(report, "The bench stopped")) << report;
	EXPECT_FALSE(contains(report, "Failed: ")) << report;
	/* Each chart is linked under its own section, after that section's heading. */
	EXPECT_LT(report.find("](ab.svg)"), report.find("## Read buffer sweep")) << report;
	EXPECT_LT(report.find("](records.svg)"), report.find("## Record merging by write size")) << report;

	/* What each chart shows, by its titles and labels. */
	const std::string ab = readFile(out + "/ab.svg"), sweep = readFile(out + "/sweep.svg");
	for (const char *part : { "time with tlstune / time without, 3 pairs per TLS version", "TLS 1.2",
				  "TLS 1.3", "one pair", "median of the pairs", "1.0: no difference",
				  "below 1.0: faster with tlstune" })
		EXPECT_TRUE(contains(ab, part)) << part << " not in ab.svg";
	for (const char *part : { "read buffer, in TLS records", "default", "throughput", "MB/s",
				  "read syscalls per MiB", "CPU ms per GiB", "serial", "parallel (4 at a time)",
				  "bars: lowest to highest" })
		EXPECT_TRUE(contains(sweep, part)) << part << " not in sweep.svg";
	const std::string ca = readFile(out + "/ca.svg"), cold = readFile(out + "/cold.svg"),
			  records = readFile(out + "/records.svg"), server = readFile(out + "/server.svg");
	for (const char *part : { "<title>tlstune-bench: CA cache", "ms per new context", "10 contexts, 10 requests",
				  "ms each (log scale)", "without tlstune", "with tlstune (the CA cache)",
				  "python: a context", "C: a GET," })
		EXPECT_TRUE(contains(ca, part)) << part << " not in ca.svg";
	for (const char *part : { "<title>tlstune-bench: cold start", "Cold start: one process, one context",
				  "median of 5 interleaved runs", "with tlstune, CA cache off",
				  "with tlstune and its CA cache (default)", "curl GET", "python first context," })
		EXPECT_TRUE(contains(cold, part)) << part << " not in cold.svg";
	for (const char *part : { "<title>tlstune-bench: record merging", "Record merging: 10000 writes of 100 B",
				  "TLS records on the wire", "records (log scale)", "no shim", "syscalls",
				  "sender, whole run", "sender, in its writes", "receiver (no shim)" })
		EXPECT_TRUE(contains(records, part)) << part << " not in records.svg";
	for (const char *part : { "<title>tlstune-bench: nginx worker CPU", "the worker", "CPU in ms, without and with tlstune",
				  "worker CPU, ms", "500 idle,", "stalled 3 s", "with tlstune (preloaded into nginx)" })
		EXPECT_TRUE(contains(server, part)) << part << " not in server.svg";
	/* --quick: every chart says that its runs are too few to compare. */
	for (const std::string *svg : { &ab, &sweep, &ca, &cold, &records, &server }) {
		EXPECT_FALSE(contains(*svg, "Gnuplot"));
		EXPECT_TRUE(contains(*svg, "--quick: too few runs to compare")) << svg->substr(0, 400);
	}
	/* The data of every chart stays beside it, for charts.gp. */
	for (const char *data : { "ab.dat", "ab-medians.dat", "sweep.dat", "sweep-summary.dat", "ca.dat", "cold.dat",
				  "records.dat", "server.dat" })
		EXPECT_TRUE(std::filesystem::exists(out + "/" + data)) << data;

	/* And they render: the script beside them draws PNGs (pngcairo). */
	Command png;
	png.argv = { "gnuplot", "-e", "format='png'", "charts.gp" };
	png.cwd = out;
	const Captured drawn = runCaptured(png, 120000);
	ASSERT_EQ(drawn.status, 0) << drawn.err;
	for (const char *chart : { "ab.png", "sweep.png", "ca.png", "cold.png", "records.png", "server.png" }) {
		const std::string bytes = readFile(out + "/" + chart);
		EXPECT_EQ(bytes.substr(0, 8), "\x89PNG\r\n\x1a\n") << chart;
		EXPECT_GT(bytes.size(), 10000u) << chart;
	}
}

/* A bench step that cannot find what it measures says so, naming the step, and fails: it
 * prints no number (issue 25: the server row once read /proc//stat and died in shell
 * arithmetic). The functions the sections use, sourced as the bench sources them. */
TEST(Bench, AStepWithoutItsProcessOrItsNumberFailsNamingItselfAndPrintsNoNumber)
{
	TempDir work;
	writeFile(work.file("nginx.log"), "nginx: [notice] using the \"epoll\" event method\n");
	writeFile(work.file("report.md"), "# tlstune-bench\n");
	struct Case {
		const char *call;
		const char *message;
	};
	const Case cases[] = {
		{ "cpu_ms '' 'server row'", "tlstune-bench: server row: no pid to read the CPU of\n" },
		{ "cpu_ms 'x1' 'server row'", "tlstune-bench: server row: no pid to read the CPU of\n" },
		/* A child that has ended and been reaped: no process by that pid now. */
		{ "true & ended=$!; wait $ended; cpu_ms $ended 'trickle row' children",
		  "tlstune-bench: trickle row: process PID has ended, no CPU to read\n" },
		{ "nginx_worker 'server row'", "tlstune-bench: server row: no nginx worker pid in its log\n" },
		{ "numbers 'CA cache row' 1.5 ''", "tlstune-bench: CA cache row: measured nothing: '' is not a number\n" },
		{ "nonzero 'record merging, pings' 3 0", "tlstune-bench: record merging, pings: measured 0, which no ratio can divide by\n" },
	};
	for (const Case &c : cases) {
		Command command;
		command.argv = { "bash", "-c",
				 std::string("set -euo pipefail; prog=tlstune-bench work=$1 report=$1/report.md; "
					     ". tools/lib/nginx.sh; . tools/lib/bench_checks.sh; ") +
					 c.call + "; echo reached",
				 "-", work.path() };
		command.cwd = TLSTUNE_SOURCE_ROOT;
		const Captured failed = runCaptured(command, 30000);
		EXPECT_NE(failed.status, 0) << c.call;
		EXPECT_EQ(failed.out, "") << c.call << ": no number, and nothing after the failure";
		std::string err = failed.err;
		const size_t pid = err.find("process ");
		if (pid != std::string::npos && contains(c.message, "PID"))
			err.replace(pid + 8, err.find(' ', pid + 8) - pid - 8, "PID");
		EXPECT_EQ(err, c.message) << c.call;
	}
	/* fail also leaves the reason in the report, for a bench that stops half-way. */
	EXPECT_EQ(readFile(work.file("report.md")),
		  "# tlstune-bench\n\n> **Failed: CA cache row: measured nothing: '' is not a number**\n"
		  "\n> **Failed: record merging, pings: measured 0, which no ratio can divide by**\n");

	/* And a live process reads as a number of ms. */
	Command live;
	live.argv = { "bash", "-c", "prog=tlstune-bench; . tools/lib/nginx.sh; cpu_ms $$ 'this shell'; cpu_ms $$ 'this shell' children" };
	live.cwd = TLSTUNE_SOURCE_ROOT;
	const Captured read = runCaptured(live, 30000);
	EXPECT_EQ(read.status, 0) << read.err;
	EXPECT_TRUE(std::regex_match(read.out, std::regex("[0-9]+(\\.[0-9]+)?\n[0-9]+(\\.[0-9]+)?\n"))) << read.out;
}

TEST(Evidence, SumsUpCasesFaultsBytesAndFuzzRunsFromTheLogs)
{
	/* Logs shaped as meson writes them: gtest's suites renamed "project.project:suite / test.Suite". */
	TempDir root;
	std::filesystem::create_directories(root.file("build/meson-logs"));
	std::filesystem::create_directories(root.file("build-fuzz/meson-logs"));
	writeFile(root.file("build/meson-logs/testlog.junit.xml"),
		  "<testsuites><testsuite name=\"tlstune.tlstune:programs / programs-faults.Faults\" "
		  "timestamp=\"2026-01-02T03:04:05\">"
		  "<testcase name=\"Reset\" status=\"run\"><properties>"
		  "<property name=\"fault\" value=\"the peer resets\"/>"
		  "<property name=\"bytes_checked\" value=\"3145728\"/></properties></testcase>"
		  "<testcase name=\"Skipped\" status=\"run\"><skipped/></testcase>"
		  "<testcase name=\"Broken\" status=\"run\"><failure/><properties>"
		  "<property name=\"bytes_checked\" value=\"5\"/></properties></testcase>"
		  "</testsuite></testsuites>");
	writeFile(root.file("build-fuzz/meson-logs/testlog.junit.xml"),
		  "<testsuites><testsuite name=\"tlstune\"><testcase name=\"fuzz-config\">"
		  "<system-err>#2 INITED\nDone 1234567 runs in 31 second(s)</system-err></testcase>"
		  "</testsuite></testsuites>");
	writeFile(root.file("README.md"), "before\n<!-- evidence: begin -->\nold\n<!-- evidence: end -->\nafter\n");

	Command evidence;
	evidence.argv = { std::string(TLSTUNE_SOURCE_ROOT) + "/tools/evidence", "--root", root.path(),
			  "--update", root.file("README.md") };
	const Captured run = runCaptured(evidence, 60000);
	ASSERT_EQ(run.status, 0) << run.err;
	const std::string readme = readFile(root.file("README.md"));
	for (const char *part :
	     { "before\n<!-- evidence: begin -->\nRun of 2026-01-02, cases per test binary and build tree:\n",
	       "| `programs-faults` | signals, fds above FD_SETSIZE, fork, library constructors, resets, exit paths | "
	       "1 passed, 1 failed, 1 skipped | not run | not run |",
	       "3 MiB in 1 passing cases; bytes lost, duplicated or reordered: 5 ",
	       "| the peer resets | `programs-faults` Faults.Reset | passed |",
	       "| `fuzz-config` | 1,234,567 in 31 s | passed |",
	       "<!-- evidence: end -->\nafter\n" })
		EXPECT_NE(readme.find(part), std::string::npos) << part << " not in\n" << readme;
	EXPECT_EQ(readme.find("old"), std::string::npos) << readme;
}

TEST(Evidence, WritesWhatPassedAgainstEachOpenSslVersion)
{
	TempDir root;
	for (const char *tree : { "build", "build-trixie" })
		std::filesystem::create_directories(root.file(std::string(tree) + "/meson-logs"));
	writeFile(root.file("build/meson-logs/meson-log.txt"),
		  "Run-time dependency openssl found: YES 3.0.19\n");
	writeFile(root.file("build/meson-logs/testlog.junit.xml"),
		  "<testsuites><testsuite name=\"tlstune.tlstune:unit / unit-ca-cache.Cache\">"
		  "<testcase name=\"Parses\" status=\"run\"/></testsuite></testsuites>");
	writeFile(root.file("build-trixie/meson-logs/meson-log.txt"),
		  "Run-time dependency openssl found: YES 3.5.9\n");
	writeFile(root.file("build-trixie/meson-logs/testlog.junit.xml"),
		  "<testsuites><testsuite name=\"tlstune.tlstune:programs / programs-ca-cache.CaCache\">"
		  "<testcase name=\"CurlAnswersTheSame\" status=\"run\"/>"
		  "<testcase name=\"SocatAndStunnelVerifyTheSame\" status=\"run\"><failure/></testcase>"
		  "</testsuite></testsuites>");
	writeFile(root.file("README.md"), "<!-- evidence: begin -->\n<!-- evidence: end -->\n"
		  "<!-- compatibility: begin -->\nold\n<!-- compatibility: end -->\nafter\n");

	Command evidence;
	evidence.argv = { std::string(TLSTUNE_SOURCE_ROOT) + "/tools/evidence", "--root", root.path(),
			  "--update", root.file("README.md") };
	const Captured run = runCaptured(evidence, 60000);
	ASSERT_EQ(run.status, 0) << run.err;
	const std::string readme = readFile(root.file("README.md"));
	for (const char *part :
	     { "| ? | Debian 11's libssl1.1 and libssl-dev (`build-openssl-1.1.1`) | not run | not run |",
	       "| 3.0.19 | Debian 12 (`build`) | - | 1 passed | - | - | - | - | - | - |\n",
	       "| 3.5.9 | Debian 13 (a debootstrap root) (`build-trixie`) | - | 1 passed, 1 failed | - | "
	       "1 passed | - | - | 1 failed | 1 failed |\n",
	       "<!-- compatibility: end -->\nafter\n" })
		EXPECT_NE(readme.find(part), std::string::npos) << part << " not in\n" << readme;
	EXPECT_EQ(readme.find("old"), std::string::npos) << readme;
}
