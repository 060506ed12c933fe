#include "read_tuning.h"

#include "core/log.h"
#include "core/openssl_api.h"

namespace tlstune {

namespace {

/* A program may make a connection per request. */
RateLimit tunedLines;

/* What a context's ex_data holds once the program set its read-ahead: any non-null pointer. */
char programSetReadAhead;

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

void ReadTuning::turnOn(const OpenSslApi &api, const Config &config, SSL *ssl) noexcept
{
	/* Four records, one recv. */
	api.SSL_set_default_read_buffer_len(ssl, config.readBuffer);
	api.SSL_set_read_ahead(ssl, 1);
}

void ReadTuning::tuneConnection(const OpenSslApi &api, const Config &config, SSL *ssl,
				Connection &connection) const noexcept
{
	connection.decideReadTuning();
	SSL_CTX *ctx = api.SSL_get_SSL_CTX(ssl);
	if (connection.programSetReadAhead() || (ctx && api.SSL_CTX_get_ex_data(ctx, contextIndex_)) ||
	    api.SSL_get_read_ahead(ssl) || !readsItsSource(api, ssl))
		return;
	turnOn(api, config, ssl);
	connection.setReadAheadByShim(true);
	logLimited(tunedLines, LogLevel::Info, "connection tuned: read-ahead on, read buffer %zu bytes",
		   config.readBuffer);
}

bool ReadTuning::readsItsSource(const OpenSslApi &api, SSL *ssl) noexcept
{
	BIO *rbio = api.SSL_get_rbio(ssl);
	return rbio && !api.BIO_next(rbio) && !(api.BIO_method_type(rbio) & BIO_TYPE_FILTER);
}

void ReadTuning::readBioChanged(const OpenSslApi &api, SSL *ssl, Connection &connection) noexcept
{
	if (!connection.readAheadByShim() || readsItsSource(api, ssl))
		return;
	/* What OpenSSL holds already it still hands out; it reads no further ahead. */
	api.SSL_set_read_ahead(ssl, 0);
	connection.setReadAheadByShim(false);
}

} /* namespace tlstune */
