#pragma once

#include <atomic>

#include "core/read/buffered_fds.h"
#include "core/read/epoll_waiters.h"
#include "core/read/fill_gate.h"
#include "core/ca/api.h"
#include "core/read/read_tuning.h"
#include "core/read/socket_cache.h"
#include "core/read/unseen_waits.h"
#include "core/ca/cache.h"
#include "core/ca/lazy.h"
#include "core/write/coalescer.h"
#include "core/write/coalescing_bio.h"
#include "core/config.h"
#include "core/read/connection.h"
#include "core/read/epoll_sets.h"
#include "core/write/held_plaintext.h"
#include "core/openssl_api.h"
#include "core/stats.h"
#include "libc_api.h"
#include "object_span.h"

namespace tlstune {

/*
 * libc's own definitions of what the shim interposes: resolved at load, or by an earlier
 * caller (another library's constructor), then one load.
 */
extern LibcApi g_libc;
extern std::atomic<bool> g_libcResolved;
const LibcApi &libcFirst() noexcept;
inline const LibcApi &libc() noexcept
{
	return g_libcResolved.load(std::memory_order_acquire) ? g_libc : libcFirst();
}

/*
 * The process-wide state of the shim, built by the first call that needs it: a process
 * that never calls in (/bin/true) builds none. Built once; never torn down (the host may
 * call in from its own destructors).
 */
struct Process {
	explicit Process(const Config &parsed) noexcept
		: config(parsed), caCache(std::chrono::seconds(parsed.caCacheTtl)),
		  coalescer(parsed.coalesceLimit, std::chrono::microseconds(parsed.coalesceDelayUs),
			    socketCalls())
	{
		buffered.onReleased(inputReleased);
	}
	/* send(2), and libc's poll(2) as resolved in libc (the shim's own poll flushes). */
	static SocketCalls socketCalls() noexcept;
	/* OpenSSL holds nothing the shim read ahead for the socket ino: its one-shot arms get their input back. */
	static void inputReleased(ino_t ino) noexcept;

	/*
	 * Before _exit, exec or the end of exit: what the coalescer holds goes out (bounded
	 * as at close). Not in a vfork child, which shares the parent's memory and locks.
	 */
	enum class ImageEnd {
		Never,     /* _exit, _Exit, quick_exit, exit: nothing interrupted resumes */
		MayReturn, /* an exec, which returns when it fails */
	};
	void drainBeforeImageEnds(ImageEnd end = ImageEnd::Never, AbortiveCloses *made = nullptr) noexcept;
	/*
	 * drainBeforeImageEnds' half for what is written: what is held goes to the kernel, and
	 * nothing is held from then on. It waits (200 ms at most) for another thread inside
	 * the shim's locks, and not for a lock this thread holds (a handler or a callback
	 * that interrupted it there).
	 */
	void handOverAtImageEnd(ImageEnd end) noexcept;
	/*
	 * The program confines itself (seccomp): the calls the shim makes for it (send,
	 * getsockopt, a thread) may be forbidden from now on. What is held goes out first,
	 * and the process's writes go straight through afterwards (issue 22); a connection
	 * decided afterwards does not read ahead (issue 23: fstat and getsockopt may be forbidden).
	 */
	void enterSandbox() noexcept;
	/*
	 * A send of the shim's was refused (sendOrWrite): from now on nothing is held, and no
	 * connection decided later reads ahead (its calls may be refused too).
	 */
	void sendRefused() noexcept;
	/*
	 * Before a clone, raw or not, with its flags: only a child process in this memory
	 * (CLONE_VM without CLONE_THREAD) is one to act on. One that borrows it while this thread waits (CLONE_VFORK) gets what is
	 * held handed over first. One that runs beside this process, or shares its fd table
	 * (CLONE_FILES: its closes are this process's, unseen), makes the process hold nothing
	 * more: what is held goes out, and writes go straight through. From then on
	 * inVforkChild asks the kernel (noteChildSharingMemory).
	 */
	void childInThisMemory(unsigned long long cloneFlags);
	/* What is held goes to the kernel (no system call where nothing ever was), and nothing more is held. */
	void handOverAndStopHolding();
	/* The same while holding: true where a write was ever held (a line is worth saying). */
	bool stopHoldingIfHolding();
	/* stopHoldingIfHolding, its line (why: what took the thread away), and the thread ends. */
	void stopHoldingAndEndThread(const char *why);
	/*
	 * Before another program (posix_spawn, popen) or a vfork-like copy may write on an
	 * inherited socket: what is held goes to the kernel.
	 */
	void handOver() noexcept;
	/*
	 * Before unshare(CLONE_FILES), which gives the calling thread an fd table of its own:
	 * the shim's thread would go on sending by numbers in the old one. What is held goes
	 * out, the thread ends, and nothing more is held.
	 */
	void unsharingFiles();
	/*
	 * The program's new thread or process met the user's task limit (RLIMIT_NPROC), which
	 * counts the shim's thread too: what is held goes to the kernel, nothing more is held in
	 * this process (a held write would start the thread again) and the thread ends. False
	 * where there was no thread of the shim's to end.
	 */
	bool yieldThreadToTheProgram();
	/*
	 * What is held for the socket fd goes to the kernel now, the connections holding on
	 * afterwards (a cork, a SHUT_RD): every connection's for a number that was copied, as
	 * the shim finds a connection by the number it writes to (a hunt: a cork through a dup
	 * waited 44 ms a request). A few loads where nothing is held (lighttpd corks each response).
	 */
	void pushHeld(int fd) noexcept;
	/*
	 * This is a vfork child (or posix_spawn's): it must change no state of the shim's. A
	 * load until the process makes such a child (noteChildSharingMemory), then a getpid.
	 */
	bool inVforkChild() const noexcept;

	const Config config;
	/* TLSTUNE_* values not accepted, for the process's first OpenSSL call to report. */
	std::vector<std::string> configErrors;
	pid_t pid = 0; /* this process's, set at start and in fork's child */
	const LibcApi &libc = tlstune::libc();
	Stats stats;
	BufferedFds buffered{ &copiedFds() };
	SocketCache cache; /* what the shim read ahead of its connections' sockets */
	ReadState read{ &buffered, &cache }; /* for a connection's end (ConnectionSlot) */
	EpollSets epoll{ &copiedFds() };
	UnseenWaits unseen;
	CaCache caCache;
	Coalescer coalescer;
	HeldRegistry held; /* TLSTUNE_COALESCE=records */
	/* The program set a message or record padding callback: it holds no plaintext (callbacks.cpp). */
	std::atomic<bool> recordCallbacks{false};
};
/*
 * Built by the first call (processFirst), then one load: every interposed libc call starts
 * here, and one with no work should cost a load and a branch (issue 24).
 */
extern std::atomic<Process *> g_process;
Process &processFirst() noexcept;
inline Process &process() noexcept
{
	Process *built = g_process.load(std::memory_order_acquire);
	return built ? *built : processFirst();
}

/*
 * Before a call that can make a child with a pid of its own in this memory (vfork, clone
 * with CLONE_VM and without CLONE_THREAD): from then on inVforkChild asks the kernel.
 */
void noteChildSharingMemory() noexcept;

/*
 * A call read new records of the socket fd (inode ino) ahead, in a process with threads
 * while a thread waits on an epoll set: the sets that register it and have a thread
 * waiting are woken, as the kernel would have ended those waits (EpollWaiters).
 */
void wakeWaitingSets(Process &p, int fd, ino_t ino) noexcept;

/* The state if a call has built it, else null: for ways out, which have nothing to hand over then. */
inline Process *builtProcess() noexcept
{
	return g_process.load(std::memory_order_acquire);
}

/*
 * The OpenSSL side, resolved on the first interposed OpenSSL call, when the program's
 * libssl is certainly loaded (python dlopens it RTLD_LOCAL long after start-up).
 */
struct OpenSsl {
	OpenSslApi api;
	ConnectionSlot slot;
	/* Connections are followed (readiness and fd learning). */
	bool tracking = false;
	/* Followed connections get read-ahead and the read buffer (core/read/read_tuning.h). */
	bool tuning = false;
	ReadTuning readTuning;
	/* Where libssl is mapped: a call libssl makes to itself, told by its return address. */
	ObjectSpan libssl;
	bool inLibssl(const void *address) const noexcept { return libssl.contains(address); }
	/* Writes to plain sockets go through the coalescing filter. */
	CoalescingBio filter;
	bool coalescing = false;
	/* Small writes' plaintext is held and merged into records (TLSTUNE_COALESCE=records). */
	bool records = false;
};
/*
 * Built by the first call (opensslFirst), then one load: every interposed OpenSSL call
 * starts here, so that a call with no work does not pay a function call more (issue 24).
 */
extern std::atomic<const OpenSsl *> g_openssl;
const OpenSsl &opensslFirst() noexcept;
inline const OpenSsl &openssl() noexcept
{
	const OpenSsl *built = g_openssl.load(std::memory_order_acquire);
	return built ? *built : opensslFirst();
}

/* libcrypto's CA loading, resolved on the first load of a CA file. */
struct Crypto {
	CaApi api;
	/* CA files are served from Process::caCache, indexed; stores get their certificates lazily. */
	bool caching = false;
	LazyStores lazy;
	/* Where libcrypto is mapped: a call from libcrypto's own code, told by its return address. */
	ObjectSpan libcrypto;
	bool inLibcrypto(const void *address) const noexcept { return libcrypto.contains(address); }
};
const Crypto &crypto() noexcept;

/*
 * The shim's pthread_atfork handlers: what is held goes to the kernel, and the locks are
 * taken around the copy. A child made past glibc's fork() (clone, syscall(SYS_fork)) runs
 * none, so the shim runs them around it itself (interpose/spawn.cpp).
 */
void lockForFork();
void unlockInParent();
void unlockInChild();

} /* namespace tlstune */
