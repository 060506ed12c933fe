/*
 * tlstune-stats: the stats line of a running process that has libtlstune.so, as the process
 * would print it at exit with TLSTUNE_STATS=1. `tlstune --stats PID` runs it.
 *
 * Nothing runs in the observed process for it, and the process is never stopped or
 * signalled: the library exports tlstune_live (shim/core/live.h), which says where its
 * counters are. This finds the library in /proc/PID/maps, the object's offset in the
 * library file's dynamic symbol table, and reads the object and the counters with pread on
 * /proc/PID/mem. The kernel allows that to root and to the process's own user (Yama's
 * ptrace_scope may restrict it further), as for a debugger, without attaching.
 *
 * Usage: tlstune-stats PID
 * Exit status: kPrinted, or one of the others below, each with one line on stderr.
 */

#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <elf.h>
#include <fcntl.h>
#include <string>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>
#include <vector>

#include "core/live.h"
#include "core/stats.h"

using namespace tlstune;

namespace {

enum Status {
	kPrinted = 0,
	kNoProcess = 1,   /* no such process, or it exited */
	kNotLoaded = 2,   /* no libtlstune mapped, or no copy of it that does the work */
	kDenied = 3,      /* the kernel does not let this user read the process */
	kOtherLayout = 4, /* a library whose tlstune_live this tool cannot read (or has none) */
	kUnreadable = 5,  /* anything else: not an x86_64 ELF library, a read that failed */
	kUsage = 125,     /* as tlstune and tlstune-check */
};

/* What went wrong, for the caller to print: one line, and the exit status that goes with it. */
struct Failure {
	int status = kPrinted;
	std::string message;
	explicit operator bool() const { return status != kPrinted; }
};

Failure failure(int status, const std::string &message)
{
	return { status, message };
}

int report(const Failure &failed)
{
	std::fprintf(stderr, "tlstune: %s\n", failed.message.c_str());
	return failed.status;
}

std::string errorText(int error)
{
	return std::strerror(error);
}

/* A whole small file (/proc files have no size to ask for); false with errno set. */
bool readWhole(const std::string &path, std::string *text)
{
	const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return false;
	text->clear();
	char buffer[65536];
	ssize_t n;
	while ((n = read(fd, buffer, sizeof(buffer))) > 0 || (n < 0 && errno == EINTR)) {
		if (n > 0)
			text->append(buffer, static_cast<size_t>(n));
	}
	const int error = errno;
	close(fd);
	errno = error;
	return n == 0;
}

/* Exactly n bytes at offset; false on a short read (errno 0) or an error. */
bool readExactly(int fd, void *out, size_t n, uint64_t offset)
{
	size_t done = 0;
	while (done < n) {
		const ssize_t got = pread(fd, static_cast<char *>(out) + done, n - done, static_cast<off_t>(offset + done));
		if (got < 0 && errno == EINTR)
			continue;
		if (got <= 0) {
			if (got == 0)
				errno = 0;
			return false;
		}
		done += static_cast<size_t>(got);
	}
	return true;
}

class Target {
public:
	explicit Target(long pid) : pid_(pid), proc_("/proc/" + std::to_string(pid)) {}
	~Target()
	{
		if (mem_ >= 0)
			close(mem_);
	}
	Target(const Target &) = delete;
	Target &operator=(const Target &) = delete;

	long pid() const { return pid_; }
	const std::string &proc() const { return proc_; }

	/* "process 42 (nginx)": what the messages call it. */
	std::string name() const
	{
		std::string comm;
		if (!readWhole(proc_ + "/comm", &comm) || comm.empty())
			return "process " + std::to_string(pid_);
		if (comm.back() == '\n')
			comm.pop_back();
		return "process " + std::to_string(pid_) + " (" + comm + ")";
	}

	/* After a read came back empty or failed: the process may have gone meanwhile. */
	bool gone() const
	{
		struct stat info;
		if (stat(proc_.c_str(), &info) != 0)
			return true;
		std::string line;
		if (!readWhole(proc_ + "/stat", &line))
			return true;
		/* "42 (name) S ...": the name may hold spaces and parentheses, the state follows the last ')'. */
		const std::string::size_type paren = line.rfind(')');
		return paren != std::string::npos && paren + 2 < line.size() &&
		       (line[paren + 2] == 'Z' || line[paren + 2] == 'X');
	}

	Failure noProcess() const
	{
		struct stat info;
		if (stat(proc_.c_str(), &info) != 0)
			return failure(kNoProcess, "no process with pid " + std::to_string(pid_));
		return failure(kNoProcess, name() + " has exited: its counters are gone");
	}

	Failure openMemory()
	{
		mem_ = open((proc_ + "/mem").c_str(), O_RDONLY | O_CLOEXEC);
		if (mem_ >= 0)
			return {};
		if (errno == EACCES || errno == EPERM)
			return denied(proc_ + "/mem", errno);
		if (errno == ENOENT || errno == ESRCH || gone())
			return noProcess();
		return failure(kUnreadable, "cannot open " + proc_ + "/mem: " + errorText(errno));
	}

	/* n bytes of the process's memory at address. */
	Failure read(uint64_t address, void *out, size_t n, const char *what) const
	{
		if (readExactly(mem_, out, n, address))
			return {};
		const int error = errno;
		if (gone())
			return noProcess();
		char where[32];
		std::snprintf(where, sizeof(where), "0x%llx", static_cast<unsigned long long>(address));
		return failure(kUnreadable, "cannot read " + std::string(what) + " at " + where + " in " + name() + ": " +
						    (error ? errorText(error) : "end of memory"));
	}

	Failure denied(const std::string &path, int error) const
	{
		std::string message = "cannot read " + path + ": " + errorText(error) + ": ";
		if (geteuid() == 0)
			message += "root too needs CAP_SYS_PTRACE over the process (a container may not grant it, "
				   "nor over a process of another user namespace)";
		else
			message += "reading a process's memory needs root, or the same user as the process (and a "
				   "process that is not setuid)";
		std::string scope;
		if (readWhole("/proc/sys/kernel/yama/ptrace_scope", &scope) && !scope.empty()) {
			while (!scope.empty() && (scope.back() == '\n' || scope.back() == ' '))
				scope.pop_back();
			message += "; /proc/sys/kernel/yama/ptrace_scope is " + scope;
			if (scope == "1")
				message += ", so only the process's ancestors may, or root";
			else if (scope == "2")
				message += ", so only root (CAP_SYS_PTRACE) may";
			else if (scope == "3")
				message += ", so no one may until the machine restarts";
		} else {
			message += "; Yama's ptrace_scope, where the kernel has it, may forbid it too";
		}
		return failure(kDenied, message);
	}

private:
	long pid_;
	std::string proc_;
	int mem_ = -1;
};

/* A copy of the library in the process: the mapping of its file's first page. */
struct Mapping {
	uint64_t start = 0;
	uint64_t end = 0;
	unsigned major = 0, minor = 0;
	uint64_t inode = 0;
	std::string path; /* as maps shows it, " (deleted)" included */
};

/* "7f..-7f.. r--p 00000000 fd:01 1234   /usr/lib/libtlstune.so" */
bool parseMapsLine(const std::string &line, Mapping *out)
{
	unsigned long long start, end, offset, inode;
	unsigned major, minor;
	char perms[8];
	int pathAt = -1;
	if (std::sscanf(line.c_str(), "%llx-%llx %7s %llx %x:%x %llu %n", &start, &end, perms, &offset, &major,
			&minor, &inode, &pathAt) < 7 || pathAt < 0 || offset != 0)
		return false;
	out->start = start;
	out->end = end;
	out->major = major;
	out->minor = minor;
	out->inode = inode;
	out->path = line.substr(static_cast<size_t>(pathAt));
	return true;
}

/* The name is what tells: the wrapper and the README spell it libtlstune.so, a build tree's too. */
bool isLibrary(const std::string &path)
{
	const std::string::size_type slash = path.rfind('/');
	const std::string base = slash == std::string::npos ? path : path.substr(slash + 1);
	return base.compare(0, 10, "libtlstune") == 0;
}

Failure findCopies(const Target &target, std::vector<Mapping> *copies)
{
	const std::string path = target.proc() + "/maps";
	std::string maps;
	if (!readWhole(path, &maps)) {
		if (errno == EACCES || errno == EPERM)
			return target.denied(path, errno);
		if (errno == ENOENT || errno == ESRCH)
			return target.noProcess();
		return failure(kUnreadable, "cannot read " + path + ": " + errorText(errno));
	}
	/* A zombie has no memory left to map: empty maps, as a kernel thread's. */
	if (maps.empty() && target.gone())
		return target.noProcess();
	size_t at = 0;
	while (at < maps.size()) {
		size_t end = maps.find('\n', at);
		if (end == std::string::npos)
			end = maps.size();
		Mapping mapping;
		if (parseMapsLine(maps.substr(at, end - at), &mapping) && isLibrary(mapping.path)) {
			bool seen = false;
			for (const Mapping &copy : *copies)
				seen = seen || (copy.inode == mapping.inode && copy.major == mapping.major &&
						copy.minor == mapping.minor && copy.path == mapping.path);
			if (!seen)
				copies->push_back(mapping);
		}
		at = end + 1;
	}
	if (copies->empty())
		return failure(kNotLoaded, target.name() + " does not have libtlstune loaded: no file named "
							    "libtlstune* is mapped in " + path);
	return {};
}

/* The library file a mapping shows: where the symbol table is read from. */
class LibraryFile {
public:
	~LibraryFile()
	{
		if (fd_ >= 0)
			close(fd_);
	}
	LibraryFile() = default;
	LibraryFile(const LibraryFile &) = delete;
	LibraryFile &operator=(const LibraryFile &) = delete;

	/*
	 * /proc/PID/map_files/START-END is the very file mapped, even if it has been replaced
	 * (a package upgrade) or lives in another mount namespace, but only root may open it;
	 * otherwise the path maps names, which is the same file unless it was replaced.
	 */
	Failure open(const Target &target, const Mapping &mapping)
	{
		char range[64];
		std::snprintf(range, sizeof(range), "/map_files/%llx-%llx", static_cast<unsigned long long>(mapping.start),
			      static_cast<unsigned long long>(mapping.end));
		fd_ = ::open((target.proc() + range).c_str(), O_RDONLY | O_CLOEXEC);
		shown_ = mapping.path;
		if (fd_ >= 0)
			return {};
		std::string path = mapping.path;
		const std::string deleted = " (deleted)";
		if (path.size() > deleted.size() && path.compare(path.size() - deleted.size(), deleted.size(), deleted) == 0)
			path.erase(path.size() - deleted.size());
		fd_ = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
		if (fd_ < 0)
			return failure(kUnreadable, "cannot open " + path + ", the library " + target.name() +
							    " has mapped: " + errorText(errno) +
							    " (replaced or removed since it started? as root, " + target.proc() +
							    "/map_files gives the copy it has)");
		struct stat info;
		if (fstat(fd_, &info) == 0 && (info.st_ino != mapping.inode || major(info.st_dev) != mapping.major ||
					       minor(info.st_dev) != mapping.minor))
			note_ = " (" + path + " may not be the file " + target.name() + " mapped: replaced since it "
				"started? as root, " + target.proc() + "/map_files gives the copy it has)";
		return {};
	}

	/* Where tlstune_live is in the process, from the library's dynamic symbol table. */
	Failure liveAddress(const Mapping &mapping, uint64_t *address) const
	{
		Elf64_Ehdr header;
		if (!readExactly(fd_, &header, sizeof(header), 0) || std::memcmp(header.e_ident, ELFMAG, SELFMAG) != 0)
			return unreadable("not an ELF file");
		if (header.e_ident[EI_CLASS] != ELFCLASS64 || header.e_ident[EI_DATA] != ELFDATA2LSB ||
		    header.e_machine != EM_X86_64)
			return unreadable("not a 64-bit x86_64 library, the only kind tlstune-stats reads");
		if (header.e_shentsize != sizeof(Elf64_Shdr) || header.e_shnum == 0)
			return unreadable("no section headers to find the dynamic symbol table by");
		if (header.e_phentsize != sizeof(Elf64_Phdr) || header.e_phnum == 0)
			return unreadable("no program headers to place it in memory by");
		std::vector<Elf64_Shdr> sections(header.e_shnum);
		if (!readExactly(fd_, sections.data(), sections.size() * sizeof(Elf64_Shdr), header.e_shoff))
			return unreadable("its section headers cannot be read");
		const Elf64_Shdr *dynsym = nullptr;
		for (const Elf64_Shdr &section : sections)
			if (section.sh_type == SHT_DYNSYM && !dynsym)
				dynsym = &section;
		if (!dynsym || dynsym->sh_link >= sections.size() || dynsym->sh_entsize != sizeof(Elf64_Sym))
			return unreadable("no dynamic symbol table");
		const Elf64_Shdr &strtab = sections[dynsym->sh_link];
		std::vector<Elf64_Sym> symbols(dynsym->sh_size / sizeof(Elf64_Sym));
		std::string names(strtab.sh_size, '\0');
		if (symbols.size() > 1000000 || names.size() > (64u << 20) ||
		    !readExactly(fd_, symbols.data(), symbols.size() * sizeof(Elf64_Sym), dynsym->sh_offset) ||
		    !readExactly(fd_, &names[0], names.size(), strtab.sh_offset))
			return unreadable("its dynamic symbol table cannot be read");

		const Elf64_Sym *live = nullptr;
		bool marker = false;
		for (const Elf64_Sym &symbol : symbols) {
			if (symbol.st_name >= names.size() || symbol.st_shndx == SHN_UNDEF)
				continue;
			const char *name = names.c_str() + symbol.st_name;
			if (std::strcmp(name, "tlstune_live") == 0 && ELF64_ST_TYPE(symbol.st_info) == STT_OBJECT)
				live = &symbol;
			marker = marker || std::strcmp(name, "tlstune_version") == 0;
		}
		if (!live && marker)
			return failure(kOtherLayout, shown_ + " has no tlstune_live: a tlstune library from before "
							      "`tlstune --stats PID`; its counters show only at exit, with "
							      "TLSTUNE_STATS=1" + note_);
		if (!live)
			return unreadable("no tlstune_live in its dynamic symbol table: not a tlstune library");

		/* The mapping at file offset 0 holds the segment that starts the file: the load bias follows. */
		std::vector<Elf64_Phdr> segments(header.e_phnum);
		if (!readExactly(fd_, segments.data(), segments.size() * sizeof(Elf64_Phdr), header.e_phoff))
			return unreadable("its program headers cannot be read");
		const uint64_t page = static_cast<uint64_t>(sysconf(_SC_PAGESIZE));
		for (const Elf64_Phdr &segment : segments) {
			if (segment.p_type == PT_LOAD && segment.p_offset < page) {
				*address = mapping.start - (segment.p_vaddr & ~(page - 1)) + live->st_value;
				return {};
			}
		}
		return unreadable("no loadable segment at its start");
	}

	Failure unreadable(const std::string &why) const
	{
		return failure(kUnreadable, shown_ + ": " + why + note_);
	}
	const std::string &note() const { return note_; }

private:
	int fd_ = -1;
	std::string shown_;
	std::string note_;
};

/* One copy's line, or why there is none from it. */
Failure readCopy(const Target &target, const Mapping &mapping, std::string *line)
{
	LibraryFile file;
	if (Failure failed = file.open(target, mapping))
		return failed;
	uint64_t address = 0;
	if (Failure failed = file.liveAddress(mapping, &address))
		return failed;

	/* The magic and layout first: nothing further is read from a layout this tool does not know. */
	Live live;
	const size_t header = offsetof(Live, program);
	if (Failure failed = target.read(address, &live, header, "tlstune_live"))
		return failed;
	if (std::memcmp(live.magic, kLiveMagic, sizeof(kLiveMagic)) != 0)
		return failure(kUnreadable, "no tlstune_live found where " + mapping.path + " puts it in " + target.name() +
						    file.note());
	if (live.layout != kLiveLayout)
		return failure(kOtherLayout, mapping.path + " in " + target.name() + " has tlstune_live of layout " +
						     std::to_string(live.layout) + "; this tlstune-stats reads layout " +
						     std::to_string(kLiveLayout) + ": use the tlstune installed with that library");
	if (Failure failed = target.read(address, &live, sizeof(live), "tlstune_live"))
		return failed;
	const LiveState state = static_cast<LiveState>(live.state);
	if (state != LiveState::Active && state != LiveState::Disabled)
		return failure(kNotLoaded, target.name() + " maps " + mapping.path + ", but that copy of the library "
							     "counts nothing: the process has made no call the library works on yet "
							     "(it sets up at the first), or another copy of it, under another "
							     "file name, does the work");
	if (live.counterCount > kLiveCounterCapacity)
		return failure(kUnreadable, "tlstune_live in " + target.name() + " lists " +
						    std::to_string(live.counterCount) + " counters, more than it holds");
	live.program[sizeof(live.program) - 1] = '\0';

	char text[4096];
	if (state == LiveState::Disabled) {
		formatDisabledLine(text, sizeof(text), live.program, target.pid());
		*line = text;
		return {};
	}
	StatsValue values[kLiveCounterCapacity];
	for (uint32_t i = 0; i < live.counterCount; i++) {
		LiveCounter &counter = live.counters[i];
		counter.name[sizeof(counter.name) - 1] = '\0';
		/*
		 * Not atomic against the process's increments: a counter that moves while the kernel
		 * copies it may read torn. Each is one aligned 8-byte word, read on its own.
		 */
		values[i] = { counter.name, 0 };
		if (Failure failed = target.read(counter.address, &values[i].value, sizeof(uint64_t), counter.name))
			return failed;
	}
	formatStatsLine(text, sizeof(text), values, live.counterCount, live.program, target.pid());
	*line = text;
	return {};
}

int usage(FILE *out, int status)
{
	std::fprintf(out, "Usage: tlstune-stats PID\n"
			  "Print the tlstune stats line of running process PID, read from its memory;\n"
			  "the process is not stopped or signalled. `tlstune --stats PID` runs this.\n");
	return status;
}

} /* namespace */

int main(int argc, char **argv)
{
	if (argc == 2 && (std::strcmp(argv[1], "-h") == 0 || std::strcmp(argv[1], "--help") == 0))
		return usage(stdout, kPrinted);
	if (argc != 2 || !*argv[1] || std::strspn(argv[1], "0123456789") != std::strlen(argv[1]))
		return usage(stderr, kUsage);
	/* Larger than any pid_max (2^22): no such process, not a number to wrap. */
	const std::string digits = argv[1];
	const std::string::size_type first = digits.find_first_not_of('0');
	const bool huge = first != std::string::npos && digits.size() - first > 9;
	const long pid = huge ? 0 : std::strtol(digits.c_str(), nullptr, 10);
	if (pid <= 0)
		return report(failure(kNoProcess, "no process with pid " + digits));

	Target target(pid);
	std::vector<Mapping> copies;
	if (Failure failed = findCopies(target, &copies))
		return report(failed);
	if (Failure failed = target.openMemory())
		return report(failed);
	/* Only one copy works (a later one passes through, shim/runtime); say the likeliest reason when none does. */
	Failure worst;
	for (const Mapping &copy : copies) {
		std::string line;
		const Failure failed = readCopy(target, copy, &line);
		if (!failed) {
			std::printf("tlstune: %s\n", line.c_str());
			return std::fflush(stdout) == 0 ? kPrinted : kUnreadable;
		}
		if (failed.status == kNoProcess || failed.status == kDenied)
			return report(failed);
		if (!worst || (worst.status == kNotLoaded && failed.status != kNotLoaded))
			worst = failed;
	}
	return report(worst);
}
