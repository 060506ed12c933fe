#pragma once

#include <openssl/ssl.h>

namespace tlstune {

/*
 * The OpenSSL functions the shim calls, found at run time in the libssl the program
 * loaded (libtlstune.so never links OpenSSL). A null entry is a function this libssl
 * lacks; the feature that needs it stays off.
 */
struct OpenSslApi {
	/* The interposed functions: what the program's call is passed on to. */
	decltype(&::SSL_CTX_new) SSL_CTX_new = nullptr;
	decltype(&::SSL_CTX_new_ex) SSL_CTX_new_ex = nullptr; /* 3.0+ */
	decltype(&::SSL_new) SSL_new = nullptr;
	decltype(&::SSL_read) SSL_read = nullptr;
	decltype(&::SSL_read_ex) SSL_read_ex = nullptr;
	decltype(&::SSL_peek) SSL_peek = nullptr;
	decltype(&::SSL_peek_ex) SSL_peek_ex = nullptr;
	decltype(&::SSL_write) SSL_write = nullptr;
	decltype(&::SSL_write_ex) SSL_write_ex = nullptr;
	decltype(&::SSL_do_handshake) SSL_do_handshake = nullptr;
	decltype(&::SSL_connect) SSL_connect = nullptr;
	decltype(&::SSL_accept) SSL_accept = nullptr;

	/* What the features need. */
	decltype(&::SSL_CTX_ctrl) SSL_CTX_ctrl = nullptr;
	decltype(&::SSL_CTX_set_default_read_buffer_len) SSL_CTX_set_default_read_buffer_len = nullptr;
	decltype(&::SSL_has_pending) SSL_has_pending = nullptr;
	decltype(&::SSL_want) SSL_want = nullptr;
	decltype(&::CRYPTO_get_ex_new_index) CRYPTO_get_ex_new_index = nullptr;
	decltype(&::SSL_get_ex_data) SSL_get_ex_data = nullptr;
	decltype(&::SSL_set_ex_data) SSL_set_ex_data = nullptr;

	/* Read-ahead is safe only with the readiness layer, so both need all of these. */
	bool hasReadPath() const noexcept
	{
		return SSL_CTX_ctrl && SSL_CTX_set_default_read_buffer_len && SSL_has_pending &&
		       SSL_want && CRYPTO_get_ex_new_index && SSL_get_ex_data && SSL_set_ex_data;
	}
};

} /* namespace tlstune */
