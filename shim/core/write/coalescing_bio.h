#pragma once

#include <openssl/ssl.h>

#include "coalescer.h"
#include "core/openssl_api.h"

namespace tlstune {

/*
 * The filter BIO that coalesces a connection's writes: put between OpenSSL and the socket
 * BIO of an SSL that writes to a plain socket, it takes each record OpenSSL writes into
 * the connection's PendingWrites instead of a send() each. OpenSSL encrypts as it always
 * does; only the syscalls are merged, and the flusher never touches OpenSSL state.
 */
class CoalescingBio {
public:
	/* Builds the BIO method; false when this libssl lacks what it needs. */
	bool init(const OpenSslApi &api, Coalescer *coalescer) noexcept;

	/* ssl's PendingWrites when its writes go through the filter; else nullptr. */
	PendingWrites *of(const OpenSslApi &api, SSL *ssl) const noexcept;

	/*
	 * The same, first putting the filter under ssl's writes when they go to a plain
	 * socket BIO (not kernel TLS, not a memory or program-made BIO); else nullptr.
	 */
	PendingWrites *attached(const OpenSslApi &api, SSL *ssl) const noexcept;

	/*
	 * ssl's write BIO as the program should see it: the socket BIO under the filter, when
	 * the filter is there (what it tells of itself, BIO_get_ktls_send included, is true).
	 */
	BIO *programsWriteBio(const OpenSslApi &api, SSL *ssl) const noexcept;

	/* The program set a callback on the socket BIO under ssl's filter: hold nothing. */
	bool socketHooked(const OpenSslApi &api, SSL *ssl) const noexcept;

	/*
	 * While one made with on = true lives on this thread, the filter passes records
	 * straight on (after what is pending): a write of the coalescing limit or more is
	 * not copied.
	 */
	class Direct {
	public:
		explicit Direct(bool on) noexcept;
		~Direct();
		Direct(const Direct &) = delete;
		Direct &operator=(const Direct &) = delete;

	private:
		const bool on_;
	};

	/*
	 * While one lives on this thread, the filter appends every record, past the limit if
	 * need be, and never sends: held plaintext is being encrypted (TLSTUNE_COALESCE=records),
	 * maybe by another thread than the connection's, and that must not block.
	 */
	class Deferred {
	public:
		/* on false: a write like any other (the SSL writes elsewhere now). */
		explicit Deferred(bool on) noexcept;
		~Deferred();
		Deferred(const Deferred &) = delete;
		Deferred &operator=(const Deferred &) = delete;

	private:
		const bool on_;
	};

private:
	BIO_METHOD *method_ = nullptr;
	int type_ = 0;
};

} /* namespace tlstune */
