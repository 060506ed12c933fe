/*
 * libFuzzer target: the strace log parser that the tests and tlstune-check share. Any log,
 * however broken (a trace cut short, a program printing into it), must parse without
 * crashing, and the per-socket counts must add up.
 */

#include <cstddef>
#include <cstdint>
#include <sstream>
#include <string>

#include "strace_log.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	std::istringstream log(std::string(reinterpret_cast<const char *>(data), size));
	const std::vector<tlstune::Syscall> calls = tlstune::parseStraceLog(log);
	uint64_t reads = 0;
	for (const auto &socket : tlstune::tcpTraffic(calls)) {
		socket.second.readsPerMiB();
		uint64_t sized = 0;
		for (const auto &entry : socket.second.readSizes)
			sized += entry.second;
		if (sized > socket.second.reads)
			__builtin_trap();
		reads += socket.second.reads;
	}
	if (reads > calls.size())
		__builtin_trap();
	tlstune::trafficOnPort(calls, 9443);
	return 0;
}
