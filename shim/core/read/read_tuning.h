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
 * The shim reads ahead of such a connection itself: OpenSSL keeps its read-ahead off and
 * reads a header and a body per record, and the shim answers those reads from a queue it
 * fills with one large read of the socket (SocketCache). What is queued is the socket's
 * stream, which every read and wait the shim serves sees; so it is on only where the shim
 * sees the connection's reads and waits. It is decided at the program's own first call on
 * the connection that may read (a handshake, a read, a peek, a write that runs the
 * handshake): a call libssl makes itself (SSL_connect's SSL_do_handshake, an SSL BIO's
 * handshake and reads) and a connection the program drives past the shim (a library
 * loaded with RTLD_DEEPBIND, as PHP loads its curl extension) are never tuned. OpenSSL is
 * not changed, so SSL_get_read_ahead and SSL_CTX_get_read_ahead answer the program's own
 * setting; a program that sets read-ahead itself keeps what it set, and its connection is
 * not tuned. A connection whose fd is no socket or pipe (a pty, a file) is not tuned: the
 * shim serves no wait on it; nor is one that a wait the shim cannot see may reach
 * (core/read/unseen_waits.h), and one that such a wait reaches later stops reading ahead
 * (what is queued is still read first).
 */
class ReadTuning {
public:
	/* False when this libssl cannot carry the context mark: then nothing is tuned. */
	bool init(const OpenSslApi &api) noexcept;

	/* The program set read-ahead on ctx (SSL_CTX_set_read_ahead, a macro over SSL_CTX_ctrl). */
	void noteContextSetting(const OpenSslApi &api, SSL_CTX *ctx) const noexcept;

	/*
	 * The bytes one read of the socket takes ahead for ssl. connecting: ssl reads as a
	 * client whatever its method said (SSL_connect makes it one).
	 */
	static std::size_t readAheadSize(const OpenSslApi &api, const Config &config, SSL *ssl,
					 bool connecting = false) noexcept;
	/*
	 * TLSTUNE_READINESS=off, which exists to show the stalls read-ahead causes where waits
	 * are not followed: OpenSSL's own read-ahead, into a buffer of the client's size.
	 */
	static void turnOnUnfollowed(const OpenSslApi &api, const Config &config, SSL *ssl) noexcept;

	/* Before the program's first call on ssl that may read. */
	void tuneConnection(const OpenSslApi &api, const Config &config, const UnseenWaits &unseen,
			    SSL *ssl, Connection &connection, bool connecting) const noexcept;

	/*
	 * Before each later call of the program's on a connection the shim reads ahead for:
	 * one load while nothing changed since its last call.
	 */
	static void followUnseen(const UnseenWaits &unseen, Connection &connection) noexcept
	{
		if (unseen.generation() != connection.unseenSeen())
			unseenChanged(unseen, connection);
	}

	/*
	 * Whether ssl's read BIO reads its source itself, with nothing chained: a socket, fd
	 * or connect BIO, or a source BIO of the program's own (curl's). A buffer BIO or any
	 * other filter keeps bytes of its own, which no wait sees, and is left as it is; so
	 * are OpenSSL's memory BIO, BIO pair and null BIO (told by name: curl's own BIO takes
	 * the memory BIO's type), whose bytes the program moves itself.
	 */
	static bool readsItsSource(const OpenSslApi &api, SSL *ssl) noexcept;
	/*
	 * The program gave ssl another read BIO (SSL_set_bio, SSL_set0_rbio, SSL_set_fd): the
	 * shim reads no further ahead when the new one does not read its source itself.
	 */
	static void readBioChanged(const OpenSslApi &api, SSL *ssl, Connection &connection) noexcept;

private:
	static void unseenChanged(const UnseenWaits &unseen, Connection &connection) noexcept;
	/*
	 * Whether the shim serves every wait on ssl's read fd, as far as it can tell now; the
	 * fd it looked at goes to connection.
	 */
	static bool followable(const OpenSslApi &api, const UnseenWaits &unseen, SSL *ssl,
			       Connection &connection) noexcept;
	static void turnOff(Connection &connection) noexcept;

	int contextIndex_ = -1;
};

} /* namespace tlstune */
