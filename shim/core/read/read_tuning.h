#pragma once

#include <cstddef>

#include <openssl/ssl.h>

#include "core/config.h"
#include "connection.h"
#include "unseen_waits.h"

namespace tlstune {

struct OpenSslApi;

/*
 * Read tuning is per connection, and only for connections tlstune follows (issue 23).
 * Read-ahead holds records the kernel no longer shows, so it is on only where the shim
 * sees the connection's reads and so serves its waits. It is decided at the program's
 * own first call on the connection that may read (a handshake, a read, a peek, a write
 * that runs the handshake), before OpenSSL makes its read buffer: a call libssl makes
 * itself (SSL_connect's SSL_do_handshake, an SSL BIO's handshake and reads) and a
 * connection the program drives past the shim (a library loaded with RTLD_DEEPBIND, as
 * PHP loads its curl extension) are never tuned. Contexts are never changed, so
 * SSL_CTX_get_read_ahead answers the program's own setting, and SSL_get_read_ahead does
 * (interpose/conn.cpp). A program that sets read-ahead itself, on the context or the
 * connection, keeps what it set. A connection whose fd is no socket or pipe (a pty, a
 * file) is not tuned: the shim serves no wait on it; nor is one that a wait the shim cannot
 * see may reach (core/read/unseen_waits.h), and one that such a wait reaches later stops
 * reading ahead.
 */
class ReadTuning {
public:
	/* False when this libssl cannot carry the context mark: then nothing is tuned. */
	bool init(const OpenSslApi &api) noexcept;

	/* The program set read-ahead on ctx (SSL_CTX_set_read_ahead, a macro over SSL_CTX_ctrl). */
	void noteContextSetting(const OpenSslApi &api, SSL_CTX *ctx) const noexcept;

	/*
	 * Read-ahead and the read buffer on ssl, before OpenSSL makes the buffer. connecting:
	 * ssl reads as a client whatever its method said (SSL_connect makes it one). Returns
	 * the buffer length set, 0 where OpenSSL's own stays (a server's).
	 */
	static std::size_t turnOn(const OpenSslApi &api, const Config &config, SSL *ssl,
				  bool connecting = false) noexcept;

	/*
	 * After each call on a connection: a read buffer the shim enlarged is let go
	 * (SSL_free_buffers) when it is empty at the end of what the peer sent, once more than
	 * a record came since the connection last wrote; then again at each such end a
	 * record's worth later, until it writes. The next read makes a new one. An idle client
	 * kept four records after a burst (77 against 41 KiB): glibc hands a buffer let go to
	 * the next one made, its pages in memory, so only a let-go as the connection falls
	 * idle saves them, and the shim cannot tell that end from a pause. Not at every
	 * answer: a request loop of small answers then paid about 3,300 instructions per
	 * answer for the new buffers (read and write), 8 % of its CPU; an answer of a record
	 * or less is read into the buffer's first pages, as into OpenSSL's own. One of one to
	 * two records filled more pages than OpenSSL's buffer has (48.7 against 41.2 KiB idle
	 * after 20,000 bytes when two records were the bound; 20.4 against 40.9 now), and a
	 * loop of such answers pays the new buffer at each (a client of 17,000-byte echoes:
	 * 2 % more CPU than with two records the bound, 5 % less than without the shim).
	 * The mode stays the program's (setting
	 * SSL_MODE_RELEASE_BUFFERS for it was tried: README). And once when the handshake is
	 * done, whose buffer would be kept, with glibc's pages of another one's burst under
	 * it, by a client that makes all its connections first and then reads each (88.8
	 * against 41.3 KiB an idle connection). Two compares for other calls.
	 */
	static void letEmptyBufferGo(const OpenSslApi &api, const UnseenWaits &unseen, SSL *ssl,
				     Connection &connection, bool progressed) noexcept
	{
		if (connection.handshakeBufferKept())
			letHandshakeBufferGo(api, ssl, connection, progressed);
		else if (connection.receivedSinceWrite() > kRecordPayload && connection.enlargedByShim() &&
			 (!connection.letGoSinceWrite() || connection.receivedSinceLetGo() >= kRecordPayload))
			letGo(api, unseen, ssl, connection, progressed);
	}
	/* A full record's data. */
	static constexpr size_t kRecordPayload = 16384;

	/* Before the program's first call on ssl that may read. */
	void tuneConnection(const OpenSslApi &api, const Config &config, const UnseenWaits &unseen,
			    SSL *ssl, Connection &connection, bool connecting) const noexcept;

	/*
	 * Before each later call of the program's on a connection the shim reads ahead for:
	 * one load while nothing changed since its last call.
	 */
	static void followUnseen(const OpenSslApi &api, const UnseenWaits &unseen, SSL *ssl,
				 Connection &connection) noexcept
	{
		if (unseen.generation() != connection.unseenSeen())
			unseenChanged(api, unseen, ssl, connection);
	}

	/*
	 * The program gave ssl another read BIO (SSL_set_bio, SSL_set0_rbio, SSL_set_fd): the
	 * shim's read-ahead goes when the new one does not read its source itself.
	 */
	static void readBioChanged(const OpenSslApi &api, SSL *ssl, Connection &connection) noexcept;

	/*
	 * Without SSL_MODE_AUTO_RETRY, SSL_read answers WANT_READ after a record that was not
	 * data (a session ticket, a key update) only when OpenSSL's buffer is empty: with
	 * read-ahead it seldom is, and the program saw fewer of them (a hunt). Such a
	 * connection does not read ahead; one that clears the mode later stops.
	 */
	static bool retriesItself(const OpenSslApi &api, SSL *ssl) noexcept;

	/*
	 * After each call on a connection the shim reads ahead for: a renegotiation (TLS 1.2)
	 * has begun. OpenSSL 3.0's read-ahead then took records around the new handshake for
	 * unexpected ones ("unexpected record"; a hunt: a reader and a writer thread under the
	 * program's lock, against a server that renegotiates every few reads, failed or
	 * stalled in 16 of 20 runs, 4 without the shim, and as often without it when the
	 * program set read-ahead itself). The connection reads no further ahead; what OpenSSL
	 * holds it still hands out.
	 */
	static void followRenegotiation(const OpenSslApi &api, SSL *ssl, Connection &connection) noexcept
	{
		if (connection.readAheadByShim())
			renegotiationBegan(api, ssl, connection);
	}
	static void retryModeCleared(const OpenSslApi &api, SSL *ssl, Connection &connection) noexcept
	{
		if (connection.readAheadByShim())
			turnOff(api, ssl, connection);
	}

	/*
	 * Whether ssl's read BIO reads its source itself, with nothing chained: a socket, fd
	 * or connect BIO, or a source BIO of the program's own (curl's). A buffer BIO or any
	 * other filter is left as it is: it keeps bytes of its own, and read-ahead's 64 KiB
	 * ask waited there for bytes that never came (the handshake hung). So are OpenSSL's
	 * memory BIO, BIO pair and null BIO (told by name: curl's own BIO takes the memory
	 * BIO's type), whose bytes the program moves itself.
	 */
	static bool readsItsSource(const OpenSslApi &api, SSL *ssl) noexcept;

private:
	static void letHandshakeBufferGo(const OpenSslApi &api, SSL *ssl, Connection &connection,
					 bool progressed) noexcept;
	static void letGo(const OpenSslApi &api, const UnseenWaits &unseen, SSL *ssl, Connection &connection,
			  bool progressed) noexcept;
	/* The socket had nothing more when the connection last read it, or has nothing queued now. */
	static bool peerSentAll(const Connection &connection, const UnseenWaits &unseen) noexcept;
	static void renegotiationBegan(const OpenSslApi &api, SSL *ssl, Connection &connection) noexcept;
	static void unseenChanged(const OpenSslApi &api, const UnseenWaits &unseen, SSL *ssl,
				  Connection &connection) noexcept;
	/*
	 * A BIO of the program's own that asks the kernel for less than a record per read
	 * (apache's mod_ssl reads 8,000 bytes whatever OpenSSL asks, and buffers them) gains
	 * nothing from read-ahead and pays an empty read per request for it. Judged by the
	 * reads of the first call past the handshake; true once judged.
	 */
	static bool judgeOwnBio(const OpenSslApi &api, SSL *ssl, Connection &connection) noexcept;
	/*
	 * Whether the shim serves every wait on ssl's read fd, as far as it can tell now; the
	 * fd it looked at goes to connection.
	 */
	static bool followable(const OpenSslApi &api, const UnseenWaits &unseen, SSL *ssl,
			       Connection &connection) noexcept;
	static void turnOff(const OpenSslApi &api, SSL *ssl, Connection &connection) noexcept;

	int contextIndex_ = -1;
};

} /* namespace tlstune */
