#pragma once

#include <cerrno>

#include "runtime.h"

namespace tlstune {

/*
 * OpenSSL holds records or decrypted bytes for the program (SSL_has_pending, unlike
 * SSL_pending, counts both). Not after close_notify: what follows the alert is never
 * returned by SSL_read (plaintext of a StopTLS protocol), and reporting it readable would
 * spin the program's poll loop.
 */
inline bool holdsData(const OpenSslApi &api, SSL *ssl) noexcept
{
	if (api.SSL_has_pending(ssl) != 1)
		return false;
	return !api.SSL_get_shutdown || !(api.SSL_get_shutdown(ssl) & SSL_RECEIVED_SHUTDOWN);
}

/* After the program gave ssl another fd or BIO to read: its readiness follows. */
inline void rebindConnection(SSL *ssl) noexcept
{
	const OpenSsl &o = openssl();
	Connection *connection = o.tracking && o.api.SSL_get_rfd ? o.slot.of(o.api, ssl) : nullptr;
	if (!connection)
		return;
	int savedErrno = errno;
	connection->rebind(process().buffered, o.api.SSL_get_rfd(ssl));
	errno = savedErrno;
}

/*
 * Runs the program's call on ssl with the connection marked as this thread's current one
 * (so its socket reads are attributed to it), then records whether OpenSSL now holds data
 * for it. errno and the return value are the real call's.
 */
template <typename Function, typename... Args>
int onConnection(SSL *ssl, Function OpenSslApi::*function, Args... args)
{
	const OpenSsl &o = openssl();
	const Function real = o.api.*function;
	/* Only when no libssl could be found: fail the call rather than crash the host. */
	if (!real)
		return 0;

	Connection *connection = o.tracking ? o.slot.of(o.api, ssl) : nullptr;
	if (!connection)
		return real(ssl, args...);

	CallScope scope(connection);
	int result = real(ssl, args...);
	if (scope.outermost()) {
		int savedErrno = errno;
		connection->afterCall(process().buffered, result > 0,
				      o.api.SSL_want(ssl) == SSL_READING, holdsData(o.api, ssl));
		errno = savedErrno;
	}
	return result;
}

/*
 * Before a call that may wait for the peer (read, peek, handshake, shutdown): the bytes
 * this connection wrote go out first, as they would have without coalescing.
 */
inline void flushWrites(SSL *ssl) noexcept
{
	/* Nothing held anywhere (every read of a program that does not write much): one load. */
	if (process().coalescer.counters().dirty.load(std::memory_order_relaxed) == 0)
		return;
	const OpenSsl &o = openssl();
	PendingWrites *writes = o.filter.of(o.api, ssl);
	if (writes && writes->dirty()) {
		int savedErrno = errno;
		process().coalescer.sendAsOwner(writes);
		errno = savedErrno;
	}
}

/*
 * SSL_write and SSL_write_ex: a connection writing to a plain socket gets the coalescing
 * filter on its first write; a write of the limit or more passes straight through.
 */
template <typename Function, typename... Args>
int onWrite(SSL *ssl, size_t length, Function OpenSslApi::*function, Args... args)
{
	const OpenSsl &o = openssl();
	PendingWrites *writes = o.coalescing ? o.filter.attached(o.api, ssl) : nullptr;
	CoalescingBio::Direct direct(writes && length >= process().coalescer.limit());
	return onConnection(ssl, function, args...);
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
