#include "ca_cache.h"

#include <cerrno>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

namespace tlstune {

namespace {

bool sameTime(const struct timespec &a, const struct timespec &b) noexcept
{
	return a.tv_sec == b.tv_sec && a.tv_nsec == b.tv_nsec;
}

/* Closes the descriptor openFile gave, on every path out of find(). */
struct OpenedFile {
	int fd;
	~OpenedFile()
	{
		if (fd >= 0)
			close(fd);
	}
};

/*
 * The longest timestamp tick of the file systems Linux mounts (FAT's mtime). ext2 and
 * old kernels stamp whole seconds; the others the kernel's coarse clock, a jiffy behind.
 */
constexpr long kTickSeconds = 2;

} /* namespace */

bool operator==(const FileIdentity &a, const FileIdentity &b) noexcept
{
	return a.dev == b.dev && a.ino == b.ino && a.size == b.size && sameTime(a.mtime, b.mtime) &&
	       sameTime(a.ctime, b.ctime);
}

int openFile(const char *path, FileIdentity *identity) noexcept
{
	/* O_NONBLOCK: opening a FIFO given as the CA file must not block before fstat says so. */
	const int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);
	if (fd < 0)
		return -1;
	struct stat st;
	if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
		close(fd);
		return -1;
	}
	identity->dev = st.st_dev;
	identity->ino = st.st_ino;
	identity->size = st.st_size;
	identity->mtime = st.st_mtim;
	identity->ctime = st.st_ctim;
	return fd;
}

bool racilyClean(const FileIdentity &identity, const struct timespec &parsedAt) noexcept
{
	/* Whole seconds: within kTickSeconds before the parse, or later (a clock set back). */
	for (const struct timespec &changed : { identity.mtime, identity.ctime }) {
		if (changed.tv_sec > parsedAt.tv_sec - kTickSeconds ||
		    (changed.tv_sec == parsedAt.tv_sec - kTickSeconds && changed.tv_nsec > parsedAt.tv_nsec))
			return true;
	}
	return false;
}

bool readWholeFile(int fd, std::string *content) noexcept
{
	/* A CA bundle is some hundred KiB; a file past this is not one, and not cached. */
	constexpr size_t kLargest = 64 << 20;
	content->clear();
	char buffer[64 * 1024];
	for (;;) {
		const ssize_t n = pread(fd, buffer, sizeof(buffer), static_cast<off_t>(content->size()));
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0 || content->size() + static_cast<size_t>(n) > kLargest)
			return false;
		if (n == 0)
			return true;
		content->append(buffer, static_cast<size_t>(n));
	}
}

struct timespec CaCache::wallClock() noexcept
{
	struct timespec now = {};
	clock_gettime(CLOCK_REALTIME, &now);
	return now;
}

CaCache::Found CaCache::find(const char *path, const char *propq, const Parse &parse)
{
	/*
	 * Identified before reading, from the descriptor that is read: a change made since
	 * leaves an entry whose identity is already out of date, so the next use parses again.
	 */
	FileIdentity identity;
	const OpenedFile file{ open_(path, &identity) };
	if (file.fd < 0)
		return { nullptr, CaLookup::Uncached };

	/* A path holds no NUL: the key is unambiguous. An empty query is no query. */
	std::string key = path;
	key += '\0';
	key += propq ? propq : "";

	std::lock_guard<std::mutex> lock(mutex_);
	const auto now = clock_();
	auto entry = entries_.find(key);
	const bool fresh = entry != entries_.end() && entry->second.identity == identity &&
			   now - entry->second.parsedAt < ttl_;
	if (fresh && !entry->second.racy)
		return { entry->second.bundle, CaLookup::Hit };

	const struct timespec readAt = wall_();
	std::string content;
	if (!readWholeFile(file.fd, &content))
		return { nullptr, CaLookup::Uncached };
	const bool racy = racilyClean(identity, readAt);
	if (fresh && content == entry->second.content) {
		entry->second.racy = racy;
		if (!racy)
			std::string().swap(entry->second.content);
		return { entry->second.bundle, CaLookup::Hit };
	}

	const CaLookup lookup = entry == entries_.end() ? CaLookup::Miss : CaLookup::Reload;
	std::shared_ptr<const CaBundle> bundle = parse(content);
	if (!bundle) {
		if (entry != entries_.end())
			entries_.erase(entry);
		return { nullptr, CaLookup::Uncached };
	}
	if (!racy)
		content.clear();
	entries_[key] = Entry{ identity, now, racy, racy ? std::move(content) : std::string(), bundle };
	return { bundle, lookup };
}

} /* namespace tlstune */
