#include <dlfcn.h>
#include "runtime.h"

#include <array>
#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <new>
#include <poll.h>
#include <sched.h>
#include <csignal>
#include <sys/socket.h>
#include <unistd.h>
#include <utility>
#include <pthread.h>
#include <cstring>
#include <mutex>
#include <sys/auxv.h>

#include "core/ca/parsed_ahead.h"
#include "core/log.h"
#include "core/patient_lock.h"
#include "core/signals_blocked.h"
#include "interpose/export.h"
#include "live.h"
#include "symbols.h"
#include "unwinder.h"

TLSTUNE_EXPORT const char *tlstune_version(void);
/* The same function, bound to this copy whoever came first. */
extern "C" const char *thisCopysVersion(void) __attribute__((alias("tlstune_version"), visibility("hidden")));

namespace tlstune {

namespace {

const char *environment(const char *name, void *)
{
	/* secure_getenv: a setuid program's environment is not its caller's to tune. */
	return secure_getenv(name);
}

/* Any TLSTUNE_ variable set: a walk over the environment, no copy, no allocation. */
bool tunedByEnvironment() noexcept
{
	if (getauxval(AT_SECURE))
		return false;
	for (char **entry = environ; entry && *entry; entry++) {
		if (std::strncmp(*entry, "TLSTUNE_", 8) == 0)
			return true;
	}
	return false;
}

/* The settings read at load, when there were any: taken over by buildProcess. */
alignas(ParsedConfig) unsigned char loadedConfigStorage[sizeof(ParsedConfig)];
ParsedConfig *g_loadedConfig = nullptr;

/* This process's, from load on: set where it starts and in fork's child, never in a vfork child. */
pid_t g_pid = 0;

const char *firstCopy() noexcept;

/*
 * What is taken at start: by the library's constructor, or before it by the state's
 * build when another library's constructor calls in first (stunnel's libtirpc closes).
 */
void noteStart() noexcept
{
	static const bool noted = [] {
		programName(); /* copied before the program can write over its argv */
		/* The environment as it was at start: the program may clear or rewrite it later. */
		if (tunedByEnvironment())
			g_loadedConfig = new (loadedConfigStorage) ParsedConfig(parseConfig(environment, nullptr));
		g_pid = getpid();
		/* Said at load: the later copy may never build its state (the first does the work). */
		if (g_loadedConfig) {
			setLogLevel(g_loadedConfig->config.logLevel);
			const char *first = logEnabled(LogLevel::Debug) ? firstCopy() : nullptr;
			if (first)
				logLine(LogLevel::Debug, "another copy of the library, %s, came first: this "
					"one passes every call through", first);
		}
		return true;
	}();
	(void)noted;
}

/* Set by the first interposed OpenSSL call or CA load: this process uses OpenSSL. */
std::atomic<bool> usesOpenSsl{false};

void printStats()
{
	/*
	 * Printed whatever TLSTUNE_LOG says: the user asked for it by name. Only by processes
	 * that used OpenSSL: `tlstune --stats sh -c 'curl ...'` wants curl's line, not sh's.
	 * The program and pid tell an nginx master's line from its workers'.
	 */
	const Process &p = process();
	const int pid = static_cast<int>(getpid());
	char line[512];
	if (p.config.disable) {
		if (!usesOpenSsl.load(std::memory_order_relaxed))
			return;
		formatDisabledLine(line, sizeof(line), programName(), pid);
	} else {
		if (!p.stats.any() && !p.coalescer.counters().records.load(std::memory_order_relaxed))
			return;
		const std::array<LineCounter, kLineCounters> counters = lineCounters(p);
		std::array<StatsValue, kLineCounters> values;
		for (std::size_t i = 0; i < kLineCounters; i++)
			values[i] = { counters[i].name, counters[i].counter->load(std::memory_order_relaxed) };
		formatStatsLine(line, sizeof(line), values.data(), values.size(), programName(), pid);
	}
	printLine("%s", line);
}

/*
 * On the first OpenSSL call or CA load: the settings line of TLSTUNE_VERBOSE comes from the
 * process that uses OpenSSL, once, not from every sh, timeout or strace that loads the library.
 */
void noteUsesOpenSsl() noexcept
{
	if (usesOpenSsl.exchange(true))
		return;
	const Process &p = process();
	for (const std::string &error : p.configErrors)
		logLine(LogLevel::Error, "%s", error.c_str());
	if (p.config.verbose)
		printLine("version %s, %s pid %d: %s", TLSTUNE_VERSION, programName(),
			  static_cast<int>(getpid()), describeConfig(p.config).c_str());
}

/*
 * The OpenSSL side, and libcrypto's, are built under a lock that a fork's prepare handler
 * takes too: a child never inherits one half built (a hunt: a fork while another thread
 * made its first OpenSSL call left the child waiting for ever on a function-local static's
 * guard, 10 of 50 runs against 3 without).
 */
struct BuiltFirst {
	std::mutex building;
	bool heldForFork = false;
};
BuiltFirst g_opensslBuild;
BuiltFirst g_cryptoBuild;

/*
 * Bounded: a builder may wait on a lock the forking thread holds (the loader's, a fork
 * from a library's constructor): the child then builds its own.
 */
void holdForFork(BuiltFirst &build) noexcept
{
	std::unique_lock<std::mutex> lock(build.building, std::defer_lock);
	build.heldForFork = lockWithin(lock, std::chrono::milliseconds(1000));
	lock.release();
}

void releaseAfterFork(BuiltFirst &build, bool child) noexcept
{
	if (build.heldForFork)
		build.building.unlock();
	else if (child)
		new (&build.building) std::mutex; /* its holder is not in this process */
	build.heldForFork = false;
}

} /* namespace */

void lockForFork()
{
	/*
	 * Built now if it was not: another thread may be building it, and a child would wait
	 * for ever on the half-made copy's guard.
	 */
	process();
	holdForFork(g_opensslBuild);
	holdForFork(g_cryptoBuild);
	/*
	 * Held plaintext becomes records, and the records go to the kernel now, in the calling
	 * thread, while the socket takes them: both processes then share a connection whose
	 * bytes are all the kernel's. daemon(3) forks and leaves the parent by glibc's own
	 * _exit, which the shim never sees: records left with the parent were lost, and the
	 * child's next records reached the peer out of sequence (bad record mac).
	 */
	process().held.encryptAllNow();
	process().coalescer.flushAll();
	process().held.lockForFork();
	process().caCache.lockForFork();
	ParsedAhead::lockForFork();
	process().coalescer.lockForFork();
	process().epoll.lockForFork(); /* before buffered: EpollSets::claim's order */
	process().buffered.lockForFork();
}
/* Both processes now share every epoll set, and either may change it: read the kernel's. */
void unlockInParent()
{
	process().epoll.forked();
	process().epoll.unlockAfterFork();
	process().buffered.unlockAfterFork();
	process().coalescer.unlockInParent();
	ParsedAhead::unlockAfterFork();
	process().caCache.unlockAfterFork();
	process().held.unlockInParent();
	releaseAfterFork(g_cryptoBuild, false);
	releaseAfterFork(g_opensslBuild, false);
}
void unlockInChild()
{
	g_pid = getpid();
	process().pid = g_pid;
	process().epoll.forked();
	process().epoll.unlockAfterFork();
	process().buffered.unlockAfterFork();
	process().cache.forkedChild();
	fillGate().forkedChild();
	epollWaiters().forkedChild();
	process().coalescer.unlockInChild();
	ParsedAhead::unlockAfterFork();
	process().caCache.unlockAfterFork();
	process().held.unlockInChild();
	releaseAfterFork(g_cryptoBuild, true);
	releaseAfterFork(g_opensslBuild, true);
}


namespace {


int libcPoll(struct pollfd *fds, unsigned long nfds, int timeout)
{
	return process().libc.poll(fds, nfds, timeout);
}

bool plaintextPending() noexcept
{
	return process().held.anyHeld();
}

void encryptPlaintext() noexcept
{
	process().held.encryptAll();
}

/*
 * Another copy of the library came first in the lookup order (/etc/ld.so.preload and the
 * wrapper's, or a build tree's and an installed one): it interposes every call and does
 * the work, and reaches this copy's functions as the "next" ones. This copy then passes
 * everything through and says nothing: two would tune each call twice, warn falsely and
 * split the counts between two stats lines.
 */
const char *firstCopy() noexcept
{
	Dl_info first;
	const void *found = dlsym(RTLD_DEFAULT, kCopyMarker);
	/*
	 * This copy's own marker, by a hidden alias. &tlstune_version would not do: it is
	 * exported, so the loader binds this copy's reference to the first copy's definition,
	 * and every copy took itself for the first (both counted and tuned; two copies'
	 * tlstune_live said active). No dladdr unless it is another copy (a start-up cost).
	 */
	if (!found || found == reinterpret_cast<const void *>(&thisCopysVersion))
		return nullptr;
	return dladdr(found, &first) && first.dli_fname ? first.dli_fname : "?";
}

Process *buildProcess() noexcept
{
	/* Never destroyed: threads and the host's destructors may still call in at exit. */
	alignas(Process) static unsigned char storage[sizeof(Process)];
	noteStart();
	ParsedConfig parsed = g_loadedConfig ? std::move(*g_loadedConfig) : ParsedConfig{};
	const char *first = firstCopy();
	if (first) {
		parsed.config.disable = true;
		parsed.config.stats = false;
		parsed.config.verbose = false;
		parsed.errors.clear(); /* the first copy reports them */
	}
	Process &instance = *new (storage) Process(parsed.config);
	instance.pid = g_pid;
	setLogLevel(instance.config.logLevel);
	/* Reported at the first OpenSSL call: by curl, not by every sh and cat of its pipeline. */
	instance.configErrors = std::move(parsed.errors);

	/* Where `tlstune --stats PID` finds the counters: the working copy's only. */
	if (!first)
		publishLive(instance);

	if (instance.config.stats)
		atexit(printStats);
	if (logEnabled(LogLevel::Debug))
		logLine(LogLevel::Debug, "loaded into %s pid %d", programName(), static_cast<int>(getpid()));
	return &instance;
}

OpenSsl *buildOpenSsl() noexcept
{
	alignas(OpenSsl) static unsigned char storage[sizeof(OpenSsl)];
	OpenSsl &instance = *new (storage) OpenSsl;
	Process &p = process();
	loadUnwinder();
	noteUsesOpenSsl();
	if (!resolveOpenSsl(&instance.api)) {
		logLine(LogLevel::Warn, "no libssl found in this process: passing every call through");
		return &instance;
	}
	if (p.config.disable)
		return &instance;
	instance.coalescing = p.config.coalesce != CoalesceMode::Off && instance.filter.init(instance.api, &p.coalescer);
	instance.records = instance.coalescing && p.config.coalesce == CoalesceMode::Records &&
			   instance.api.hasRecordPath();
	if (instance.records)
		p.coalescer.setPlaintextWork({ plaintextPending, encryptPlaintext });
	else if (instance.coalescing && p.config.coalesce == CoalesceMode::Records)
		logLine(LogLevel::Warn, "TLSTUNE_COALESCE=records: this libssl lacks functions it needs: "
			"merging syscalls only");
	if (!instance.api.hasReadPath()) {
		logLine(LogLevel::Warn, "this libssl lacks read-ahead or readiness functions: "
			"read tuning off");
		return &instance;
	}
	/* With read-ahead off by configuration the shim changes nothing, readiness included. */
	instance.tracking = p.config.readAhead && p.config.readiness &&
			    instance.slot.init(instance.api, &p.read);
	/*
	 * Read-ahead without the readiness layer stalls programs that poll before reading;
	 * only TLSTUNE_READINESS=off, set to show exactly that, asks for it anyway.
	 */
	instance.tuning = p.config.readAhead && (instance.tracking || !p.config.readiness) &&
			  instance.readTuning.init(instance.api);
	instance.libssl = spanOf(reinterpret_cast<const void *>(instance.api.SSL_new));
	return &instance;
}

Crypto *buildCrypto() noexcept
{
	alignas(Crypto) static unsigned char storage[sizeof(Crypto)];
	Crypto &instance = *new (storage) Crypto;
	loadUnwinder();
	const Config &config = process().config;
	noteUsesOpenSsl();
	const bool found = resolveCrypto(&instance.api);
	if (found)
		instance.libcrypto = spanOf(reinterpret_cast<const void *>(instance.api.X509_STORE_get0_objects));
	const bool wanted = found && config.caCache && config.caLazy && !config.disable;
	instance.caching = wanted && instance.api.complete() && instance.lazy.init(instance.api);
	if (wanted && !instance.caching)
		logLine(LogLevel::Info, "this libcrypto is not one the CA cache knows (OpenSSL 3.0 and "
			"3.5, with every function it calls): OpenSSL loads CA files itself");
	return &instance;
}

} /* namespace */

namespace {

RateLimit refusedLines;

/*
 * The shim's own send of held bytes. Refused (EPERM, ENOSYS: a seccomp filter the process
 * was started under, which the shim never saw installed, and which lets the program's own
 * write through: a hunt lost 780 bytes), it is made as OpenSSL's socket BIO makes it, by
 * write, and the process holds nothing from then on. (Refusing a process anything because
 * it runs under some filter would turn tlstune off in every container: Docker's default
 * profile is one.)
 */
ssize_t sendOrWrite(int fd, const void *data, size_t length, int flags)
{
	const ssize_t sent = libc().send(fd, data, length, flags);
	if (sent >= 0 || (errno != EPERM && errno != ENOSYS))
		return sent;
	process().sendRefused();
	/* MSG_DONTWAIT: a write that could block is left to the owner's own call (Again). */
	struct pollfd room = { fd, POLLOUT, 0 };
	if ((flags & MSG_DONTWAIT) && (libcPoll(&room, 1, 0) != 1 || !(room.revents & POLLOUT))) {
		errno = EAGAIN;
		return -1;
	}
	if (!(flags & MSG_NOSIGNAL))
		return libc().write(fd, data, length);
	/* MSG_NOSIGNAL: a SIGPIPE the write raises is taken back, unless one was pending. */
	sigset_t pipe, old, pending;
	sigemptyset(&pipe);
	sigaddset(&pipe, SIGPIPE);
	const bool blocked = pthread_sigmask(SIG_BLOCK, &pipe, &old) == 0;
	const bool wasPending = sigpending(&pending) == 0 && sigismember(&pending, SIGPIPE) == 1;
	const ssize_t written = libc().write(fd, data, length);
	const int writeErrno = errno;
	if (written < 0 && writeErrno == EPIPE && blocked && !wasPending) {
		const struct timespec now = { 0, 0 };
		sigtimedwait(&pipe, nullptr, &now);
	}
	if (blocked)
		pthread_sigmask(SIG_SETMASK, &old, nullptr);
	errno = writeErrno;
	return written;
}

} /* namespace */

void Process::sendRefused() noexcept
{
	const int savedErrno = errno;
	unseen.noteConfined();
	held.stopHolding();
	coalescer.stopHoldingIdle();
	logLimited(refusedLines, LogLevel::Warn, "a send of the shim's was refused (seccomp?): small writes are "
		   "no longer held in this process");
	errno = savedErrno;
}

void Process::handOverAndStopHolding()
{
	/* Nothing to hand over (a process that never held): no system call. */
	if (coalescer.idle()) {
		held.stopHolding();
		coalescer.stopHoldingIdle();
		return;
	}
	const int savedErrno = errno;
	held.stopHolding();
	held.encryptAllNow();
	coalescer.stopHolding();
	errno = savedErrno;
}

void Process::handOver() noexcept
{
	if (coalescer.idle() || inVforkChild())
		return;
	const int savedErrno = errno;
	held.encryptAllNow();
	coalescer.flushAll();
	coalescer.awaitFlusherPass();
	errno = savedErrno;
}

bool Process::stopHoldingIfHolding()
{
	if (!coalescer.holding())
		return false;
	/* Holding is on in every process until then: only one that held has a line to say. */
	const bool hadHeld = !coalescer.idle();
	handOverAndStopHolding();
	return hadHeld;
}

void Process::stopHoldingAndEndThread(const char *why)
{
	if (stopHoldingIfHolding())
		logLine(LogLevel::Info, "%s: small writes are no longer held in this process", why);
	coalescer.endFlusher();
}

void Process::unsharingFiles()
{
	/* Idle or not: the thread's table keeps the old one's sockets open until it ends. */
	if (!inVforkChild())
		stopHoldingAndEndThread("unshare(CLONE_FILES)");
}

bool Process::yieldThreadToTheProgram()
{
	if (inVforkChild() || !coalescer.flusherRunning())
		return false;
	const int savedErrno = errno;
	stopHoldingAndEndThread("a new thread or process met the task limit (RLIMIT_NPROC)");
	errno = savedErrno;
	return true;
}

void Process::pushHeld(int fd) noexcept
{
	if ((!held.anyHeld() && !coalescer.anyPending()) || inVforkChild())
		return;
	const int savedErrno = errno;
	if (copiedFds().mayHave(fd)) {
		held.encryptAllNow();
		coalescer.flushAll();
	} else {
		held.pushing(fd);
		coalescer.pushing(fd);
	}
	coalescer.awaitFlusherPass();
	errno = savedErrno;
}

void Process::childInThisMemory(unsigned long long cloneFlags)
{
	/* A thread, or a copy of the memory (fork's): no child in this memory. */
	if (!(cloneFlags & CLONE_VM) || (cloneFlags & CLONE_THREAD))
		return;
	noteChildSharingMemory();
	if (inVforkChild())
		return;
	if ((cloneFlags & CLONE_VFORK) && !(cloneFlags & CLONE_FILES)) {
		handOver();
		return;
	}
	if (!coalescer.holding())
		return;
	handOverAndStopHolding();
	logLine(LogLevel::Info, "clone(CLONE_VM) made a process that shares this memory or its fds: small writes "
		"are no longer held in this process");
}


SocketCalls Process::socketCalls() noexcept
{
	return { sendOrWrite, libcPoll };
}

std::atomic<Process *> g_process{ nullptr };

Process &processFirst() noexcept
{
	/*
	 * Not in a signal handler of this thread: one that calls in while the state is built
	 * would find it half made (a recursive guard: std::terminate).
	 */
	SignalsBlocked blocked;
	static Process *instance = buildProcess();
	g_process.store(instance, std::memory_order_release);
	return *instance;
}

LibcApi g_libc;
std::atomic<bool> g_libcResolved{ false };

const LibcApi &libcFirst() noexcept
{
	SignalsBlocked blocked; /* as processFirst's */
	static const bool resolved = [] {
		resolveLibc(&g_libc);
		return true;
	}();
	g_libcResolved.store(resolved, std::memory_order_release);
	return g_libc;
}

std::atomic<const OpenSsl *> g_openssl{ nullptr };

namespace {

std::atomic<const Crypto *> g_crypto{ nullptr };

template <typename Part>
const Part &buildFirst(BuiltFirst &build, std::atomic<const Part *> &built, Part *(*make)()) noexcept
{
	/* Not in a signal handler of this thread: one that calls in would wait for itself. */
	SignalsBlocked blocked;
	std::lock_guard<std::mutex> lock(build.building);
	const Part *part = built.load(std::memory_order_relaxed);
	if (!part) {
		part = make();
		built.store(part, std::memory_order_release);
	}
	return *part;
}

} /* namespace */

const OpenSsl &opensslFirst() noexcept
{
	return buildFirst(g_opensslBuild, g_openssl, buildOpenSsl);
}

const Crypto &crypto() noexcept
{
	const Crypto *built = g_crypto.load(std::memory_order_acquire);
	return built ? *built : buildFirst(g_cryptoBuild, g_crypto, buildCrypto);
}

namespace {
/* Set in the parent before the child exists, so the child, in the same memory, sees it. */
std::atomic<bool> g_childMayShareMemory{ false };
} /* namespace */

void noteChildSharingMemory() noexcept
{
	g_childMayShareMemory.store(true, std::memory_order_relaxed);
}

void wakeWaitingSets(Process &p, int fd, ino_t ino) noexcept
{
	int sets[16];
	const int found = p.epoll.setsOf(fd, ino, sets, 16);
	for (int i = 0; i < found; i++)
		if (epollWaiters().waitingOn(sets[i]))
			p.epoll.wake().wake(sets[i], p.libc.epoll_ctl);
}

bool Process::inVforkChild() const noexcept
{
	/* No such child was ever made: a process that never vforks pays no getpid per close (issue 24). */
	if (!g_childMayShareMemory.load(std::memory_order_relaxed))
		return false;
	/* vfork() runs no atfork handler: the child still has the parent's pid recorded. */
	return getpid() != pid;
}

void Process::inputReleased(ino_t ino) noexcept
{
	if (Process *p = builtProcess())
		p->epoll.released(ino);
}

void Process::drainBeforeImageEnds(ImageEnd end, AbortiveCloses *made) noexcept
{
	/*
	 * Its sockets close with the process, or pass to a new image that cannot read the
	 * shim's queues (a hunt: an exec's closed with a FIN): bytes queued unread reset them.
	 */
	const bool resets = !buffered.empty();
	/* No system call before that (getpid): a sandbox may forbid it (seccomp, issue 22). */
	if ((!resets && coalescer.idle()) || inVforkChild())
		return;
	if (resets)
		buffered.imageEnds(end == ImageEnd::MayReturn ? made : nullptr);
	handOverAtImageEnd(end);
}

void Process::handOverAtImageEnd(ImageEnd end) noexcept
{
	if (coalescer.idle())
		return;
	const int savedErrno = errno;
	/* Not after exit's atexit handlers: OpenSSL may be cleaned up (see encryptBeforeExit). */
	const bool plaintext = held.holding();
	/*
	 * Other threads write on until the image ends: what they write then goes straight out.
	 * An exec too (a thread that kept writing through one lost what it wrote after this
	 * drain); one that fails leaves the process writing straight out from then on.
	 */
	held.stopHolding();
	coalescer.stopHolding();
	if (plaintext)
		held.encryptAtImageEnd(end == ImageEnd::MayReturn);
	coalescer.drainAll();
	errno = savedErrno;
}

/*
 * At exit, after the program's atexit handlers and the destructors of the libraries
 * loaded after this one (an ELF destructor of a preloaded library runs after them): bytes
 * written from an atexit handler go out too.
 */
__attribute__((destructor)) static void unloadShim()
{
	/* A process that never called in has nothing to hand over. */
	if (!g_process.load(std::memory_order_acquire))
		return;
	process().drainBeforeImageEnds();
}

namespace {
RateLimit sandboxLines;
} /* namespace */

void Process::enterSandbox() noexcept
{
	if (inVforkChild())
		return;
	unseen.noteConfined();
	if (stopHoldingIfHolding())
		logLimited(sandboxLines, LogLevel::Info, "seccomp: small writes are no longer held in this process");
}

/*
 * What must be taken at load; the rest of the state is built by the first call that needs
 * it (issue 24: /bin/true, sh and cat make none, or few, and never use TLS).
 */
__attribute__((constructor)) static void loadShim()
{
	noteStart();
	/*
	 * At load (10 us of a /bin/true), not at the first call: that may come from a signal
	 * handler that interrupted the loader, where dlsym is not safe.
	 */
	libc();
	/*
	 * At load, before any of the program's: the last prepare handler to run, so that what
	 * the program's handlers write still goes out before the shim locks for the fork.
	 */
	pthread_atfork(lockForFork, unlockInParent, unlockInChild);
}

} /* namespace tlstune */

TLSTUNE_EXPORT const char *tlstune_version(void)
{
	return TLSTUNE_VERSION;
}
