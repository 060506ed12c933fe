#pragma once

#include <openssl/ssl.h>

#include "error_queue.h"
#include "openssl_compat.h"

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
	/* 3.3+, which the headers of the 3.0 and 1.1.1 builds do not declare. */
	using WriteEx2 = int (*)(SSL *s, const void *buf, size_t num, uint64_t flags, size_t *written);
	WriteEx2 SSL_write_ex2 = nullptr;
	decltype(&::SSL_do_handshake) SSL_do_handshake = nullptr;
	decltype(&::SSL_connect) SSL_connect = nullptr;
	decltype(&::SSL_accept) SSL_accept = nullptr;
	decltype(&::SSL_shutdown) SSL_shutdown = nullptr;
	decltype(&::SSL_set_fd) SSL_set_fd = nullptr;
	decltype(&::SSL_set_rfd) SSL_set_rfd = nullptr;
	decltype(&::SSL_set_wfd) SSL_set_wfd = nullptr;
	decltype(&::SSL_set_bio) SSL_set_bio = nullptr;
	decltype(&::SSL_set0_rbio) SSL_set0_rbio = nullptr;
	decltype(&::SSL_free) SSL_free = nullptr;
	decltype(&::SSL_clear) SSL_clear = nullptr;
	decltype(&::SSL_get_error) SSL_get_error = nullptr;
	decltype(&::SSL_CTX_callback_ctrl) SSL_CTX_callback_ctrl = nullptr;
	decltype(&::SSL_callback_ctrl) SSL_callback_ctrl = nullptr;
	decltype(&::BIO_f_ssl) BIO_f_ssl = nullptr;
	decltype(&::SSL_CTX_set_record_padding_callback) SSL_CTX_set_record_padding_callback = nullptr;
	decltype(&::SSL_set_record_padding_callback) SSL_set_record_padding_callback = nullptr;
	/* Interposed for TLSTUNE_COALESCE=records only: see interpose/state.cpp. */
	decltype(&::SSL_pending) SSL_pending = nullptr;
	decltype(&::SSL_key_update) SSL_key_update = nullptr;
	decltype(&::SSL_renegotiate) SSL_renegotiate = nullptr;
	decltype(&::SSL_renegotiate_abbreviated) SSL_renegotiate_abbreviated = nullptr;
	decltype(&::SSL_set_connect_state) SSL_set_connect_state = nullptr;
	decltype(&::SSL_set_accept_state) SSL_set_accept_state = nullptr;
	decltype(&::SSL_set_ssl_method) SSL_set_ssl_method = nullptr;
	decltype(&::SSL_set_session) SSL_set_session = nullptr;
	decltype(&::SSL_copy_session_id) SSL_copy_session_id = nullptr;

	/* What the features need. */
	decltype(&::SSL_CTX_ctrl) SSL_CTX_ctrl = nullptr;
	decltype(&::SSL_CTX_set_default_read_buffer_len) SSL_CTX_set_default_read_buffer_len = nullptr;
	/* TLSTUNE_READINESS=off's read-ahead is OpenSSL's own; what the program set is asked. */
	decltype(&::SSL_set_default_read_buffer_len) SSL_set_default_read_buffer_len = nullptr;
	decltype(&::SSL_set_read_ahead) SSL_set_read_ahead = nullptr;
	decltype(&::SSL_get_read_ahead) SSL_get_read_ahead = nullptr;
	decltype(&::SSL_get_SSL_CTX) SSL_get_SSL_CTX = nullptr;
	decltype(&::SSL_CTX_get_ex_data) SSL_CTX_get_ex_data = nullptr;
	decltype(&::SSL_CTX_set_ex_data) SSL_CTX_set_ex_data = nullptr;
	decltype(&::SSL_has_pending) SSL_has_pending = nullptr;
	decltype(&::SSL_want) SSL_want = nullptr;
	/* Optional: without them a moved fd is learnt at the next read, close_notify not seen. */
	decltype(&::SSL_get_rfd) SSL_get_rfd = nullptr;
	decltype(&::SSL_is_server) SSL_is_server = nullptr;
	/* Connections the shim leaves alone: DTLS (1.1.1+) and QUIC objects (3.5+). */
	int (*SSL_is_dtls)(const SSL *) = nullptr;
	int (*SSL_is_quic)(const SSL *) = nullptr;
	decltype(&::SSL_get_shutdown) SSL_get_shutdown = nullptr;
	decltype(&::SSL_set_shutdown) SSL_set_shutdown = nullptr;
	decltype(&::CRYPTO_get_ex_new_index) CRYPTO_get_ex_new_index = nullptr;
	decltype(&::SSL_get_ex_data) SSL_get_ex_data = nullptr;
	decltype(&::CRYPTO_get_ex_data) CRYPTO_get_ex_data = nullptr;
	decltype(&::SSL_set_ex_data) SSL_set_ex_data = nullptr;

	/* Write coalescing: a filter BIO between OpenSSL and its socket BIO. */
	decltype(&::SSL_get_wbio) SSL_get_wbio = nullptr;
	/* Read tuning: whether the read BIO reads its source itself. */
	decltype(&::SSL_get_rbio) SSL_get_rbio = nullptr;
	decltype(&::SSL_set0_wbio) SSL_set0_wbio = nullptr;
	decltype(&::BIO_get_new_index) BIO_get_new_index = nullptr;
	decltype(&::BIO_meth_new) BIO_meth_new = nullptr;
	decltype(&::BIO_meth_set_write) BIO_meth_set_write = nullptr;
	decltype(&::BIO_meth_set_read) BIO_meth_set_read = nullptr;
	decltype(&::BIO_meth_set_ctrl) BIO_meth_set_ctrl = nullptr;
	decltype(&::BIO_meth_set_destroy) BIO_meth_set_destroy = nullptr;
	decltype(&::BIO_new) BIO_new = nullptr;
	decltype(&::BIO_up_ref) BIO_up_ref = nullptr;
	decltype(&::BIO_push) BIO_push = nullptr;
	decltype(&::BIO_next) BIO_next = nullptr;
	/* Optional: a socket BIO with a callback is left alone. */
	decltype(&::BIO_get_callback_ex) BIO_get_callback_ex = nullptr;
	/* Deprecated since 3.0, and still what a program may set: spelt out, not decltype'd. */
	long (*(*BIO_get_callback)(const BIO *))(BIO *, int, const char *, int, long, long) = nullptr;
	decltype(&::BIO_get_data) BIO_get_data = nullptr;
	decltype(&::BIO_set_data) BIO_set_data = nullptr;
	decltype(&::BIO_set_init) BIO_set_init = nullptr;
	decltype(&::BIO_write) BIO_write = nullptr;
	decltype(&::BIO_read) BIO_read = nullptr;
	decltype(&::BIO_ctrl) BIO_ctrl = nullptr;
	decltype(&::BIO_set_flags) BIO_set_flags = nullptr;
	decltype(&::BIO_clear_flags) BIO_clear_flags = nullptr;
	decltype(&::BIO_copy_next_retry) BIO_copy_next_retry = nullptr;
	decltype(&::BIO_method_type) BIO_method_type = nullptr;
	decltype(&::BIO_method_name) BIO_method_name = nullptr;

	/* TLSTUNE_COALESCE=records: which connections may hold plaintext. */
	decltype(&::SSL_version) SSL_version = nullptr;
	decltype(&::SSL_is_init_finished) SSL_is_init_finished = nullptr;
	decltype(&::SSL_renegotiate_pending) SSL_renegotiate_pending = nullptr;
	decltype(&::SSL_get_key_update_type) SSL_get_key_update_type = nullptr;
	/* SSL_set_mode, SSL_set_max_send_fragment and the other macros over it. */
	decltype(&::SSL_ctrl) SSL_ctrl = nullptr;
	decltype(&::SSL_set_options) SSL_set_options = nullptr;
	decltype(&::SSL_clear_options) SSL_clear_options = nullptr;
	decltype(&::SSL_set_block_padding) SSL_set_block_padding = nullptr;
	/* A deferred encryption's errors go to the thread whose call reports them. */
	ErrorQueueApi errors;

	bool hasRecordPath() const noexcept
	{
		return hasWritePath() && SSL_free && SSL_get_error && SSL_write_ex && SSL_want &&
		       SSL_version && SSL_is_init_finished && SSL_renegotiate_pending &&
		       SSL_get_key_update_type && SSL_get_shutdown;
	}

	bool hasWritePath() const noexcept
	{
		return SSL_get_wbio && SSL_set0_wbio && BIO_get_new_index && BIO_meth_new &&
		       BIO_meth_set_write && BIO_meth_set_read && BIO_meth_set_ctrl &&
		       BIO_meth_set_destroy && BIO_new &&
		       BIO_up_ref && BIO_push && BIO_next && BIO_get_data && BIO_set_data &&
		       BIO_set_init && BIO_write && BIO_read && BIO_ctrl && BIO_set_flags &&
		       BIO_clear_flags && BIO_copy_next_retry && BIO_method_type;
	}

	/* Read-ahead is safe only with the readiness layer, so both need all of these. */
	bool hasReadPath() const noexcept
	{
		return SSL_CTX_ctrl && SSL_set_default_read_buffer_len && SSL_set_read_ahead &&
		       SSL_get_read_ahead && SSL_get_SSL_CTX && SSL_CTX_get_ex_data &&
		       SSL_CTX_set_ex_data && SSL_has_pending && SSL_want &&
		       CRYPTO_get_ex_new_index && SSL_get_ex_data && SSL_set_ex_data && SSL_get_rbio &&
		       BIO_next && BIO_method_type;
	}
};

} /* namespace tlstune */
