#pragma once
/* What the syscall and program tests share: certificates, the example server, strace runs. */

#include <cstdint>
#include <string>
#include <vector>

#include "process.h"
#include "strace_log.h"

namespace testsupport {

/* Built by meson; see tests/meson.build. */
std::string shimPath();
std::string examplePath(const std::string &name);
/* What LD_PRELOAD holds to put the shim in front of a program. */
std::string preloadValue();
/*
 * This is a sanitizer build. Its runtime must come first in a program, so it is preloaded
 * ahead of the shim; preloaded alone into Debian's curl, libasan deadlocks in setlocale
 * (measured), so tests of programs built without a sanitizer skip themselves.
 */
bool sanitizerBuild();
/* This build runs under ThreadSanitizer. */
bool threadSanitizerBuild();
/* The CA cache runs with the OpenSSL the programs load (3.0 or 3.5); elsewhere OpenSSL loads CA files itself. */
bool caCacheRunsHere();
#define SKIP_IN_SANITIZER_BUILD()                                                           \
	do {                                                                                 \
		if (testsupport::sanitizerBuild())                                           \
			GTEST_SKIP() << "a sanitizer runtime cannot be preloaded into programs " \
					"built without one";                                     \
	} while (0)

/* A CA-less self-signed certificate for localhost and 127.0.0.1, made once per binary. */
struct Certificate {
	std::string cert;
	std::string key;
};
const Certificate &certificate();

/* examples/tls_server with the given mode arguments, listening on a free port. */
class ExampleServer {
public:
	explicit ExampleServer(const std::vector<std::string> &arguments,
			       const std::vector<std::string> &env = {},
			       const Certificate &identity = certificate(),
			       const std::string &stdinPath = "/dev/null");
	int port() const { return port_; }
	std::string portText() const { return std::to_string(port_); }
	Process &process() { return process_; }

private:
	Process process_;
	int port_ = 0;
};

struct TracedRun {
	int status = -1;
	std::string out;
	/* The calls on an fd (their first argument), parsed. */
	std::vector<tlstune::Syscall> calls;
	/* Every call traced, on an fd or not (rt_sigprocmask): the lines of the log that are one. */
	std::size_t traced = 0;
};

/* What runTraced traces by default: the reads and writes. */
extern const char *const kTracedIo;

/*
 * Runs argv under `strace -f -yy`, with libtlstune.so preloaded into the traced program
 * only when withShim. env is given to the program; stdout is captured. trace: strace's
 * list of syscalls.
 */
TracedRun runTraced(const std::vector<std::string> &argv, bool withShim,
		    const std::vector<std::string> &env = {}, int timeoutMs = 300000,
		    const std::string &trace = kTracedIo);

/*
 * The most read syscalls per MiB the shim's default buffer may take on the TLS socket.
 * TLS 1.2 AES-GCM records are 16,413 bytes: every read takes four whole ones, 16/MiB.
 * TLS 1.3 records are 16,406 bytes: a read takes four and 28 bytes of a fifth, and
 * OpenSSL fetches the rest of a record whose header it holds with an exact read, so
 * reads alternate 65,652 and 16,378 bytes: 2 per 5 records, 25.6/MiB. A reader that
 * catches up with its sender reads whatever has arrived, so the bound is half as much
 * again as the steady state (the 24 for TLS 1.2's 16). Without the shim both
 * take two reads per record, 128/MiB.
 */
double maxReadsPerMiB(const std::string &tls);

/*
 * The 5-byte header reads left with read-ahead on, for a program's connections. OpenSSL
 * 3.2 and later ignore read-ahead until the application keys are in use (a read must not
 * take records meant for the next key), so each connection reads its handshake records a
 * header at a time: 6 or 7 on 3.5, TLS 1.2 or 1.3, client or server; the bound is 8.
 * Before 3.2: none.
 */
uint64_t handshakeHeaderReads(uint64_t connections);

/* The environment that preloads the shim, for programs run without strace. */
std::vector<std::string> shimEnv(std::vector<std::string> more = {});

/*
 * Runs argv to its end with libtlstune.so preloaded when withShim; env is given to the
 * program either way. Both streams are captured.
 */
Captured runProgram(const std::vector<std::string> &argv, bool withShim,
		    const std::vector<std::string> &env = {}, int timeoutMs = 300000);

} /* namespace testsupport */
