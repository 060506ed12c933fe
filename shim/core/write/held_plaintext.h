#pragma once

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <memory>
#include <chrono>
#include <climits>
#include <mutex>
#include <unordered_map>

#include "core/error_queue.h"
#include "core/known_fds.h"
#include "core/owned_lock.h"

namespace tlstune {

/*
 * TLSTUNE_COALESCE=records (issue 14): the plaintext of a connection's small SSL_write
 * calls, held until it becomes one record. It is encrypted by the real SSL_write into the
 * coalescing filter, which takes it without sending (so the encryption never blocks):
 * - by the connection's own thread, before its next call on the SSL of any kind;
 * - by anyone else (the flusher within the delay, a wait, close, fork, exit) only while
 *   no thread is inside an OpenSSL call on that SSL: every interposed call on it counts
 *   itself in (enter/leave) under the same lock the encryption holds.
 * The lock is never held across a call that may block: the encryption only appends.
 *
 * A deferred encryption that fails is kept, and the connection's next call reports it,
 * with the entries the encryption left in OpenSSL's error queue when another thread made
 * them (the connection's own call finds them in its thread already).
 */
class HeldPlaintext {
public:
	/* One maximum TLS record of plaintext. */
	static constexpr std::size_t kCapacity = 16384;

	/*
	 * Encrypts data as one record through the real SSL_write. Returns 0, or the
	 * SSL_get_error class of the failure (errno kept), or kNotNow when another thread than
	 * the connection's (byOwner false) must leave the SSL alone: the program changed it
	 * under the held bytes (SSL_clear, a new BIO), and its own next call encrypts them.
	 */
	using Encrypt = int (*)(void *ssl, const unsigned char *data, std::size_t length,
				bool byOwner) noexcept;
	static constexpr int kNotNow = -1;

	struct Failure {
		int sslError = 0; /* 0: none */
		int error = 0;    /* errno */
		/* Another thread's entries, for this one's queue; valid until the call leaves. */
		const ErrorEntries *errors = nullptr;
	};

	/* What a program's call on this SSL does with a kept failure. */
	enum class Entering {
		Report, /* fails with it: read, handshake, shutdown, ... */
		Write,  /* the same, and retries an unfinished record first (see unfinished_) */
		Keep,   /* leaves it to the next call: the connection goes on (SSL_set_fd, SSL_set_bio) */
		Drop,   /* forgets it: the SSL starts a new connection (SSL_clear) */
		Query,  /* neither encrypts nor reports: it only reads state (SSL_pending, ...) */
	};

	HeldPlaintext(void *ssl, Encrypt encrypt, const ErrorQueueApi *errors) noexcept
		: ssl_(ssl), encrypt_(encrypt), errorApi_(errors) {}

	/*
	 * The program's small write: copies it and returns true, after encrypting what is
	 * held when it would not fit. False: the write must go through as it is (another call
	 * on this SSL is running, or a kept failure must be reported first: see enter()).
	 * becameHeld: the buffer was empty before.
	 */
	bool hold(const void *data, std::size_t length, bool *becameHeld) noexcept;

	/*
	 * The program's write (Entering::Write): its buffer, its length, and how to ask
	 * whether OpenSSL lets a retry move the buffer (SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER;
	 * asked of the SSL only where a retry comes from another buffer).
	 */
	struct WriteCall {
		const void *data = nullptr;
		std::size_t length = 0;
		bool (*movesBuffer)(void *ssl) noexcept = nullptr;
	};

	/*
	 * The program's call on this SSL begins: what is held is encrypted first. Report: a
	 * kept failure is returned (and forgotten), and the call must fail with it instead.
	 * Write (write given): the same, and then a record whose encryption failed is retried
	 * first where OpenSSL would retry the program's failed write (see unfinished_); a
	 * failure again is returned the same way.
	 */
	Failure enter(Entering how = Entering::Report, const WriteCall *write = nullptr) noexcept;
	void leave() noexcept;

	/*
	 * Anyone else: encrypts what is held unless a call on this SSL is running or the lock
	 * is busy (patient: waits for it a bounded while, unless this thread holds it). True
	 * when nothing is held afterwards.
	 */
	bool encryptIfIdle(bool patient = false, bool socketLeaving = false) noexcept;
	/* Nothing is held, as seen under the lock (false when it is busy). */
	bool emptyNow() noexcept;

	/* SSL_free: what is held is encrypted, and nothing touches the SSL afterwards. */
	void retire() noexcept;

	/* The SSL_get_error class of the call that reported a kept failure, once asked. */
	int takeReportedError() noexcept;

	bool held() const noexcept { return size_.load(std::memory_order_relaxed) > 0; }
	/* The socket its records go to (-1: not known yet). */
	int fd() const noexcept { return fd_.load(std::memory_order_relaxed); }
	void writesTo(int fd) noexcept { fd_.store(fd, std::memory_order_relaxed); }
	/* The same, ordered after the end of an encryption in another thread. */
	bool holdsNow() const noexcept { return size_.load(std::memory_order_acquire) > 0; }
	/* Whether length more bytes fit in the record being gathered. */
	bool fits(std::size_t length) const noexcept
	{
		return size_.load(std::memory_order_relaxed) + length <= capacity_.load(std::memory_order_relaxed);
	}
	/*
	 * The connection's own write, with nothing held: the record it begins holds at most
	 * capacity bytes (what the socket has room for: PendingWrites::batchRoom).
	 */
	void beginRecord(std::size_t capacity) noexcept
	{
		capacity_.store(std::min(capacity, kCapacity), std::memory_order_relaxed);
	}
	/*
	 * The connection's own write, between its calls: the record gathered so far is
	 * encrypted now (into the filter, without sending). A failure is kept for the write
	 * that follows, which reports it (hold() refuses to hold then).
	 */
	void encryptByOwner() noexcept;

	/* This thread is encrypting held plaintext: OpenSSL's calls back in go straight through. */
	static bool encryptingHere() noexcept;

	/* A forked child: the parent encrypts and sends what is held, once. */
	void dropAfterFork() noexcept { size_.store(0, std::memory_order_relaxed); }
	OwnedLock &mutex() noexcept { return mutex_; }
	/*
	 * The process image ends (_exit, exec, exit): what is held is encrypted unless a call
	 * on the SSL is inside OpenSSL, waiting a bounded while for another thread's
	 * encryption to end; at once when this thread holds the lock (a signal handler
	 * interrupted it). mayReturn: an exec, which comes back when it fails.
	 */
	void encryptAtImageEnd(bool mayReturn) noexcept;

private:
	/*
	 * With mutex_ held and no call inside; signals are blocked while it runs. reportedHere: a failure is reported by this
	 * thread's current call, whose queue keeps the entries; else they are taken.
	 */
	void encryptLocked(bool byOwner, bool reportedHere, bool keepBuffer = false) noexcept;
	/* The program's write: the unfinished record is retried, as OpenSSL asks of its writes. */
	void finishLocked() noexcept;
	/* Whether write retries the program's failed write (or none is known). */
	bool retriesFailedWrite(const WriteCall &write) const noexcept;
	/* A handler's way out of the socket, this thread being inside the lock. */
	bool handOverInterrupted() noexcept;

	/*
	 * size_ after a handler's way out that interrupted a write being copied in: no size
	 * that write read matches it, so it is not held (hold()'s compare-and-swap).
	 */
	static constexpr std::size_t kHandedOver = ~std::size_t{0} / 2;
	/* hold() is copying a write in, from before it reads anything to its end. */
	class Copying {
	public:
		explicit Copying(HeldPlaintext &held) noexcept;
		~Copying();
		Copying(const Copying &) = delete;
		Copying &operator=(const Copying &) = delete;

	private:
		HeldPlaintext &held_;
	};
	bool copying_ = false;

	OwnedLock mutex_; /* owner-aware: see encryptAtImageEnd */
	void *const ssl_;
	const Encrypt encrypt_;
	const ErrorQueueApi *const errorApi_;
	int inside_ = 0;
	bool retired_ = false;
	bool ended_ = false; /* the image ends: nothing more is held */
	Failure failure_;
	ErrorEntries errors_; /* failure_'s, when taken from the encrypting thread */
	int reported_ = 0;
	/*
	 * A record whose encryption failed (a broken connection): OpenSSL keeps it as a write
	 * to be retried with the same bytes and length, and fails any other write
	 * (bad write retry, and the connection with it). So bytes_ keeps them, nothing more is
	 * held, and the program's next writes retry them first: each then meets the broken
	 * connection as without the shim, with its EPIPE and SIGPIPE.
	 */
	std::size_t unfinished_ = 0;
	/*
	 * The program's write that a kept failure was reported to: OpenSSL would have kept
	 * that one unfinished, and failed the next write unless it retried it (the same
	 * length or more, the same buffer unless it may move). A write that does not retry
	 * it goes to OpenSSL as it is, which fails it and the connection, as it would have
	 * (a hunt: a program writing from two buffers in turn survived a reset without the
	 * shim, and died of SIGPIPE with it). None known: any write retries the record.
	 */
	WriteCall failedWrite_;
	std::atomic<std::size_t> size_{0};
	std::atomic<std::size_t> capacity_{kCapacity}; /* of the record being gathered */
	std::atomic<int> fd_{-1};
	int leftFd_ = -1; /* a way out took this socket: nothing more is held for it */
	/*
	 * Made by the first write it holds and freed when encrypted: a server's idle
	 * connections hold nothing, as OpenSSL's own buffers with SSL_MODE_RELEASE_BUFFERS.
	 */
	/* Back to the process's spare when it is empty, else freed. */
	struct GiveBack {
		void operator()(unsigned char *buffer) const noexcept;
	};
	std::unique_ptr<unsigned char[], GiveBack> bytes_;
};

/*
 * Every connection's HeldPlaintext, by SSL. Lock order: registry, then a HeldPlaintext's
 * lock, then the coalescer's locks (the encryption appends to the filter).
 */
class HeldRegistry {
public:
	/*
	 * ssl's, made on its first held write for the socket fd (indexed by it in the same
	 * hold of the lock); nullptr when out of memory.
	 */
	HeldPlaintext *attach(void *ssl, int fd, HeldPlaintext::Encrypt encrypt,
			      const ErrorQueueApi *errors) noexcept;
	/* ssl's when it has one: one relaxed load when no connection ever held plaintext. */
	HeldPlaintext *of(void *ssl) noexcept;
	/*
	 * No connection of the process holds plaintext state: the check a query call makes
	 * before any other, one load (issue 24). Counted over every registry (one is made).
	 */
	static bool none() noexcept { return count_.load(std::memory_order_relaxed) == 0; }
	/* SSL_free: encrypts what is held, then forgets ssl. */
	void free(void *ssl) noexcept;

	/* A held buffer became non-empty: what encryptAll() must look at. */
	void noteHeld() noexcept { held_.fetch_add(1, std::memory_order_relaxed); }
	bool anyHeld() const noexcept { return held_.load(std::memory_order_relaxed) > 0; }

	/* Before a wait, and from the flusher: encrypts what it can now. */
	void encryptAll() noexcept;
	/*
	 * Before a way out of every connection (a callback set, a sandbox, a spawn, fork): the
	 * same, waiting a bounded while for an encryption under way in another thread, whose
	 * record would reach the socket after the way out.
	 */
	void encryptAllNow() noexcept;
	/*
	 * Before sockets first..last are closed, shut down or sent away: the same for the
	 * connections writing to them, and nothing more is held for those sockets (a write
	 * copied in after this pass, before the close detached the socket, was encrypted into
	 * a closed socket and lost: a hunt, a thread writing while another closed). A number
	 * no connection held plaintext for costs a load: a signal handler's close of another
	 * fd waits for nothing and encrypts nothing (a hunt: 200 to 600 ms, and hangs, in a
	 * timer's close_range).
	 */
	void socketsLeaving(int first, int last) noexcept;
	/*
	 * Before the program changes how fd's socket gathers its bytes (TCP_CORK, TCP_NODELAY):
	 * its connections' held bytes are encrypted, for the socket to take before the change,
	 * as the program's own writes were. A load or two while nothing is held.
	 */
	void pushing(int fd) noexcept;
	/* After the way out that socketsLeaving(first, last) began (whatever it returned). */
	void socketsLeft(int first, int last) noexcept
	{
		if (first == last)
			leaving_.forget(first);
		else
			rangesLeaving_.fetch_sub(1, std::memory_order_relaxed);
	}
	/*
	 * A connection begins a record of plaintext for the socket fd: a way out of fd looks
	 * at it from now on. False while one is under way, or after it (the write then goes
	 * out as it is, and fails as without tlstune).
	 * Noted, then asked, as the way out announces itself, then asks: one of the two sees
	 * the other (a hunt: a record begun as the close passed by was lost). Each side asks
	 * after a read-modify-write of waysOut_: of two such, the later sees the earlier and
	 * all before it (a fence would do as much, but ThreadSanitizer does not follow fences).
	 */
	bool holdingFor(HeldPlaintext *held, int fd, unsigned long waysOutBefore) noexcept
	{
		/* -1: the socket was closed under the connection (PendingWrites::detach). */
		if (fd < 0 || (held->fd() != fd && !index(held, fd)))
			return false;
		fds_.note(fd);
		if (waysOut_.fetch_add(0, std::memory_order_acq_rel) != waysOutBefore)
			return false;
		return rangesLeaving_.load(std::memory_order_relaxed) == 0 && !leaving_.mayHave(fd);
	}
	/*
	 * How many ways out have begun, read before a write decides to begin a record: a
	 * signal handler's close or shutdown that interrupted this very thread between that
	 * and holdingFor() has come and gone before fds_ named the socket, and neither side of
	 * the handshake above sees it (a hunt: a one-shot timer's shutdown, the third line
	 * written held and lost in 6 runs of 40).
	 */
	unsigned long waysOut() const noexcept
	{
		const unsigned long begun = waysOut_.load(std::memory_order_relaxed);
		std::atomic_signal_fence(std::memory_order_seq_cst);
		return begun;
	}
	/* fds first..last are closed: what was held for them has been handed over. */
	void closed(int first, int last) noexcept { fds_.forgetIn(first, last); }
	/*
	 * At _exit, exec or exit: the same, waiting a bounded while for a connection another
	 * thread is encrypting (its bytes would be lost with the image). A signal handler that
	 * interrupted this thread inside one of the locks goes on as their holder: what they
	 * guard is whole at every instruction but an encryption, which blocks signals.
	 */
	void encryptAtImageEnd(bool mayReturn) noexcept;

	/* Exit has begun (OpenSSL may be torn down after): no more holding. */
	void stopHolding() noexcept { stopped_.store(true, std::memory_order_relaxed); }
	bool holding() const noexcept { return !stopped_.load(std::memory_order_relaxed); }

	void lockForFork() noexcept;
	void unlockInParent() noexcept;
	void unlockInChild() noexcept;

private:
	/* Which connections a pass encrypts: every one, or those writing to sockets first..last. */
	enum class Pass {
		Every,
		Leaving, /* the sockets leave: nothing more is held for them */
		Pushed,  /* the sockets are pushed: their connections hold on afterwards */
	};
	void encryptAll(bool patient, int first, int last, Pass pass) noexcept;
	/*
	 * With the lock held: the held bytes of the connections writing to sockets first..last
	 * are encrypted (leaving: nothing more is held for them). Found through the index by
	 * socket; false where it cannot answer (a wide range, an entry it could not index):
	 * then the caller looks at every connection.
	 */
	bool encryptBySocket(int first, int last, bool leaving) noexcept;
	/*
	 * held writes to fd from now on (the program gave its SSL another socket): the index
	 * by socket follows. False when this thread is inside the registry's lock (a signal
	 * handler's write).
	 */
	bool index(HeldPlaintext *held, int fd) noexcept;
	/* With the lock held: held writes to fd, and the index by socket says so. */
	void indexLocked(HeldPlaintext *held, int fd) noexcept;
	/* With the lock held: held leaves the index by socket. */
	void unindex(HeldPlaintext *held) noexcept;

	OwnedLock mutex_;
	std::unordered_map<void *, std::unique_ptr<HeldPlaintext>> entries_;
	/* The entries by the socket they write to, so that a close looks its own up. */
	std::unordered_multimap<int, HeldPlaintext *> bySocket_;
	bool unindexed_ = false; /* an entry could not be indexed (out of memory) */
	static inline std::atomic<int> count_{0};
	/* Moves on whenever an entry goes: a thread's cached lookup of() is stale then. */
	std::atomic<unsigned long> generation_{0};
	std::atomic<int> held_{0}; /* a hint: buffers that became non-empty since the last pass */
	/*
	 * Process-wide, as the registry is one: zeroes in .bss, so no constructor writes them
	 * and a process that holds nothing touches none of their 16 KiB.
	 */
	static inline FdBitmap fds_; /* the sockets connections held plaintext for */
	static inline FdBitmap leaving_; /* sockets a way out is under way for (close, shutdown, sent away) */
	std::atomic<int> rangesLeaving_{0}; /* close_range and closefrom under way */
	std::atomic<unsigned long> waysOut_{0}; /* socketsLeaving() calls begun */
	std::atomic<bool> stopped_{false};
};

} /* namespace tlstune */
