#include "read_tuning.h"

#include <cstring>

#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/log.h"
#include "core/openssl_api.h"

namespace tlstune {

namespace {

/* A program may make a connection per request. */
RateLimit tunedLines;
RateLimit untunedLines;
RateLimit oneShotLines;

/*
 * What OpenSSL's own read buffer holds by default: a record of the largest size with its
 * header and the most a cipher adds (SSL3_RT_MAX_ENCRYPTED_LENGTH).
 */
constexpr std::size_t kOneRecordRead = SSL3_RT_HEADER_LENGTH + SSL3_RT_MAX_ENCRYPTED_LENGTH;

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

/*
 * Kernel TLS receives decrypted records with recvmsg: bytes the shim queued before OpenSSL
 * switched would be read as plaintext.
 */
bool usesKernelTls(const OpenSslApi &api, SSL *ssl) noexcept
{
#ifdef SSL_OP_ENABLE_KTLS
	return api.SSL_set_options && (api.SSL_set_options(ssl, 0) & SSL_OP_ENABLE_KTLS);
#else
	(void)api;
	(void)ssl;
	return false;
#endif
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

std::size_t ReadTuning::readAheadSize(const OpenSslApi &api, const Config &config, SSL *ssl,
				       bool connecting) noexcept
{
	/*
	 * Four records, one read, for a client: it downloads (64 reads per MiB with one). A
	 * server takes what OpenSSL's own buffer would hold, a record: it may hold thousands
	 * of connections, each with a burst queued; unless TLSTUNE_READ_BUFFER names another
	 * size. A queue is freed as soon as it is read (SocketCache).
	 */
	const bool server = !connecting && api.SSL_is_server && api.SSL_is_server(ssl);
	return !server || config.readBufferSet ? config.readBuffer : kOneRecordRead;
}

void ReadTuning::turnOnUnfollowed(const OpenSslApi &api, const Config &config, SSL *ssl) noexcept
{
	api.SSL_set_default_read_buffer_len(ssl, config.readBuffer);
	api.SSL_set_read_ahead(ssl, 1);
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
	else if (usesKernelTls(api, ssl))
		untuned = "it may read through kernel TLS (SSL_OP_ENABLE_KTLS)";
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
	const std::size_t size = readAheadSize(api, config, ssl, connecting);
	connection.setReadAheadSize(size);
	connection.setReadAheadByShim(true);
	logLimited(tunedLines, LogLevel::Info, "connection tuned: read-ahead on, %zu bytes a read", size);
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
	return !notFollowed(fd) && !oneShotFds().mayHave(fd) &&
	       unseen.follows(connection.ino());
}

void ReadTuning::turnOff(Connection &connection) noexcept
{
	/* What is queued is still read first; the shim reads no further ahead. */
	connection.setReadAheadByShim(false);
}

void ReadTuning::unseenChanged(const UnseenWaits &unseen, Connection &connection) noexcept
{
	const unsigned generation = unseen.generation();
	const bool justLearnt = connection.ownBio() == Connection::OwnBio::learnt;
	const bool oneShot = oneShotFds().mayHave(connection.fd());
	if (oneShot || !unseen.follows(connection.ino()) ||
	    (justLearnt && (unseen.confined() || notFollowed(connection.fd())))) {
		turnOff(connection);
		if (oneShot)
			logLimited(oneShotLines, LogLevel::Info, "read-ahead off: the connection's fd is armed EPOLLONESHOT");
		return;
	}
	connection.setOwnBio(Connection::OwnBio::settled);
	connection.setUnseenSeen(generation);
}

void ReadTuning::readBioChanged(const OpenSslApi &api, SSL *ssl, Connection &connection) noexcept
{
	if (connection.readAheadByShim() && !readsItsSource(api, ssl))
		turnOff(connection);
}

} /* namespace tlstune */
