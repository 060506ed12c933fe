#include "buffered_fds.h"

#include <algorithm>
#include <cerrno>
#include <linux/sock_diag.h>
#include <new>
#include <sys/socket.h>
#include <sys/stat.h>

#include "core/known_fds.h"
#include "core/log.h"

namespace tlstune {

bool streamInode(int fd, ino_t *ino) noexcept
{
	int savedErrno = errno;
	struct stat st;
	bool ok = fstat(fd, &st) == 0 && (S_ISSOCK(st.st_mode) || S_ISFIFO(st.st_mode));
	errno = savedErrno;
	if (!ok)
		return false;
	*ino = st.st_ino;
	return true;
}

namespace {
/* Per call that leaves data in OpenSSL: rate-limited. */
RateLimit heldLines;
}

void BufferedFds::set(const void *owner, int fd, ino_t ino, bool buffered,
		      unsigned long long arrival) noexcept
{
	bool added = false;
	ino_t left = 0; /* the socket of an entry that went or moved */
	if (buffered)
		knownFds().note(fd);
	{
		std::lock_guard<std::mutex> lock(mutex_);

		auto it = std::find_if(entries_.begin(), entries_.end(),
				       [owner](const Entry &e) { return e.owner == owner; });
		if (!buffered) {
			if (it != entries_.end()) {
				left = it->ino;
				entries_.erase(it);
			}
		} else if (it != entries_.end()) {
			if (it->ino != ino)
				left = it->ino;
			it->fd = fd;
			it->ino = ino;
			it->arrival = arrival;
		} else {
			try {
				entries_.push_back({ owner, fd, ino, arrival });
				added = true;
			} catch (const std::bad_alloc &) {
				/* Out of memory: this connection goes without readiness help. */
			}
		}
		publishCount();
	}
	if (left && released_)
		released_(left);
	/* Outside the lock: a write(2) to stderr may block. */
	if (added)
		logLimited(heldLines, LogLevel::Debug,
			   "fd %d: bytes read ahead are queued; waits report it readable", fd);
}

namespace {

/*
 * The kernel's reset for a close with unread data: SO_LINGER 0 (a pipe: ENOTSOCK, nothing).
 * made: where the socket's own setting is kept, for a close that fails.
 */
void resetAtClose(int fd, AbortiveCloses *made = nullptr) noexcept
{
	/*
	 * A call that may fail must be able to take the reset back (a hunt: an exec that
	 * failed left the ninth socket resetting): past the list's room, its close is a FIN.
	 */
	if (made && made->count == AbortiveCloses::kMost)
		return;
	const int savedErrno = errno;
	struct linger before = {};
	socklen_t length = sizeof(before);
	if (made && getsockopt(fd, SOL_SOCKET, SO_LINGER, &before, &length) == 0)
		made->made[made->count++] = { fd, before };
	const struct linger abortive = { 1, 0 };
	setsockopt(fd, SOL_SOCKET, SO_LINGER, &abortive, sizeof(abortive));
	errno = savedErrno;
}

} /* namespace */

void BufferedFds::forget(const void *owner) noexcept
{
	if (empty())
		return;
	std::unique_lock<std::mutex> lock(mutex_);
	auto it = std::find_if(entries_.begin(), entries_.end(),
			       [owner](const Entry &e) { return e.owner == owner; });
	if (it == entries_.end())
		return;
	/*
	 * What the shim read ahead and nobody read stays in the socket's queue, which took the
	 * readiness over (handOver) and resets the connection at its close if still unread.
	 */
	const ino_t left = it->ino;
	entries_.erase(it);
	publishCount();
	lock.unlock();
	if (released_)
		released_(left);
}

void BufferedFds::handOver(const void *from, const void *to) noexcept
{
	if (empty())
		return;
	std::lock_guard<std::mutex> lock(mutex_);
	if (std::any_of(entries_.begin(), entries_.end(), [to](const Entry &e) { return e.owner == to; }))
		return;
	for (Entry &entry : entries_) {
		if (entry.owner == from) {
			entry.owner = to;
			handedOver_.store(true, std::memory_order_relaxed);
		}
	}
}

int BufferedFds::openElsewhere(ino_t ino, int first, int last) const noexcept
{
	for (const Entry &other : entries_) {
		if (other.ino == ino && other.fd >= 0 && (other.fd < first || other.fd > last))
			return other.fd;
	}
	for (int fd = copies_->highestBelow(FdBitmap::kNumbers); fd >= 0; fd = copies_->highestBelow(fd)) {
		ino_t copy;
		if ((fd < first || fd > last) && streamInode(fd, &copy) && copy == ino)
			return fd;
	}
	return -1;
}

int BufferedFds::copyAmong(ino_t ino, int first, int last) const noexcept
{
	const int above = last < FdBitmap::kNumbers - 1 ? last + 1 : FdBitmap::kNumbers;
	for (int fd = copies_->highestBelow(above); fd >= first && fd >= 0; fd = copies_->highestBelow(fd)) {
		ino_t copy;
		if (streamInode(fd, &copy) && copy == ino)
			return fd;
	}
	return -1;
}

void BufferedFds::closing(int first, int last, AbortiveCloses *made) noexcept
{
	if (empty())
		return;
	std::lock_guard<std::mutex> lock(mutex_);
	/*
	 * The kernel resets at the last close only (a hunt: a dup kept the socket, and lost
	 * data); which may be that of a copy that kept a closed connection's socket (another
	 * hunt: a FIN).
	 */
	for (const Entry &entry : entries_) {
		if (entry.shared)
			continue;
		const int closing = entry.fd >= first && entry.fd <= last ? entry.fd
				    : entry.fd < 0			   ? copyAmong(entry.ino, first, last)
									   : -1;
		if (closing >= 0 && openElsewhere(entry.ino, first, last) < 0)
			resetAtClose(closing, made);
	}
}

void BufferedFds::closeFailed(const AbortiveCloses &made) noexcept
{
	const int savedErrno = errno;
	for (int i = 0; i < made.count; i++) {
		const AbortiveCloses::Made &close = made.made[i];
		setsockopt(close.fd, SOL_SOCKET, SO_LINGER, &close.before, sizeof(close.before));
	}
	errno = savedErrno;
}

void BufferedFds::imageEnds(AbortiveCloses *made) const noexcept
{
	if (empty())
		return;
	/*
	 * Only tried: exit may come from a signal handler that interrupted this thread inside
	 * the lock, which must not hang it. Then the sockets close with a FIN.
	 */
	std::unique_lock<std::mutex> lock(mutex_, std::try_to_lock);
	if (!lock.owns_lock())
		return;
	for (const Entry &entry : entries_) {
		/* One whose own number closed: the copy that keeps its socket (a hunt: a FIN). */
		const int fd = entry.fd >= 0 ? entry.fd : openElsewhere(entry.ino, -1, -1);
		if (!entry.shared && fd >= 0)
			resetAtClose(fd, made);
	}
}

const BufferedFds::Entry *BufferedFds::find(int fd) const noexcept
{
	/* Newest first: after a reuse the connection that registered last owns the fd. */
	for (auto it = entries_.rbegin(); it != entries_.rend(); ++it) {
		if (it->fd == fd)
			return &*it;
	}
	return nullptr;
}

bool BufferedFds::lookup(int fd, ino_t *ino) const noexcept
{
	if (fd < 0 || empty())
		return false;
	{
		std::lock_guard<std::mutex> lock(mutex_);
		if (const Entry *entry = find(fd)) {
			*ino = entry->ino;
			return true;
		}
	}
	/* A copy: whatever file the number names now, held if a connection reads that one. */
	return copies_->mayHave(fd) && streamInode(fd, ino) && holdsInode(*ino);
}

int BufferedFds::highestHeld(int below) const noexcept
{
	if (empty())
		return -1;
	int highest = -1;
	{
		std::lock_guard<std::mutex> lock(mutex_);
		for (const Entry &entry : entries_) {
			if (entry.fd < below)
				highest = std::max(highest, entry.fd);
		}
	}
	for (int fd = copies_->highestBelow(below); fd > highest; fd = copies_->highestBelow(fd)) {
		if (holds(fd))
			return fd;
	}
	return highest;
}

bool BufferedFds::holds(int fd) const noexcept
{
	ino_t ignored;
	return lookup(fd, &ignored);
}

bool BufferedFds::holds(int fd, ino_t ino) const noexcept
{
	ino_t registered;
	return lookup(fd, &registered) && registered == ino;
}

bool BufferedFds::holdsInode(ino_t ino) const noexcept
{
	if (empty())
		return false;
	std::lock_guard<std::mutex> lock(mutex_);
	return std::any_of(entries_.begin(), entries_.end(),
			   [ino](const Entry &e) { return e.ino == ino; });
}

void BufferedFds::closed(int first, int last) noexcept
{
	std::lock_guard<std::mutex> lock(mutex_);
	/*
	 * An entry whose number closed stays while another descriptor names its socket (the
	 * kernel's readiness is the socket's): the connection's next call gives it its fd
	 * again. That descriptor's own close comes here too (its number is noted as known),
	 * and the entry goes with the socket's last one (a hunt: a registration the kernel had
	 * dropped was reported, at once and for ever).
	 */
	entries_.erase(std::remove_if(entries_.begin(), entries_.end(),
				      [&](Entry &e) {
					      if (e.fd >= 0 && (e.fd < first || e.fd > last))
						      return false;
					      const int keeper = openElsewhere(e.ino, first, last);
					      if (keeper < 0)
						      return true;
					      e.fd = -1;
					      knownFds().note(keeper);
					      return false;
				      }),
		       entries_.end());
	publishCount();
	closings_.fetch_add(1, std::memory_order_relaxed);
}

void BufferedFds::quieted(int fd) noexcept
{
	if (fd < 0 || empty())
		return;
	std::lock_guard<std::mutex> lock(mutex_);
	const std::size_t before = entries_.size();
	entries_.erase(std::remove_if(entries_.begin(), entries_.end(),
				      [fd](const Entry &e) { return e.fd == fd; }),
		       entries_.end());
	if (entries_.size() == before)
		return;
	publishCount();
	closings_.fetch_add(1, std::memory_order_relaxed);
}

} /* namespace tlstune */
