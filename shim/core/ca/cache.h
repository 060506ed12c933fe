#pragma once

#include <chrono>
#include <cstddef>
#include <functional>
#include <list>
#include <memory>
#include <mutex>
#include <string>

#include "index.h"

namespace tlstune {

/*
 * The CA file at path, opened with the calls OpenSSL's own load makes (stat, open, and
 * then read and close: glibc's stat and fstat are one system call, newfstatat), with its
 * fstat size. Anything but a regular file is never opened here: opening a FIFO is an
 * event for its writer. -1 when the file is not a readable regular file (or was replaced
 * since the stat); then OpenSSL loads it alone.
 */
int openCaFile(const char *path, std::size_t *size) noexcept;
/* The rest of an open file, read onto content; false on an error or past the largest size cached. */
bool readRest(int fd, std::string *content) noexcept;

enum class CaLookup {
	Hit,      /* the same bytes were indexed before, younger than the TTL */
	Miss,     /* indexed now, first time */
	Reload,   /* indexed again: the entry outlived the TTL */
	Uncached, /* not indexable: OpenSSL loads the file itself */
	Unread,   /* the file could not be read whole: OpenSSL loads it itself */
};

/*
 * The process-wide cache of indexed CA files, keyed by their bytes (and the property query
 * they are loaded for, kept by value): an index is reused
 * only for a file whose bytes are the bytes it was made from (metadata can say that a file
 * changed, never that it did not), whatever its path. Python's temporary copies of one
 * bundle share one entry. At most `capacity` files, the least recently loaded dropped
 * first; files that are not indexable are remembered too, so their bytes are not scanned
 * at every load. One lock, held while indexing, so threads loading the same bytes at once
 * index them once; only the loaders take it, never a connection.
 */
class CaCache {
public:
	using Clock = std::chrono::steady_clock::time_point (*)();
	/* Indexes the file's bytes: null when they are not indexable. */
	using Index = std::function<std::shared_ptr<const CaIndex>(const std::string &content)>;

	static constexpr std::size_t kCapacity = 8;

	explicit CaCache(std::chrono::seconds ttl, std::size_t capacity = kCapacity,
			 Clock clock = std::chrono::steady_clock::now) noexcept
		: ttl_(ttl), capacity_(capacity), clock_(clock) {}

	struct Found {
		std::shared_ptr<const CaIndex> index; /* null when Uncached */
		CaLookup lookup;
	};
	Found find(const std::string &content, const std::string &propq, const Index &index);
	/*
	 * The same for the file open on fd, of fstat size size. It is compared with the
	 * entry of that size as it is read, in small pieces: a hit (python's contexts from
	 * copies of one bundle) allocates nothing the size of the file, which would grow the
	 * heap for good once glibc's threshold for mapped allocations rose past it.
	 */
	Found find(int fd, std::size_t size, const std::string &propq, const Index &index);

	/* Files remembered now, at most the capacity. */
	std::size_t size();

	/* fork() must not copy the lock while another thread holds it mid-index. */
	void lockForFork() noexcept { mutex_.lock(); }
	void unlockAfterFork() noexcept { mutex_.unlock(); }

private:
	/* The fresh entry holding these bytes (the same object), moved to the front. */
	Found touch(const std::shared_ptr<const std::string> &content, const std::string &propq,
		    const Index &index);

	struct Entry {
		std::shared_ptr<const std::string> content;
		std::string propq;
		std::chrono::steady_clock::time_point indexedAt;
		std::shared_ptr<const CaIndex> index; /* null: not indexable */
	};

	bool fresh(const Entry &entry, std::chrono::steady_clock::time_point now) const noexcept
	{
		return now - entry.indexedAt < ttl_;
	}

	const std::chrono::seconds ttl_;
	const std::size_t capacity_;
	const Clock clock_;
	std::mutex mutex_;
	std::list<Entry> entries_; /* most recently loaded first */
};

} /* namespace tlstune */
