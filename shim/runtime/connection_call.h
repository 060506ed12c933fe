#pragma once

#include <cerrno>
#include <csignal>
#include <pthread.h>
#include <chrono>
#include <cstdlib>
#include <type_traits>

#include "runtime.h"

namespace tlstune {

/* After the program gave ssl another fd or BIO to read: its readiness follows. */
inline void rebindConnection(SSL *ssl) noexcept
{
	const OpenSsl &o = openssl();
	Connection *connection = o.tracking && o.api.SSL_get_rfd ? o.slot.of(o.api, ssl) : nullptr;
	if (!connection)
		return;
	int savedErrno = errno;
	connection->rebind(process().buffered, o.api.SSL_get_rfd(ssl));
	ReadTuning::readBioChanged(o.api, ssl, *connection);
	errno = savedErrno;
}

/*
 * The OpenSSL side while no connection of the process has held-plaintext state: a query
 * call then goes straight to OpenSSL's, two loads and a branch (issue 24). Null before the
 * side is built, or while plaintext may be held: then the call takes its full path.
 */
inline const OpenSsl *nothingHeld() noexcept
{
	const OpenSsl *built = g_openssl.load(std::memory_order_acquire);
	return built && HeldRegistry::none() ? built : nullptr;
}

/* TLSTUNE_COALESCE=records: ssl's held plaintext, once it wrote through the filter. */
inline HeldPlaintext *heldOf(const SSL *ssl) noexcept
{
	return openssl().records ? process().held.of(const_cast<SSL *>(ssl)) : nullptr;
}

/*
 * A program's call on an SSL that may hold plaintext: what is held becomes a record
 * first, and nobody else encrypts while the call runs. A deferred encryption that failed
 * makes this call fail instead, as the write would have (how: Report).
 */
class HeldCall {
public:
	explicit HeldCall(const SSL *ssl,
			  HeldPlaintext::Entering how = HeldPlaintext::Entering::Report) noexcept
		: held_(heldOf(ssl))
	{
		if (!held_)
			return;
		failure_ = held_->enter(how);
	}
	/* The program's write of length bytes at data (Entering::Write). */
	HeldCall(SSL *ssl, const void *data, size_t length) noexcept : held_(heldOf(ssl))
	{
		if (!held_)
			return;
		const HeldPlaintext::WriteCall write{ data, length, movesBuffer };
		failure_ = held_->enter(HeldPlaintext::Entering::Write, &write);
	}
	~HeldCall()
	{
		if (held_)
			held_->leave();
	}
	HeldCall(const HeldCall &) = delete;
	HeldCall &operator=(const HeldCall &) = delete;

	/*
	 * The kept failure, errno set as the write's was and OpenSSL's error queue holding
	 * what the encryption left in another thread's. A write that met a closed pipe
	 * raises SIGPIPE in the writing thread; the encryption's thread could not (its
	 * signals are not the program's), so this one does.
	 */
	bool failed() const noexcept
	{
		if (!failure_.sslError)
			return false;
		if (failure_.errors)
			failure_.errors->replay(openssl().api.errors);
		if (failure_.error == EPIPE)
			pthread_kill(pthread_self(), SIGPIPE);
		errno = failure_.error;
		return true;
	}

private:
	static bool movesBuffer(void *ssl) noexcept
	{
		const long mode = openssl().api.SSL_ctrl(static_cast<SSL *>(ssl), SSL_CTRL_MODE, 0, nullptr);
		return (mode & SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER) != 0;
	}

	HeldPlaintext *const held_;
	HeldPlaintext::Failure failure_;
};

/*
 * A call that only reads state of the SSL that an encryption changes (SSL_pending,
 * SSL_get_shutdown, SSL_want, SSL_get_error, ...): nobody encrypts held plaintext into
 * it while it runs. It neither encrypts nor reports a kept failure: a query is not the
 * connection's next call. No lock is held across it: OpenSSL's SSL_get_error calls
 * SSL_want, which comes back here.
 */
class HeldQuery {
public:
	/*
	 * Not while this thread encrypts held plaintext: the real SSL_get_error of a failed
	 * encryption calls SSL_want back, and the registry's lock may be this thread's
	 * (HeldRegistry::encryptAll), which heldOf could take again.
	 */
	explicit HeldQuery(const SSL *ssl) noexcept
		: held_(HeldPlaintext::encryptingHere() ? nullptr : heldOf(ssl))
	{
		/*
		 * Nothing held: no encryption can be running (one ends by emptying the buffer,
		 * with release order), and none can start but by a write of the program's own,
		 * which the program orders with this call. So no lock (issue 24).
		 */
		if (held_ && !held_->holdsNow())
			held_ = nullptr;
		/*
		 * A signal handler's query that interrupted this thread inside the lock (copying a
		 * write in, which leaves OpenSSL alone; an encryption blocks signals): it reads
		 * OpenSSL's state as it is, as without the shim (a hunt: SSL_pending from a 50 us
		 * timer's handler hung 20 runs of 20 on the lock its own thread held).
		 */
		if (held_ && held_->mutex().heldHere())
			held_ = nullptr;
		if (held_)
			held_->enter(HeldPlaintext::Entering::Query);
	}
	~HeldQuery()
	{
		if (held_)
			held_->leave();
	}
	HeldQuery(const HeldQuery &) = delete;
	HeldQuery &operator=(const HeldQuery &) = delete;

private:
	HeldPlaintext *held_;
};

/* What a failed call returns: 0 for the _ex functions, -1 for the others. */
template <typename Function>
constexpr int failedResult() noexcept
{
	return std::is_same<Function, decltype(&::SSL_read_ex)>::value ||
			       std::is_same<Function, decltype(&::SSL_write_ex)>::value ||
			       std::is_same<Function, OpenSslApi::WriteEx2>::value
		       ? 0
		       : -1;
}

/* SSL_write and its kin: a write that succeeds made no progress in reading a record. */
template <typename Function>
constexpr bool writes() noexcept
{
	return std::is_same<Function, decltype(&::SSL_write)>::value ||
	       std::is_same<Function, decltype(&::SSL_write_ex)>::value ||
	       std::is_same<Function, OpenSslApi::WriteEx2>::value;
}

/*
 * After a call on a connection (the outermost on it in this thread), returned or left by
 * an exception or pthread_exit (a callback's): whether its socket's queue holds bytes.
 */
inline void settleConnection(Connection *connection) noexcept
{
	int savedErrno = errno;
	/*
	 * What the shim read ahead of the socket and OpenSSL has not asked for: the kernel
	 * would have it queued. What OpenSSL holds (a record's plaintext left unread, records
	 * of the program's own read-ahead) it would not report either.
	 */
	Process &p = process();
	const int fd = connection->fd();
	const bool queued = p.cache.queued(fd) > 0;
	if (connection->afterCall(p.buffered, queued) && !__libc_single_threaded && epollWaiters().any())
		wakeWaitingSets(p, fd, connection->ino());
	/* A freed connection's readiness the queue took over (SSL_free) goes when it is read. */
	if (!queued && p.buffered.anyHandedOver() && !p.buffered.empty() && p.cache.mayHave(fd))
		p.buffered.forget(p.cache.owner(fd));
	errno = savedErrno;
}

/*
 * A call left by an exception, pthread_exit or a cancellation: what the shim read ahead
 * in it is still the program's to wait for, and to reset at its close (a hunt: poll
 * missed it, and the close was a FIN). A longjmp runs no destructor: see docs/limits.md.
 */
class SettledOnUnwinding {
public:
	SettledOnUnwinding(Connection *connection, const CallScope &scope) noexcept
		: connection_(connection), scope_(scope)
	{
	}
	~SettledOnUnwinding()
	{
		if (!returned && scope_.outermost())
			settleConnection(connection_);
	}
	SettledOnUnwinding(const SettledOnUnwinding &) = delete;
	SettledOnUnwinding &operator=(const SettledOnUnwinding &) = delete;

	bool returned = false;

private:
	Connection *const connection_;
	const CallScope &scope_;
};

/* A program's SSL_write*: its buffer and length. */
struct ProgramWrite {
	const void *data;
	size_t length;
};

/*
 * Runs the program's call on ssl with the connection marked as this thread's current one
 * (so its socket reads are attributed to it), then records whether its socket's queue
 * holds bytes. errno and the return value are the real call's.
 */

template <typename Function, typename... Args>
int onConnectionAs(const ProgramWrite *write, SSL *ssl, Function OpenSslApi::*function, Args... args)
{
	const OpenSsl &o = openssl();
	const Function real = o.api.*function;
	/* Only when no libssl could be found: fail the call rather than crash the host. */
	if (!real)
		return 0;

	/* Held plaintext being encrypted: OpenSSL calling its own interposed functions. */
	if (HeldPlaintext::encryptingHere())
		return real(ssl, args...);
	HeldCall held = write ? HeldCall(ssl, write->data, write->length) : HeldCall(ssl);
	if (held.failed())
		return failedResult<Function>();

	Connection *connection = o.tracking ? o.slot.of(o.api, ssl) : nullptr;
	if (!connection)
		return real(ssl, args...);

	CallScope scope(connection);
	SettledOnUnwinding unwinding(connection, scope);
	int result = real(ssl, args...);
	unwinding.returned = true;
	if (scope.outermost())
		settleConnection(connection);
	return result;
}

template <typename Function, typename... Args>
int onConnection(SSL *ssl, Function OpenSslApi::*function, Args... args)
{
	return onConnectionAs(nullptr, ssl, function, args...);
}

/*
 * Before a call that may wait for the peer (read, peek, handshake, shutdown): the bytes
 * this connection wrote go out first, as they would have without coalescing. Not
 * noexcept, nor is anything between a program's call and a send that may block: that send
 * is a cancellation point, and pthread_cancel unwinds through it as through the
 * program's own write.
 */
inline void flushWrites(SSL *ssl)
{
	waitsOfThisThread()++;
	if (HeldPlaintext *held = heldOf(ssl))
		held->encryptIfIdle();
	/* Nothing held anywhere (every read of a program that does not write much): one load. */
	if (process().coalescer.counters().dirty.load(std::memory_order_relaxed) == 0)
		return;
	const OpenSsl &o = openssl();
	PendingWrites *writes = o.filter.of(o.api, ssl);
	if (writes && writes->dirty()) {
		int savedErrno = errno;
		process().coalescer.sendAsOwner(writes, false);
		errno = savedErrno;
	}
}

/*
 * A call that may wait for the peer (read, peek, handshake): what the connection wrote
 * goes out before it (flushWrites), and it counts as a wait again when it returns. The
 * records it wrote itself (a handshake's flights, a TLS 1.3 server's session tickets
 * after the client's Finished) are not the program's: the program's first writes after
 * it go out at once, as after any wait. Before, lighttpd's response to the request read
 * in the handshake's SSL_read was held, and sent at its next epoll_wait, for nothing.
 */
class PeerCall {
public:
	explicit PeerCall(SSL *ssl) { flushWrites(ssl); }
	~PeerCall() { waitsOfThisThread()++; }
	PeerCall(const PeerCall &) = delete;
	PeerCall &operator=(const PeerCall &) = delete;
};

/* Writes of this many bytes or more are not held: they go out after what is. */
constexpr size_t kHeldWriteBelow = 4096;

/* The real SSL_write of held plaintext, into the filter, which takes it without sending. */
inline int encryptHeld(void *ssl, const unsigned char *data, size_t length, bool byOwner) noexcept
{
	const OpenSsl &o = openssl();
	const OpenSslApi &api = o.api;
	SSL *s = static_cast<SSL *>(ssl);
	/*
	 * Another thread writes only a record into the filter, never a handshake: not after
	 * the program cleared the SSL or gave it another BIO under the held bytes.
	 */
	const bool intoFilter = o.filter.of(api, s) && api.SSL_is_init_finished(s) == 1;
	if (!byOwner && !intoFilter)
		return HeldPlaintext::kNotNow;
	CoalescingBio::Deferred deferred(intoFilter);
	size_t written = 0;
	const int ok = api.SSL_write_ex(s, data, length, &written);
	if (ok == 1 && written == length)
		return 0;
	const int error = api.SSL_get_error(s, ok);
	return error == SSL_ERROR_NONE ? SSL_ERROR_SYSCALL : error;
}

/* At exit, before OpenSSL's own atexit cleanup: held plaintext becomes records, no more is held. */
inline void encryptBeforeExit() noexcept
{
	Process &p = process();
	p.held.stopHolding();
	if (p.inVforkChild())
		return;
	p.held.encryptAtImageEnd(false);
	/* The other threads run on through exit: their writes go to the kernel, as without the shim. */
	p.coalescer.stopHolding();
}

/* holdWrite's last step: data joins the record being gathered. */
inline bool holdMore(Process &p, HeldPlaintext *held, PendingWrites *writes, const void *data, size_t length,
		     unsigned long waits, int savedErrno)
{
	bool becameHeld = false;
	if (!held->hold(data, length, &becameHeld)) {
		errno = savedErrno;
		return false;
	}
	writes->noteWrite(waits);
	bool sendNow = false;
	if (becameHeld) {
		/* Before OpenSSL's atexit cleanup, which was registered before this. */
		static const bool registered = atexit(encryptBeforeExit) == 0;
		p.held.noteHeld();
		/* No flusher thread could be started: nothing would bound the wait. */
		sendNow = !registered || !p.coalescer.plaintextHeld();
	}
	/*
	 * Holding stopped meanwhile (an exit or exec in another thread, whose drain took the
	 * lock before this hold did): nothing sends it later (a run in 10 lost a write).
	 */
	if (sendNow || !p.held.holding() || !p.coalescer.holding()) {
		held->encryptIfIdle();
		p.coalescer.sendAsOwner(writes);
	}
	/* As after OpenSSL's own write: its socket BIO clears errno before a write that succeeds. */
	errno = 0;
	return true;
}

/*
 * TLSTUNE_COALESCE=records: a small write on a connection that may hold plaintext is
 * copied and reported written. True when it was; false: it goes through as it is.
 */
inline bool holdWrite(SSL *ssl, const void *data, size_t length)
{
	const OpenSsl &o = openssl();
	if (!o.records || length == 0 || length >= kHeldWriteBelow || HeldPlaintext::encryptingHere())
		return false;
	Process &p = process();
	if (!p.held.holding() || !p.coalescer.holding() || p.recordCallbacks.load(std::memory_order_relaxed))
		return false;
	/*
	 * The program's write would be a cancellation point (its write system call): a pending
	 * cancellation acts here too, before the write is taken. One load in glibc.
	 */
	pthread_testcancel();
	const unsigned long waysOut = p.held.waysOut();
	PendingWrites *writes = o.filter.attached(o.api, ssl);
	/* A broken connection's writes go through the filter, which reports it as the kernel would. */
	if (!writes || writes->fd() < 0 || writes->stalled() || writes->writesDirect() || writes->error() ||
	    o.filter.socketHooked(o.api, ssl))
		return false;
	const int version = o.api.SSL_version(ssl);
	/*
	 * SSL_WRITING: the program retries a write that returned WANT_WRITE, and OpenSSL holds
	 * the rest of its record: the retry must reach OpenSSL (a held copy would be written
	 * twice, or fail as a "bad write retry").
	 */
	if ((version != TLS1_2_VERSION && version != TLS1_3_VERSION) ||
	    o.api.SSL_is_init_finished(ssl) != 1 || o.api.SSL_renegotiate_pending(ssl) ||
	    /* A key update goes out with the write that finds it pending, in the program's call. */
	    o.api.SSL_get_key_update_type(ssl) != SSL_KEY_UPDATE_NONE ||
	    (o.api.SSL_get_shutdown(ssl) & SSL_SENT_SHUTDOWN) || o.api.SSL_want(ssl) == SSL_WRITING)
		return false;
	/* Made by the first write actually held: a connection whose writes all go out has none. */
	HeldPlaintext *held = p.held.of(ssl);
	/*
	 * A write that finds the connection quiet, or follows a wait of this thread, goes
	 * through the filter, which sends it at once (Coalescer::quietWrite). One that follows
	 * held plaintext is held: the clock is read only for the first of a batch (encrypting
	 * the batch counts as a write: PendingWrites::appendOverflow).
	 */
	const unsigned long waits = waitsOfThisThread();
	const int savedErrno = errno;
	if (!held || !held->held()) {
		if (writes->writesSince(waits) <= kDirectWritesAfterWait)
			return false;
		const auto now = std::chrono::steady_clock::now();
		if (!writes->dirty() && now - writes->lastWrite() >= p.coalescer.delay())
			return false;
		writes->setLastWrite(now);
	} else if (!held->fits(length)) {
		/* The record gathered is full: it goes to the kernel in this call, as OpenSSL's would. */
		held->encryptByOwner();
	} else {
		return holdMore(p, held, writes, data, length, waits, savedErrno);
	}
	/*
	 * A new record begins: with nothing else of this connection's left unsent, and on a
	 * socket with room for it, so that what is held can always go to the kernel at once
	 * (issue 22). Else the write goes through, and blocks or says WANT_WRITE as without.
	 */
	if (writes->dirty() && p.coalescer.sendAsOwner(writes) != PendingWrites::Result::Done) {
		errno = savedErrno;
		return false;
	}
	const std::size_t room = writes->batchRoom();
	if (room < length)
		return false;
	if (!held && !(held = p.held.attach(ssl, writes->fd(), encryptHeld, &o.api.errors)))
		return false;
	if (!p.held.holdingFor(held, writes->fd(), waysOut))
		return false;
	held->beginRecord(room);
	return holdMore(p, held, writes, data, length, waits, savedErrno);
}

/*
 * SSL_write and SSL_write_ex: a connection writing to a plain socket gets the coalescing
 * filter on its first write; a write of the limit or more passes straight through.
 */
template <typename Function, typename... Args>
int onWrite(SSL *ssl, const void *data, size_t length, Function OpenSslApi::*function, Args... args)
{
	const OpenSsl &o = openssl();
	if (HeldPlaintext::encryptingHere())
		return (o.api.*function)(ssl, args...);
	PendingWrites *writes = o.coalescing ? o.filter.attached(o.api, ssl) : nullptr;
	CoalescingBio::Direct direct(writes && length >= process().coalescer.limit());
	const ProgramWrite write{ data, length };
	return onConnectionAs(&write, ssl, function, args...);
}

/*
 * Read tuning, decided at the program's own first call on ssl that may read. caller: the
 * interposed call's return address; libssl calling its own exported functions (SSL_connect
 * calls SSL_do_handshake, an SSL BIO its handshake) is not the program. After the first
 * decision, on a connection that reads ahead: whether a wait the shim cannot see may
 * reach it now (one load while nothing changed).
 */
inline void tuneReads(SSL *ssl, const void *caller, bool connecting = false) noexcept
{
	const OpenSsl &o = openssl();
	if (!o.tuning || !o.tracking)
		return;
	Connection *connection = o.slot.of(o.api, ssl);
	if (!connection)
		return;
	if (connection->readTuningDecided()) {
		if (connection->readAheadByShim())
			ReadTuning::followUnseen(process().unseen, *connection);
		return;
	}
	if (o.inLibssl(caller))
		return;
	/*
	 * A connection made past the shim is never tuned: PHP's curl extension (RTLD_DEEPBIND)
	 * makes its SSL and reads and waits past the shim, yet its SSL_do_handshake comes here.
	 */
	if (!connection->madeThroughShim()) {
		connection->decideReadTuning();
		return;
	}
	const int savedErrno = errno;
	o.readTuning.tuneConnection(o.api, process().config, process().unseen, ssl, *connection,
				    connecting);
	errno = savedErrno;
}

/* Counts data the program read through OpenSSL, for TLSTUNE_STATS. */
inline void countSslRead(size_t bytes) noexcept
{
	Process &p = process();
	/* Only when asked: threads reading at once would share the counters' cache line. */
	if (!p.config.stats)
		return;
	Stats &stats = p.stats;
	Stats::add(stats.sslReads, 1);
	Stats::add(stats.sslReadBytes, bytes);
}

} /* namespace tlstune */
