/*
 * What OpenSSL runs past the shim's SSL_write. Callbacks it runs for each record it
 * writes: the message callback (SSL_CTX_set_msg_callback, which libssl sets through
 * SSL_CTX_callback_ctrl) and the record padding callback. Held plaintext may be encrypted
 * by a thread of the shim's (TLSTUNE_COALESCE=records); the program's callback would then
 * run in a thread it never made, beside its own. OpenSSL has no getter for either, so
 * setting one is seen here. And the SSL BIO (BIO_f_ssl, BIO_new_ssl), which writes and
 * reads its SSL through libssl's internal calls: its writes overtook held plaintext (a
 * hunt: SSL_write then BIO_write, the peer got the second first), and its reads are not
 * followed. From either on, the process holds no plaintext (it still merges syscalls);
 * from the first SSL BIO on, no connection reads ahead.
 */

#include "interpose/export.h"
#include "runtime/runtime.h"

using namespace tlstune;

namespace {

/*
 * From now on nothing is held; what is held now becomes records before the callback is
 * set, so that it sees no record written before it was (issue 22).
 */
void observed(bool set) noexcept
{
	if (!set)
		return;
	Process &p = process();
	p.recordCallbacks.store(true, std::memory_order_relaxed);
	p.held.encryptAllNow();
}

} /* namespace */

TLSTUNE_EXPORT long SSL_CTX_callback_ctrl(SSL_CTX *ctx, int cmd, void (*fp)(void))
{
	observed(cmd == SSL_CTRL_SET_MSG_CALLBACK && fp);
	const OpenSslApi &api = openssl().api;
	return api.SSL_CTX_callback_ctrl ? api.SSL_CTX_callback_ctrl(ctx, cmd, fp) : 0;
}

TLSTUNE_EXPORT long SSL_callback_ctrl(SSL *ssl, int cmd, void (*fp)(void))
{
	observed(cmd == SSL_CTRL_SET_MSG_CALLBACK && fp);
	const OpenSslApi &api = openssl().api;
	return api.SSL_callback_ctrl ? api.SSL_callback_ctrl(ssl, cmd, fp) : 0;
}

/* 1.1.1 returns void from both, 3.0 int from the SSL one: the headers built against say which. */
using PaddingCallback = size_t (*)(SSL *, int, size_t, void *);

TLSTUNE_EXPORT auto SSL_CTX_set_record_padding_callback(SSL_CTX *ctx, PaddingCallback cb)
	-> decltype(::SSL_CTX_set_record_padding_callback(ctx, cb))
{
	observed(cb != nullptr);
	const OpenSslApi &api = openssl().api;
	using Result = decltype(::SSL_CTX_set_record_padding_callback(ctx, cb));
	if (!api.SSL_CTX_set_record_padding_callback)
		return Result();
	return api.SSL_CTX_set_record_padding_callback(ctx, cb);
}

TLSTUNE_EXPORT auto SSL_set_record_padding_callback(SSL *ssl, PaddingCallback cb)
	-> decltype(::SSL_set_record_padding_callback(ssl, cb))
{
	observed(cb != nullptr);
	const OpenSslApi &api = openssl().api;
	using Result = decltype(::SSL_set_record_padding_callback(ssl, cb));
	if (!api.SSL_set_record_padding_callback)
		return Result();
	return api.SSL_set_record_padding_callback(ssl, cb);
}

TLSTUNE_EXPORT const BIO_METHOD *BIO_f_ssl(void)
{
	/* Once: BIO_new_ssl asks for the method for every connection, and nothing is held since. */
	if (!process().recordCallbacks.load(std::memory_order_relaxed))
		observed(true);
	process().unseen.noteSslBio();
	const OpenSslApi &api = openssl().api;
	return api.BIO_f_ssl ? api.BIO_f_ssl() : nullptr;
}
