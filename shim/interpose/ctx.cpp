/* Context creation: SSL_CTX_new and SSL_CTX_new_ex get read-ahead and the read buffer. */

#include <cerrno>

#include "core/read_tuning.h"
#include "interpose/export.h"
#include "runtime/runtime.h"

using namespace tlstune;

namespace {

/* libssl 3 implements SSL_CTX_new through its exported SSL_CTX_new_ex: tune once. */
thread_local int creating = 0;

template <typename Create>
SSL_CTX *created(Create create)
{
	const OpenSsl &ssl = openssl();
	creating++;
	SSL_CTX *ctx = create(ssl.api);
	creating--;
	if (ctx && creating == 0 && ssl.tuning) {
		int savedErrno = errno;
		tuneContext(ssl.api, process().config, ctx);
		Stats::add(process().stats.contextsTuned, 1);
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
