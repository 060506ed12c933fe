#pragma once

#include <atomic>
#include <cstdint>

namespace tlstune {

enum class LogLevel { Off, Error, Warn, Info, Debug };

/* The threshold is set once from TLSTUNE_LOG; until then warnings and errors pass. */
void setLogLevel(LogLevel level) noexcept;
bool logEnabled(LogLevel level) noexcept;

/*
 * Writes one "tlstune: ..." line to stderr with a single write(2), formatted on the
 * stack: no allocation, no stdio (the host may be inside malloc or hold stdio locks),
 * errno preserved. Never writes to stdout.
 */
void logLine(LogLevel level, const char *format, ...) noexcept
	__attribute__((format(printf, 2, 3)));

/* The same, whatever the level: for what the user asked for by name (stats, verbose). */
void printLine(const char *format, ...) noexcept __attribute__((format(printf, 1, 2)));

/*
 * For lines that can come once per call or per connection (a server has thousands): at
 * most one per interval, each saying how many were left out before it. Lock-free; two
 * threads racing at the boundary may both write, which costs a line, not correctness.
 */
class RateLimit {
public:
	static constexpr int64_t kIntervalNs = 1000000000;

	/* True when a line may be written at nowNs (a monotonic clock); *skipped: left out since the last. */
	bool allow(int64_t nowNs, uint64_t *skipped) noexcept;

private:
	std::atomic<int64_t> next_{0};
	std::atomic<uint64_t> skipped_{0};
};

/* logLine through a RateLimit, on CLOCK_MONOTONIC; the level is checked first, for free. */
void logLimited(RateLimit &limit, LogLevel level, const char *format, ...) noexcept
	__attribute__((format(printf, 3, 4)));

/* The program's short name (argv[0]'s last part), for lines that must say whose they are. */
const char *programName() noexcept;

} /* namespace tlstune */
