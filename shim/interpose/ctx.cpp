/*
 * Contexts: counted, never changed (read tuning is per connection, core/read/read_tuning.h);
 * the program's own read-ahead setting on a context is noted, so its connections keep it.
 */

#include <cerrno>

#include "core/log.h"
#include "interpose/export.h"
#include "runtime/runtime.h"

using namespace tlstune;

namespace {

/* libssl 3 implements SSL_CTX_new through its exported SSL_CTX_new_ex: count once. */
thread_local int creating = 0;

RateLimit contextLines;

template <typename Create>
SSL_CTX *created(Create create)
{
	const OpenSsl &ssl = openssl();
	creating++;
	SSL_CTX *ctx = create(ssl.api);
	creating--;
	if (ctx)
		epollWaiters().countFromNow();
	if (ctx && creating == 0 && ssl.tuning) {
		int savedErrno = errno;
		Stats::add(process().stats.contextsTuned, 1);
		logLimited(contextLines, LogLevel::Info, "new SSL_CTX: the connections tlstune follows read "
			   "ahead, %zu bytes a read (a server's: a record, unless TLSTUNE_READ_BUFFER is "
			   "set)", process().config.readBuffer);
		errno = savedErrno;
	}
	return ctx;
}

} /* namespace */

TLSTUNE_EXPORT SSL_CTX *SSL_CTX_new(const SSL_METHOD *method)
{
	return created([&](const OpenSslApi &api) {
		return api.SSL_CTX_new ? api.SSL_CTX_new(method) : nullptr;
	});
}

TLSTUNE_EXPORT SSL_CTX *SSL_CTX_new_ex(OSSL_LIB_CTX *libctx, const char *propq,
				      const SSL_METHOD *method)
{
	return created([&](const OpenSslApi &api) {
		return api.SSL_CTX_new_ex ? api.SSL_CTX_new_ex(libctx, propq, method) : nullptr;
	});
}

/* SSL_CTX_set_read_ahead and SSL_CTX_get_read_ahead are macros over this. */
TLSTUNE_EXPORT long SSL_CTX_ctrl(SSL_CTX *ctx, int cmd, long larg, void *parg)
{
	const OpenSsl &ssl = openssl();
	if (cmd == SSL_CTRL_SET_READ_AHEAD && ssl.tuning) {
		const int savedErrno = errno;
		ssl.readTuning.noteContextSetting(ssl.api, ctx);
		errno = savedErrno;
	}
	return ssl.api.SSL_CTX_ctrl ? ssl.api.SSL_CTX_ctrl(ctx, cmd, larg, parg) : 0;
}
