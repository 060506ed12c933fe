#include "log.h"

#include <cerrno>
#include <cstdarg>
#include <cstdio>
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

void writeLine(const char *format, va_list args) noexcept
{
	int savedErrno = errno;
	char line[512] = "tlstune: ";
	size_t prefix = sizeof("tlstune: ") - 1;

	int n = vsnprintf(line + prefix, sizeof(line) - prefix - 1, format, args);

	size_t len = prefix + (n < 0 ? 0 : static_cast<size_t>(n));
	if (len > sizeof(line) - 2)
		len = sizeof(line) - 2;
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
	writeLine(format, args);
	va_end(args);
}

void printLine(const char *format, ...) noexcept
{
	va_list args;
	va_start(args, format);
	writeLine(format, args);
	va_end(args);
}

} /* namespace tlstune */
