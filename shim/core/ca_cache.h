#pragma once

#include <chrono>
#include <ctime>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <sys/types.h>
#include <unordered_map>

#include "ca_bundle.h"

namespace tlstune {

/*
 * What a file looked like when it was parsed. An in-place rewrite that restores the old
 * mtime keeps inode, size and mtime; its ctime still moves, and the kernel sets ctime.
 */
struct FileIdentity {
	dev_t dev = 0;
	ino_t ino = 0;
	off_t size = 0;
	struct timespec mtime = {};
	struct timespec ctime = {};
};
bool operator==(const FileIdentity &a, const FileIdentity &b) noexcept;

/* stat(2) of path, following links. False for anything but a regular file: never cached. */
bool identifyFile(const char *path, FileIdentity *identity) noexcept;

enum class CaLookup {
	Hit,      /* parsed before, file unchanged, younger than the TTL */
	Miss,     /* parsed now, first time */
	Reload,   /* parsed again: the file changed or the entry outlived the TTL */
	Uncached, /* not a regular file, or the parse failed: the caller loads it itself */
};

/*
 * The process-wide cache of parsed CA files, keyed by the path the loader was given and
 * the property query the certificates are parsed for (a string: kept by value).
 * One lock, held while parsing, so threads asking for the same file at once cause one
 * parse; only the loaders take it, never a connection.
 */
class CaCache {
public:
	using Identify = bool (*)(const char *path, FileIdentity *identity);
	using Clock = std::chrono::steady_clock::time_point (*)();
	using Parse = std::function<std::shared_ptr<const CaBundle>()>;

	explicit CaCache(std::chrono::seconds ttl, Identify identify = identifyFile,
			 Clock clock = std::chrono::steady_clock::now) noexcept
		: ttl_(ttl), identify_(identify), clock_(clock) {}

	struct Found {
		std::shared_ptr<const CaBundle> bundle; /* null when Uncached */
		CaLookup lookup;
	};
	/* The bundle for path and propq, from parse() when there is no fresh one. */
	Found find(const char *path, const char *propq, const Parse &parse);

	/* fork() must not copy the lock while another thread holds it mid-parse. */
	void lockForFork() noexcept { mutex_.lock(); }
	void unlockAfterFork() noexcept { mutex_.unlock(); }

private:
	struct Entry {
		FileIdentity identity;
		std::chrono::steady_clock::time_point parsedAt;
		std::shared_ptr<const CaBundle> bundle;
	};

	const std::chrono::seconds ttl_;
	const Identify identify_;
	const Clock clock_;
	std::mutex mutex_;
	std::unordered_map<std::string, Entry> entries_;
};

} /* namespace tlstune */
