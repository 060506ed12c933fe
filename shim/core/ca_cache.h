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

/*
 * Opens path for reading (following links, as the loader does) and fstat(2)s the
 * descriptor: the identity is that of the file this process can read now, so a process
 * that lost access (a dropped uid, capabilities, a Landlock rule) gets no entry and the
 * loader fails in its own words. Returns the descriptor (O_CLOEXEC), or -1 for anything
 * but a readable regular file: never cached.
 */
int openFile(const char *path, FileIdentity *identity) noexcept;

/*
 * Git's "racily clean" rule: a file changed (mtime or ctime) less than one timestamp tick
 * before it was read may be changed again within that tick with no visible trace (same
 * size and times: ext2 stamps whole seconds, FAT's mtime two). Such an entry is reused
 * only while the file's bytes are still the ones parsed, as git compares such a file's
 * content. readAt is the wall clock before the file was read.
 */
bool racilyClean(const FileIdentity &identity, const struct timespec &readAt) noexcept;

/* The whole file open on fd, from its start; false if it cannot be read. */
bool readWholeFile(int fd, std::string *content) noexcept;

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
	using Open = int (*)(const char *path, FileIdentity *identity);
	using Clock = std::chrono::steady_clock::time_point (*)();
	using WallClock = struct timespec (*)();
	/* Parses the file's bytes. */
	using Parse = std::function<std::shared_ptr<const CaBundle>(const std::string &content)>;

	static struct timespec wallClock() noexcept;

	explicit CaCache(std::chrono::seconds ttl, Open open = openFile,
			 Clock clock = std::chrono::steady_clock::now,
			 WallClock wall = wallClock) noexcept
		: ttl_(ttl), open_(open), clock_(clock), wall_(wall) {}

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
		bool racy;           /* racily clean: reused only if the bytes are the same */
		std::string content; /* the bytes parsed, kept while racy */
		std::shared_ptr<const CaBundle> bundle;
	};

	const std::chrono::seconds ttl_;
	const Open open_;
	const Clock clock_;
	const WallClock wall_;
	std::mutex mutex_;
	std::unordered_map<std::string, Entry> entries_;
};

} /* namespace tlstune */
