#pragma once

#include <atomic>
#include <cstdint>
#include <string>

namespace tlstune {

/* Process-wide counters for TLSTUNE_STATS; relaxed atomics, summed once at exit. */
struct Stats {
	std::atomic<uint64_t> contextsTuned{0};
	std::atomic<uint64_t> connections{0};
	std::atomic<uint64_t> sslReads{0};       /* SSL_read/_ex/peek calls that returned data */
	std::atomic<uint64_t> sslReadBytes{0};
	std::atomic<uint64_t> socketReads{0};    /* read syscalls OpenSSL made on its socket */
	std::atomic<uint64_t> socketReadBytes{0};
	std::atomic<uint64_t> caHits{0};         /* CA file loads served from the cache */
	std::atomic<uint64_t> caMisses{0};       /* CA files parsed for the first time */
	std::atomic<uint64_t> caReloads{0};      /* parsed again: changed, or older than the TTL */
	std::atomic<uint64_t> caCertsIndexed{0}; /* certificates indexed by lazy loading */
	std::atomic<uint64_t> caCertsParsed{0};  /* of those, parsed (d2i_X509) */

	static void add(std::atomic<uint64_t> &counter, uint64_t n) noexcept
	{
		counter.fetch_add(n, std::memory_order_relaxed);
	}
	std::string summary() const;
	/* Anything counted: the process used OpenSSL. */
	bool any() const noexcept;
};

} /* namespace tlstune */
