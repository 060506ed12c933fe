#include "live.h"

#include <cstring>

#include "core/live.h"
#include "core/log.h"
#include "runtime.h"

/*
 * Exported (tlstune.map), and initialised in the file, so that every copy carries the
 * magic and layout from the start; only the working copy fills in the rest.
 */
extern "C" {
__attribute__((visibility("default"))) tlstune::Live tlstune_live = {
	"tlstune live", tlstune::kLiveLayout, static_cast<uint32_t>(tlstune::LiveState::Passive), "", 0, 0, {}
};
/*
 * This copy's own, whatever the loader binds: a reference to an exported object may
 * resolve to another copy's definition that came first, and each copy must fill in its
 * own struct or none.
 */
extern tlstune::Live ownLive __attribute__((alias("tlstune_live"), visibility("hidden")));
}

namespace tlstune {

static_assert(sizeof(std::atomic<uint64_t>) == sizeof(uint64_t) && std::atomic<uint64_t>::is_always_lock_free,
	      "a reader of the process's memory takes a counter for its 8 bytes");

namespace {

/* name into size bytes, cut short and terminated: snprintf's "%s" at a tenth of its cost, at every start. */
void copyName(char *out, std::size_t size, const char *name) noexcept
{
	const std::size_t length = strnlen(name, size - 1);
	std::memcpy(out, name, length);
	out[length] = '\0';
}

} /* namespace */

std::array<LineCounter, kLineCounters> lineCounters(const Process &p) noexcept
{
	std::array<LineCounter, kLineCounters> counters{};
	std::size_t i = 0;
	for (const Stats::Field &field : Stats::kFields)
		counters[i++] = { field.name, &(p.stats.*field.counter) };
	/* records_held: records kept back to go out together; held_sends: the sends that carried them. */
	const PendingWrites::Counters &writes = p.coalescer.counters();
	counters[i++] = { "records_held", &writes.records };
	counters[i++] = { "held_sends", &writes.sends };
	return counters;
}

void publishLive(const Process &p) noexcept
{
	static_assert(kLineCounters <= kLiveCounterCapacity, "tlstune_live holds every counter of the line");
	Live &live = ownLive;
	copyName(live.program, sizeof(live.program), programName());
	uint32_t count = 0;
	for (const LineCounter &counter : lineCounters(p)) {
		LiveCounter &entry = live.counters[count++];
		copyName(entry.name, sizeof(entry.name), counter.name);
		entry.address = reinterpret_cast<uintptr_t>(counter.counter);
	}
	live.counterCount = count;
	const LiveState state = p.config.disable ? LiveState::Disabled : LiveState::Active;
	/* Last: a reader that sees the state sees the rest (it may read at any moment). */
	__atomic_store_n(&live.state, static_cast<uint32_t>(state), __ATOMIC_RELEASE);
}

} /* namespace tlstune */
