#pragma once
/*
 * The layout of tlstune_live, the one data object the library exports: it says where a
 * running process's counters are, so that `tlstune --stats PID` (tools/stats) can read
 * them from /proc/PID/mem while nothing runs in that process to answer (no signal
 * handler, thread or file, and no cost per call: the counters stay where they are).
 *
 * The reader may come from another build than the library it reads. So the fields are
 * of fixed width and hold no pointer of the reader's own; the reader checks kLiveMagic
 * and reads nothing further in a layout other than its kLiveLayout. Each counter comes
 * with its name in the stats line: a counter added later changes no layout, and the
 * reader prints the fields the exit line has.
 */

#include <cstddef>
#include <cstdint>

namespace tlstune {

constexpr char kLiveMagic[16] = "tlstune live";
/* Change it with any change below (a field, a size, a meaning). */
constexpr uint32_t kLiveLayout = 1;
constexpr std::size_t kLiveCounterCapacity = 32;

enum class LiveState : uint32_t {
	Passive = 0,  /* not set up yet (the first call that needs the state does), or a later copy of the library */
	Active = 1,   /* the copy that does the work: its counters are the process's */
	Disabled = 2, /* the working copy, with TLSTUNE_DISABLE set: nothing is counted */
};

struct LiveCounter {
	char name[24];    /* as in the stats line, NUL-terminated */
	uint64_t address; /* of the counter, a std::atomic<uint64_t> (8 bytes, lock-free) */
};

struct Live {
	char magic[16];   /* kLiveMagic */
	uint32_t layout;  /* kLiveLayout */
	uint32_t state;   /* LiveState: stored last, once the rest is filled */
	char program[64]; /* the name the process was started with (programName()) */
	uint32_t counterCount;
	uint32_t reserved;
	LiveCounter counters[kLiveCounterCapacity];
};
static_assert(sizeof(Live) == 96 + kLiveCounterCapacity * sizeof(LiveCounter), "no padding in the layout");

} /* namespace tlstune */
