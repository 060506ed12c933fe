#include "read_tuning.h"

#include "openssl_api.h"

namespace tlstune {

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
}

} /* namespace tlstune */
