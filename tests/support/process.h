#pragma once
/*
 * Child processes for the tests: started by the test, waited for with a bound, and
 * killed by their recorded pid when a test ends early.
 */

#include <string>
#include <sys/types.h>
#include <vector>

namespace testsupport {

struct Command {
	std::vector<std::string> argv;
	/* "NAME=value" set for the child; "NAME" alone removes it. LD_PRELOAD is never inherited. */
	std::vector<std::string> env;
	std::string stdinPath = "/dev/null";
	/* Empty: a pipe the test reads with readLine()/readAll(). */
	std::string stdoutPath;
	std::string stderrPath;
	/* Send stderr down the stdout pipe: for servers that announce readiness in their log. */
	bool stderrToStdout = false;
	/* The child's working directory; empty: the test's. */
	std::string cwd;
};

class Process {
public:
	explicit Process(const Command &command);
	~Process();
	Process(const Process &) = delete;
	Process &operator=(const Process &) = delete;

	pid_t pid() const { return pid_; }
	/* One line of stdout without its newline; empty at EOF or after timeoutMs. */
	std::string readLine(int timeoutMs);
	/* Lines of stdout up to and including one containing needle (or EOF, or timeoutMs). */
	std::string readUntil(const std::string &needle, int timeoutMs);
	/* The rest of stdout, until EOF or timeoutMs in all. */
	std::string readAll(int timeoutMs);
	/* The exit status (or 128 + signal); on timeout kills the child and returns -1. */
	int wait(int timeoutMs);
	void kill(int signal);

private:
	/* Reads what stdout has into pending_; false at EOF or after timeoutMs. */
	bool fill(int timeoutMs);
	bool nextLine(std::string *line, int timeoutMs);

	pid_t pid_ = -1;
	int pidfd_ = -1;
	int stdout_ = -1;
	std::string pending_;
	int status_ = -1;
};

/* Runs a command to its end; stdout goes to *out when given. Status as Process::wait. */
int run(const Command &command, int timeoutMs, std::string *out = nullptr);

/* What a command printed on each stream, and its status. */
struct Captured {
	int status = -1;
	std::string out;
	std::string err;
};
/* run() with stderr captured too (command.stderrPath is ignored). */
Captured runCaptured(Command command, int timeoutMs);

/* A private directory under /tmp, removed with everything in it. */
class TempDir {
public:
	TempDir();
	~TempDir();
	const std::string &path() const { return path_; }
	std::string file(const std::string &name) const { return path_ + "/" + name; }

private:
	std::string path_;
};

/* A FIFO a child reads as stdin while the test writes to it, one line at a time. */
class Fifo {
public:
	explicit Fifo(const std::string &path);
	~Fifo() { closeWriter(); }
	Fifo(const Fifo &) = delete;
	Fifo &operator=(const Fifo &) = delete;
	const std::string &path() const { return path_; }
	void write(const std::string &text);
	/* The child reads EOF once it has read everything written. */
	void closeWriter();

private:
	std::string path_;
	int fd_ = -1;
};

std::string readFile(const std::string &path);
void writeFile(const std::string &path, const std::string &text);
/* A free TCP port on 127.0.0.1 for a server that cannot pick its own (nginx, socat). */
int freePort();
/*
 * The running test compared this many more bytes end to end (sent and received, by
 * sha256): recorded as its "bytes_checked" property, which tools/evidence adds up.
 */
void countCheckedBytes(unsigned long long bytes);
/* sha256 of a file, hex; its size counts as checked (tests hash files to compare them). */
std::string fileSha256(const std::string &path);
/* Writes bytes of the examples' data pattern (seed) to path; returns its sha256. */
std::string writePattern(const std::string &path, unsigned long long bytes, unsigned long long seed);
/* The sha256 of that many bytes of the pattern, without writing them anywhere; counted
 * as checked (it is what a test expects a stream to hash to). */
std::string patternSha256(unsigned long long bytes, unsigned long long seed);
/* Is the program on PATH (or an absolute path that exists)? */
bool haveProgram(const std::string &name);

} /* namespace testsupport */
