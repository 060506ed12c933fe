#include "cache.h"

#include <cerrno>
#include <cstring>
#include <new>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

namespace tlstune {

namespace {

/* A CA bundle is some hundred KiB; a file past this is not one, and not cached. */
constexpr std::size_t kLargest = 64 << 20;

/* read(2), again after a signal. */
ssize_t readSome(int fd, char *buffer, std::size_t size) noexcept
{
	ssize_t n;
	do
		n = read(fd, buffer, size);
	while (n < 0 && errno == EINTR);
	return n;
}

} /* namespace */

int openCaFile(const char *path, std::size_t *size) noexcept
{
	struct stat st;
	if (stat(path, &st) != 0 || !S_ISREG(st.st_mode))
		return -1;
	/* fopen(path, "r"), as BIO_new_file opens it: O_RDONLY and nothing else. */
	const int fd = open(path, O_RDONLY);
	if (fd < 0)
		return -1;
	/*
	 * Replaced by something else since the stat: that open was an event already, and
	 * OpenSSL's own open would be a second one. A race a CA file does not run in practice.
	 */
	if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || static_cast<std::size_t>(st.st_size) >= kLargest) {
		close(fd);
		return -1;
	}
	*size = static_cast<std::size_t>(st.st_size);
	return fd;
}

bool readRest(int fd, std::string *content) noexcept
{
	std::size_t used = content->size();
	for (;;) {
		/* One more byte than asked for, to meet the end in the same call. */
		if (content->capacity() <= used)
			content->reserve(used < 4096 ? 4096 : used * 2);
		content->resize(content->capacity());
		const ssize_t n = readSome(fd, &(*content)[used], content->size() - used);
		if (n <= 0 || used + static_cast<std::size_t>(n) > kLargest) {
			content->resize(used);
			return n == 0;
		}
		used += static_cast<std::size_t>(n);
	}
}

CaCache::Found CaCache::find(int fd, std::size_t size, const std::string &propq, const Index &index)
{
	std::shared_ptr<const std::string> candidate;
	{
		std::lock_guard<std::mutex> lock(mutex_);
		const auto now = clock_();
		for (const Entry &entry : entries_) {
			if (entry.content->size() == size && entry.propq == propq && fresh(entry, now)) {
				candidate = entry.content;
				break;
			}
		}
	}
	std::string content;
	if (candidate) {
		/* Small enough for the heap's free lists; the bytes so far are the candidate's. */
		constexpr std::size_t kPiece = 16 << 10;
		std::unique_ptr<char[]> piece(new (std::nothrow) char[kPiece]);
		std::size_t matched = 0;
		while (piece) {
			const ssize_t n = readSome(fd, piece.get(), kPiece);
			if (n < 0)
				return { nullptr, CaLookup::Unread };
			const std::size_t got = static_cast<std::size_t>(n);
			if (got == 0 && matched == candidate->size())
				return touch(candidate, propq, index);
			if (got == 0 || matched + got > candidate->size() ||
			    std::memcmp(candidate->data() + matched, piece.get(), got) != 0) {
				content.reserve(size + 1);
				content.assign(*candidate, 0, matched);
				content.append(piece.get(), got);
				break;
			}
			matched += got;
		}
	}
	if (content.empty())
		content.reserve(size + 1); /* the file's size, and a byte to meet its end */
	if (!readRest(fd, &content) || content.empty())
		return { nullptr, CaLookup::Unread };
	return find(content, propq, index);
}

CaCache::Found CaCache::touch(const std::shared_ptr<const std::string> &content, const std::string &propq,
			      const Index &index)
{
	{
		std::lock_guard<std::mutex> lock(mutex_);
		for (auto entry = entries_.begin(); entry != entries_.end(); ++entry) {
			if (entry->content == content && entry->propq == propq && fresh(*entry, clock_())) {
				entries_.splice(entries_.begin(), entries_, entry);
				return { entry->index, entry->index ? CaLookup::Hit : CaLookup::Uncached };
			}
		}
	}
	/* Dropped or aged since it was compared: the bytes are known, so the usual way. */
	return find(*content, propq, index);
}

CaCache::Found CaCache::find(const std::string &content, const std::string &propq,
			     const Index &index)
{
	/* A handful of entries: compared whole (sizes first), no hash to compute. */
	std::lock_guard<std::mutex> lock(mutex_);
	const auto now = clock_();
	auto entry = entries_.begin();
	while (entry != entries_.end() && (*entry->content != content || entry->propq != propq))
		++entry;
	CaLookup lookup = CaLookup::Miss;
	if (entry != entries_.end()) {
		if (fresh(*entry, now)) {
			entries_.splice(entries_.begin(), entries_, entry);
			return { entry->index, entry->index ? CaLookup::Hit : CaLookup::Uncached };
		}
		entries_.erase(entry);
		lookup = CaLookup::Reload;
	}
	std::shared_ptr<const CaIndex> made = index(content);
	auto bytes = std::make_shared<const std::string>(content);
	entries_.push_front(Entry{ std::move(bytes), propq, now, made });
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
