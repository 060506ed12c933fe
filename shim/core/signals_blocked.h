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
	SignalsBlocked() noexcept
	{
		sigset_t all;
		sigfillset(&all);
		pthread_sigmask(SIG_BLOCK, &all, &old_);
	}
	~SignalsBlocked() { pthread_sigmask(SIG_SETMASK, &old_, nullptr); }
	SignalsBlocked(const SignalsBlocked &) = delete;
	SignalsBlocked &operator=(const SignalsBlocked &) = delete;

private:
	sigset_t old_;
};

} /* namespace tlstune */
