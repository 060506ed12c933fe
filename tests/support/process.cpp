#include "process.h"

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <fcntl.h>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sstream>
#include <stdexcept>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include "common/example.h"

extern char **environ;

namespace testsupport {

namespace {

std::vector<std::string> childEnvironment(const std::vector<std::string> &changes)
{
	std::map<std::string, std::string> env;
	for (char **entry = environ; *entry; entry++) {
		std::string text = *entry;
		std::string::size_type equals = text.find('=');
		if (equals != std::string::npos)
			env[text.substr(0, equals)] = text;
	}
	env.erase("LD_PRELOAD");
	for (const std::string &change : changes) {
		std::string::size_type equals = change.find('=');
		if (equals == std::string::npos)
			env.erase(change);
		else
			env[change.substr(0, equals)] = change;
	}
	std::vector<std::string> out;
	for (const auto &entry : env)
		out.push_back(entry.second);
	return out;
}

void redirect(const std::string &path, int target, int flags)
{
	int fd = open(path.c_str(), flags | O_CLOEXEC, 0644);
	if (fd < 0)
		_exit(126);
	dup2(fd, target);
}

} /* namespace */

Process::Process(const Command &command)
{
	std::vector<std::string> env = childEnvironment(command.env);
	std::vector<char *> argv, envp;
	for (const std::string &arg : command.argv)
		argv.push_back(const_cast<char *>(arg.c_str()));
	argv.push_back(nullptr);
	for (const std::string &entry : env)
		envp.push_back(const_cast<char *>(entry.c_str()));
	envp.push_back(nullptr);

	int out[2] = { -1, -1 };
	if (command.stdoutPath.empty() && pipe2(out, O_CLOEXEC) != 0)
		throw std::runtime_error("pipe");

	pid_ = fork();
	if (pid_ < 0)
		throw std::runtime_error("fork");
	if (pid_ == 0) {
		redirect(command.stdinPath, STDIN_FILENO, O_RDONLY);
		if (command.stdoutPath.empty())
			dup2(out[1], STDOUT_FILENO);
		else
			redirect(command.stdoutPath, STDOUT_FILENO, O_WRONLY | O_CREAT | O_TRUNC);
		if (command.stderrToStdout)
			dup2(STDOUT_FILENO, STDERR_FILENO);
		else if (!command.stderrPath.empty())
			redirect(command.stderrPath, STDERR_FILENO, O_WRONLY | O_CREAT | O_TRUNC);
		if (!command.cwd.empty() && chdir(command.cwd.c_str()) != 0)
			_exit(126);
		execvpe(argv[0], argv.data(), envp.data());
		_exit(127);
	}
	if (out[1] >= 0)
		close(out[1]);
	stdout_ = out[0];
	pidfd_ = static_cast<int>(syscall(SYS_pidfd_open, pid_, 0));
}

Process::~Process()
{
	if (status_ < 0 && pid_ > 0) {
		kill(SIGKILL);
		wait(10000);
	}
	if (stdout_ >= 0)
		close(stdout_);
	if (pidfd_ >= 0)
		close(pidfd_);
}

void Process::kill(int signal)
{
	if (status_ < 0 && pid_ > 0)
		::kill(pid_, signal);
}

bool Process::fill(int timeoutMs)
{
	struct pollfd pfd = { stdout_, POLLIN, 0 };
	/* A signal to this process is no end of the child's output (EINTR: asked again). */
	int ready = 0;
	while (stdout_ >= 0 && (ready = poll(&pfd, 1, timeoutMs)) < 0 && errno == EINTR) {
	}
	if (stdout_ < 0 || ready <= 0)
		return false;
	char buffer[4096];
	ssize_t n;
	while ((n = read(stdout_, buffer, sizeof(buffer))) < 0 && errno == EINTR) {
	}
	if (n <= 0)
		return false;
	pending_.append(buffer, static_cast<size_t>(n));
	return true;
}

bool Process::nextLine(std::string *line, int timeoutMs)
{
	std::string::size_type newline;
	while ((newline = pending_.find('\n')) == std::string::npos) {
		if (!fill(timeoutMs))
			return false;
	}
	*line = pending_.substr(0, newline);
	pending_.erase(0, newline + 1);
	return true;
}

std::string Process::readLine(int timeoutMs)
{
	std::string line;
	return nextLine(&line, timeoutMs) ? line : "";
}

std::string Process::readUntil(const std::string &needle, int timeoutMs)
{
	std::string seen;
	for (std::string line; nextLine(&line, timeoutMs);) {
		seen += line + "\n";
		if (line.find(needle) != std::string::npos)
			break;
	}
	return seen;
}

std::string Process::readAll(int timeoutMs)
{
	/* A total bound, not one per read: a child that keeps printing is stopped too. */
	const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeoutMs);
	for (;;) {
		const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
			deadline - std::chrono::steady_clock::now());
		if (left.count() <= 0 || !fill(static_cast<int>(left.count())))
			break;
	}
	std::string all;
	all.swap(pending_);
	return all;
}

int Process::wait(int timeoutMs)
{
	if (status_ >= 0)
		return status_;
	struct pollfd pfd = { pidfd_, POLLIN, 0 };
	if (pidfd_ >= 0 && poll(&pfd, 1, timeoutMs) == 0) {
		::kill(pid_, SIGKILL);
		int ignored;
		waitpid(pid_, &ignored, 0);
		status_ = 255;
		return -1;
	}
	int status = 0;
	while (waitpid(pid_, &status, 0) < 0 && errno == EINTR) {
	}
	status_ = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
	return status_;
}

int run(const Command &command, int timeoutMs, std::string *out)
{
	/* timeoutMs bounds the whole run, output and exit together. */
	const auto start = std::chrono::steady_clock::now();
	Process process(command);
	std::string text = process.readAll(timeoutMs);
	if (out)
		*out = text;
	const auto spent = std::chrono::duration_cast<std::chrono::milliseconds>(
		std::chrono::steady_clock::now() - start);
	return process.wait(std::max(1000, timeoutMs - static_cast<int>(spent.count())));
}

Captured runCaptured(Command command, int timeoutMs)
{
	TempDir dir;
	command.stderrPath = dir.file("stderr");
	Captured captured;
	captured.status = run(command, timeoutMs, &captured.out);
	captured.err = readFile(command.stderrPath);
	return captured;
}

TempDir::TempDir()
{
	char pattern[] = "/tmp/tlstune-test.XXXXXX";
	if (!mkdtemp(pattern))
		throw std::runtime_error("mkdtemp");
	path_ = pattern;
}

TempDir::~TempDir()
{
	std::error_code ignored;
	std::filesystem::remove_all(path_, ignored);
}

Fifo::Fifo(const std::string &path) : path_(path)
{
	if (mkfifo(path.c_str(), 0600) != 0)
		throw std::runtime_error("mkfifo " + path);
	/* Read-write: opening does not wait for the reader, and the child's open does not either. */
	fd_ = open(path.c_str(), O_RDWR | O_CLOEXEC);
}

void Fifo::write(const std::string &text)
{
	if (::write(fd_, text.data(), text.size()) != static_cast<ssize_t>(text.size()))
		throw std::runtime_error("short write to " + path_);
}

void Fifo::closeWriter()
{
	if (fd_ >= 0)
		close(fd_);
	fd_ = -1;
}

std::string readFile(const std::string &path)
{
	std::ifstream in(path, std::ios::binary);
	std::stringstream text;
	text << in.rdbuf();
	return text.str();
}

void writeFile(const std::string &path, const std::string &text)
{
	std::ofstream(path, std::ios::binary) << text;
}

int freePort()
{
	int chosen = 0;
	int fd = example::listenOn(0, &chosen);
	close(fd);
	return chosen;
}

void countCheckedBytes(unsigned long long bytes)
{
	const ::testing::TestInfo *test = ::testing::UnitTest::GetInstance()->current_test_info();
	if (!test)
		return;
	static std::mutex mutex;
	static std::map<std::string, unsigned long long> totals;
	std::lock_guard<std::mutex> lock(mutex);
	unsigned long long &total = totals[std::string(test->test_suite_name()) + "." + test->name()];
	total += bytes;
	::testing::Test::RecordProperty("bytes_checked", std::to_string(total));
}

std::string fileSha256(const std::string &path)
{
	example::Sha256 digest;
	std::ifstream in(path, std::ios::binary);
	std::vector<char> buffer(1 << 20);
	unsigned long long bytes = 0;
	while (in) {
		in.read(buffer.data(), static_cast<std::streamsize>(buffer.size()));
		digest.update(buffer.data(), static_cast<size_t>(in.gcount()));
		bytes += static_cast<unsigned long long>(in.gcount());
	}
	countCheckedBytes(bytes);
	return digest.hex();
}

namespace {

std::string pattern(std::ostream *out, unsigned long long bytes, unsigned long long seed)
{
	example::Pattern pattern(seed);
	example::Sha256 digest;
	std::vector<unsigned char> buffer(1 << 20);
	for (unsigned long long done = 0; done < bytes;) {
		size_t n = static_cast<size_t>(std::min<unsigned long long>(buffer.size(), bytes - done));
		pattern.fill(buffer.data(), n);
		if (out)
			out->write(reinterpret_cast<const char *>(buffer.data()), static_cast<std::streamsize>(n));
		digest.update(buffer.data(), n);
		done += n;
	}
	return digest.hex();
}

} /* namespace */

std::string writePattern(const std::string &path, unsigned long long bytes, unsigned long long seed)
{
	std::ofstream out(path, std::ios::binary);
	return pattern(&out, bytes, seed);
}

std::string patternSha256(unsigned long long bytes, unsigned long long seed)
{
	countCheckedBytes(bytes);
	return pattern(nullptr, bytes, seed);
}

bool haveProgram(const std::string &name)
{
	if (name.find('/') != std::string::npos)
		return access(name.c_str(), X_OK) == 0;
	const char *path = std::getenv("PATH");
	std::stringstream dirs(path ? path : "/usr/bin:/bin");
	for (std::string dir; std::getline(dirs, dir, ':');) {
		if (access((dir + "/" + name).c_str(), X_OK) == 0)
			return true;
	}
	return false;
}

} /* namespace testsupport */
