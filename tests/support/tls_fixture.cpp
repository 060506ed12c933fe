#include "tls_fixture.h"

#include <cctype>
#include <cstring>
#include <fstream>
#include <link.h>
#include <memory>
#include <stdexcept>

#include <openssl/crypto.h>

namespace testsupport {

std::string shimPath()
{
	return TLSTUNE_SHIM_PATH;
}

namespace {

int findSanitizerRuntime(struct dl_phdr_info *info, size_t, void *data)
{
	const char *name = info->dlpi_name;
	if (name && (std::strstr(name, "/libasan.so") || std::strstr(name, "/libtsan.so"))) {
		*static_cast<std::string *>(data) = name;
		return 1;
	}
	return 0;
}

} /* namespace */

namespace {

const std::string &sanitizerRuntime()
{
	static const std::string runtime = [] {
		std::string path;
		dl_iterate_phdr(findSanitizerRuntime, &path);
		return path;
	}();
	return runtime;
}

} /* namespace */

bool sanitizerBuild()
{
	return !sanitizerRuntime().empty();
}

bool caCacheRunsHere()
{
	const unsigned long version = OpenSSL_version_num() >> 20;
	return version == 0x300 || version == 0x305;
}

bool threadSanitizerBuild()
{
	return sanitizerRuntime().find("libtsan") != std::string::npos;
}

std::string preloadValue()
{
	/*
	 * A sanitizer build of the shim needs its runtime loaded first in a program that was
	 * built without one: the runtime this test binary runs with, ahead of the shim. Not
	 * ThreadSanitizer's: the programs it runs are instrumented and bring it themselves, and
	 * ahead of the shim its poll and close interceptors would call the shim's from inside,
	 * where TSan does not see the locks taken (false data races, measured).
	 */
	if (!sanitizerBuild() || sanitizerRuntime().find("libtsan") != std::string::npos)
		return shimPath();
	return sanitizerRuntime() + ":" + shimPath();
}

std::string examplePath(const std::string &name)
{
	return std::string(TLSTUNE_EXAMPLES_DIR) + "/" + name;
}

const Certificate &certificate()
{
	static TempDir dir;
	static const Certificate made = [] {
		Certificate c{ dir.file("cert.pem"), dir.file("key.pem") };
		Command command;
		command.argv = { "openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes",
				 "-keyout", c.key, "-out", c.cert, "-days", "2", "-subj", "/CN=localhost",
				 "-addext", "subjectAltName=DNS:localhost,IP:127.0.0.1" };
		command.stderrPath = dir.file("openssl.log");
		if (run(command, 60000) != 0)
			throw std::runtime_error("openssl req failed: " + readFile(command.stderrPath));
		return c;
	}();
	return made;
}

namespace {

Command serverCommand(const std::vector<std::string> &arguments, const std::vector<std::string> &env,
		      const Certificate &identity, const std::string &stdinPath)
{
	Command command;
	command.stdinPath = stdinPath;
	command.argv = { examplePath("tls_server"), "--cert", identity.cert, "--key", identity.key };
	command.argv.insert(command.argv.end(), arguments.begin(), arguments.end());
	command.env = env;
	return command;
}

} /* namespace */

ExampleServer::ExampleServer(const std::vector<std::string> &arguments,
			     const std::vector<std::string> &env, const Certificate &identity,
			     const std::string &stdinPath)
	: process_(serverCommand(arguments, env, identity, stdinPath))
{
	const std::string line = process_.readLine(30000);
	if (line.rfind("port ", 0) != 0)
		throw std::runtime_error("tls_server did not start: '" + line + "'");
	port_ = std::stoi(line.substr(5));
}

const char *const kTracedIo = "read,readv,preadv2,recvfrom,recvmsg,write,writev,sendto,sendmsg";

TracedRun runTraced(const std::vector<std::string> &argv, bool withShim,
		    const std::vector<std::string> &env, int timeoutMs, const std::string &trace)
{
	TempDir dir;
	const std::string log = dir.file("strace.log");
	Command command;
	command.argv = { "strace", "-f", "-yy", "-qq", "-s", "0", "-e", "signal=none", "-e",
			 "trace=" + trace, "-o", log };
	if (withShim)
		command.argv.insert(command.argv.end(), { "-E", "LD_PRELOAD=" + preloadValue() });
	command.argv.push_back("--");
	command.argv.insert(command.argv.end(), argv.begin(), argv.end());
	command.env = env;
	if (sanitizerBuild()) /* LeakSanitizer refuses to run under ptrace */
		command.env.push_back("ASAN_OPTIONS=detect_leaks=0");

	TracedRun result;
	result.status = run(command, timeoutMs, &result.out);
	std::ifstream in(log);
	result.calls = tlstune::parseStraceLog(in);
	in.clear();
	in.seekg(0);
	/* "PID name(...": neither a signal ("--- SIG") nor an exit ("+++"). */
	for (std::string line; std::getline(in, line);) {
		const std::string::size_type space = line.find(' ');
		if (space != std::string::npos && space + 1 < line.size() && std::islower(static_cast<unsigned char>(line[space + 1])))
			result.traced++;
	}
	return result;
}

double maxReadsPerMiB(const std::string &tls)
{
	return 1.5 * (tls == "1.2" ? 16.0 : 25.6);
}

uint64_t handshakeHeaderReads(uint64_t connections)
{
	return OpenSSL_version_num() >= 0x30200000L ? 8 * connections : 0;
}

std::vector<std::string> shimEnv(std::vector<std::string> more)
{
	more.push_back("LD_PRELOAD=" + preloadValue());
	return more;
}

Captured runProgram(const std::vector<std::string> &argv, bool withShim,
		    const std::vector<std::string> &env, int timeoutMs)
{
	Command command;
	command.argv = argv;
	command.env = withShim ? shimEnv(env) : env;
	return runCaptured(command, timeoutMs);
}

} /* namespace testsupport */
