/*
 * Calls that read or change connection state a deferred encryption of held plaintext
 * changes too (TLSTUNE_COALESCE=records, issue 14): they wait for another thread's
 * encryption to end. With no plaintext ever held, one relaxed load each.
 *
 * SSL_write_early_data is left alone: plaintext is held only after the handshake, and
 * early data is written only before it.
 */

#include "interpose/export.h"
#include "runtime/connection_call.h"

using namespace tlstune;

namespace {

/* A query on a connection that may hold plaintext, or before the OpenSSL side is built. */
template <typename Ssl, typename Function, typename... Args>
__attribute__((noinline)) auto heldQuery(Ssl *ssl, Function OpenSslApi::*function, int missing, Args... args)
	-> decltype((openssl().api.*function)(ssl, args...))
{
	const Function real = openssl().api.*function;
	if (!real)
		return missing;
	HeldQuery held(ssl);
	return real(ssl, args...);
}

/*
 * A query: the real answer, read while no other thread encrypts into ssl. With nothing
 * held anywhere, two loads, a branch and the call, and no frame: the rest is outlined.
 */
template <typename Ssl, typename Function, typename... Args>
auto query(Ssl *ssl, Function OpenSslApi::*function, int missing, Args... args)
	-> decltype((openssl().api.*function)(ssl, args...))
{
	if (const OpenSsl *quiet = nothingHeld()) {
		if (const Function real = quiet->api.*function)
			return real(ssl, args...);
	}
	return heldQuery(ssl, function, missing, args...);
}

/*
 * A request that changes what the next write sends (a KeyUpdate, a renegotiation): what
 * was held goes out before it, as written before it, to the kernel (a program's own
 * bytes on the socket next come after it: a hunt); a kept failure makes it fail (0).
 */
template <typename Function, typename... Args>
int request(SSL *ssl, Function OpenSslApi::*function, Args... args)
{
	const Function real = openssl().api.*function;
	if (!real)
		return 0;
	if (HeldPlaintext::encryptingHere())
		return real(ssl, args...);
	flushWrites(ssl);
	HeldCall held(ssl);
	if (held.failed())
		return 0;
	return real(ssl, args...);
}

/*
 * Before a call that sets the connection's write side anew (SSL_set_shutdown, a state,
 * method or session set): what the program wrote before goes out first, to the kernel,
 * encrypted as it was written before. A failure to encrypt it is kept for the
 * connection's next call.
 */
void handOverHeld(SSL *ssl)
{
	if (HeldPlaintext::encryptingHere())
		return;
	flushWrites(ssl);
	HeldCall(ssl, HeldPlaintext::Entering::Keep);
}

/*
 * Such a call from caller, made once what is held went out (0, or nothing, where OpenSSL
 * lacks it). Not where libssl calls it itself, through its PLT, inside a call of the
 * program's that handed over already: SSL_connect's SSL_set_connect_state, a handshake's
 * SSL_set_session, once per connection.
 */
template <typename Function, typename... Args>
auto afterHandOver(const void *caller, SSL *ssl, Function OpenSslApi::*function, Args... args)
	-> decltype((openssl().api.*function)(ssl, args...))
{
	using Result = decltype((openssl().api.*function)(ssl, args...));
	const OpenSsl &o = openssl();
	const Function real = o.api.*function;
	if (!real)
		return Result();
	if (!o.inLibssl(caller))
		handOverHeld(ssl);
	return real(ssl, args...);
}

} /* namespace */

TLSTUNE_EXPORT int SSL_pending(const SSL *s)
{
	return query(s, &OpenSslApi::SSL_pending, 0);
}

TLSTUNE_EXPORT int SSL_has_pending(const SSL *s)
{
	return query(s, &OpenSslApi::SSL_has_pending, 0);
}

TLSTUNE_EXPORT int SSL_get_shutdown(const SSL *s)
{
	return query(s, &OpenSslApi::SSL_get_shutdown, 0);
}

TLSTUNE_EXPORT int SSL_want(const SSL *s)
{
	return query(s, &OpenSslApi::SSL_want, SSL_NOTHING);
}

TLSTUNE_EXPORT int SSL_get_key_update_type(const SSL *s)
{
	return query(s, &OpenSslApi::SSL_get_key_update_type, SSL_KEY_UPDATE_NONE);
}

/*
 * SSL_ctrl (under SSL_set_mode, SSL_set_max_send_fragment, SSL_get_mode, ...) and the
 * option and padding setters read or change what an encryption uses: never beside
 * another thread's.
 */
TLSTUNE_EXPORT long SSL_ctrl(SSL *s, int cmd, long larg, void *parg)
{
	return query(s, &OpenSslApi::SSL_ctrl, 0, cmd, larg, parg);
}

/* uint64_t since 3.0, unsigned long (the same on LP64) in 1.1.1: the headers say which. */
using Options = decltype(::SSL_get_options(nullptr));

TLSTUNE_EXPORT Options SSL_set_options(SSL *s, Options op)
{
	return query(s, &OpenSslApi::SSL_set_options, 0, op);
}

TLSTUNE_EXPORT Options SSL_clear_options(SSL *s, Options op)
{
	return query(s, &OpenSslApi::SSL_clear_options, 0, op);
}

TLSTUNE_EXPORT int SSL_set_block_padding(SSL *s, size_t block_size)
{
	return query(s, &OpenSslApi::SSL_set_block_padding, 0, block_size);
}

/*
 * A quiet shutdown (SSL_set_shutdown(SENT | RECEIVED), then SSL_shutdown, which sends
 * nothing): what the program wrote before goes out first, to the kernel, as it was
 * written before. A failure to encrypt it is kept for the connection's next call.
 */
TLSTUNE_EXPORT void SSL_set_shutdown(SSL *s, int mode)
{
	afterHandOver(__builtin_return_address(0), s, &OpenSslApi::SSL_set_shutdown, mode);
}

/*
 * A state, method or session set clears the connection's ciphers (a hunt: ten short
 * writes, then SSL_set_connect_state, SSL_set_accept_state, SSL_set_ssl_method,
 * SSL_set_session or SSL_copy_session_id: the peer got 2 lines of 10, or a bad record
 * mac): what was written before goes out first, as it went out before without tlstune.
 */
TLSTUNE_EXPORT void SSL_set_connect_state(SSL *s)
{
	afterHandOver(__builtin_return_address(0), s, &OpenSslApi::SSL_set_connect_state);
}

TLSTUNE_EXPORT void SSL_set_accept_state(SSL *s)
{
	afterHandOver(__builtin_return_address(0), s, &OpenSslApi::SSL_set_accept_state);
}

TLSTUNE_EXPORT int SSL_set_ssl_method(SSL *s, const SSL_METHOD *method)
{
	return afterHandOver(__builtin_return_address(0), s, &OpenSslApi::SSL_set_ssl_method, method);
}

TLSTUNE_EXPORT int SSL_set_session(SSL *s, SSL_SESSION *session)
{
	return afterHandOver(__builtin_return_address(0), s, &OpenSslApi::SSL_set_session, session);
}

TLSTUNE_EXPORT int SSL_copy_session_id(SSL *to, const SSL *from)
{
	return afterHandOver(__builtin_return_address(0), to, &OpenSslApi::SSL_copy_session_id, from);
}

TLSTUNE_EXPORT int SSL_key_update(SSL *s, int updatetype)
{
	return request(s, &OpenSslApi::SSL_key_update, updatetype);
}

TLSTUNE_EXPORT int SSL_renegotiate(SSL *s)
{
	return request(s, &OpenSslApi::SSL_renegotiate);
}

TLSTUNE_EXPORT int SSL_renegotiate_abbreviated(SSL *s)
{
	return request(s, &OpenSslApi::SSL_renegotiate_abbreviated);
}
