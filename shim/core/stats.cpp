#include "stats.h"

#include <cstdio>

namespace tlstune {

const Stats::Field Stats::kFields[kFieldCount] = {
	{ "contexts_tuned", &Stats::contextsTuned },
	{ "connections", &Stats::connections },
	{ "ssl_reads", &Stats::sslReads },
	{ "ssl_read_bytes", &Stats::sslReadBytes },
	{ "socket_reads", &Stats::socketReads },
	{ "socket_read_bytes", &Stats::socketReadBytes },
	{ "ca_hits", &Stats::caHits },
	{ "ca_misses", &Stats::caMisses },
	{ "ca_reloads", &Stats::caReloads },
	{ "ca_certs_indexed", &Stats::caCertsIndexed },
	{ "ca_certs_parsed", &Stats::caCertsParsed },
};

bool Stats::any() const noexcept
{
	return contextsTuned.load() || connections.load() || sslReads.load() || caHits.load() ||
	       caMisses.load() || caReloads.load();
}

void formatStatsLine(char *out, std::size_t size, const StatsValue *values, std::size_t count,
		     const char *program, long pid) noexcept
{
	if (size == 0)
		return;
	std::size_t used = 0;
	/* snprintf's count is what the whole text needs: stop adding once it no longer fits. */
	auto append = [&](int n) {
		used = n < 0 || used + static_cast<std::size_t>(n) >= size ? size - 1 : used + static_cast<std::size_t>(n);
	};
	append(std::snprintf(out, size, "stats:"));
	for (std::size_t i = 0; i < count; i++)
		append(std::snprintf(out + used, size - used, " %s=%llu", values[i].name,
				     static_cast<unsigned long long>(values[i].value)));
	append(std::snprintf(out + used, size - used, " program=%s pid=%ld", program, pid));
}

void formatDisabledLine(char *out, std::size_t size, const char *program, long pid) noexcept
{
	if (size)
		std::snprintf(out, size, "stats: disabled by TLSTUNE_DISABLE, every call passed through: "
			      "program=%s pid=%ld", program, pid);
}

} /* namespace tlstune */
