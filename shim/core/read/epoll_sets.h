#pragma once

#include <array>
#include <atomic>
#include <mutex>
#include <unordered_map>
#include <vector>

#include <sys/epoll.h>
#include <sys/types.h>

#include "buffered_fds.h"
#include "epoll_wake.h"

namespace tlstune {

/*
 * One registration of an epoll set: the fd it was added by, the program's own events mask
 * and data, and the inode of the file registered (how the kernel reports it in
 * /proc/self/fdinfo/EPFD, and how a buffered connection's socket is matched). An inode
 * with kUnresolvedInode set is not one yet: the file has not been looked at (below).
 */
struct EpollRegistration {
	int fd;
	unsigned events;
	unsigned long long data;
	unsigned long ino;
};

/* Marks a registration's inode as not looked up yet; the rest of the word is its fd. */
constexpr unsigned long kUnresolvedInode = 1UL << 63;

/* epoll_ctl(op, event) makes an EPOLLONESHOT arm (an ADD or a MOD). */
inline bool armsOneShot(int op, const struct epoll_event *event) noexcept
{
	return event && op != EPOLL_CTL_DEL && (event->events & EPOLLONESHOT);
}

/*
 * The registrations of every epoll set, kept from epoll_ctl as the program makes them, so
 * a wait finds the sets' registrations of the few connections holding buffered data
 * without reading the kernel's list: a wait costs O(connections holding data), an
 * epoll_ctl O(1). Reading /proc/self/fdinfo/EPFD on every wait cost a server with 5,000
 * idle connections 70 % more CPU (issue 10).
 *
 * Where the shim cannot know a set whole, it reads the kernel's list instead, for that set
 * only: a set created before the shim was there (or through a dup of its fd), and every
 * set after fork(), which the other process may change.
 *
 * Registrations follow the kernel's lifetime rule: one lives while its file is open, not
 * its fd number. A registration whose fd is closed while a dup keeps the file open still
 * reports events; the shim keeps such "detached" registrations, matched by inode only, and
 * prunes the dead ones against the kernel's list once they outnumber the live ones.
 *
 * EPOLL_CTL_ADD makes no syscall (issue 24: apache's event MPM re-adds every keep-alive
 * connection after each request, and an fstat per ADD was 13 % more syscalls). The file's
 * inode is looked up only when it can matter, at most once per registration: at the first
 * wait that has a connection's held data to report (claim), or before the close of its fd,
 * where a registration that outlives its fd (a dup keeps the file) must know its file.
 * Until then a registration is "pending": its events and data in a slot indexed by its
 * fd, so that an ADD, MOD or DEL of it allocates nothing and looks nothing up by hash
 * (issue 24: two nodes made and freed per ADD and DEL made epoll_ctl 1.24x as slow in a
 * process with TLS). One-shot registrations and registrations of sets are stored at once:
 * the kernel's events name them by their data, and nested sets are walked.
 *
 * It also carries what the kernel's semantics need beyond the mask: which arrival an
 * edge-triggered registration was last told of (one synthesized event per arrival), and
 * whether a EPOLLONESHOT registration has fired since it was armed.
 *
 * An EPOLLONESHOT arm made while OpenSSL holds records the shim read ahead for its socket
 * goes to the kernel without input (EPOLLIN, EPOLLRDNORM), so that one reporter hands it
 * to one waiter: the shim, for what OpenSSL holds (a hunt: a pool of eight workers on 32
 * short connections whose peers write as the handshake ends, a worker told of an arm of
 * a connection it had closed in 1 to 4 runs of 300, when both the kernel and the shim
 * reported the connection's first arms). When OpenSSL no longer holds them (released),
 * an arm not yet reported is given to the kernel as the program made it. A one-shot
 * connection reads no further ahead (unseen_waits.h), so this lasts a few records.
 */
class EpollSets {
public:
	/*
	 * copies: the numbers the process ever copied or received (copiedFds()). A registration
	 * at a number outside them goes with the number's close, the file's only name here:
	 * no fstat to learn which file it was. Null: any number may have a copy.
	 */
	explicit EpollSets(const FdBitmap *copies = nullptr) noexcept : copies_(copies) {}

	/*
	 * epoll_create/epoll_create1 returned epfd: a set the shim sees every change of.
	 * following: changes are recorded from now on; false (no connection yet, issue 24),
	 * the set's list is read from the kernel once, when it first matters.
	 */
	void created(int epfd, bool following = true) noexcept;
	/*
	 * The program made fd `to` a copy of `from` (dup, dup2, dup3, F_DUPFD): when `from`
	 * is a set, `to` is the same set, for its changes and its waits (a hunt: poll on a
	 * dup of a set's fd stalled).
	 */
	void aliased(int from, int to) noexcept;
	/* After a successful epoll_ctl(epfd, op, fd, event), while changes are followed. */
	void changed(int epfd, int op, int fd, const struct epoll_event *event) noexcept;
	/*
	 * The program's epoll_ctl while changes are followed: the kernel's call (ctl) and the
	 * table's change in one hold of the lock, so that the table takes the changes of
	 * several threads in the kernel's order (a hunt: a worker's MOD came before the
	 * accepting thread's ADD, and the set was read from the kernel on every wait after).
	 * buffered: the connections holding data, whose one-shot arms the kernel gets without
	 * input (above); null: every arm as the program made it.
	 */
	int control(int epfd, int op, int fd, struct epoll_event *event, EpollCtl ctl,
		    const BufferedFds *buffered = nullptr) noexcept;
	/*
	 * OpenSSL holds nothing the shim read ahead for the socket ino any more
	 * (BufferedFds::onReleased): its one-shot arms made without input (control) are given
	 * to the kernel as the program made them. One load while there are none.
	 */
	void released(ino_t ino) noexcept;
	/* The program is about to close fds first..last: their registrations learn their files. */
	void closing(int first, int last) noexcept;
	/* The program closed fds first..last (close, dup2 onto one, close_range). */
	void closed(int first, int last) noexcept;
	/* closing, then closed: the numbers are about to be freed, and nobody notes them meanwhile. */
	void freeing(int first, int last) noexcept;
	/* No set is known: a close has nothing to look up. */
	bool empty() const noexcept { return count_.load(std::memory_order_relaxed) == 0; }
	/* The highest fd of a set the shim knows (-1: none). */
	int highestSet() const noexcept;
	/* fork(): from now on each set may be changed by another process. */
	void forked() noexcept;

	/*
	 * The registrations of epfd to report readable now, at most max: those asking for input
	 * on a socket that holds buffered data, less the edge-triggered ones already told of
	 * that arrival and EPOLLONESHOT ones that fired. Each is claimed: give it back with
	 * unclaim() when it could not be delivered.
	 */
	int claim(int epfd, const BufferedFds &buffered, EpollRegistration *out, int max) noexcept;
	/*
	 * poll or select on the set's own fd: the kernel reports a set readable while it has
	 * events, so the shim does while claim() would report a registration (it tells none).
	 * False for an fd that is no set the shim knows.
	 */
	bool reportsHeld(int epfd, const BufferedFds &buffered) noexcept;
	void unclaim(int epfd, const EpollRegistration &registration) noexcept;

	/*
	 * The numbers (at most max) of the sets that register the socket fd (inode ino) for
	 * input, or may (a set whose list is the kernel's), and of their copies: a call that
	 * filled wakes those a thread waits on (EpollWaiters); and of the sets that have one
	 * of those for input (nested, one level). Not a set made before a fork, which another
	 * process may wait on too.
	 */
	int setsOf(int fd, ino_t ino, int *out, int max) noexcept;

	/*
	 * A wait could not deliver some of the shim's events: the kernel's filled maxevents.
	 * The kernel's ready list rotates, so every ready file gets its turn; owe() notes the
	 * debt, and takeOwed() answers (once) whether the next wait serves the shim's first,
	 * beginning with the connections this one could not deliver.
	 */
	void owe(int epfd) noexcept;
	bool takeOwed(int epfd) noexcept;

	/*
	 * The real wait returned these events: EPOLLONESHOT registrations among them are
	 * disarmed. One that another wait claimed (it reports the records OpenSSL holds) is
	 * taken out: that wait reports this arm, and the kernel reported it too to a waiter
	 * that began before the claim's disarm (a hunt: a connection handed to two worker
	 * threads at once, 18 runs of 30). claimed: what this wait claimed, kept. The count left.
	 *
	 * ticket: the wait's (beginWait), taken before the real wait. A report to a wait that
	 * began before a claimed arm was disarmed in the kernel (disarm) may be that old arm's
	 * although the program has armed the registration again since: it is taken out too, and
	 * the kernel is given the program's arm again (realCtl), so that, were it the new arm's
	 * report, the kernel makes it anew to a later wait (a hunt: three workers on four
	 * connections, two workers had one connection at once in 1 to 3 runs of 20). Not where
	 * the wait returned before the disarm (returned, read as the real wait came back): the
	 * report is the old arm's for certain, and the program's arm may have gone to another
	 * wait already, which the kernel's arm made again would duplicate (a hunt: four workers
	 * on 48 connections, two workers on one connection in 1 to 3 runs of 30).
	 */
	int delivered(int epfd, struct epoll_event *events, int count, const EpollRegistration *claimed = nullptr,
		      int claimedCount = 0, unsigned long ticket = kNewestTicket, EpollCtl realCtl = nullptr,
		      unsigned long returned = kNewestTicket) noexcept;
	/* A ticket newer than every disarm: a wait that began after them all. */
	static constexpr unsigned long kNewestTicket = ~0UL;
	/* Before each real wait on a set, while a set has EPOLLONESHOT registrations: its ticket. */
	unsigned long beginWait() noexcept { return tickets_.fetch_add(1, std::memory_order_seq_cst); }
	/*
	 * As each such wait returns, before anything else: a report to a wait returned before
	 * a claimed arm's disarm is that arm's, never the program's arm made since (delivered).
	 */
	unsigned long returned() const noexcept { return tickets_.load(std::memory_order_seq_cst); }
	/*
	 * A wait delivered the shim's event of a claimed EPOLLONESHOT registration: its arm is
	 * disarmed in the kernel too (as the kernel's own report would have), unless the program
	 * armed it again meanwhile; the waits that began before then are remembered (delivered).
	 */
	void disarm(int epfd, const EpollRegistration &registration, EpollCtl realCtl) noexcept;
	/* No set has an EPOLLONESHOT registration: delivered() has nothing to do. One load. */
	bool noOneShots() const noexcept { return oneShotCount_.load(std::memory_order_relaxed) == 0; }

	/*
	 * epfd is no set made before a fork: no other process waits on it, and the shim's
	 * wake would reach none but this one's waits.
	 */
	bool ownedHere(int epfd) const noexcept;

	/* What wakes a set's waiters when a held connection's registration is armed. */
	EpollWake &wake() noexcept { return wake_; }

	/* fork() must not leave the child with the lock held by a thread it does not have. */
	void lockForFork() noexcept { mutex_.lock(); }
	void unlockAfterFork() noexcept { mutex_.unlock(); }

	/* For tests: how many registrations the shim holds for epfd, and whether it knows it whole. */
	size_t registrations(int epfd) const noexcept;
	bool exact(int epfd) const noexcept;

private:
	struct Stored {
		EpollRegistration registration;
		unsigned long long toldArrival; /* EPOLLET: the arrival last reported */
		bool told;                      /* toldArrival is set */
		bool fired;                     /* EPOLLONESHOT: disarmed until the next MOD */
		bool detached;                  /* its fd was closed; alive while the file is */
		unsigned long long closedAt;    /* the closing that detached it */
		int innerSet = -1;              /* the registered fd is this epoll set of the shim's */
		/* EPOLLONESHOT: a wait of the shim's claimed this arm, which the kernel may report too */
		bool claimed = false;
		/* EPOLLONESHOT: the tickets handed out when a claimed arm was last disarmed (delivered) */
		unsigned long disarmedAt = 0;
		/* EPOLLONESHOT: the shim gave the kernel the program's arm again since the program made it */
		bool armedByShim = false;
		/*
		 * EPOLLONESHOT: the kernel has this arm without input (control): OpenSSL held
		 * records the shim read ahead when it was made, and the shim alone reports them.
		 */
		bool restricted = false;
	};
	/* A registration whose file is not looked up yet (see above): live, never told. */
	struct Pending {
		unsigned long long data;
		unsigned events;
		bool used;
	};
	struct Set {
		/* Node-based: a Stored stays where it is while others come and go. */
		std::unordered_multimap<unsigned long, Stored> byIno;
		std::unordered_map<int, unsigned long> liveByFd; /* fd -> inode */
		/* The kernel's events carry only the data: the one-shot registrations by it. */
		std::unordered_multimap<unsigned long long, Stored *> oneShotByData;
		size_t detached = 0;
		bool exact = true;
		/* Made before a fork: another process may wait on it too. */
		bool shared = false;
		/* Made before changes were followed: its list is the kernel's, read on first use. */
		bool unread = false;
		bool owed = false; /* the last wait left some of the shim's events undelivered */
		size_t turn = 0;   /* the buffered connection the next claim begins with */
		size_t claimedFrom = 0; /* turn before the last claim: owe() goes back to it */
		size_t nested = 0; /* registrations of other sets (innerSet) */
		/*
		 * Live registrations whose inode is not looked up yet (pending ones and stored
		 * ones), and the fds they may be at.
		 */
		size_t unresolved = 0;
		std::vector<int> unresolvedFds;
		std::vector<Pending> pending; /* by fd, below kPendingFds */
		/*
		 * The disarms of the last claimed one-shot arms that no registration carries any
		 * more (data, disarmedAt): deleted, closed, or given new data by a MOD. A report of
		 * one to a wait begun before its disarm is that old arm's (delivered); a
		 * registration the program adds with its data (DEL, then ADD: its re-arm, or a new
		 * connection given a closed one's data) takes its disarm over.
		 */
		std::array<std::pair<unsigned long long, unsigned long>, 64> formerDisarms{};
		size_t formerNext = 0;
		unsigned long newestFormerDisarm = 0; /* a wait begun after it finds none of them */
		size_t restricted = 0; /* registrations whose kernel arm has no input (Stored) */
	};
	/* Registrations of higher numbers are stored at once: a slot per number below. */
	static constexpr int kPendingFds = 1 << 16;

	/* Under the lock: set has a registration of fd's file asking for input, or may have. */
	bool registersForInput(Set &set, int fd, ino_t ino) noexcept;
	/* Asks for input and is not a fired one-shot. */
	static bool armed(const Stored &stored) noexcept;
	/* Armed, and (edge-triggered) not yet told of that arrival. */
	static bool reportable(const Stored &stored, unsigned long long arrival) noexcept;
	/* Reported for that arrival: told, and a one-shot fired. */
	static void tell(Stored &stored, unsigned long long arrival) noexcept;
	/* Under the lock: each of set's registrations that is registration (file, fd and data). */
	template <typename Visit>
	static void forEachOf(Set &set, const EpollRegistration &registration, Visit visit) noexcept;
	/* The kernel's arm of registration made events (EPOLL_CTL_MOD), errno kept. */
	static void armInKernel(EpollCtl realCtl, int epfd, const EpollRegistration &registration,
				unsigned events) noexcept;
	/* Under the lock: set has a held connection's registration to report; its newest arrival. */
	bool heldToReport(Set &set, const BufferedFds &buffered, unsigned long long *newest) noexcept;
	/*
	 * claim() for the sets registered in outer: one is ready while it has a registration to
	 * report, as the kernel reports a nested set ready while it has events. With out null,
	 * counts them and tells none.
	 */
	int claimNested(Set &outer, const BufferedFds &buffered, EpollRegistration *out, int max) noexcept;
	Set *find(int epfd) noexcept;
	const Set *find(int epfd) const noexcept;
	Stored *live(Set &set, int fd) noexcept;
	/* The pending registration at fd, or null. */
	static Pending *pendingAt(Set &set, int fd) noexcept;
	/* Under the lock: forgets the pending registration at fd; whether there was one. */
	bool dropPending(Set &set, int fd) noexcept;
	/* Under the lock: records a registration the program just made (ADD, or a MOD of a pending one). */
	void record(int epfd, Set &set, int fd, const struct epoll_event &event);
	void erase(Set &set, Stored *stored) noexcept;
	/* Indexes stored by its data when it is EPOLLONESHOT; unindex undoes it. */
	void index(Set &set, Stored *stored);
	void unindex(Set &set, const Stored *stored) noexcept;
	void detach(Set &set, int fd) noexcept;
	/*
	 * Under the lock: the detached registration the kernel reaches again by fd (its number
	 * names its file once more: a dup2 of the file over its own number, a restore), made
	 * live, or null. The kernel keys a registration by file and number, not by an open fd.
	 */
	Stored *reattach(Set &set, int fd) noexcept;
	/*
	 * Under the lock, in a set whose waits read the kernel's list: fd's registrations were
	 * re-armed (ADD, MOD), and are told nothing yet. A walk: such a set keeps only the
	 * registrations of connections holding data (reload).
	 */
	void forgetTold(Set &set, int fd) noexcept;
	/*
	 * Under the lock: the inodes of set's unresolved registrations (at fd, or all), by fstat.
	 * closing: fd is about to be closed, and a registration of a file that can be no
	 * connection's (no socket or pipe, no set) is dropped: the shim never reports it, and
	 * kept detached it would share its inode with every eventfd and timerfd closed since
	 * (anonymous files have one), so that each close walked them all (issue 24: a close of
	 * a registered eventfd cost 2.06x).
	 */
	void resolve(Set &set) noexcept;
	void resolve(Set &set, int fd, bool closing = false) noexcept;
	void resolvePending(Set &set, int fd, const Pending &pending, bool closing) noexcept;
	/* Under the lock: fd may have an unresolved registration (the list resolve(set) walks). */
	void noteUnresolvedFd(Set &set, int fd);
	/* Under the lock: a set's unresolved count changed by delta, the process's with it. */
	void countUnresolved(Set &set, long delta) noexcept;
	void dropSet(std::unordered_map<int, Set>::iterator it) noexcept;
	/* Under the lock: a copy of the set's fd (aliased), or aliases_.end(). */
	std::unordered_map<int, int>::const_iterator firstCopy(int epfd) const noexcept;
	/*
	 * Under the lock: the set, whose fd closed, goes on under a copy's number; its
	 * registrations' inodes and data stay as they were.
	 */
	void moveToCopy(int epfd) noexcept;
	/* closing() under the lock. */
	void closingLocked(int first, int last) noexcept;
	/* closed(), or freeing() where resolving: under one hold of the lock. */
	void forget(int first, int last, bool resolving) noexcept;
	/* closed() under the lock: returns the sets (at most max) whose detached entries want pruning. */
	int closedLocked(int first, int last, int *prune, int max) noexcept;
	/* Drops the detached registrations of epfd the kernel no longer has. */
	void prune(int epfd) noexcept;
	/* Replaces an inexact set's entries by the kernel's, for the buffered sockets. */
	void reload(int epfd, const BufferedFds &buffered) noexcept;
	/* Under the lock: set becomes fresh, the one-shot count kept true. */
	void replace(Set &set, Set &&fresh) noexcept;
	/* Under the lock: an unread set's whole list, from the kernel, once; exact if it could be read. */
	void readWhole(int epfd, Set &set) noexcept;
	/* Under the lock: records a registration the kernel has (ADD, or readWhole). */
	Stored *add(int epfd, Set &set, const EpollRegistration &registration);
	/* The newest disarm of a former arm with that data (formerDisarms), or 0. */
	static unsigned long formerDisarm(const Set &set, unsigned long long data) noexcept;
	/*
	 * stored's claimed arm, with its data, is carried by no registration from now on. One
	 * that was reported and that the shim gave the kernel again (armedByShim) may have
	 * that copy's report in flight: remembered as disarmed now.
	 */
	void rememberFormerArm(Set &set, const Stored &stored) noexcept;
	/* Under the lock: stored's kernel arm is without input (on) or as the program made it. */
	void armWithoutInput(Set &set, Stored &stored, bool on) noexcept;
	/* The events the kernel has for stored's arm. */
	static unsigned kernelEvents(const Stored &stored) noexcept;
	/*
	 * Under the lock: stored's arm, if the kernel has it without input, goes to the kernel
	 * as the program made it.
	 */
	void giveBackInput(int epfd, Set &set, Stored &stored) noexcept;
	/* Under the lock: a live registration of set that is no one-shot has that data (a walk). */
	static bool othersCarry(const Set &set, unsigned long long data) noexcept;

	/* fd's file may have another name in this process, which keeps its registrations. */
	bool mayBeCopy(int fd) const noexcept { return !copies_ || copies_->mayHave(fd); }

	/* changed() with the lock held. */
	void changedLocked(int epfd, int op, int fd, const struct epoll_event *event) noexcept;

	mutable std::mutex mutex_;
	std::unordered_map<int, Set> sets_;
	/* Copies of sets' fds: the copy's number -> the set's. */
	std::unordered_map<int, int> aliases_;
	EpollWake wake_;
	std::atomic<size_t> count_{0};        /* sets_.size(): close() of a non-epoll program skips all */
	std::atomic<size_t> oneShotCount_{0}; /* EPOLLONESHOT registrations in all sets */
	std::atomic<unsigned long> tickets_{1}; /* beginWait's, in the order the waits begin */
	std::atomic<size_t> unresolved_{0};   /* Set::unresolved, over all sets: closing() skips at 0 */
	std::atomic<size_t> restricted_{0};   /* Set::restricted, over all sets: released() skips at 0 */
	EpollCtl realCtl_ = nullptr;          /* the kernel's epoll_ctl, as control() was given it */
	unsigned long long closings_ = 0;
	const FdBitmap *const copies_;
};

/*
 * The registrations of epfd that wait for input on a socket holding buffered data (by
 * whatever fd it was added), read from the kernel's own list. At most max.
 */
int kernelRegistrations(const BufferedFds &buffered, int epfd, EpollRegistration *out,
			int max) noexcept;

/* Parses one "tfd: ..." line of an epoll fdinfo file; false for any other line. */
bool parseEpollFdinfoLine(const char *line, EpollRegistration *out) noexcept;

} /* namespace tlstune */
