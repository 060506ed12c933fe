#pragma once

#include <atomic>

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

} /* namespace tlstune */
