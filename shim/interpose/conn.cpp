/* Connections: every call that may read from the socket goes through onConnection(). */

#include "interpose/export.h"
#include "runtime/connection_call.h"

using namespace tlstune;

TLSTUNE_EXPORT SSL *SSL_new(SSL_CTX *ctx)
{
	const OpenSsl &ssl = openssl();
	SSL *created = ssl.api.SSL_new ? ssl.api.SSL_new(ctx) : nullptr;
	if (created && ssl.tracking) {
		if (Connection *connection = ssl.slot.of(ssl.api, created)) {
			process().stats.connections.fetch_add(1, std::memory_order_relaxed);
			if (!ssl.inLibssl(__builtin_return_address(0)))
				connection->noteMadeThroughShim();
		}
	}
	/*
	 * TLSTUNE_READINESS=off, which exists to show the stalls read-ahead causes: every
	 * connection made here reads ahead, followed or not, into a client's buffer (an SSL
	 * from TLS_method looks like a server until its first call).
	 */
	if (created && ssl.tuning && !ssl.tracking && ssl.api.SSL_get_read_ahead(created) == 0)
		ReadTuning::turnOnUnfollowed(ssl.api, process().config, created);
	return created;
}

TLSTUNE_EXPORT void SSL_set_read_ahead(SSL *s, int yes)
{
	const OpenSsl &ssl = openssl();
	if (ssl.tracking && !ssl.inLibssl(__builtin_return_address(0))) {
		const int savedErrno = errno;
		if (Connection *connection = ssl.slot.of(ssl.api, s)) {
			/* Decided by the program: the shim leaves it as set. */
			connection->noteProgramSetReadAhead();
			connection->decideReadTuning();
		}
		errno = savedErrno;
	}
	if (ssl.api.SSL_set_read_ahead)
		ssl.api.SSL_set_read_ahead(s, yes);
}

TLSTUNE_EXPORT int SSL_read(SSL *s, void *buf, int num)
{
	tuneReads(s, __builtin_return_address(0));
	PeerCall peer(s);
	int n = onConnection(s, &OpenSslApi::SSL_read, buf, num);
	if (n > 0)
		countSslRead(static_cast<size_t>(n));
	return n;
}

TLSTUNE_EXPORT int SSL_read_ex(SSL *s, void *buf, size_t num, size_t *readbytes)
{
	tuneReads(s, __builtin_return_address(0));
	PeerCall peer(s);
	int ok = onConnection(s, &OpenSslApi::SSL_read_ex, buf, num, readbytes);
	if (ok > 0 && readbytes)
		countSslRead(*readbytes);
	return ok;
}

TLSTUNE_EXPORT int SSL_peek(SSL *s, void *buf, int num)
{
	tuneReads(s, __builtin_return_address(0));
	PeerCall peer(s);
	return onConnection(s, &OpenSslApi::SSL_peek, buf, num);
}

TLSTUNE_EXPORT int SSL_peek_ex(SSL *s, void *buf, size_t num, size_t *readbytes)
{
	tuneReads(s, __builtin_return_address(0));
	PeerCall peer(s);
	return onConnection(s, &OpenSslApi::SSL_peek_ex, buf, num, readbytes);
}

/* A write runs the handshake when none was done yet, and may read records past it. */
TLSTUNE_EXPORT int SSL_write(SSL *s, const void *buf, int num)
{
	tuneReads(s, __builtin_return_address(0));
	if (num > 0 && holdWrite(s, buf, static_cast<size_t>(num)))
		return num;
	return onWrite(s, buf, num > 0 ? static_cast<size_t>(num) : 0, &OpenSslApi::SSL_write, buf, num);
}

TLSTUNE_EXPORT int SSL_write_ex(SSL *s, const void *buf, size_t num, size_t *written)
{
	tuneReads(s, __builtin_return_address(0));
	if (holdWrite(s, buf, num)) {
		/* OpenSSL stores it whatever it is: a null written is the program's fault, as without tlstune. */
		*written = num;
		return 1;
	}
	return onWrite(s, buf, num, &OpenSslApi::SSL_write_ex, buf, num, written);
}

/*
 * 3.3+: a write with flags (SSL_WRITE_FLAG_CONCLUDE ends a QUIC stream). It is never
 * held, but what an SSL_write held before it goes out first.
 */
TLSTUNE_EXPORT int SSL_write_ex2(SSL *s, const void *buf, size_t num, uint64_t flags, size_t *written)
{
	tuneReads(s, __builtin_return_address(0));
	return onWrite(s, buf, num, &OpenSslApi::SSL_write_ex2, buf, num, flags, written);
}

/*
 * With read-ahead the handshake's last read can take the first application records too:
 * an IMAP or SMTP greeting sent right after the server's Finished.
 */
TLSTUNE_EXPORT int SSL_do_handshake(SSL *s)
{
	tuneReads(s, __builtin_return_address(0));
	PeerCall peer(s);
	return onConnection(s, &OpenSslApi::SSL_do_handshake);
}

TLSTUNE_EXPORT int SSL_connect(SSL *s)
{
	tuneReads(s, __builtin_return_address(0), true);
	PeerCall peer(s);
	return onConnection(s, &OpenSslApi::SSL_connect);
}

TLSTUNE_EXPORT int SSL_accept(SSL *s)
{
	tuneReads(s, __builtin_return_address(0));
	PeerCall peer(s);
	return onConnection(s, &OpenSslApi::SSL_accept);
}

namespace {

/*
 * libssl's SSL_set_fd calls SSL_set_bio, and that SSL_set0_rbio, by their exported names,
 * which come back here: only the outermost call follows the new read BIO, once, after the
 * inner ones (each looked its socket up again: three fstat calls a connection).
 */
class BioChange {
public:
	BioChange() noexcept : outer_(depth()++ == 0) {}
	~BioChange() { depth()--; }
	BioChange(const BioChange &) = delete;
	BioChange &operator=(const BioChange &) = delete;
	void done(SSL *s) const noexcept
	{
		if (outer_)
			rebindConnection(s);
	}

private:
	static int &depth() noexcept
	{
		static thread_local int calls __attribute__((tls_model("initial-exec"))) = 0;
		return calls;
	}
	const bool outer_;
};

/* SSL_set_fd, SSL_set_rfd: the real call, then the readiness follows the fd it set. */
int settingFd(decltype(&::SSL_set_fd) real, SSL *s, int fd)
{
	BioChange change;
	flushWrites(s);
	int ok = 0;
	{
		/* Nobody encrypts while the BIO changes; the TLS connection goes on. */
		HeldCall call(s, HeldPlaintext::Entering::Keep);
		ok = real ? real(s, fd) : 0;
	}
	if (ok)
		change.done(s);
	return ok;
}

} /* namespace */

/* The connection's readiness follows the fd it reads from (issue 12: dup, SSL_set_fd, close). */
TLSTUNE_EXPORT int SSL_set_fd(SSL *s, int fd)
{
	return settingFd(openssl().api.SSL_set_fd, s, fd);
}

/*
 * Of the fd the SSL writes to, OpenSSL makes the write BIO the read BIO too (SSL_get_rbio
 * is SSL_get_wbio). Asked from inside libssl, SSL_get_wbio answers the shim's filter, no
 * socket BIO, and libssl made a second one (a hunt): the program's socket BIO is shared
 * as OpenSSL shares it.
 */
TLSTUNE_EXPORT int SSL_set_rfd(SSL *s, int fd)
{
	const OpenSsl &o = openssl();
	BIO *socket = o.coalescing && s && o.api.SSL_get_wbio ? o.filter.programsWriteBio(o.api, s) : nullptr;
	if (!socket || socket == o.api.SSL_get_wbio(s) || o.api.BIO_method_type(socket) != BIO_TYPE_SOCKET ||
	    o.api.BIO_ctrl(socket, BIO_C_GET_FD, 0, nullptr) != fd)
		return settingFd(o.api.SSL_set_rfd, s, fd);
	o.api.BIO_up_ref(socket);
	SSL_set0_rbio(s, socket); /* the shim's: the readiness follows the BIO */
	return 1;
}

TLSTUNE_EXPORT void SSL_set_bio(SSL *s, BIO *rbio, BIO *wbio)
{
	const OpenSslApi &api = openssl().api;
	if (!api.SSL_set_bio)
		return;
	BioChange change;
	flushWrites(s);
	{
		HeldCall call(s, HeldPlaintext::Entering::Keep);
		api.SSL_set_bio(s, rbio, wbio);
	}
	change.done(s);
}

/* Another thread never encrypts into a write BIO the program is replacing. */
TLSTUNE_EXPORT int SSL_set_wfd(SSL *s, int fd)
{
	return settingFd(openssl().api.SSL_set_wfd, s, fd);
}

TLSTUNE_EXPORT void SSL_set0_wbio(SSL *s, BIO *wbio)
{
	const OpenSslApi &api = openssl().api;
	if (!api.SSL_set0_wbio)
		return;
	flushWrites(s);
	HeldCall call(s, HeldPlaintext::Entering::Keep);
	api.SSL_set0_wbio(s, wbio);
}

TLSTUNE_EXPORT void SSL_set0_rbio(SSL *s, BIO *rbio)
{
	const OpenSslApi &api = openssl().api;
	if (!api.SSL_set0_rbio)
		return;
	BioChange change;
	api.SSL_set0_rbio(s, rbio);
	change.done(s);
}

/* close_notify goes out after everything written before it (and it may read the peer's). */
TLSTUNE_EXPORT int SSL_shutdown(SSL *s)
{
	flushWrites(s);
	return onConnection(s, &OpenSslApi::SSL_shutdown);
}

/*
 * Held plaintext becomes a record before the connection is reset for reuse. A kept
 * failure is the old connection's: the new one must not inherit it (see Limits).
 */
TLSTUNE_EXPORT int SSL_clear(SSL *s)
{
	flushWrites(s);
	const OpenSslApi &api = openssl().api;
	HeldCall call(s, HeldPlaintext::Entering::Drop);
	return api.SSL_clear ? api.SSL_clear(s) : 0;
}

/*
 * Held plaintext becomes a record before the connection goes (TLSTUNE_COALESCE=records).
 * A call left by a longjmp recorded nothing of what the shim read ahead in it: that is
 * recorded now, so that the close resets the connection as the kernel, holding it unread,
 * would (a hunt: a FIN).
 */
TLSTUNE_EXPORT void SSL_free(SSL *s)
{
	const OpenSsl &o = openssl();
	if (o.records && s)
		process().held.free(s);
	if (o.tracking) {
		Connection *connection = o.slot.existing(o.api, s);
		if (connection)
			settleConnection(connection);
	}
	if (o.api.SSL_free)
		o.api.SSL_free(s);
}

namespace {

/* SSL_get_error where plaintext may be held, or before the OpenSSL side is built. */
__attribute__((noinline)) int errorWithHeld(const SSL *s, int ret)
{
	const OpenSslApi &api = openssl().api;
	if (ret <= 0 && !HeldPlaintext::encryptingHere()) {
		if (HeldPlaintext *held = heldOf(s)) {
			if (const int reported = held->takeReportedError())
				return reported;
		}
	}
	HeldQuery query(s);
	return api.SSL_get_error ? api.SSL_get_error(s, ret) : SSL_ERROR_SSL;
}

} /* namespace */

/*
 * The class of a kept failure that the last call reported in its stead. With nothing held
 * anywhere, two loads and the call (issue 24): programs call this after every read.
 */
TLSTUNE_EXPORT int SSL_get_error(const SSL *s, int ret)
{
	const OpenSsl *quiet = nothingHeld();
	if (quiet && quiet->api.SSL_get_error)
		return quiet->api.SSL_get_error(s, ret);
	return errorWithHeld(s, ret);
}

/*
 * The program asks for the SSL's write BIO: its own socket BIO, as without the shim, not
 * the filter above it. A callback it sets there is seen at the next write (the filter
 * then passes every record through that BIO); writes it makes there itself overtake what
 * is held (README, Limits). libssl's own calls (SSL_get_wfd, its handshake) get the
 * filter: they must write through it.
 */
TLSTUNE_EXPORT BIO *SSL_get_wbio(const SSL *s)
{
	const OpenSsl &o = openssl();
	if (!o.api.SSL_get_wbio)
		return nullptr;
	SSL *ssl = const_cast<SSL *>(s);
	if (!o.coalescing || HeldPlaintext::encryptingHere() || o.inLibssl(__builtin_return_address(0)))
		return o.api.SSL_get_wbio(ssl);
	return o.filter.programsWriteBio(o.api, ssl);
}
