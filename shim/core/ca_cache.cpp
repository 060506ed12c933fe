#include "ca_cache.h"

#include <sys/stat.h>

namespace tlstune {

namespace {

bool sameTime(const struct timespec &a, const struct timespec &b) noexcept
{
	return a.tv_sec == b.tv_sec && a.tv_nsec == b.tv_nsec;
}

} /* namespace */

bool operator==(const FileIdentity &a, const FileIdentity &b) noexcept
{
	return a.dev == b.dev && a.ino == b.ino && a.size == b.size && sameTime(a.mtime, b.mtime) &&
	       sameTime(a.ctime, b.ctime);
}

bool identifyFile(const char *path, FileIdentity *identity) noexcept
{
	struct stat st;
	if (stat(path, &st) != 0 || !S_ISREG(st.st_mode))
		return false;
	identity->dev = st.st_dev;
	identity->ino = st.st_ino;
	identity->size = st.st_size;
	identity->mtime = st.st_mtim;
	identity->ctime = st.st_ctim;
	return true;
}

CaCache::Found CaCache::find(const char *path, const char *propq, const Parse &parse)
{
	/*
	 * Identified before parsing: a change made while parsing leaves an entry whose
	 * identity is already out of date, so the next use parses again.
	 */
	FileIdentity identity;
	if (!identify_(path, &identity))
		return { nullptr, CaLookup::Uncached };

	/* A path holds no NUL: the key is unambiguous. An empty query is no query. */
	std::string key = path;
	key += '\0';
	key += propq ? propq : "";

	std::lock_guard<std::mutex> lock(mutex_);
	const auto now = clock_();
	auto entry = entries_.find(key);
	if (entry != entries_.end() && entry->second.identity == identity &&
	    now - entry->second.parsedAt < ttl_)
		return { entry->second.bundle, CaLookup::Hit };

	const CaLookup lookup = entry == entries_.end() ? CaLookup::Miss : CaLookup::Reload;
	std::shared_ptr<const CaBundle> bundle = parse();
	if (!bundle) {
		if (entry != entries_.end())
			entries_.erase(entry);
		return { nullptr, CaLookup::Uncached };
	}
	entries_[key] = Entry{ identity, now, bundle };
	return { bundle, lookup };
}

} /* namespace tlstune */
