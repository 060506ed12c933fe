#include "load.h"

#include <unistd.h>

#include "core/log.h"

namespace tlstune {

namespace {

/* TLSTUNE_LOG=info: what the cache did, limited (python makes a context per request). */
RateLimit cacheLines;

const char *describe(CaLookup lookup) noexcept
{
	switch (lookup) {
	case CaLookup::Hit:
		return "served from the cache";
	case CaLookup::Miss:
		return "indexed once, and cached";
	case CaLookup::Reload:
		return "older than the TTL: indexed again";
	case CaLookup::Uncached:
	case CaLookup::Unread:
		break;
	}
	return "not indexable: OpenSSL loads it itself";
}

} /* namespace */

int loadCaFile(const CaApi &api, CaCache &cache, Stats &stats, const LazyStores &lazy,
	       X509_STORE *store, const char *path, const std::string &propq)
{
	std::size_t size = 0;
	const int fd = openCaFile(path, &size);
	if (fd < 0)
		return -1;
	const CaCache::Found found = cache.find(fd, size, propq, [&](const std::string &bytes) {
		return std::shared_ptr<const CaIndex>(indexFile(api, stats, bytes, propq));
	});
	close(fd);
	if (found.lookup == CaLookup::Unread)
		return -1;
	switch (found.lookup) {
	case CaLookup::Hit:
		Stats::add(stats.caHits, 1);
		break;
	case CaLookup::Miss:
		Stats::add(stats.caMisses, 1);
		break;
	case CaLookup::Reload:
		Stats::add(stats.caReloads, 1);
		break;
	case CaLookup::Uncached:
	case CaLookup::Unread:
		break;
	}
	const bool decodes = found.index && found.index->keysDecodeNow();
	logLimited(cacheLines, LogLevel::Info, "CA file %s: %s", path,
		   decodes || !found.index ? describe(found.lookup)
					   : "a key would not decode now: OpenSSL loads it itself");
	if (!decodes)
		return -1;
	const int count = lazy.attach(store, found.index);
	if (count >= 0 && lazy.listed(store))
		lazy.beforeEnumeration(store);
	return count;
}

} /* namespace tlstune */
