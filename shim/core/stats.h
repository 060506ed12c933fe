#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>

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

	/* Each counter and its name in the stats line, in the line's order. */
	struct Field {
		const char *name;
		std::atomic<uint64_t> Stats::*counter;
	};
	static constexpr std::size_t kFieldCount = 11;
	static const Field kFields[kFieldCount];

	static void add(std::atomic<uint64_t> &counter, uint64_t n) noexcept
	{
		counter.fetch_add(n, std::memory_order_relaxed);
	}
	/* Anything counted: the process used OpenSSL. */
	bool any() const noexcept;
};

/* A counter of the stats line and its value. */
struct StatsValue {
	const char *name;
	uint64_t value;
};

/*
 * The stats line after "tlstune: ", into out (NUL-terminated, cut to fit): "stats:
 * contexts_tuned=1 ... held_sends=0 program=curl pid=42". The exit line and
 * `tlstune --stats PID` (tools/stats, which reads a running process's counters) both
 * come from here, so that they are one format.
 */
void formatStatsLine(char *out, std::size_t size, const StatsValue *values, std::size_t count,
		     const char *program, long pid) noexcept;
/* The line of a process with TLSTUNE_DISABLE set, in the same way. */
void formatDisabledLine(char *out, std::size_t size, const char *program, long pid) noexcept;

} /* namespace tlstune */
