#pragma once

#include <openssl/ssl.h>

#include "connection.h"

namespace tlstune {

struct OpenSslApi;

/*
 * A read buffer the shim made longer than OpenSSL's own (a client's four records) is let
 * go once empty after a read wrote past its first record, as OpenSSL lets its buffers go
 * under SSL_MODE_RELEASE_BUFFERS: an idle client connection kept three records more than
 * without the shim after a burst (issues 23, 24); now it keeps no read buffer. The mode
 * is OpenSSL's own mechanism: the shim sets it for the length of each of the program's
 * calls that may read on such a connection, from such a read until a call leaves
 * nothing buffered, where only OpenSSL's read side acts on it (and a write the call makes
 * itself, a handshake's or a key update's), and clears it after. Inside the call, the
 * program's callbacks are told the program's own mode (SSL_get_mode, SSL_set_mode).
 * Reads within a record (requests and answers) make no malloc and free per call.
 */
class BufferRelease {
public:
	/* reads: the program's outermost call on ssl in this thread, one that may read. */
	BufferRelease(const OpenSslApi &api, SSL *ssl, Connection &connection, bool reads) noexcept
		: api_(api), ssl_(ssl), connection_(connection)
	{
		if (reads && connection.bufferSizedByShim() &&
		    (connection.filledPastOneRecord() || connection.releasing()))
			begin();
	}
	~BufferRelease()
	{
		if (began_)
			end();
	}
	BufferRelease(const BufferRelease &) = delete;
	BufferRelease &operator=(const BufferRelease &) = delete;

	/* This thread is inside a call that set the mode: one thread-local load. */
	static bool anyHere() noexcept { return calls_ != 0; }
	/*
	 * SSL_ctrl's SSL_CTRL_MODE or SSL_CTRL_CLEAR_MODE on the connection, as the program
	 * sees it: result, OpenSSL's answer, without the shim's mode. A program that sets or
	 * clears SSL_MODE_RELEASE_BUFFERS inside the call owns the mode from then on.
	 */
	static long programsMode(Connection &connection, long larg, long result) noexcept;

private:
	void begin() noexcept;
	void end() noexcept;

	/*
	 * The calls of this thread inside which the shim set the mode on some connection. A
	 * longjmp out of one leaves it counted: that thread's mode queries then take the
	 * longer way, and are still answered right.
	 */
	__attribute__((tls_model("initial-exec"))) static thread_local int calls_;

	const OpenSslApi &api_;
	SSL *const ssl_;
	Connection &connection_;
	bool began_ = false;
};

} /* namespace tlstune */
