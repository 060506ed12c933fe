#include "log.h"

#include <cerrno>
#include <cstdarg>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <unistd.h>

namespace tlstune {

namespace {
std::atomic<LogLevel> threshold{LogLevel::Warn};
}

void setLogLevel(LogLevel level) noexcept
{
	threshold.store(level, std::memory_order_relaxed);
}

bool logEnabled(LogLevel level) noexcept
{
	return level != LogLevel::Off &&
	       static_cast<int>(level) <= static_cast<int>(threshold.load(std::memory_order_relaxed));
}

namespace {

/* suffix: appended after the formatted text ("" for none), still within the one line. */
void writeLine(const char *suffix, const char *format, va_list args) noexcept
{
	int savedErrno = errno;
	char line[512] = "tlstune: ";
	size_t prefix = sizeof("tlstune: ") - 1;

	int n = vsnprintf(line + prefix, sizeof(line) - prefix - 1, format, args);
	size_t len = prefix + (n < 0 ? 0 : static_cast<size_t>(n));
	if (len > sizeof(line) - 2)
		len = sizeof(line) - 2;
	if (*suffix) {
		n = snprintf(line + len, sizeof(line) - len - 1, "%s", suffix);
		len += n < 0 ? 0 : static_cast<size_t>(n);
		if (len > sizeof(line) - 2)
			len = sizeof(line) - 2;
	}
	line[len++] = '\n';

	ssize_t ignored = write(STDERR_FILENO, line, len);
	(void)ignored;
	errno = savedErrno;
}

} /* namespace */

void logLine(LogLevel level, const char *format, ...) noexcept
{
	if (!logEnabled(level))
		return;
	va_list args;
	va_start(args, format);
	writeLine("", format, args);
	va_end(args);
}

void printLine(const char *format, ...) noexcept
{
	va_list args;
	va_start(args, format);
	writeLine("", format, args);
	va_end(args);
}

bool RateLimit::allow(int64_t nowNs, uint64_t *skipped) noexcept
{
	int64_t next = next_.load(std::memory_order_relaxed);
	if (nowNs < next || !next_.compare_exchange_strong(next, nowNs + kIntervalNs,
							  std::memory_order_relaxed)) {
		skipped_.fetch_add(1, std::memory_order_relaxed);
		return false;
	}
	*skipped = skipped_.exchange(0, std::memory_order_relaxed);
	return true;
}

void logLimited(RateLimit &limit, LogLevel level, const char *format, ...) noexcept
{
	if (!logEnabled(level))
		return;
	const int savedErrno = errno;
	struct timespec now;
	clock_gettime(CLOCK_MONOTONIC, &now);
	errno = savedErrno;
	uint64_t skipped = 0;
	if (!limit.allow(static_cast<int64_t>(now.tv_sec) * 1000000000 + now.tv_nsec, &skipped))
		return;
	char suffix[64] = "";
	if (skipped)
		snprintf(suffix, sizeof(suffix), " (%llu more like it not shown)",
			 static_cast<unsigned long long>(skipped));
	va_list args;
	va_start(args, format);
	writeLine(suffix, format, args);
	va_end(args);
}

const char *programName() noexcept
{
	/*
	 * The name exec gave the process (glibc sets it from argv[0] before any constructor
	 * runs), copied at the first call, which the library's constructor makes: argv's
	 * memory is the program's, and nginx writes its title over it ("nginx: worker process
	 * is shutting down" was this once). Reading the kernel's /proc/self/comm instead
	 * would open a file at exit, which a sandboxed process may not.
	 */
	static char name[64];
	static const char *const copied = [] {
		const char *given = program_invocation_short_name;
		if (!given || !*given)
			given = "?";
		/* Not snprintf: its code is pages every process would fault in at start. */
		const size_t length = strnlen(given, sizeof(name) - 1);
		std::memcpy(name, given, length);
		name[length] = '\0';
		return name;
	}();
	return copied;
}

} /* namespace tlstune */
