#include "stats.h"

namespace tlstune {

std::string Stats::summary() const
{
	auto field = [](const char *name, const std::atomic<uint64_t> &counter) {
		return std::string(name) + "=" + std::to_string(counter.load(std::memory_order_relaxed));
	};
	return "stats: " + field("contexts_tuned", contextsTuned) + " " +
	       field("connections", connections) + " " + field("ssl_reads", sslReads) + " " +
	       field("ssl_read_bytes", sslReadBytes) + " " + field("socket_reads", socketReads) + " " +
	       field("socket_read_bytes", socketReadBytes) + " " + field("ca_hits", caHits) + " " +
	       field("ca_misses", caMisses) + " " + field("ca_reloads", caReloads) + " " +
	       field("ca_certs_indexed", caCertsIndexed) + " " + field("ca_certs_parsed", caCertsParsed);
}

bool Stats::any() const noexcept
{
	return contextsTuned.load() || connections.load() || sslReads.load() || caHits.load() ||
	       caMisses.load() || caReloads.load();
}

} /* namespace tlstune */
