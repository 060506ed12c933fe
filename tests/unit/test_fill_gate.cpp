/*
 * FillGate: a fill reads ahead only while no thread waits on its socket, and a wait that
 * begins during a fill waits for it to end (core/read/fill_gate.h). EpollWaiters: which
 * epoll sets a thread waits on, for a call that filled to wake.
 */

#include <gtest/gtest.h>

#include <atomic>
#include <thread>

#include "core/read/epoll_waiters.h"
#include "core/read/fill_gate.h"

using namespace tlstune;

namespace {

constexpr int kFd = 7;

/* A gate where kFd had its first fill (which only notes the number); its waits wait as long as a fill lasts. */
FillGate *noted()
{
	FillGate *gate = new FillGate(1 << 30);
	EXPECT_FALSE(gate->enterFill(kFd)) << "the first fill only notes the number";
	EXPECT_TRUE(gate->tracks(kFd));
	return gate;
}

} /* namespace */

TEST(FillGate, AFillReadsAheadOnlyWhileNoThreadWaits)
{
	FillGate *gate = noted();
	EXPECT_TRUE(gate->enterFill(kFd));
	gate->leaveFill(kFd);
	gate->enterWait(kFd);
	EXPECT_FALSE(gate->enterFill(kFd)) << "a wait is counted in";
	EXPECT_FALSE(gate->enterFill(kFd + FillGate::kWords)) << "a number sharing its word is kept plain too";
	gate->leaveWait(kFd);
	EXPECT_TRUE(gate->enterFill(kFd));
	gate->leaveFill(kFd);
	delete gate;
}

TEST(FillGate, AWaitBegunDuringAFillWaitsForItsEnd)
{
	FillGate *gate = noted();
	ASSERT_TRUE(gate->enterFill(kFd));
	std::atomic<bool> counted{ false };
	std::thread waiter([&] {
		gate->enterWait(kFd);
		counted = true;
		gate->leaveWait(kFd);
	});
	/* The waiter cannot pass while the fill is under way; it does once the fill leaves. */
	for (int i = 0; i < 1000; i++)
		std::this_thread::yield();
	EXPECT_FALSE(counted.load());
	gate->leaveFill(kFd);
	waiter.join();
	EXPECT_TRUE(counted.load());
	delete gate;
}

TEST(FillGate, WaitsLeftUncountedNeverMakeAWaitWait)
{
	/* 70,000 waits left by siglongjmp (a hunt: 16 bits of them made every wait wait 20 ms). */
	FillGate *gate = noted();
	for (int i = 0; i < 70000; i++)
		gate->enterWait(kFd);
	EXPECT_FALSE(gate->enterFill(kFd)) << "they keep fills plain";
	std::atomic<bool> counted{ false };
	std::thread waiter([&] {
		gate->enterWait(kFd);
		counted = true;
	});
	waiter.join();
	EXPECT_TRUE(counted.load());
	delete gate;
}

TEST(FillGate, AWaitInsideItsOwnThreadsFillDoesNotWaitForIt)
{
	/* A signal handler's poll while its thread is inside a fill. */
	FillGate *gate = noted();
	ASSERT_TRUE(gate->enterFill(kFd));
	gate->enterWait(kFd);
	gate->leaveWait(kFd);
	gate->leaveFill(kFd);
	delete gate;
}

TEST(FillGate, CountedWaitLeavesWhatItCountedWhateverIsNotedMeanwhile)
{
	FillGate *gate = noted();
	{
		CountedWait counted(gate, 40);
		for (int fd = 0; fd < 40; fd++)
			EXPECT_EQ(counted.count(fd), fd == kFd);
		EXPECT_FALSE(gate->enterFill(kFd));
		/* Noted during the wait: not counted, not left. */
		EXPECT_FALSE(gate->enterFill(kFd + 1));
	}
	EXPECT_TRUE(gate->enterFill(kFd));
	gate->leaveFill(kFd);
	EXPECT_TRUE(gate->enterFill(kFd + 1));
	gate->leaveFill(kFd + 1);
	{
		/* More numbers than it has room for (a handler's wait must not allocate): the rest are not counted. */
		constexpr int kMany = static_cast<int>(CountedWait::kMost) + 40;
		CountedWait counted(gate, kMany);
		for (int fd = 0; fd < kMany; fd++)
			if (gate->enterFill(fd))
				gate->leaveFill(fd);
		for (int fd = 0; fd < kMany; fd++)
			EXPECT_EQ(counted.count(fd), fd < static_cast<int>(CountedWait::kMost)) << fd;
		for (int fd = 0; fd < kMany; fd++) {
			const bool plain = fd < static_cast<int>(CountedWait::kMost);
			const bool ahead = gate->enterFill(fd);
			EXPECT_EQ(ahead, !plain) << fd;
			if (ahead)
				gate->leaveFill(fd);
		}
	}
	for (int fd = 0; fd < static_cast<int>(CountedWait::kMost) + 40; fd++) {
		EXPECT_TRUE(gate->enterFill(fd)) << fd;
		gate->leaveFill(fd);
	}
	CountedWait none(nullptr, 10);
	EXPECT_FALSE(none.count(kFd));
	delete gate;
}

TEST(EpollWaiters, CountsEachWaitOnItsSetWhileItLasts)
{
	EpollWaiters waiters;
	EXPECT_FALSE(waiters.any());
	{
		CountedEpollWait first(waiters, 5, true);
		CountedEpollWait uncounted(waiters, 6, false);
		EXPECT_TRUE(waiters.any());
		EXPECT_TRUE(waiters.waitingOn(5));
		EXPECT_FALSE(waiters.waitingOn(6)) << "a process of one thread counts nothing";
		{
			CountedEpollWait second(waiters, 5, true);
		}
		EXPECT_TRUE(waiters.waitingOn(5)) << "one wait on it is left";
	}
	EXPECT_FALSE(waiters.any());
	EXPECT_FALSE(waiters.waitingOn(5));
}

TEST(EpollWaiters, AForksChildHasNoneOfItsParentsWaits)
{
	EpollWaiters waiters;
	waiters.enter(5);
	waiters.enter(5 + EpollWaiters::kSlots);
	EXPECT_TRUE(waiters.waitingOn(5 + 2 * EpollWaiters::kSlots)) << "numbers kSlots apart share a slot";
	waiters.forkedChild();
	EXPECT_FALSE(waiters.any());
	EXPECT_FALSE(waiters.waitingOn(5));
}
