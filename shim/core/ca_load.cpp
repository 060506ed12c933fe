#include "ca_load.h"

namespace tlstune {

int loadCaFile(const CaApi &api, CaCache &cache, Stats &stats, X509_STORE *store,
	       const char *path, const char *propq)
{
	const CaCache::Found found =
		cache.find(path, propq, [&](const std::string &content) {
		return parseBundle(api, content, propq);
	});
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
		return -1;
	}
	return fillStore(api, store, *found.bundle);
}

} /* namespace tlstune */
