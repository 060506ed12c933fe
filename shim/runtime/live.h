#pragma once

#include <array>
#include <atomic>
#include <cstdint>

#include "core/stats.h"

namespace tlstune {

struct Process;

/* A counter of the stats line: Stats' own, then the coalescer's records_held and held_sends. */
struct LineCounter {
	const char *name;
	const std::atomic<uint64_t> *counter;
};
constexpr std::size_t kLineCounters = Stats::kFieldCount + 2;
/* The stats line's counters, in its order: what the exit line prints and tlstune_live lists. */
std::array<LineCounter, kLineCounters> lineCounters(const Process &p) noexcept;

/*
 * Fills tlstune_live (core/live.h) from p, so that `tlstune --stats PID` finds this copy's
 * counters. Only for the copy that does the work: a later copy's stays passive.
 */
void publishLive(const Process &p) noexcept;

} /* namespace tlstune */
