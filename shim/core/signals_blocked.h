#pragma once

#include <csignal>
#include <pthread.h>

namespace tlstune {

/*
 * Signals are held off this thread while it lives. Held bytes were reported written: a
 * signal handler that ends the process (its _exit, an exec) must never find them taken
 * out of the buffer and half sent. Only around sends that cannot block.
 */
class SignalsBlocked {
public:
	/*
	 * A thread of the shim's takes none all its life (shim_thread.h), and one inside
	 * another SignalsBlocked has them blocked already, unless the program's code ran in
	 * between (ProgramMayRun): no system call there (a shutdown of a connection nested
	 * three, six calls where two do).
	 */
	SignalsBlocked() noexcept : changed_(!noneEver() && blockedHere() == 0)
	{
		if (!changed_)
			return;
		sigset_t all;
		sigfillset(&all);
		/*
		 * Refused (a seccomp filter), nothing changed; one that fakes success writes no
		 * old mask: old_ starts full, and the end unblocks only what it says was open.
		 */
		sigfillset(&old_);
		changed_ = pthread_sigmask(SIG_BLOCK, &all, &old_) == 0;
		/* Counted once blocked: no handler runs here between the two. */
		if (changed_)
			blockedHere()++;
	}
	~SignalsBlocked()
	{
		if (!changed_)
			return;
		blockedHere()--;
		sigset_t wasOpen;
		sigfillset(&wasOpen);
		for (int signal = 1; signal < NSIG; signal++) {
			if (sigismember(&old_, signal) == 1)
				sigdelset(&wasOpen, signal);
		}
		pthread_sigmask(SIG_UNBLOCK, &wasOpen, nullptr);
	}
	SignalsBlocked(const SignalsBlocked &) = delete;
	SignalsBlocked &operator=(const SignalsBlocked &) = delete;

	/* This thread is the shim's, which has every signal blocked for good. */
	static void noteNoneEver() noexcept { noneEver() = true; }

	/*
	 * Around a call that may run the program's code (OpenSSL's message and info
	 * callbacks, inside an encryption), which may unblock signals: the blocks nested in
	 * it block again.
	 */
	class ProgramMayRun {
	public:
		ProgramMayRun() noexcept : saved_(blockedHere()) { blockedHere() = 0; }
		~ProgramMayRun() { blockedHere() = saved_; }
		ProgramMayRun(const ProgramMayRun &) = delete;
		ProgramMayRun &operator=(const ProgramMayRun &) = delete;

	private:
		const int saved_;
	};

private:
	static bool &noneEver() noexcept
	{
		static thread_local bool none __attribute__((tls_model("initial-exec"))) = false;
		return none;
	}
	/* 1 inside the outermost one that blocked (a vfork child returns to its parent balanced). */
	static int &blockedHere() noexcept
	{
		static thread_local int depth __attribute__((tls_model("initial-exec"))) = 0;
		return depth;
	}

	bool changed_;
	sigset_t old_;
};

/*
 * No cancellation point acts while it lives (pthread_setcancelstate: no system call). A
 * send of bytes the program was told are written must not end half way in a cancelled
 * thread: they would be lost with its stack. Only around sends that cannot block.
 */
class CancelDeferred {
public:
	CancelDeferred() noexcept { pthread_setcancelstate(PTHREAD_CANCEL_DISABLE, &old_); }
	~CancelDeferred() { pthread_setcancelstate(old_, nullptr); }
	CancelDeferred(const CancelDeferred &) = delete;
	CancelDeferred &operator=(const CancelDeferred &) = delete;

private:
	int old_ = PTHREAD_CANCEL_ENABLE;
};

} /* namespace tlstune */
