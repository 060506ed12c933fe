#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <vector>

#include "pending_writes.h"

namespace tlstune {

/*
 * Bytes the shim holds for a socket that was full when it tried to send them: of live
 * connections whose peer reads slowly, and of connections the program closed, freed or
 * shut down before the peer took them (orphans, which own a duplicate of the descriptor).
 * A thread sends them as the socket drains, as the kernel would send from its own queue
 * without the shim. So no close, SSL_free or shutdown waits for a slow peer, no byte
 * OpenSSL reported as written is dropped while the process lives, and a stalled peer
 * costs no CPU: the thread sleeps in poll(POLLOUT).
 *
 * An orphan's socket stays open while its bytes wait, where the program's close would
 * have ended it. The kernel resets a closed socket that has unread data, or that receives
 * some later, and discards what it had to send; a peer blocked writing to a program that
 * closed without reading is woken by that reset. So an orphan watches for the peer's
 * data too, and once the process has no descriptor of its own for the socket, data there
 * drops its bytes and closes its duplicate, and the kernel resets the connection.
 */
class StalledWrites {
public:
	explicit StalledWrites(SocketCalls calls) noexcept : calls_(calls) {}
	/* Stops the thread (the process's one never ends: this is for tests). */
	~StalledWrites();
	StalledWrites(const StalledWrites &) = delete;
	StalledWrites &operator=(const StalledWrites &) = delete;

	/* Sends writes' bytes as its socket takes them. False: no thread could be started. */
	bool watch(std::shared_ptr<PendingWrites> writes);

	/*
	 * The program is closing fds first..last: an orphan whose duplicate has one of those
	 * numbers is the program's to close now (close_range over fds it did not open), so its
	 * bytes are dropped before the number can name another file.
	 */
	void closing(int first, int last);

	/* After the program closed fds: an orphan's socket may be the process's no more. */
	void closed();

	bool empty() const noexcept { return count_.load(std::memory_order_relaxed) == 0; }
	/* At exit: returns when nothing is left to send, or at deadline. */
	void waitUntilEmpty(std::chrono::steady_clock::time_point deadline);

	void lockForFork();
	void unlockInParent();
	/* The child closes its copies of the orphans' descriptors: the parent sends, not both. */
	void unlockInChild();

	/* An orphan whose socket took nothing for this long is dropped (and logged). */
	static constexpr std::chrono::seconds kOrphanPatience{120};

private:
	void loop();
	/* Takes finished ones (sent, failed, reset, or given up on) off the list. */
	void prune(const std::vector<std::shared_ptr<PendingWrites>> &round);
	/* The peer's data reached an orphan's socket: true when that reset it. */
	bool peerSent(PendingWrites &orphan, const std::vector<int> &duplicates);

	const SocketCalls calls_;
	std::mutex mutex_;
	std::condition_variable changed_;
	std::vector<std::shared_ptr<PendingWrites>> watched_;
	std::atomic<std::size_t> count_{0}; /* watched_.size(), read without the lock */
	bool running_ = false;
	bool stopping_ = false;
};

} /* namespace tlstune */
