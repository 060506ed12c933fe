#include "ca_load.h"

namespace tlstune {

int loadCaFile(const CaApi &api, CaCache &cache, Stats &stats, const LazyStores *lazy,
	       X509_STORE *store, const char *path, const char *propq)
{
	/* Certificates parsed for a property query keep it: only the default ones are lazy. */
	const bool indexing = lazy && !propq;
	const CaCache::Found found = cache.find(path, propq, [&](const std::string &content) {
		if (indexing) {
			if (std::shared_ptr<const CaIndex> index = indexFile(api, stats, content))
				return CaBundle::lazy(api, std::move(index));
		}
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
	if (found.bundle->index())
		return lazy->attach(store, found.bundle->index());
	/* A batched fill bypasses X509_STORE_add_cert: lazy certificates go in first. */
	if (lazy)
		lazy->beforeEnumeration(store);
	return fillStore(api, store, *found.bundle);
}

} /* namespace tlstune */
