#include "read_tuning.h"

#include "log.h"
#include "openssl_api.h"

namespace tlstune {

namespace {
/* A program may make a context per request (python's create_default_context per call). */
RateLimit tunedLines;
}

void tuneContext(const OpenSslApi &api, const Config &config, SSL_CTX *ctx) noexcept
{
	if (!ctx || !config.readAhead)
		return;

	/*
	 * Both are per-context defaults that SSL_new copies, so a program that later turns
	 * read-ahead off on its context or connection keeps it off.
	 * SSL_CTX_set_read_ahead() is a macro over SSL_CTX_ctrl().
	 */
	api.SSL_CTX_ctrl(ctx, SSL_CTRL_SET_READ_AHEAD, 1, nullptr);
	api.SSL_CTX_set_default_read_buffer_len(ctx, config.readBuffer);
	logLimited(tunedLines, LogLevel::Info, "new SSL_CTX tuned: read-ahead on, read buffer %zu bytes",
		   config.readBuffer);
}

} /* namespace tlstune */
