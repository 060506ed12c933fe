#include "connection.h"

#include <atomic>
#include <new>

#include "core/log.h"
#include "core/openssl_api.h"
#include "core/read/unseen_waits.h"

namespace tlstune {

namespace {

std::atomic<unsigned long long> arrivalCount{0};

/* A server learns one fd per connection, thousands of them: these lines are rate-limited. */
RateLimit followedLines;
RateLimit movedLines;

/* What TLSTUNE_LOG=info shows of a connection's fd: learnt from a read, or set by the program. */
void logFd(int from, int to, ino_t ino) noexcept
{
	if (from < 0 && to >= 0)
		logLimited(followedLines, LogLevel::Info, "connection followed: OpenSSL reads fd %d (inode %lu)",
			   to, static_cast<unsigned long>(ino));
	else if (from != to)
		logLimited(movedLines, LogLevel::Debug, "connection moved from fd %d to fd %d", from, to);
}

/* initial-exec: the read wrappers test this on every read(2) of the host program. */
__attribute__((tls_model("initial-exec"))) thread_local CallScope *innermost = nullptr;
__attribute__((tls_model("initial-exec"))) thread_local uint64_t innermostCookie = 0;
__attribute__((tls_model("initial-exec"))) thread_local uint64_t lastCookie = 0;

/*
 * The slot's value for an SSL the shim leaves alone: a DTLS connection (OpenSSL reads each
 * datagram whole, so what it holds the socket would not show either, and a datagram's
 * boundaries are the program's) or a QUIC object (3.5: its own engine reads and waits, and
 * asking it what it holds puts "no stream" on the error queue, a hunt).
 */
char unfollowedMark;
void *const kUnfollowed = &unfollowedMark;

bool unfollowable(const OpenSslApi &api, SSL *ssl) noexcept
{
	return (api.SSL_is_dtls && api.SSL_is_dtls(ssl) == 1) || (api.SSL_is_quic && api.SSL_is_quic(ssl) == 1);
}

void freeConnection(void * /*parent*/, void *ptr, CRYPTO_EX_DATA * /*ad*/, int /*idx*/,
		    long /*argl*/, void *argp)
{
	auto *connection = static_cast<Connection *>(ptr);
	if (!connection || ptr == kUnfollowed)
		return;
	const ReadState &read = *static_cast<ReadState *>(argp);
	const int fd = connection->fd();
	if (fd >= 0 && read.cache->queued(fd) > 0)
		read.buffered->handOver(connection, read.cache->owner(fd));
	read.buffered->forget(connection);
	delete connection;
}

const OpenSslApi *g_api = nullptr;

/*
 * SSL_dup copies a new SSL's ex_data: without this the copy shared the original's state,
 * and freeing both freed it twice. The copy keeps the state of its own that SSL_dup's
 * SSL_new gave it (through libssl's PLT), or has none until it needs one.
 */
void *copysOwn(CRYPTO_EX_DATA *to, int idx) noexcept
{
	return g_api && g_api->CRYPTO_get_ex_data ? g_api->CRYPTO_get_ex_data(to, idx) : nullptr;
}
#if OPENSSL_VERSION_NUMBER >= 0x30000000L
int keepTheCopysOwn(CRYPTO_EX_DATA *to, const CRYPTO_EX_DATA * /*from*/, void **state, int idx,
		    long /*argl*/, void * /*argp*/)
{
	*state = copysOwn(to, idx);
	return 1;
}
#else
/* 1.1.1 declares the copy's slot as void *, the same pointer to it. */
int keepTheCopysOwn(CRYPTO_EX_DATA *to, const CRYPTO_EX_DATA * /*from*/, void *state, int idx,
		    long /*argl*/, void * /*argp*/)
{
	*static_cast<void **>(state) = copysOwn(to, idx);
	return 1;
}
#endif

} /* namespace */

void Connection::noteSocketRead(int fd, ssize_t returned) noexcept
{
	/* The BIO named its fd: a read of another one is a callback's (a control pipe, a fetch). */
	if (fd != fd_ && namedByBio_)
		return;
	readBytes_ = readBytes_ || returned > 0;
	if (fd == fd_)
		return;
	ino_t ino;
	if (streamInode(fd, &ino))
		noteSocket(fd, ino);
}

void Connection::noteSocket(int fd, ino_t ino) noexcept
{
	if (fd == fd_)
		return;
	if (readAheadByShim_ && fd_ < 0) {
		/* The next call's one compare fails, and it asks about this socket. */
		setOwnBio(OwnBio::learnt);
		--unseenSeen_;
	}
	namedByBio_ = true;
	logFd(fd_, fd, ino);
	fd_ = fd;
	ino_ = ino;
}

void Connection::rebind(BufferedFds &buffered, int fd) noexcept
{
	ino_t ino = 0;
	const int from = fd_;
	if (fd >= 0 && streamInode(fd, &ino)) {
		fd_ = fd;
		ino_ = ino;
	} else {
		fd_ = -1;
	}
	namedByBio_ = fd_ >= 0;
	logFd(from, fd_, ino);
	if (!buffered_)
		return;
	buffered_ = fd_ >= 0;
	closings_ = buffered.closings();
	buffered.set(this, fd_, ino_, buffered_, arrivals_);
}

bool Connection::afterCall(BufferedFds &buffered, bool queued) noexcept
{
	const bool now = fd_ >= 0 && queued;
	const bool arrived = now && readBytes_;
	readBytes_ = false;
	/*
	 * Numbered process-wide: a new SSL on a socket an edge-triggered registration was told
	 * of before (SSL_free, then SSL_new on the same fd) must not repeat an old number.
	 */
	if (arrived)
		arrivals_ = arrivalCount.fetch_add(1, std::memory_order_relaxed) + 1;
	const unsigned closings = buffered.closings();
	if (now == buffered_ && !arrived && (!now || closings == closings_))
		return false;
	buffered_ = now;
	closings_ = closings;
	buffered.set(this, fd_, ino_, now, arrivals_);
	return arrived;
}

bool ConnectionSlot::init(const OpenSslApi &api, ReadState *read) noexcept
{
	/* SSL_get_ex_new_index() is a macro over this. */
	g_api = &api;
	index_ = api.CRYPTO_get_ex_new_index(CRYPTO_EX_INDEX_SSL, 0, read, nullptr,
					     keepTheCopysOwn, freeConnection);
	return index_ >= 0;
}

bool ConnectionSlot::attach(const OpenSslApi &api, SSL *ssl) const noexcept
{
	return of(api, ssl) != nullptr;
}

Connection *ConnectionSlot::existing(const OpenSslApi &api, SSL *ssl) const noexcept
{
	void *state = ssl && index_ >= 0 ? api.SSL_get_ex_data(ssl, index_) : nullptr;
	return state == kUnfollowed ? nullptr : static_cast<Connection *>(state);
}

Connection *ConnectionSlot::of(const OpenSslApi &api, SSL *ssl) const noexcept
{
	if (!ssl || index_ < 0)
		return nullptr;
	void *state = api.SSL_get_ex_data(ssl, index_);
	if (state)
		return state == kUnfollowed ? nullptr : static_cast<Connection *>(state);
	if (unfollowable(api, ssl)) {
		api.SSL_set_ex_data(ssl, index_, kUnfollowed);
		return nullptr;
	}

	Connection *connection = new (std::nothrow) Connection;
	if (!connection)
		return nullptr;
	if (!api.SSL_set_ex_data(ssl, index_, connection)) {
		delete connection;
		return nullptr;
	}
	if (!made_.load(std::memory_order_relaxed))
		made_.store(true, std::memory_order_seq_cst);
	return connection;
}

std::atomic<bool> ConnectionSlot::made_{false};

/*
 * Whether scope, as a link names it, is a live frame of this thread: above below on the
 * stack, and still carrying the cookie it was made with. A longjmp out of an OpenSSL call
 * (a callback's, a signal handler's siglongjmp) skips destructors, and new frames reuse
 * the memory; a scope above below is in mapped stack, so reading its cookie is safe.
 */
bool CallScope::live(const CallScope *scope, uint64_t cookie, const void *below) noexcept
{
	return scope && static_cast<const void *>(scope) > below && scope->cookie_ == cookie;
}

CallScope::CallScope(Connection *connection) noexcept : connection_(connection), cookie_(++lastCookie)
{
	const bool chained = live(innermost, innermostCookie, this);
	previous_ = chained ? innermost : nullptr;
	previousCookie_ = chained ? innermostCookie : 0;
	outermost_ = true;
	for (const CallScope *scope = this; live(scope->previous_, scope->previousCookie_, this);
	     scope = scope->previous_) {
		if (scope->previous_->connection_ == connection) {
			outermost_ = false;
			break;
		}
	}
	innermost = this;
	innermostCookie = cookie_;
}

CallScope::~CallScope()
{
	innermost = previous_;
	innermostCookie = previousCookie_;
}

bool CallScope::active() noexcept
{
	return live(innermost, innermostCookie, __builtin_frame_address(0));
}

std::size_t CallScope::readAheadFor(int fd) noexcept
{
	if (!live(innermost, innermostCookie, __builtin_frame_address(0)))
		return 0;
	Connection *connection = innermost->connection_;
	if (!connection->readAheadByShim())
		return 0;
	/* A BIO of the program's own (curl's) names its socket by its first read: this one. */
	if (connection->fd() < 0)
		connection->noteSocketRead(fd, 0);
	return connection->fd() == fd ? connection->readAheadSize() : 0;
}

bool CallScope::noteSocketRead(int fd, ssize_t returned) noexcept
{
	const void *here = __builtin_frame_address(0);
	if (!live(innermost, innermostCookie, here))
		return false;
	for (CallScope *scope = innermost;; scope = scope->previous_) {
		scope->connection_->noteSocketRead(fd, returned);
		if (!live(scope->previous_, scope->previousCookie_, here))
			break;
	}
	return true;
}

} /* namespace tlstune */
