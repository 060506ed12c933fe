#pragma once
/* Waiting, without a sleep of one's own, until another thread of this process sleeps in a call. */

#include <fstream>
#include <sched.h>
#include <string>
#include <sys/types.h>

namespace example {

/*
 * Until thread tid sleeps (state S in /proc), or 100,000 looks: a case that acts on a
 * thread blocked in a call (a cancellation) then finds it there, or still on its way.
 */
inline void untilAsleep(pid_t tid)
{
	const std::string path = "/proc/self/task/" + std::to_string(tid) + "/stat";
	for (int i = 0; i < 100000; i++) {
		std::ifstream stat(path);
		std::string line;
		std::getline(stat, line);
		const std::string::size_type end = line.rfind(')');
		if (end != std::string::npos && line.compare(end, 3, ") S") == 0)
			return;
		sched_yield();
	}
}

} /* namespace example */
