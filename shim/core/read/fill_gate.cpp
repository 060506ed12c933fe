#include "fill_gate.h"

#include <climits>
#include <ctime>

#include "core/futex.h"

namespace tlstune {

namespace {

/* This thread is between enterFill and leaveFill: a signal handler's wait must not wait for it. */
__attribute__((tls_model("initial-exec"))) thread_local bool filling = false;

} /* namespace */

FillGate g_fillGate;

void FillGate::noteFirst(int fd) noexcept
{
	used_.store(true, std::memory_order_relaxed);
	fills_.note(fd);
}

bool FillGate::enterFill(int fd) noexcept
{
	if (!fills_.mayHave(fd)) {
		noteFirst(fd);
		return false;
	}
	const unsigned at = slot(fd);
	/*
	 * Marked before it counts and unmarked after, as ShimLock: a handler's wait in between
	 * would wait its rounds for this very thread.
	 */
	filling = true;
	std::atomic_signal_fence(std::memory_order_seq_cst);
	filling_[at].fetch_add(1, std::memory_order_seq_cst);
	if (waits_[at].load(std::memory_order_seq_cst) != 0) {
		leave(at);
		std::atomic_signal_fence(std::memory_order_seq_cst);
		filling = false;
		return false;
	}
	return true;
}

void FillGate::leaveFill(int fd) noexcept
{
	leave(slot(fd));
	std::atomic_signal_fence(std::memory_order_seq_cst);
	filling = false;
}

void FillGate::leave(unsigned at) noexcept
{
	/* The last fill out wakes the waits that came in meanwhile. */
	if (filling_[at].fetch_sub(1, std::memory_order_seq_cst) == 1 && waits_[at].load(std::memory_order_seq_cst))
		futexWake(&filling_[at], INT_MAX);
}

void FillGate::enterWait(int fd) noexcept
{
	const unsigned at = slot(fd);
	waits_[at].fetch_add(1, std::memory_order_seq_cst);
	/*
	 * A fill takes microseconds; one left by siglongjmp from a signal handler never
	 * leaves. Bounded (waitRounds_ of 2 ms) so that such a one costs a wait a delay, not
	 * the process a hang.
	 */
	static const struct timespec kRound = { 0, 2000000 };
	const int rounds = waitRounds_ ? waitRounds_ : 10;
	uint32_t now = filling_[at].load(std::memory_order_seq_cst);
	for (int round = 0; now != 0 && !filling && round < rounds; round++) {
		/* The count changed since: no sleep (the futex compares it first). */
		futexWait(&filling_[at], now, &kRound);
		now = filling_[at].load(std::memory_order_seq_cst);
	}
}

void FillGate::leaveWait(int fd) noexcept
{
	waits_[slot(fd)].fetch_sub(1, std::memory_order_seq_cst);
}

void FillGate::forkedChild() noexcept
{
	filling = false;
	if (!used_.load(std::memory_order_relaxed))
		return;
	for (int at = 0; at < kWords; at++) {
		waits_[at].store(0, std::memory_order_relaxed);
		filling_[at].store(0, std::memory_order_relaxed);
	}
}

CountedWait::~CountedWait()
{
	for (std::size_t i = 0; i < counted_; i++)
		gate_->leaveWait(fds_[i]);
}

bool CountedWait::count(int fd) noexcept
{
	if (counted_ >= most_ || counted_ >= kMost || !gate_->tracks(fd))
		return false;
	fds_[counted_++] = fd;
	gate_->enterWait(fd);
	return true;
}

} /* namespace tlstune */
