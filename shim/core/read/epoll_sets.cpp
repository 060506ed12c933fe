#include "epoll_sets.h"

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fcntl.h>
#include <new>
#include <set>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>
#include <utility>

#include "core/known_fds.h"
#include "core/raw_syscalls.h"

namespace tlstune {

namespace {

constexpr unsigned kInput = EPOLLIN | EPOLLRDNORM;
/* What an arm may ask the kernel for besides input (EPOLLERR and EPOLLHUP it always reports). */
constexpr unsigned kBesidesInput = EPOLLOUT | EPOLLWRNORM | EPOLLWRBAND | EPOLLRDBAND | EPOLLPRI | EPOLLRDHUP;
/* Detached registrations tolerated beyond the live ones before a prune. */
constexpr size_t kPruneSlack = 1024;

/*
 * Calls visit(registration) for each line of the kernel's list of epfd. Raw syscalls: the
 * shim's own read() wrapper would take this for a socket read when a program's BIO waits
 * inside SSL_read, and its close() would take the set's lock again (RawSyscalls keeps
 * them off the syscall() routing). False when the list cannot be read.
 */
template <typename Visit>
bool readKernelList(int epfd, Visit visit) noexcept
{
	RawSyscalls raw;
	int savedErrno = errno;
	char path[64];
	std::snprintf(path, sizeof(path), "/proc/self/fdinfo/%d", epfd);
	int fd = static_cast<int>(syscall(SYS_openat, AT_FDCWD, path, O_RDONLY | O_CLOEXEC));
	if (fd < 0) {
		errno = savedErrno;
		return false;
	}
	char buffer[4096];
	size_t used = 0;
	for (;;) {
		ssize_t n = syscall(SYS_read, fd, buffer + used, sizeof(buffer) - 1 - used);
		if (n <= 0)
			break;
		used += static_cast<size_t>(n);
		buffer[used] = '\0';

		char *start = buffer;
		for (char *end; (end = std::strchr(start, '\n')); start = end + 1) {
			*end = '\0';
			EpollRegistration registration;
			if (parseEpollFdinfoLine(start, &registration))
				visit(registration);
		}
		used = static_cast<size_t>(buffer + used - start);
		std::memmove(buffer, start, used);
		if (used == sizeof(buffer) - 1)
			used = 0; /* a line longer than any fdinfo line: drop it */
	}
	syscall(SYS_close, fd);
	errno = savedErrno;
	return true;
}

} /* namespace */

bool parseEpollFdinfoLine(const char *line, EpollRegistration *out) noexcept
{
	/* "tfd:        5 events:       19 data:                5  pos:0 ino:3d1a sdev:8" */
	int fd;
	unsigned events;
	unsigned long long data;
	unsigned long ino;
	if (std::sscanf(line, "tfd: %d events: %x data: %llx pos:%*d ino:%lx", &fd, &events, &data,
			&ino) != 4)
		return false;
	*out = { fd, events, data, ino };
	return true;
}

int kernelRegistrations(const BufferedFds &buffered, int epfd, EpollRegistration *out,
			int max) noexcept
{
	int found = 0;
	readKernelList(epfd, [&](const EpollRegistration &registration) {
		if (found < max && (registration.events & kInput) &&
		    buffered.holdsInode(registration.ino))
			out[found++] = registration;
	});
	return found;
}

EpollSets::Set *EpollSets::find(int epfd) noexcept
{
	return const_cast<Set *>(static_cast<const EpollSets *>(this)->find(epfd));
}

int EpollSets::highestSet() const noexcept
{
	if (empty())
		return -1;
	std::lock_guard<std::mutex> lock(mutex_);
	int highest = -1;
	for (const auto &set : sets_)
		highest = std::max(highest, set.first);
	for (const auto &alias : aliases_)
		highest = std::max(highest, alias.first);
	return highest;
}

const EpollSets::Set *EpollSets::find(int epfd) const noexcept
{
	/* One set and no copy (most processes): no hash to compute (issue 24: epoll_ctl). */
	if (sets_.size() == 1 && aliases_.empty()) {
		const auto only = sets_.begin();
		return only->first == epfd ? &only->second : nullptr;
	}
	auto it = sets_.find(epfd);
	if (it == sets_.end() && !aliases_.empty()) {
		auto alias = aliases_.find(epfd);
		if (alias != aliases_.end())
			it = sets_.find(alias->second);
	}
	return it == sets_.end() ? nullptr : &it->second;
}

void EpollSets::aliased(int from, int to) noexcept
{
	knownFds().note(to);
	std::lock_guard<std::mutex> lock(mutex_);
	aliases_.erase(to);
	auto alias = aliases_.find(from);
	const int set = alias == aliases_.end() ? from : alias->second;
	if (set == to || sets_.find(set) == sets_.end())
		return;
	try {
		aliases_.emplace(to, set);
	} catch (const std::bad_alloc &) {
		/* Out of memory: waits on the copy see only the kernel's readiness. */
	}
}

EpollSets::Stored *EpollSets::live(Set &set, int fd) noexcept
{
	/* A set of pending registrations only (most): no hash to compute. */
	if (set.liveByFd.empty())
		return nullptr;
	auto it = set.liveByFd.find(fd);
	if (it == set.liveByFd.end())
		return nullptr;
	auto range = set.byIno.equal_range(it->second);
	for (auto entry = range.first; entry != range.second; ++entry) {
		if (!entry->second.detached && entry->second.registration.fd == fd)
			return &entry->second;
	}
	return nullptr;
}

EpollSets::Pending *EpollSets::pendingAt(Set &set, int fd) noexcept
{
	if (fd < 0 || static_cast<size_t>(fd) >= set.pending.size() || !set.pending[fd].used)
		return nullptr;
	return &set.pending[fd];
}

bool EpollSets::dropPending(Set &set, int fd) noexcept
{
	Pending *pending = pendingAt(set, fd);
	if (!pending)
		return false;
	pending->used = false;
	countUnresolved(set, -1);
	return true;
}

void EpollSets::record(int epfd, Set &set, int fd, const struct epoll_event &event)
{
	const bool pendable = fd < kPendingFds && !(event.events & EPOLLONESHOT) && !find(fd);
	if (!pendable) {
		Stored *stored = add(epfd, set, { fd, event.events, event.data.u64, kUnresolvedInode | static_cast<unsigned>(fd) });
		/* A re-arm by DEL and ADD: waits begun before the old arm's disarm may report it still. */
		if (event.events & EPOLLONESHOT)
			stored->disarmedAt = formerDisarm(set, event.data.u64);
		return;
	}
	if (static_cast<size_t>(fd) >= set.pending.size())
		set.pending.resize(std::max<size_t>(static_cast<size_t>(fd) + 1, 2 * set.pending.size()));
	noteUnresolvedFd(set, fd);
	set.pending[fd] = { event.data.u64, event.events, true };
	countUnresolved(set, 1);
}

void EpollSets::index(Set &set, Stored *stored)
{
	if (!(stored->registration.events & EPOLLONESHOT))
		return;
	set.oneShotByData.emplace(stored->registration.data, stored);
	oneShotCount_.fetch_add(1, std::memory_order_relaxed);
}

void EpollSets::unindex(Set &set, const Stored *stored) noexcept
{
	auto range = set.oneShotByData.equal_range(stored->registration.data);
	for (auto it = range.first; it != range.second; ++it) {
		if (it->second == stored) {
			set.oneShotByData.erase(it);
			oneShotCount_.fetch_sub(1, std::memory_order_relaxed);
			return;
		}
	}
}

void EpollSets::rememberFormerArm(Set &set, const Stored &stored) noexcept
{
	const unsigned long disarmedAt = stored.fired && stored.armedByShim
						 ? tickets_.fetch_add(1, std::memory_order_seq_cst) + 1
						 : stored.disarmedAt;
	if (disarmedAt == 0)
		return;
	set.formerDisarms[set.formerNext] = { stored.registration.data, disarmedAt };
	set.formerNext = (set.formerNext + 1) % set.formerDisarms.size();
	set.newestFormerDisarm = std::max(set.newestFormerDisarm, disarmedAt);
}

bool EpollSets::othersCarry(const Set &set, unsigned long long data) noexcept
{
	for (const Pending &pending : set.pending) {
		if (pending.used && pending.data == data)
			return true;
	}
	for (const auto &entry : set.byIno) {
		const Stored &stored = entry.second;
		if (!stored.detached && !(stored.registration.events & EPOLLONESHOT) && stored.registration.data == data)
			return true;
	}
	return false;
}

void EpollSets::erase(Set &set, Stored *stored) noexcept
{
	rememberFormerArm(set, *stored);
	armWithoutInput(set, *stored, false);
	unindex(set, stored);
	if (stored->registration.ino & kUnresolvedInode)
		countUnresolved(set, -1);
	if (stored->innerSet >= 0)
		set.nested--;
	if (stored->detached)
		set.detached--;
	else
		set.liveByFd.erase(stored->registration.fd);
	auto range = set.byIno.equal_range(stored->registration.ino);
	for (auto entry = range.first; entry != range.second; ++entry) {
		if (&entry->second == stored) {
			set.byIno.erase(entry);
			return;
		}
	}
}

void EpollSets::dropSet(std::unordered_map<int, Set>::iterator it) noexcept
{
	oneShotCount_.fetch_sub(it->second.oneShotByData.size(), std::memory_order_relaxed);
	unresolved_.fetch_sub(it->second.unresolved, std::memory_order_relaxed);
	restricted_.fetch_sub(it->second.restricted, std::memory_order_relaxed);
	sets_.erase(it);
	count_.store(sets_.size(), std::memory_order_relaxed);
}

void EpollSets::created(int epfd, bool following) noexcept
{
	knownFds().note(epfd);
	std::lock_guard<std::mutex> lock(mutex_);
	aliases_.erase(epfd);
	auto old = sets_.find(epfd);
	if (old != sets_.end())
		dropSet(old); /* its fd was closed behind the shim's back */
	try {
		sets_.emplace(epfd, Set()).first->second.unread = !following;
	} catch (const std::bad_alloc &) {
		/* Out of memory: the set stays unknown, and its waits read the kernel's list. */
	}
	count_.store(sets_.size(), std::memory_order_relaxed);
}

void EpollSets::changed(int epfd, int op, int fd, const struct epoll_event *event) noexcept
{
	knownFds().note(fd);
	std::lock_guard<std::mutex> lock(mutex_);
	changedLocked(epfd, op, fd, event);
}

int EpollSets::control(int epfd, int op, int fd, struct epoll_event *event, EpollCtl ctl,
		       const BufferedFds *buffered) noexcept
{
	knownFds().note(fd);
	/*
	 * A one-shot arm is counted before the kernel has it: a wait that returns with its
	 * report before the table has it (the set's first read from the kernel takes a while)
	 * looks for it under the lock, after this change, instead of passing it on unseen (a
	 * hunt: the first connection's report went to one worker, the table took the arm for
	 * armed, and a claim gave it to a second, 1 to 3 runs of 30).
	 */
	const bool oneShot = armsOneShot(op, event);
	if (oneShot)
		oneShotCount_.fetch_add(1, std::memory_order_seq_cst);
	int result;
	{
		std::lock_guard<std::mutex> lock(mutex_);
		realCtl_ = ctl;
		/*
		 * Held records the shim read ahead: the arm's input is the shim's to report alone.
		 * Not an arm that asks for more than input: the kernel would report the rest alone
		 * (EPOLLOUT of a writable socket, at once), and the arm fired without input, at
		 * each re-arm.
		 */
		const bool inputOnly = oneShot && (event->events & kInput) && !(event->events & kBesidesInput);
		Set *set = inputOnly && buffered && !buffered->empty() && buffered->holds(fd) ? find(epfd) : nullptr;
		/* Made before the first connection: its list, read now, is the table (a hunt's first connection). */
		if (set && set->unread)
			readWhole(epfd, *set);
		const bool withoutInput = set && set->exact;
		struct epoll_event toKernel = {};
		if (withoutInput) {
			toKernel = *event;
			toKernel.events &= ~kInput;
		}
		result = ctl(epfd, op, fd, withoutInput ? &toKernel : event);
		if (result == 0) {
			const int savedErrno = errno;
			changedLocked(epfd, op, fd, event);
			/* A one-shot arm, or a MOD of one that was (one load else). */
			const bool mayBeRestricted = oneShot || (op == EPOLL_CTL_MOD && restricted_.load(std::memory_order_relaxed) > 0);
			Set *changed = mayBeRestricted ? find(epfd) : nullptr;
			Stored *stored = changed && changed->exact ? live(*changed, fd) : nullptr;
			if (stored)
				armWithoutInput(*changed, *stored, withoutInput);
			else if (withoutInput)
				ctl(epfd, EPOLL_CTL_MOD, fd, event); /* no table to follow it: the program's arm */
			errno = savedErrno;
		}
	}
	if (oneShot)
		oneShotCount_.fetch_sub(1, std::memory_order_relaxed);
	return result;
}

void EpollSets::changedLocked(int epfd, int op, int fd, const struct epoll_event *event) noexcept
{
	Set *set = find(epfd);
	if (!set) {
		/*
		 * A set the shim never saw created (made before it, or through a dup of a known
		 * set's fd, which changes that set behind its back): trust none of the tables.
		 */
		for (auto &entry : sets_)
			entry.second.exact = false;
		return;
	}
	/* Its list as the kernel has it, this change included: the change below then finds it. */
	if (set->unread)
		readWhole(epfd, *set);
	if (!set->exact) {
		/*
		 * Its waits read the kernel's list, and keep what each registration was told
		 * (reload): an ADD or MOD re-polls, so what it was told goes (a hunt: an
		 * edge-triggered one-shot re-armed after one record in a set gone inexact was
		 * never told of the records held, and its connection stalled for good).
		 */
		if (op != EPOLL_CTL_DEL)
			forgetTold(*set, fd);
		return;
	}
	/* A MOD of a pending registration makes it anew: it was never told anything. */
	const bool wasPending = dropPending(*set, fd);
	Stored *stored = live(*set, fd);
	if (!stored && !wasPending && op != EPOLL_CTL_ADD)
		stored = reattach(*set, fd);
	if (op == EPOLL_CTL_DEL) {
		if (stored)
			erase(*set, stored);
		return;
	}
	if (!event || (op == EPOLL_CTL_MOD && !stored && !wasPending)) {
		set->exact = false; /* the kernel has a registration the shim missed */
		return;
	}
	if (op == EPOLL_CTL_MOD && stored) {
		if (stored->registration.data != event->data.u64) {
			/* The old data's claimed arm may still reach a wait begun before its disarm. */
			rememberFormerArm(*set, *stored);
			stored->disarmedAt = formerDisarm(*set, event->data.u64);
		}
		unindex(*set, stored);
		stored->registration.events = event->events;
		stored->registration.data = event->data.u64;
		stored->fired = false; /* MOD re-arms */
		stored->claimed = false;
		stored->armedByShim = false;
		/*
		 * The kernel polls the file again on MOD, edge-triggered too, and queues an event
		 * when it is ready: a held connection is, so its next wait reports it once more
		 * (a one-shot re-armed after reading one record stalled for ever otherwise).
		 */
		stored->told = false;
	} else {
		if (stored)
			erase(*set, stored); /* a registration whose end the shim missed */
		stored = nullptr;
	}
	try {
		if (stored)
			index(*set, stored);
		else
			record(epfd, *set, fd, *event);
	} catch (const std::bad_alloc &) {
		set->exact = false;
	}
}

void EpollSets::forgetTold(Set &set, int fd) noexcept
{
	for (auto &entry : set.byIno) {
		if (entry.second.registration.fd == fd && !entry.second.detached) {
			entry.second.told = false;
			entry.second.fired = false;
		}
	}
}

void EpollSets::noteUnresolvedFd(Set &set, int fd)
{
	/* Stale numbers (deleted, closed, resolved) are dropped before they outnumber the live. */
	if (set.unresolvedFds.size() > 2 * set.unresolved + 64) {
		set.unresolvedFds.clear();
		for (const auto &entry : set.liveByFd) {
			if (entry.second & kUnresolvedInode)
				set.unresolvedFds.push_back(entry.first);
		}
		for (size_t number = 0; number < set.pending.size(); number++) {
			if (set.pending[number].used)
				set.unresolvedFds.push_back(static_cast<int>(number));
		}
	}
	set.unresolvedFds.push_back(fd);
}

EpollSets::Stored *EpollSets::add(int epfd, Set &set, const EpollRegistration &registration)
{
	const bool unresolved = (registration.ino & kUnresolvedInode) != 0;
	if (unresolved)
		noteUnresolvedFd(set, registration.fd);
	Stored added = { registration, 0, false, false, false, 0 };
	Stored *stored = &set.byIno.emplace(registration.ino, added)->second;
	set.liveByFd[registration.fd] = registration.ino;
	if (unresolved)
		countUnresolved(set, 1);
	if (registration.fd != epfd && find(registration.fd)) {
		stored->innerSet = registration.fd;
		set.nested++;
	}
	index(set, stored);
	return stored;
}

unsigned long EpollSets::formerDisarm(const Set &set, unsigned long long data) noexcept
{
	unsigned long disarmedAt = 0;
	for (size_t i = 0; i < set.formerDisarms.size() && set.formerDisarms[i].second > 0; i++) {
		if (set.formerDisarms[i].first == data)
			disarmedAt = std::max(disarmedAt, set.formerDisarms[i].second);
	}
	return disarmedAt;
}

void EpollSets::readWhole(int epfd, Set &set) noexcept
{
	set.unread = false;
	Set fresh;
	bool fits = true;
	const bool read = readKernelList(epfd, [&](const EpollRegistration &registration) {
		if (!fits)
			return;
		try {
			knownFds().note(registration.fd);
			add(epfd, fresh, registration);
		} catch (const std::bad_alloc &) {
			fits = false;
		}
	});
	replace(set, std::move(fresh));
	/* Unreadable (no /proc) or out of memory: its waits read the kernel's list, as before. */
	set.exact = read && fits;
}

EpollSets::Stored *EpollSets::reattach(Set &set, int fd) noexcept
{
	if (set.detached == 0)
		return nullptr;
	struct stat st;
	const int savedErrno = errno;
	const bool open = fstat(fd, &st) == 0;
	errno = savedErrno;
	if (!open)
		return nullptr;
	auto range = set.byIno.equal_range(st.st_ino);
	for (auto it = range.first; it != range.second; ++it) {
		Stored &stored = it->second;
		if (!stored.detached || stored.registration.fd != fd)
			continue;
		try {
			set.liveByFd[fd] = st.st_ino;
		} catch (const std::bad_alloc &) {
			return nullptr; /* the caller finds none: the set reads the kernel's list */
		}
		stored.detached = false;
		set.detached--;
		return &stored;
	}
	return nullptr;
}

void EpollSets::detach(Set &set, int fd) noexcept
{
	/* Its file was not learnt before the close (closing() could not): nothing can match it. */
	if (dropPending(set, fd))
		return;
	Stored *stored = live(set, fd);
	if (!stored)
		return;
	if (stored->registration.ino & kUnresolvedInode) {
		/* Its file was not learnt before the close (closing() could not): nothing can match it. */
		erase(set, stored);
		return;
	}
	/*
	 * A fired one-shot's file can report it again only after a MOD by this number: it
	 * goes, its claimed arm remembered, and a new connection given its data is the data's
	 * only registration (a hunt: a closed connection's data reused, two registrations of
	 * it, and the set read from the kernel, which reported the old arm to a thread pool's
	 * second thread).
	 */
	if ((stored->registration.events & EPOLLONESHOT) && stored->fired) {
		erase(set, stored);
		return;
	}
	set.liveByFd.erase(fd);
	stored->detached = true;
	stored->closedAt = closings_;
	set.detached++;
}

void EpollSets::countUnresolved(Set &set, long delta) noexcept
{
	set.unresolved += delta;
	/* Written under the lock only: no locked instruction per ADD and DEL (issue 24). */
	unresolved_.store(unresolved_.load(std::memory_order_relaxed) + static_cast<size_t>(delta),
			  std::memory_order_relaxed);
}

void EpollSets::resolve(Set &set, int fd, bool closing) noexcept
{
	if (Pending *pending = pendingAt(set, fd)) {
		resolvePending(set, fd, *pending, closing);
		return;
	}
	Stored *stored = live(set, fd);
	if (!stored || !(stored->registration.ino & kUnresolvedInode))
		return;
	/* The file's only name closes, and its registration with it (issue 24: an fstat per close). */
	if (closing && stored->innerSet < 0 && !mayBeCopy(fd)) {
		erase(set, stored);
		return;
	}
	struct stat st;
	const int savedErrno = errno;
	const bool open = fstat(fd, &st) == 0;
	errno = savedErrno;
	if (!open) {
		/* Closed where the shim could not see: the kernel's list says what is left of it. */
		erase(set, stored);
		set.exact = false;
		return;
	}
	if (closing && stored->innerSet < 0 && !S_ISSOCK(st.st_mode) && !S_ISFIFO(st.st_mode)) {
		erase(set, stored);
		return;
	}
	/* A node moves between keys in place: the one-shot index's pointer to it stays good. */
	auto range = set.byIno.equal_range(stored->registration.ino);
	for (auto it = range.first; it != range.second; ++it) {
		if (&it->second != stored)
			continue;
		auto node = set.byIno.extract(it);
		node.key() = st.st_ino;
		node.mapped().registration.ino = st.st_ino;
		set.byIno.insert(std::move(node));
		set.liveByFd[fd] = st.st_ino;
		countUnresolved(set, -1);
		return;
	}
}

void EpollSets::resolvePending(Set &set, int fd, const Pending &pending, bool closing) noexcept
{
	const Pending copy = pending;
	dropPending(set, fd);
	if (closing && !mayBeCopy(fd))
		return; /* as above: the registration goes with the file's only name */
	struct stat st;
	const int savedErrno = errno;
	const bool open = fstat(fd, &st) == 0;
	errno = savedErrno;
	if (!open) {
		/* Closed where the shim could not see: the kernel's list says what is left of it. */
		set.exact = false;
		return;
	}
	/* A pending registration is of no set (record): a file that is no stream goes with its fd. */
	if (closing && !S_ISSOCK(st.st_mode) && !S_ISFIFO(st.st_mode))
		return;
	const Stored stored = { { fd, copy.events, copy.data, st.st_ino }, 0, false, false, false, 0 };
	try {
		auto node = set.byIno.emplace(st.st_ino, stored);
		try {
			set.liveByFd[fd] = st.st_ino;
		} catch (const std::bad_alloc &) {
			set.byIno.erase(node);
			throw;
		}
	} catch (const std::bad_alloc &) {
		set.exact = false; /* out of memory: its waits read the kernel's list */
	}
}

void EpollSets::resolve(Set &set) noexcept
{
	for (int fd : set.unresolvedFds)
		resolve(set, fd);
	set.unresolvedFds.clear();
}

void EpollSets::closing(int first, int last) noexcept
{
	if (unresolved_.load(std::memory_order_relaxed) == 0)
		return;
	std::lock_guard<std::mutex> lock(mutex_);
	closingLocked(first, last);
}

void EpollSets::closingLocked(int first, int last) noexcept
{
	for (auto &entry : sets_) {
		Set &set = entry.second;
		if (set.unresolved == 0)
			continue;
		/* long long: a close of INT_MAX ended no int loop (a hunt: a core spinning). */
		if (static_cast<long long>(last) - first <= 64) {
			for (long long fd = first; fd <= last; fd++)
				resolve(set, static_cast<int>(fd), true);
		} else {
			/* A wide close_range: from the set's side (resolve leaves the list as it is). */
			for (int fd : set.unresolvedFds) {
				if (fd >= first && fd <= last)
					resolve(set, fd, true);
			}
		}
	}
}

void EpollSets::closed(int first, int last) noexcept
{
	forget(first, last, false);
}

void EpollSets::freeing(int first, int last) noexcept
{
	forget(first, last, true);
}

void EpollSets::forget(int first, int last, bool resolving) noexcept
{
	if (empty())
		return;
	constexpr int kMaxPrunes = 4;
	int prunes[kMaxPrunes];
	int wanted = 0;
	{
		std::lock_guard<std::mutex> lock(mutex_);
		if (resolving && unresolved_.load(std::memory_order_relaxed) != 0)
			closingLocked(first, last);
		wanted = closedLocked(first, last, prunes, kMaxPrunes);
	}
	/* Outside the lock: reading the kernel's list takes a while for a large set. */
	for (int i = 0; i < wanted; i++)
		prune(prunes[i]);
}

int EpollSets::closedLocked(int first, int last, int *prune, int max) noexcept
{
	closings_++;
	for (auto alias = aliases_.begin(); alias != aliases_.end();) {
		if (alias->first >= first && alias->first <= last)
			alias = aliases_.erase(alias);
		else
			++alias;
	}
	/* A set a copy keeps goes on under its number, after this walk (an insert may rehash). */
	int kept[4];
	int keeping = 0;
	for (auto it = sets_.begin(); it != sets_.end();) {
		auto next = std::next(it);
		if (it->first >= first && it->first <= last) {
			if (keeping < 4 && firstCopy(it->first) != aliases_.end())
				kept[keeping++] = it->first;
			else
				dropSet(it);
		}
		it = next;
	}
	for (int i = 0; i < keeping; i++)
		moveToCopy(kept[i]);

	/* A wide close_range (after fork, before exec) looks the fds up from the sets' side. */
	const bool wide = static_cast<long long>(last) - first > 64;
	int wanted = 0;
	for (auto &entry : sets_) {
		Set &set = entry.second;
		if (!wide) {
			for (long long fd = first; fd <= last; fd++)
				detach(set, static_cast<int>(fd));
		} else {
			for (auto it = set.liveByFd.begin(); it != set.liveByFd.end();) {
				const int fd = (it++)->first;
				if (fd >= first && fd <= last)
					detach(set, fd);
			}
			for (int fd : set.unresolvedFds) {
				if (fd >= first && fd <= last)
					dropPending(set, fd);
			}
		}
		if (set.detached > set.liveByFd.size() + kPruneSlack && wanted < max)
			prune[wanted++] = entry.first;
	}
	return wanted;
}

std::unordered_map<int, int>::const_iterator EpollSets::firstCopy(int epfd) const noexcept
{
	return std::find_if(aliases_.begin(), aliases_.end(),
			    [epfd](const std::pair<const int, int> &alias) { return alias.second == epfd; });
}

void EpollSets::moveToCopy(int epfd) noexcept
{
	auto copy = firstCopy(epfd);
	auto it = sets_.find(epfd);
	if (copy == aliases_.end() || it == sets_.end())
		return;
	/* The kernel's set lives while a copy does: it is the copy's now, where it stands in memory. */
	const int successor = copy->first;
	aliases_.erase(copy);
	auto node = sets_.extract(it);
	node.key() = successor;
	sets_.insert(std::move(node));
	for (auto &alias : aliases_) {
		if (alias.second == epfd)
			alias.second = successor;
	}
	/* An outer set's registration of it stays the kernel's while the file lives (a hunt's stalled). */
	for (auto &entry : sets_) {
		for (auto &stored : entry.second.byIno) {
			if (stored.second.innerSet == epfd)
				stored.second.innerSet = successor;
		}
	}
}

void EpollSets::prune(int epfd) noexcept
{
	unsigned long long before;
	{
		std::lock_guard<std::mutex> lock(mutex_);
		before = closings_;
	}
	std::set<std::pair<int, unsigned long>> kernel;
	bool read;
	try {
		read = readKernelList(epfd, [&](const EpollRegistration &registration) {
			kernel.emplace(registration.fd, registration.ino);
		});
	} catch (const std::bad_alloc &) {
		return;
	}
	if (!read)
		return;

	std::lock_guard<std::mutex> lock(mutex_);
	Set *set = find(epfd);
	if (!set)
		return;
	for (auto it = set->byIno.begin(); it != set->byIno.end();) {
		Stored &stored = it->second;
		/* Detached after the list was read: the list says nothing about it yet. */
		const bool dead = stored.detached && stored.closedAt < before &&
				  !kernel.count({ stored.registration.fd, stored.registration.ino });
		if (!dead) {
			++it;
			continue;
		}
		unindex(*set, &stored);
		set->detached--;
		it = set->byIno.erase(it);
	}
}

void EpollSets::forked() noexcept
{
	/* Called with the lock held (between lockForFork and unlockAfterFork). */
	for (auto &entry : sets_) {
		entry.second.exact = false;
		entry.second.shared = true;
	}
}

void EpollSets::reload(int epfd, const BufferedFds &buffered) noexcept
{
	/*
	 * The kernel's list is the table now: an arm it has without input is given back as the
	 * program made it first, or the list would show it asking for none.
	 */
	if (restricted_.load(std::memory_order_relaxed) > 0) {
		std::lock_guard<std::mutex> lock(mutex_);
		Set *set = find(epfd);
		if (set && set->restricted > 0) {
			for (auto &entry : set->byIno)
				giveBackInput(epfd, *set, entry.second);
		}
	}
	constexpr int kMax = 64;
	EpollRegistration kernel[kMax];
	const int found = kernelRegistrations(buffered, epfd, kernel, kMax);

	std::lock_guard<std::mutex> lock(mutex_);
	Set *set = find(epfd);
	if (!set)
		return;
	Set fresh;
	fresh.exact = false;
	try {
		for (int i = 0; i < found; i++) {
			knownFds().note(kernel[i].fd);
			Stored stored = { kernel[i], 0, false, false, false, 0 };
			/* The same registration as last time keeps what it was told. */
			auto range = set->byIno.equal_range(kernel[i].ino);
			for (auto it = range.first; it != range.second; ++it) {
				const EpollRegistration &old = it->second.registration;
				if (old.fd == kernel[i].fd && old.data == kernel[i].data) {
					stored.toldArrival = it->second.toldArrival;
					stored.told = it->second.told;
				}
			}
			fresh.byIno.emplace(kernel[i].ino, stored);
		}
	} catch (const std::bad_alloc &) {
		return;
	}
	replace(*set, std::move(fresh));
}

void EpollSets::replace(Set &set, Set &&fresh) noexcept
{
	/* fresh's one-shot and unresolved registrations were counted as they were made; set's go. */
	oneShotCount_.fetch_sub(set.oneShotByData.size(), std::memory_order_relaxed);
	unresolved_.fetch_sub(set.unresolved, std::memory_order_relaxed);
	restricted_.fetch_sub(set.restricted, std::memory_order_relaxed);
	set = std::move(fresh);
}

int EpollSets::claim(int epfd, const BufferedFds &buffered, EpollRegistration *out,
		     int max) noexcept
{
	bool known;
	{
		std::lock_guard<std::mutex> lock(mutex_);
		Set *set = find(epfd);
		if (set && set->unread)
			readWhole(epfd, *set);
		known = set && set->exact;
		if (!set) {
			try {
				sets_[epfd].exact = false;
				count_.store(sets_.size(), std::memory_order_relaxed);
			} catch (const std::bad_alloc &) {
				return kernelRegistrations(buffered, epfd, out, max);
			}
		}
	}
	if (!known)
		reload(epfd, buffered);

	/* Lock order: this one's, then the buffered set's (never the other way round). */
	std::lock_guard<std::mutex> lock(mutex_);
	Set *set = find(epfd);
	if (!set)
		return 0;
	if (set->unresolved > 0)
		resolve(*set);
	/*
	 * Round robin: the next wait begins after the last connection this one served, as the
	 * kernel's ready list rotates (a wait of 64 always served the same first 64 of 80).
	 */
	int found = 0;
	set->claimedFrom = set->turn;
	std::size_t visited = 0, resume = set->turn;
	buffered.forEach(set->turn, [&](int, ino_t ino, unsigned long long arrival) {
		visited++;
		auto range = set->byIno.equal_range(ino);
		for (auto it = range.first; it != range.second && found < max; ++it) {
			Stored &stored = it->second;
			if (!reportable(stored, arrival))
				continue;
			tell(stored, arrival);
			out[found++] = stored.registration;
			resume = set->turn + visited;
		}
	});
	set->turn = resume;
	if (set->nested > 0 && found < max)
		found += claimNested(*set, buffered, out + found, max - found);
	return found;
}

int EpollSets::setsOf(int fd, ino_t ino, int *out, int max) noexcept
{
	if (empty())
		return 0;
	int found = 0;
	auto name = [&](int epfd) {
		if (found < max)
			out[found++] = epfd;
		for (const auto &alias : aliases_)
			if (alias.second == epfd && found < max)
				out[found++] = alias.first;
	};
	std::lock_guard<std::mutex> lock(mutex_);
	int inner[16], inners = 0;
	for (auto &entry : sets_) {
		if (!registersForInput(entry.second, fd, ino))
			continue;
		name(entry.first);
		if (inners < 16)
			inner[inners++] = entry.first;
	}
	/* A set that has one of those for input: the kernel reports it ready with them (one level). */
	for (auto &entry : sets_) {
		const Set &outer = entry.second;
		if (outer.nested == 0 || outer.shared)
			continue;
		const bool has = std::any_of(outer.byIno.begin(), outer.byIno.end(), [&](const auto &registration) {
			const Stored &stored = registration.second;
			return stored.innerSet >= 0 && armed(stored) &&
			       std::find(inner, inner + inners, stored.innerSet) != inner + inners;
		});
		if (has)
			name(entry.first);
	}
	return found;
}

bool EpollSets::registersForInput(Set &set, int fd, ino_t ino) noexcept
{
	/* Another process's too: it would get the shim's wake as an event (a hunt: "tlstunew"). */
	if (set.shared)
		return false;
	if (set.unread || !set.exact)
		return true;
	const Pending *pending = pendingAt(set, fd);
	if (pending)
		return pending->events & kInput;
	const Stored *stored = live(set, fd);
	if (stored && armed(*stored))
		return true;
	const auto range = set.byIno.equal_range(ino);
	return std::any_of(range.first, range.second, [](const auto &entry) { return armed(entry.second); });
}

bool EpollSets::armed(const Stored &stored) noexcept
{
	return (stored.registration.events & kInput) && !stored.fired;
}

bool EpollSets::reportable(const Stored &stored, unsigned long long arrival) noexcept
{
	const bool told = (stored.registration.events & EPOLLET) && stored.told && stored.toldArrival == arrival;
	return armed(stored) && !told;
}

void EpollSets::tell(Stored &stored, unsigned long long arrival) noexcept
{
	stored.told = true;
	stored.toldArrival = arrival;
	stored.fired = (stored.registration.events & EPOLLONESHOT) != 0;
	stored.claimed = stored.fired;
}

bool EpollSets::heldToReport(Set &set, const BufferedFds &buffered, unsigned long long *newest) noexcept
{
	if (set.unresolved > 0)
		resolve(set);
	bool ready = false;
	*newest = 0;
	buffered.forEach(0, [&](int, ino_t ino, unsigned long long arrival) {
		auto range = set.byIno.equal_range(ino);
		for (auto it = range.first; it != range.second; ++it) {
			if (reportable(it->second, arrival)) {
				ready = true;
				*newest = std::max(*newest, arrival);
			}
		}
	});
	return ready;
}

int EpollSets::claimNested(Set &outer, const BufferedFds &buffered, EpollRegistration *out, int max) noexcept
{
	int found = 0;
	for (auto &entry : outer.byIno) {
		Stored &stored = entry.second;
		if (found >= max || stored.innerSet < 0 || !armed(stored))
			continue;
		/*
		 * Its number closed: the kernel keeps it while a copy keeps the inner set, which the
		 * shim knows by that copy's number now; not a set that took the number later.
		 */
		struct stat st;
		if (stored.detached && (fstat(stored.innerSet, &st) != 0 || st.st_ino != stored.registration.ino))
			continue;
		Set *inner = find(stored.innerSet);
		/* Made before the first connection: its list is the kernel's, read now (a hunt's stalled). */
		if (inner && inner->unread)
			readWhole(stored.innerSet, *inner);
		/* The newest arrival the inner set would report: an edge of the outer registration. */
		unsigned long long newest = 0;
		if (!inner || !heldToReport(*inner, buffered, &newest) || !reportable(stored, newest))
			continue;
		if (out) {
			tell(stored, newest);
			out[found] = stored.registration;
		}
		found++;
	}
	return found;
}

bool EpollSets::reportsHeld(int epfd, const BufferedFds &buffered) noexcept
{
	if (empty())
		return false;
	bool known;
	{
		std::lock_guard<std::mutex> lock(mutex_);
		Set *set = find(epfd);
		if (!set)
			return false;
		if (set->unread)
			readWhole(epfd, *set);
		known = set->exact;
	}
	if (!known)
		reload(epfd, buffered);
	std::lock_guard<std::mutex> lock(mutex_);
	Set *set = find(epfd);
	unsigned long long newest = 0;
	if (!set)
		return false;
	return heldToReport(*set, buffered, &newest) ||
	       (set->nested > 0 && claimNested(*set, buffered, nullptr, 1) > 0);
}

void EpollSets::owe(int epfd) noexcept
{
	std::lock_guard<std::mutex> lock(mutex_);
	Set *set = find(epfd);
	if (!set)
		return;
	set->owed = true;
	/*
	 * The turn had moved past the connections left out: the debt is theirs (a hunt: with
	 * maxevents 2, two of four held connections waited 22 waits, the others served).
	 */
	set->turn = set->claimedFrom;
}

bool EpollSets::takeOwed(int epfd) noexcept
{
	std::lock_guard<std::mutex> lock(mutex_);
	Set *set = find(epfd);
	const bool owed = set && set->owed;
	if (owed)
		set->owed = false;
	return owed;
}

template <typename Visit>
void EpollSets::forEachOf(Set &set, const EpollRegistration &registration, Visit visit) noexcept
{
	auto range = set.byIno.equal_range(registration.ino);
	for (auto it = range.first; it != range.second; ++it) {
		Stored &stored = it->second;
		if (stored.registration.fd == registration.fd && stored.registration.data == registration.data)
			visit(stored);
	}
}

void EpollSets::armInKernel(EpollCtl realCtl, int epfd, const EpollRegistration &registration,
			    unsigned events) noexcept
{
	const int savedErrno = errno;
	struct epoll_event event = {};
	event.events = events;
	event.data.u64 = registration.data;
	realCtl(epfd, EPOLL_CTL_MOD, registration.fd, &event);
	errno = savedErrno;
}

void EpollSets::armWithoutInput(Set &set, Stored &stored, bool on) noexcept
{
	if (stored.restricted == on)
		return;
	stored.restricted = on;
	if (on) {
		set.restricted++;
		restricted_.fetch_add(1, std::memory_order_relaxed);
	} else {
		set.restricted--;
		restricted_.fetch_sub(1, std::memory_order_relaxed);
	}
}

unsigned EpollSets::kernelEvents(const Stored &stored) noexcept
{
	return stored.restricted ? stored.registration.events & ~kInput : stored.registration.events;
}

void EpollSets::released(ino_t ino) noexcept
{
	if (restricted_.load(std::memory_order_relaxed) == 0)
		return;
	std::lock_guard<std::mutex> lock(mutex_);
	for (auto &entry : sets_) {
		Set &set = entry.second;
		if (set.restricted == 0)
			continue;
		auto range = set.byIno.equal_range(ino);
		for (auto it = range.first; it != range.second; ++it)
			giveBackInput(entry.first, set, it->second);
	}
}

void EpollSets::giveBackInput(int epfd, Set &set, Stored &stored) noexcept
{
	if (!stored.restricted)
		return;
	armWithoutInput(set, stored, false);
	/* Reported already (fired): the program's next arm is the kernel's. */
	if (!stored.fired && !stored.detached && realCtl_)
		armInKernel(realCtl_, epfd, stored.registration, stored.registration.events);
}

void EpollSets::unclaim(int epfd, const EpollRegistration &registration) noexcept
{
	std::lock_guard<std::mutex> lock(mutex_);
	Set *set = find(epfd);
	if (!set)
		return;
	forEachOf(*set, registration, [](Stored &stored) {
		stored.told = false;
		stored.fired = false;
		stored.claimed = false;
	});
}

void EpollSets::disarm(int epfd, const EpollRegistration &registration, EpollCtl realCtl) noexcept
{
	std::lock_guard<std::mutex> lock(mutex_);
	Set *set = find(epfd);
	if (!set)
		return;
	forEachOf(*set, registration, [&](Stored &stored) {
		/* Not fired: the program armed it again since the claim (MOD), and that arm stands. */
		if (stored.detached || !stored.fired)
			return;
		armInKernel(realCtl, epfd, stored.registration,
			    stored.registration.events & (EPOLLONESHOT | EPOLLET | EPOLLWAKEUP));
		/*
		 * After the kernel's disarm, a ticket of its own: a wait with a ticket from here on
		 * began after it, and one whose return was read below it returned before it.
		 */
		stored.disarmedAt = tickets_.fetch_add(1, std::memory_order_seq_cst) + 1;
	});
}

int EpollSets::delivered(int epfd, struct epoll_event *events, int count, const EpollRegistration *claimed,
			 int claimedCount, unsigned long ticket, EpollCtl realCtl, unsigned long returned) noexcept
{
	if (count <= 0 || oneShotCount_.load(std::memory_order_relaxed) == 0)
		return count;
	std::lock_guard<std::mutex> lock(mutex_);
	Set *set = find(epfd);
	if (!set || !set->exact || set->oneShotByData.empty())
		return count;
	/*
	 * The kernel disarmed the EPOLLONESHOT registrations it reported. Where two of them
	 * share their data the shim cannot tell which fired: it reads the kernel's list from
	 * then on.
	 */
	int kept = 0;
	for (int i = 0; i < count; i++) {
		auto range = set->oneShotByData.equal_range(events[i].data.u64);
		if (range.first != range.second && std::next(range.first) != range.second) {
			set->exact = false;
			for (; i < count; i++)
				events[kept++] = events[i];
			return kept;
		}
		Stored *stored = range.first != range.second ? range.first->second : nullptr;
		/*
		 * No one-shot carries this data now, and a claimed arm that did was disarmed after
		 * this wait began: the report is that arm's (a hunt: a re-arm by MOD with new
		 * data, and the old data's report reached a second thread, 14 runs of 30).
		 */
		if (!stored && ticket < set->newestFormerDisarm && ticket < formerDisarm(*set, events[i].data.u64) &&
		    !othersCarry(*set, events[i].data.u64))
			continue;
		const bool claimedHere = stored && std::any_of(claimed, claimed + claimedCount, [stored](const EpollRegistration &r) {
			return r.fd == stored->registration.fd && r.data == stored->registration.data;
		});
		const bool another = stored && (stored->claimed || ticket < stored->disarmedAt) && !claimedHere;
		/*
		 * Returned before the last claimed arm's disarm: that arm's report or an older
		 * one's, for certain. It goes, and a claim made since keeps its mark for its own
		 * arm's report (a hunt: such a report used the mark up, and the claimed arm's
		 * report went to a second worker, 1 run in 30).
		 */
		if (another && returned < stored->disarmedAt)
			continue;
		if (another && stored->claimed) {
			/* Another wait reports this arm: the kernel's report of it goes (once). */
			stored->claimed = false;
			continue;
		}
		if (another) {
			/*
			 * Begun before a claimed arm's disarm, returned after it: perhaps that arm's
			 * report. It goes; an arm the program made since is the kernel's again, to
			 * report anew if it was this one's (its fd still names its file: not
			 * detached). Whatever it asks for: an arm for output alone, made after an
			 * input arm was claimed, was taken out and never made again (a hunt: its
			 * connection stalled for good, 8 runs of 10).
			 */
			if (realCtl && !stored->fired && !stored->detached) {
				armInKernel(realCtl, epfd, stored->registration, kernelEvents(*stored));
				stored->armedByShim = true;
			}
			continue;
		}
		/*
		 * An arm is reported once: a second report of one another wait already took in,
		 * where the shim gave the kernel the arm again above, is that copy's, made for a
		 * report that was in fact the old arm's (a hunt: eight workers on two cores, a
		 * worker told of an arm it had not made in 3 runs of 100). Only then: an arm the
		 * program made where the shim could not see (a ring's EPOLL_CTL) is reported.
		 */
		if (stored && stored->fired && stored->armedByShim && !claimedHere)
			continue;
		/* The kernel reported the arm this wait claimed to this wait: nobody else can. */
		if (stored) {
			stored->fired = true;
			stored->claimed = false;
		}
		events[kept++] = events[i];
	}
	return kept;
}

size_t EpollSets::registrations(int epfd) const noexcept
{
	std::lock_guard<std::mutex> lock(mutex_);
	const Set *set = find(epfd);
	if (!set)
		return 0;
	const auto pending = std::count_if(set->pending.begin(), set->pending.end(),
					   [](const Pending &slot) { return slot.used; });
	return set->byIno.size() + static_cast<size_t>(pending);
}

bool EpollSets::ownedHere(int epfd) const noexcept
{
	std::lock_guard<std::mutex> lock(mutex_);
	const Set *set = find(epfd);
	return !set || !set->shared;
}

bool EpollSets::exact(int epfd) const noexcept
{
	std::lock_guard<std::mutex> lock(mutex_);
	const Set *set = find(epfd);
	return set && set->exact;
}

} /* namespace tlstune */
