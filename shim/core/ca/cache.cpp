#include "cache.h"

#include <cerrno>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

namespace tlstune {

bool readCaFile(const char *path, std::string *content) noexcept
{
	/* A CA bundle is some hundred KiB; a file past this is not one, and not cached. */
	constexpr std::size_t kLargest = 64 << 20;
	struct stat st;
	if (stat(path, &st) != 0 || !S_ISREG(st.st_mode))
		return false;
	/* fopen(path, "r"), as BIO_new_file opens it: O_RDONLY and nothing else. */
	const int fd = open(path, O_RDONLY);
	if (fd < 0)
		return false;
	/*
	 * Replaced by something else since the stat: that open was an event already, and
	 * OpenSSL's own open would be a second one. A race a CA file does not run in practice.
	 */
	bool ok = fstat(fd, &st) == 0 && S_ISREG(st.st_mode) &&
		  static_cast<std::size_t>(st.st_size) < kLargest;
	/* Read in place, the size known: one more byte than fstat said, to meet the end. */
	std::size_t used = 0;
	if (ok)
		content->resize(static_cast<std::size_t>(st.st_size) + 1);
	while (ok) {
		if (used == content->size())
			content->resize(used * 2);
		const ssize_t n = read(fd, &(*content)[used], content->size() - used);
		if (n < 0 && errno == EINTR)
			continue;
		ok = n >= 0 && used + static_cast<std::size_t>(n) <= kLargest;
		if (!ok || n == 0)
			break;
		used += static_cast<std::size_t>(n);
	}
	content->resize(used);
	close(fd);
	return ok && !content->empty();
}

CaCache::Found CaCache::find(const std::string &content, const std::string &propq,
			     const Index &index)
{
	/* A handful of entries: compared whole (sizes first), no hash to compute. */
	std::lock_guard<std::mutex> lock(mutex_);
	const auto now = clock_();
	auto entry = entries_.begin();
	while (entry != entries_.end() && (entry->content != content || entry->propq != propq))
		++entry;
	CaLookup lookup = CaLookup::Miss;
	if (entry != entries_.end()) {
		if (now - entry->indexedAt < ttl_) {
			entries_.splice(entries_.begin(), entries_, entry);
			return { entry->index, entry->index ? CaLookup::Hit : CaLookup::Uncached };
		}
		entries_.erase(entry);
		lookup = CaLookup::Reload;
	}
	std::shared_ptr<const CaIndex> made = index(content);
	entries_.push_front(Entry{ content, propq, now, made });
	while (entries_.size() > capacity_)
		entries_.pop_back();
	return { made, made ? lookup : CaLookup::Uncached };
}

std::size_t CaCache::size()
{
	std::lock_guard<std::mutex> lock(mutex_);
	return entries_.size();
}

} /* namespace tlstune */
