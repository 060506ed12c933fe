#pragma once

#include <pthread.h>
#include <signal.h>
#include <system_error>
#include <thread>
#include <utility>

#include "core/signals_blocked.h"

namespace tlstune {

/*
 * Starts a detached thread of the shim's. It takes no signal: they are the program's
 * (issue 11: a flusher that could take SIGUSR1 killed a program waiting for it in
 * sigwait, and ran a handler meant to interrupt the program's pselect). False when no
 * thread could be started.
 */
template <typename Function>
bool startShimThread(Function &&function) noexcept
{
	sigset_t all, old;
	sigfillset(&all);
	pthread_sigmask(SIG_SETMASK, &all, &old);
	bool started = true;
	try {
		std::thread([run = std::forward<Function>(function)]() mutable {
			SignalsBlocked::noteNoneEver();
			run();
		}).detach();
	} catch (const std::system_error &) {
		started = false;
	}
	pthread_sigmask(SIG_SETMASK, &old, nullptr);
	return started;
}

} /* namespace tlstune */
