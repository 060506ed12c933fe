/*
 * tlstune-check: runs a command under strace without and with libtlstune.so and shows,
 * per TCP peer, the read and write syscalls side by side, so users can see the effect on
 * their own program. It runs the command twice: mind its side effects. Both runs get the
 * same standard input (read once, kept in a file); their standard output is kept apart
 * from the report and compared.
 *
 * Usage: tlstune-check [--library PATH] [--keep-logs DIR] [--] COMMAND [ARGS...]
 * PATH may be a list as LD_PRELOAD takes it (colons or spaces).
 */

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fcntl.h>
#include <fstream>
#include <iterator>
#include <map>
#include <string>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include <vector>

#include "strace_log.h"

using namespace tlstune;

namespace {

/* Writes smaller than this count as small: a burst of them is what coalescing saves. */
constexpr long long kSmallWrite = 1024;

struct Peer {
	SocketTraffic traffic;
	uint64_t smallWrites = 0;
};

/* The kernel's range for ephemeral ports, from which a client's own port comes. */
std::pair<long, long> ephemeralPorts()
{
	std::ifstream in("/proc/sys/net/ipv4/ip_local_port_range");
	long low = 32768, high = 60999;
	in >> low >> high;
	return { low, high };
}

/* "127.0.0.1:41442" -> 41442; -1 when there is no port. */
long portOf(const std::string &endpoint)
{
	const std::string::size_type colon = endpoint.rfind(':');
	if (colon == std::string::npos)
		return -1;
	char *end = nullptr;
	const long port = std::strtol(endpoint.c_str() + colon + 1, &end, 10);
	return end && *end == '\0' ? port : -1;
}

/*
 * What names a connection the same way in both runs: the far end for a client
 * ("TCP:[127.0.0.1:41442->127.0.0.1:9443]" -> "127.0.0.1:9443"); for a server, whose far
 * ends are clients' ephemeral ports, its own end, so that its connections add up
 * ("clients of 127.0.0.1:9443").
 */
std::string peerOf(const std::string &target)
{
	static const std::pair<long, long> ephemeral = ephemeralPorts();
	const std::string::size_type open = target.find('[');
	const std::string::size_type arrow = target.find("->");
	const std::string::size_type end = target.rfind(']');
	if (open == std::string::npos || arrow == std::string::npos || end == std::string::npos || end < arrow)
		return target;
	const std::string local = target.substr(open + 1, arrow - open - 1);
	const std::string remote = target.substr(arrow + 2, end - arrow - 2);
	const auto isEphemeral = [](long port) { return port >= ephemeral.first && port <= ephemeral.second; };
	if (isEphemeral(portOf(remote)) && !isEphemeral(portOf(local)))
		return "clients of " + local;
	return remote;
}

std::map<std::string, Peer> byPeer(const std::vector<Syscall> &calls)
{
	std::map<std::string, Peer> peers;
	for (const auto &socket : tcpTraffic(calls)) {
		Peer &peer = peers[peerOf(socket.first)];
		const SocketTraffic &t = socket.second;
		peer.traffic.reads += t.reads;
		peer.traffic.readBytes += t.readBytes;
		peer.traffic.headerReads += t.headerReads;
		peer.traffic.writes += t.writes;
		peer.traffic.writeBytes += t.writeBytes;
		for (const auto &size : t.readSizes)
			peer.traffic.readSizes[size.first] += size.second;
		for (const auto &size : t.writeSizes) {
			peer.traffic.writeSizes[size.first] += size.second;
			if (size.first < kSmallWrite)
				peer.smallWrites += size.second;
		}
	}
	return peers;
}

/* "65652 x4096, 16378 x4095": the commonest sizes first. */
std::string commonest(const std::map<long long, uint64_t> &sizes, size_t count)
{
	std::vector<std::pair<uint64_t, long long>> order;
	for (const auto &size : sizes)
		order.push_back({ size.second, size.first });
	std::sort(order.rbegin(), order.rend());
	std::string text;
	for (size_t i = 0; i < order.size() && i < count; i++)
		text += (i ? ", " : "") + std::to_string(order[i].second) + " x" + std::to_string(order[i].first);
	return text.empty() ? "-" : text;
}

/* Counts of syscalls by size: the distribution shown side by side. */
struct Bucket {
	const char *label;
	long long upTo; /* inclusive */
};
const Bucket kBuckets[] = {
	{ "  1-5 B", 5 },         { "  6 B-1 KiB", 1024 },      { "  1-16 KiB", 16 * 1024 },
	{ "  16-64 KiB", 64 * 1024 }, { "  over 64 KiB", -1 },
};

uint64_t inBucket(const std::map<long long, uint64_t> &sizes, size_t bucket)
{
	const long long low = bucket ? kBuckets[bucket - 1].upTo + 1 : 1;
	const long long high = kBuckets[bucket].upTo;
	uint64_t count = 0;
	for (const auto &size : sizes) {
		if (size.first >= low && (high < 0 || size.first <= high))
			count += size.second;
	}
	return count;
}

struct Run {
	int status = -1;
	std::map<std::string, Peer> peers;
	bool openedLibssl = false; /* the command (or a child) opened OpenSSL's libssl */
	std::string out;           /* its standard output */
};

/* Whether the log shows a successful open of libssl (file names print in full under -s 0). */
bool opensLibssl(const std::string &log)
{
	std::ifstream in(log);
	for (std::string line; std::getline(in, line);) {
		if (line.find("open") != std::string::npos && line.find("libssl.so") != std::string::npos &&
		    line.find(" = -1 ") == std::string::npos)
			return true;
	}
	return false;
}

std::string readAll(const std::string &file)
{
	std::ifstream in(file, std::ios::binary);
	return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

/* Opens file onto fd in a child about to exec; false when it cannot. */
bool redirect(int fd, const std::string &file, int flags)
{
	const int opened = open(file.c_str(), flags, 0600);
	if (opened < 0)
		return false;
	if (opened != fd && (dup2(opened, fd) != fd || close(opened) != 0))
		return false;
	return true;
}

/*
 * One run of command under strace. input: a file to give it as standard input ("" to
 * leave the terminal's); its standard output goes to out.
 */
Run trace(const std::vector<std::string> &command, const std::string &library, const std::string &log,
	  const std::string &input, const std::string &out)
{
	std::vector<std::string> argv = { "strace", "-f", "-yy", "-qq", "-s", "0", "-e", "signal=none",
					  "-e", "trace=read,readv,preadv2,recvfrom,recvmsg,write,writev,sendto,sendmsg,openat,open",
					  "-o", log };
	if (!library.empty())
		argv.insert(argv.end(), { "-E", "LD_PRELOAD=" + library });
	argv.push_back("--");
	argv.insert(argv.end(), command.begin(), command.end());

	Run run;
	pid_t pid = fork();
	if (pid == 0) {
		std::vector<char *> args;
		for (std::string &arg : argv)
			args.push_back(&arg[0]);
		args.push_back(nullptr);
		unsetenv("LD_PRELOAD");
		if ((!input.empty() && !redirect(0, input, O_RDONLY)) ||
		    !redirect(1, out, O_WRONLY | O_CREAT | O_TRUNC)) {
			std::fprintf(stderr, "tlstune-check: cannot set up the run: %s\n", std::strerror(errno));
			_exit(125);
		}
		execvp(args[0], args.data());
		std::fprintf(stderr, "tlstune-check: cannot run strace: %s\n", std::strerror(errno));
		_exit(127);
	}
	int status = 0;
	if (pid < 0 || waitpid(pid, &status, 0) < 0)
		return run;
	run.status = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
	std::ifstream in(log);
	run.peers = byPeer(parseStraceLog(in));
	run.openedLibssl = opensLibssl(log);
	run.out = readAll(out);
	return run;
}

/* Standard input, read once, for both runs: "" when it is a terminal (each run asks it). */
bool keepInput(const std::string &file, std::string *kept)
{
	kept->clear();
	if (isatty(0))
		return true;
	std::ofstream copy(file, std::ios::binary);
	char buffer[65536];
	for (;;) {
		const ssize_t n = read(0, buffer, sizeof(buffer));
		if (n == 0)
			break;
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			return errno == EBADF; /* no standard input at all: each run gets none either */
		copy.write(buffer, n);
	}
	copy.close();
	if (!copy)
		return false;
	*kept = file;
	return true;
}

void row(const char *what, const std::string &without, const std::string &with, const char *note = "")
{
	std::printf("  %-22s %26s %26s  %s\n", what, without.c_str(), with.c_str(), note);
}

std::string perMiB(const SocketTraffic &t)
{
	char text[32];
	std::snprintf(text, sizeof(text), "%.1f", t.readsPerMiB());
	return text;
}

std::string defaultLibrary()
{
	if (const char *env = std::getenv("TLSTUNE_LIBRARY"))
		return env;
	/* Run from the build tree: the library built beside it; installed: the installed one. */
	char self[4096];
	ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
	std::string exe = n > 0 ? std::string(self, static_cast<size_t>(n)) : "";
	const std::string buildRoot = TLSTUNE_BUILD_ROOT;
	if (exe.compare(0, buildRoot.size() + 1, buildRoot + "/") == 0)
		return TLSTUNE_BUILD_LIBRARY;
	return TLSTUNE_INSTALLED_LIBRARY;
}

int usage(FILE *out, int status)
{
	std::fprintf(out,
		     "Usage: tlstune-check [--library PATH] [--keep-logs DIR] [--] COMMAND [ARG]...\n"
		     "Runs COMMAND under strace without and with libtlstune.so and compares, per TCP\n"
		     "peer, the read and write syscalls. COMMAND runs twice: mind its side effects.\n"
		     "Both runs get the same standard input (read once); their standard output is\n"
		     "compared, not shown (--keep-logs keeps it).\n"
		     "\n"
		     "  --library PATH   the library to preload (default: %s;\n"
		     "                   TLSTUNE_LIBRARY sets it too); a list as LD_PRELOAD takes it\n"
		     "  --keep-logs DIR  keep the two strace logs and outputs in DIR (an existing\n"
		     "                   directory): without.strace, with.strace, without.out, with.out\n"
		     "  -h, --help       this text\n"
		     "An option's value may also be given as --library=PATH.\n"
		     "Exit status: 0 when both runs exit 0, 1 otherwise; 125 for tlstune-check's own\n"
		     "errors, 126 when COMMAND cannot be run, 127 when it is not found.\n",
		     defaultLibrary().c_str());
	return status;
}

int fail(const std::string &message)
{
	std::fprintf(stderr, "tlstune-check: %s\nTry 'tlstune-check --help'.\n", message.c_str());
	return 125;
}

bool runnable(const std::string &file)
{
	struct stat st;
	return stat(file.c_str(), &st) == 0 && S_ISREG(st.st_mode) && access(file.c_str(), X_OK) == 0;
}

/*
 * Where exec would find program, as the wrapper looks: "" when nowhere. Checked before
 * strace runs, so that a typo gets one line and 127, not strace's error twice.
 */
std::string findProgram(const std::string &program)
{
	if (program.find('/') != std::string::npos)
		return access(program.c_str(), F_OK) == 0 ? program : "";
	const char *path = std::getenv("PATH");
	const std::string dirs = path ? path : "/usr/bin:/bin";
	std::string::size_type start = 0;
	for (;;) {
		const std::string::size_type end = dirs.find(':', start);
		const std::string dir = dirs.substr(start, end - start);
		const std::string candidate = (dir.empty() ? "." : dir) + "/" + program;
		if (runnable(candidate))
			return candidate;
		if (end == std::string::npos)
			return "";
		start = end + 1;
	}
}

} /* namespace */

int main(int argc, char **argv)
{
	std::string library = defaultLibrary();
	std::string keep;
	int i = 1;
	for (; i < argc && argv[i][0] == '-'; i++) {
		const std::string arg = argv[i];
		if (arg == "--") {
			i++;
			break;
		}
		if (arg == "-h" || arg == "--help")
			return usage(stdout, 0);
		/* --library PATH and --library=PATH, as GNU tools take them. */
		const std::string name = arg.substr(0, arg.find('='));
		if (name != "--library" && name != "--keep-logs")
			return fail("unknown option '" + arg + "'");
		std::string value;
		if (name.size() < arg.size())
			value = arg.substr(name.size() + 1);
		else if (i + 1 < argc)
			value = argv[++i];
		if (value.empty())
			return fail(name + " needs a value");
		(name == "--library" ? library : keep) = value;
	}
	if (i >= argc)
		return fail("no command given");
	const char *environment = std::getenv("TLSTUNE_LIBRARY");
	const std::string fromEnvironment = environment ? environment : "";
	/*
	 * --library is what LD_PRELOAD gets: a list, when a sanitizer runtime must go first.
	 * Each path is made absolute: the loader resolves a relative one against each
	 * process's own directory, and a child that changes directory would run without it.
	 */
	std::string absolute;
	std::string::size_type start = 0;
	while (start < library.size()) {
		std::string::size_type end = library.find_first_of(": ", start);
		const std::string entry = library.substr(start, end - start);
		if (!entry.empty() && access(entry.c_str(), R_OK) != 0)
			return fail("cannot read the library " + entry +
				    (library == fromEnvironment ? " (TLSTUNE_LIBRARY is set to it)" : ""));
		if (!entry.empty()) {
			char *resolved = realpath(entry.c_str(), nullptr);
			absolute += (absolute.empty() ? "" : ":") + std::string(resolved ? resolved : entry.c_str());
			std::free(resolved);
		}
		start = end == std::string::npos ? end : end + 1;
	}
	library = absolute;
	struct stat st;
	if (!keep.empty() && (stat(keep.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)))
		return fail("--keep-logs: " + keep + " is not a directory");
	if (findProgram("strace").empty())
		return fail("strace is not installed (Debian: apt-get install strace)");
	const std::string program = findProgram(argv[i]);
	if (program.empty())
		return std::fprintf(stderr, "tlstune-check: %s: command not found\n", argv[i]), 127;
	if (!runnable(program))
		return std::fprintf(stderr, "tlstune-check: %s: cannot run: not an executable file\n", argv[i]), 126;
	const std::vector<std::string> command(argv + i, argv + argc);

	char dir[] = "/tmp/tlstune-check.XXXXXX";
	if (!mkdtemp(dir))
		return fail(std::string("cannot make a temporary directory: ") + std::strerror(errno));
	const std::string work = dir;
	const std::string logs = keep.empty() ? work : keep;
	std::string input;
	if (!keepInput(work + "/stdin", &input)) {
		unlink((work + "/stdin").c_str());
		rmdir(work.c_str());
		return fail(std::string("cannot keep the standard input for both runs: ") + std::strerror(errno));
	}
	const Run without = trace(command, "", logs + "/without.strace", input, logs + "/without.out");
	const Run with = trace(command, library, logs + "/with.strace", input, logs + "/with.out");
	for (const char *file : { "/without.strace", "/with.strace", "/without.out", "/with.out" }) {
		if (keep.empty())
			unlink((work + file).c_str());
	}
	unlink((work + "/stdin").c_str());
	rmdir(work.c_str());

	std::printf("%-24s %26s %26s\n", "", "without tlstune", "with tlstune");
	row("exit status", std::to_string(without.status), std::to_string(with.status));
	row("standard output bytes", std::to_string(without.out.size()), std::to_string(with.out.size()),
	    without.out == with.out ? "the same bytes" : "<- they differ");
	std::map<std::string, bool> peers;
	for (const auto &p : without.peers)
		peers[p.first] = true;
	for (const auto &p : with.peers)
		peers[p.first] = true;
	for (const auto &p : peers) {
		static const Peer none;
		auto a = without.peers.find(p.first), b = with.peers.find(p.first);
		const Peer &x = a == without.peers.end() ? none : a->second;
		const Peer &y = b == with.peers.end() ? none : b->second;
		std::printf("TCP peer %s\n", p.first.c_str());
		row("read syscalls", std::to_string(x.traffic.reads), std::to_string(y.traffic.reads));
		row("bytes read", std::to_string(x.traffic.readBytes), std::to_string(y.traffic.readBytes));
		row("reads per MiB", perMiB(x.traffic), perMiB(y.traffic));
		row("5-byte header reads", std::to_string(x.traffic.headerReads),
		    std::to_string(y.traffic.headerReads),
		    x.traffic.headerReads > y.traffic.headerReads ? "<- record header, then body" : "");
		row("commonest read sizes", commonest(x.traffic.readSizes, 2), commonest(y.traffic.readSizes, 2));
		for (size_t b = 0; b < sizeof(kBuckets) / sizeof(kBuckets[0]); b++)
			row(kBuckets[b].label, std::to_string(inBucket(x.traffic.readSizes, b)),
			    std::to_string(inBucket(y.traffic.readSizes, b)));
		row("write syscalls", std::to_string(x.traffic.writes), std::to_string(y.traffic.writes));
		row("commonest write sizes", commonest(x.traffic.writeSizes, 2), commonest(y.traffic.writeSizes, 2));
		for (size_t b = 0; b < sizeof(kBuckets) / sizeof(kBuckets[0]); b++)
			row(kBuckets[b].label, std::to_string(inBucket(x.traffic.writeSizes, b)),
			    std::to_string(inBucket(y.traffic.writeSizes, b)));
		row("writes < 1 KiB", std::to_string(x.smallWrites), std::to_string(y.smallWrites),
		    x.smallWrites >= 100 && x.smallWrites * 2 > x.traffic.writes ? "<- small-write burst" : "");
	}
	if (peers.empty())
		std::printf("no TCP traffic seen\n");
	/* What would make the table mean less than it seems to. */
	if (!without.openedLibssl && !with.openedLibssl)
		std::printf("note: %s never opened OpenSSL's libssl: tlstune has nothing to tune in it "
			    "(another TLS library, such as GnuTLS or NSS, or no TLS)\n",
			    command[0].c_str());
	for (const auto &p : peers) {
		auto a = without.peers.find(p.first), b = with.peers.find(p.first);
		if (a == without.peers.end() || b == with.peers.end() ||
		    a->second.traffic.readBytes != b->second.traffic.readBytes ||
		    a->second.traffic.writeBytes != b->second.traffic.writeBytes) {
			std::printf("note: the runs moved different bytes (%s): compare the counts with care\n",
				    p.first.c_str());
			break;
		}
	}
	if (keep.empty() && without.out != with.out)
		std::printf("note: keep the outputs with --keep-logs DIR to compare them\n");
	return without.status == 0 && with.status == 0 ? 0 : 1;
}
