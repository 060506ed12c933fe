#include "fill_gate.h"

#include <climits>
#include <new>
#include <linux/futex.h>
#include <ctime>
#include <sys/syscall.h>
#include <unistd.h>

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
	std::atomic<uint32_t> &w = word(fd);
	if (w.fetch_add(kFill, std::memory_order_seq_cst) & kWaiters) {
		leave(w);
		return false;
	}
	filling = true;
	return true;
}

void FillGate::leaveFill(int fd) noexcept
{
	filling = false;
	leave(word(fd));
}

void FillGate::leave(std::atomic<uint32_t> &w) noexcept
{
	const uint32_t before = w.fetch_sub(kFill, std::memory_order_seq_cst);
	/* The last fill out wakes the waits that came in meanwhile. */
	if (before / kFill == 1 && (before & kWaiters))
		syscall(SYS_futex, &w, FUTEX_WAKE_PRIVATE, INT_MAX, nullptr, nullptr, 0);
}

void FillGate::enterWait(int fd) noexcept
{
	std::atomic<uint32_t> &w = word(fd);
	uint32_t now = w.fetch_add(kWaiter, std::memory_order_seq_cst) + kWaiter;
	/*
	 * A fill takes microseconds; one left by siglongjmp from a signal handler never
	 * leaves. Bounded (waitRounds_ of 2 ms) so that such a one costs a wait a delay, not
	 * the process a hang.
	 */
	static const struct timespec kRound = { 0, 2000000 };
	const int rounds = waitRounds_ ? waitRounds_ : 10;
	for (int round = 0; now >= kFill && !filling && round < rounds; round++) {
		/* The word changed since: no sleep (the futex compares it first). */
		syscall(SYS_futex, &w, FUTEX_WAIT_PRIVATE, now, &kRound, nullptr, 0);
		now = w.load(std::memory_order_seq_cst);
	}
}

void FillGate::leaveWait(int fd) noexcept
{
	word(fd).fetch_sub(kWaiter, std::memory_order_seq_cst);
}

void FillGate::forkedChild() noexcept
{
	filling = false;
	if (!used_.load(std::memory_order_relaxed))
		return;
	for (auto &w : words_)
		w.store(0, std::memory_order_relaxed);
}

CountedWait::~CountedWait()
{
	for (std::size_t i = 0; i < counted_; i++)
		gate_->leaveWait(i < kInline ? inline_[i] : more_[i - kInline]);
	delete[] more_;
}

bool CountedWait::count(int fd) noexcept
{
	if (counted_ >= most_ || !gate_->tracks(fd))
		return false;
	if (counted_ >= kInline && !more_) {
		more_ = most_ > kInline ? new (std::nothrow) int[most_ - kInline] : nullptr;
		if (!more_)
			return false;
	}
	(counted_ < kInline ? inline_[counted_] : more_[counted_ - kInline]) = fd;
	counted_++;
	gate_->enterWait(fd);
	return true;
}

} /* namespace tlstune */
