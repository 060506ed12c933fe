#include "read_tuning.h"

#include <cstring>

#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "core/log.h"
#include "core/openssl_api.h"
#include "core/raw_syscalls.h"

namespace tlstune {

namespace {

/* A program may make a connection per request. */
RateLimit tunedLines;
RateLimit untunedLines;
RateLimit chunkedLines;
RateLimit renegotiationLines;
RateLimit oneShotLines;
RateLimit peekedLines;

/* TLS's largest record payload: a BIO that asks the kernel for less reads in chunks of its own. */
constexpr size_t kOneRecord = 16384;

/* What a context's ex_data holds once the program set its read-ahead: any non-null pointer. */
char programSetReadAhead;

/*
 * SO_RCVLOWAT above 1 set before the process's first connection (setsockopt notes it only
 * from then on: a process without TLS pays nothing for it). A pipe has none.
 */
bool countsBytes(int fd) noexcept
{
	int lowWater = 1;
	socklen_t length = sizeof(lowWater);
	return getsockopt(fd, SOL_SOCKET, SO_RCVLOWAT, &lowWater, &length) == 0 && lowWater > 1;
}

/*
 * A UNIX socket closed with records unread makes the peer's next read fail with
 * ECONNRESET, while the kernel holds them; read ahead into OpenSSL they made the close an
 * end of file, and the peer's next write met SIGPIPE (a hunt, over a socketpair). TCP's
 * reset the shim can send instead (SO_LINGER) has no UNIX form: such a socket does not
 * read ahead. A pipe is no socket.
 */
bool unixSocket(int fd) noexcept
{
	int domain = 0;
	socklen_t length = sizeof(domain);
	return getsockopt(fd, SOL_SOCKET, SO_DOMAIN, &domain, &length) == 0 && domain == AF_UNIX;
}

/* What the shim's readiness cannot stand for on this socket. */
bool notFollowed(int fd) noexcept
{
	return countsBytes(fd) || unixSocket(fd);
}

} /* namespace */

bool ReadTuning::init(const OpenSslApi &api) noexcept
{
	contextIndex_ = api.CRYPTO_get_ex_new_index(CRYPTO_EX_INDEX_SSL_CTX, 0, nullptr, nullptr,
						    nullptr, nullptr);
	return contextIndex_ >= 0;
}

void ReadTuning::noteContextSetting(const OpenSslApi &api, SSL_CTX *ctx) const noexcept
{
	if (ctx && contextIndex_ >= 0)
		api.SSL_CTX_set_ex_data(ctx, contextIndex_, &programSetReadAhead);
}

std::size_t ReadTuning::turnOn(const OpenSslApi &api, const Config &config, SSL *ssl, bool connecting) noexcept
{
	/*
	 * Four records, one recv, for a client: it downloads (64 reads per MiB with one). A
	 * server keeps OpenSSL's own size, one record: it may hold thousands of connections,
	 * and a burst then costs what it costs without the shim, while read-ahead still takes
	 * what that buffer holds at once; unless TLSTUNE_READ_BUFFER names another size. A
	 * client's four records are let go when it falls idle after a burst (letEmptyBufferGo).
	 */
	const bool server = !connecting && api.SSL_is_server && api.SSL_is_server(ssl);
	const bool sized = !server || config.readBufferSet;
	if (sized)
		api.SSL_set_default_read_buffer_len(ssl, config.readBuffer);
	api.SSL_set_read_ahead(ssl, 1);
	return sized ? config.readBuffer : 0;
}

void ReadTuning::tuneConnection(const OpenSslApi &api, const Config &config,
				const UnseenWaits &unseen, SSL *ssl, Connection &connection,
				bool connecting) const noexcept
{
	connection.decideReadTuning();
	/* Read first: a note made while this looks is seen at the next call. */
	const unsigned generation = unseen.generation();
	SSL_CTX *ctx = api.SSL_get_SSL_CTX(ssl);
	/* Why not, for TLSTUNE_LOG=info: a user who sees no read-ahead in the stats asks. */
	const char *untuned = nullptr;
	if (connection.programSetReadAhead() || (ctx && api.SSL_CTX_get_ex_data(ctx, contextIndex_)) ||
	    api.SSL_get_read_ahead(ssl))
		untuned = "the program set read-ahead itself";
	else if (!retriesItself(api, ssl))
		untuned = "the program cleared SSL_MODE_AUTO_RETRY";
	else if (!readsItsSource(api, ssl))
		untuned = "its read BIO is a filter or a memory BIO";
	else if (!followable(api, unseen, ssl, connection))
		untuned = "its waits may go where the shim cannot see (docs/how-it-works.md)";
	if (untuned) {
		logLimited(untunedLines, LogLevel::Info, "connection not tuned: %s", untuned);
		return;
	}
	/* A socket learnt later (a BIO of the program's own) is asked about once it is known. */
	connection.setUnseenSeen(generation);
	const std::size_t buffer = turnOn(api, config, ssl, connecting);
	connection.setReadAheadByShim(true);
	if (buffer) {
		connection.setEnlargedByShim();
		logLimited(tunedLines, LogLevel::Info, "connection tuned: read-ahead on, read buffer %zu bytes", buffer);
	} else {
		logLimited(tunedLines, LogLevel::Info, "connection tuned: read-ahead on, OpenSSL's own read buffer "
			   "(a server)");
	}
}

void ReadTuning::letHandshakeBufferGo(const OpenSslApi &api, SSL *ssl, Connection &connection,
				      bool progressed) noexcept
{
	if (!progressed || !api.SSL_is_init_finished || api.SSL_is_init_finished(ssl) != 1)
		return;
	/*
	 * One try, at the call that ended the handshake (letGo says when it is safe): a
	 * record read ahead with its end keeps the buffer until the end of the first burst.
	 */
	connection.handshakeBufferGone();
	if (api.SSL_free_buffers && api.SSL_has_pending(ssl) == 0 && api.SSL_free_buffers(ssl) == 1)
		connection.bufferLetGo();
}

void ReadTuning::letGo(const OpenSslApi &api, const UnseenWaits &unseen, SSL *ssl, Connection &connection,
		       bool progressed) noexcept
{
	/*
	 * Only after a call that returned a record, with nothing unread, outside a handshake:
	 * a call that read a record's header alone leaves nothing "pending" yet points into
	 * the buffer for the body (CVE-2024-4741, which 1.1.1 builds do not check
	 * themselves). SSL_free_buffers also frees an empty write buffer, which the next
	 * write makes again, and refuses while a write is pending (the next end of what the
	 * peer sent tries again).
	 */
	if (!progressed || !api.SSL_free_buffers || !api.SSL_is_init_finished || api.SSL_has_pending(ssl) != 0 ||
	    api.SSL_is_init_finished(ssl) != 1 || !peerSentAll(connection, unseen))
		return;
	if (api.SSL_free_buffers(ssl) == 1)
		connection.bufferLetGo();
}

bool ReadTuning::peerSentAll(const Connection &connection, const UnseenWaits &unseen) noexcept
{
	if (connection.lastReadEmptied())
		return true;
	/*
	 * The last read filled what it asked: a burst that ended there, read by a program that
	 * then reads no more (it knew the length), is told by the socket's queue. One ioctl at
	 * such an empty buffer (a download whose every read fills the buffer: one per four
	 * records). Not in a confined process, whose filter may forbid it.
	 */
	if (unseen.confined())
		return false;
	int queued = -1;
	RawSyscalls raw;
	return connection.fd() >= 0 && syscall(SYS_ioctl, connection.fd(), FIONREAD, &queued) == 0 && queued == 0;
}

bool ReadTuning::retriesItself(const OpenSslApi &api, SSL *ssl) noexcept
{
	return api.SSL_ctrl && (api.SSL_ctrl(ssl, SSL_CTRL_MODE, 0, nullptr) & SSL_MODE_AUTO_RETRY) != 0;
}

bool ReadTuning::readsItsSource(const OpenSslApi &api, SSL *ssl) noexcept
{
	BIO *rbio = api.SSL_get_rbio(ssl);
	if (!rbio || api.BIO_next(rbio))
		return false;
	const int type = api.BIO_method_type(rbio);
	if (type & BIO_TYPE_FILTER)
		return false;
	/*
	 * OpenSSL's memory BIO, BIO pair and null BIO read no descriptor: the program moves
	 * the bytes itself (asyncio's SSLObject), so read-ahead would save no syscall and only
	 * change what it sees (BIO_pending, BIO_get_read_request). Told by their names too:
	 * curl's own BIO, which reads its socket, calls its type BIO_TYPE_MEM.
	 */
	if (type != BIO_TYPE_MEM && type != BIO_TYPE_BIO && type != BIO_TYPE_NULL)
		return true;
	const char *name = api.BIO_method_name ? api.BIO_method_name(rbio) : nullptr;
	return !name || (std::strcmp(name, "memory buffer") != 0 && std::strcmp(name, "BIO pair") != 0 &&
			 std::strcmp(name, "NULL") != 0);
}

bool ReadTuning::followable(const OpenSslApi &api, const UnseenWaits &unseen, SSL *ssl,
			    Connection &connection) noexcept
{
	if (unseen.confined())
		return false;
	const int fd = api.SSL_get_rfd ? api.SSL_get_rfd(ssl) : -1;
	/* A BIO of the program's own (curl's): its socket is learnt from its reads. */
	if (fd < 0)
		return unseen.follows(0);
	/* SSL_set_fd told the connection its socket or pipe already: no stat. */
	if (connection.fd() != fd) {
		struct stat st;
		if (fstat(fd, &st) != 0 || !(S_ISSOCK(st.st_mode) || S_ISFIFO(st.st_mode)))
			return false;
		connection.noteSocket(fd, st.st_ino);
	}
	return !notFollowed(fd) && !oneShotFds().mayHave(fd) && !peekedFds().mayHave(fd) &&
	       unseen.follows(connection.ino());
}

void ReadTuning::turnOff(const OpenSslApi &api, SSL *ssl, Connection &connection) noexcept
{
	/* What OpenSSL holds already it still hands out; it reads no further ahead. */
	api.SSL_set_read_ahead(ssl, 0);
	connection.setReadAheadByShim(false);
}

void ReadTuning::renegotiationBegan(const OpenSslApi &api, SSL *ssl, Connection &connection) noexcept
{
	if (api.SSL_renegotiate_pending(ssl)) {
		turnOff(api, ssl, connection);
		logLimited(renegotiationLines, LogLevel::Info, "read-ahead off: the connection renegotiates");
	}
}

void ReadTuning::unseenChanged(const OpenSslApi &api, const UnseenWaits &unseen, SSL *ssl,
			       Connection &connection) noexcept
{
	const unsigned generation = unseen.generation();
	const bool justLearnt = connection.ownBio() == Connection::OwnBio::learnt;
	const bool oneShot = oneShotFds().mayHave(connection.fd());
	const bool peeked = peekedFds().mayHave(connection.fd());
	if (oneShot || peeked || !unseen.follows(connection.ino()) ||
	    (justLearnt && (unseen.confined() || notFollowed(connection.fd())))) {
		turnOff(api, ssl, connection);
		if (oneShot)
			logLimited(oneShotLines, LogLevel::Info, "read-ahead off: the connection's fd is armed EPOLLONESHOT");
		else if (peeked)
			logLimited(peekedLines, LogLevel::Info,
				   "read-ahead off: the program peeks at the connection's socket (MSG_PEEK)");
	} else if (connection.ownBio() == Connection::OwnBio::settled || judgeOwnBio(api, ssl, connection)) {
		connection.setUnseenSeen(generation);
	}
}

bool ReadTuning::judgeOwnBio(const OpenSslApi &api, SSL *ssl, Connection &connection) noexcept
{
	using Stage = Connection::OwnBio;
	/* OpenSSL 3.5 reads a handshake a header at a time, whatever the BIO would take. */
	if (api.SSL_is_init_finished(ssl) != 1) {
		connection.setOwnBio(Stage::handshaking);
		return false;
	}
	if (connection.ownBio() != Stage::measuring) {
		connection.setOwnBio(Stage::measuring);
		return false;
	}
	if (connection.largestAsk() == 0)
		return false;
	if (connection.largestAsk() < kOneRecord) {
		turnOff(api, ssl, connection);
		logLimited(chunkedLines, LogLevel::Info,
			   "read-ahead off: the connection's own BIO reads in chunks under one record");
	}
	connection.setOwnBio(Stage::settled);
	return true;
}

void ReadTuning::readBioChanged(const OpenSslApi &api, SSL *ssl, Connection &connection) noexcept
{
	if (connection.readAheadByShim() && !readsItsSource(api, ssl))
		turnOff(api, ssl, connection);
}

} /* namespace tlstune */
