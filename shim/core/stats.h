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

	static void add(std::atomic<uint64_t> &counter, uint64_t n) noexcept
	{
		counter.fetch_add(n, std::memory_order_relaxed);
	}
	std::string summary() const;
};

} /* namespace tlstune */
