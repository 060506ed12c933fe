/*
 * libFuzzer target: the TLSTUNE_* parser, fed an environment. Whatever it holds, the
 * parser must not crash, each rejected value must give exactly one line, and the
 * configuration must stay within the documented ranges.
 */

#include <cstddef>
#include <cstdint>
#include <string>

#include "core/config.h"
#include "environment.h"

using namespace tlstune;

namespace {

void require(bool condition)
{
	if (!condition)
		__builtin_trap();
}

} /* namespace */

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	/* "NAME=VALUE" entries split by NULs, as in /proc/PID/environ: a value may hold a newline. */
	const std::string text(reinterpret_cast<const char *>(data), size);
	testsupport::Environment env;
	for (std::size_t start = 0; start < text.size();) {
		std::size_t end = text.find('\0', start);
		if (end == std::string::npos)
			end = text.size();
		const std::string line = text.substr(start, end - start);
		const std::size_t equals = line.find('=');
		if (equals != std::string::npos)
			env[line.substr(0, equals)] = line.substr(equals + 1);
		start = end + 1;
	}

	const ParsedConfig parsed = testsupport::parseEnvironment(env);
	for (const std::string &error : parsed.errors)
		require(error.find('\n') == std::string::npos && error.size() < 1024);
	const Config &config = parsed.config;
	require(config.readBuffer >= 16 * 1024 && config.readBuffer <= 1024 * 1024);
	require(config.coalesceLimit >= 1024 && config.coalesceLimit <= 1024 * 1024);
	require(config.coalesceDelayUs >= 10 && config.coalesceDelayUs <= 100000);
	require(config.caCacheTtl <= 365ul * 24 * 60 * 60);
	describeConfig(config);

	/* And each value parser on the raw bytes. */
	std::size_t bytes = 0;
	bool flag = false;
	unsigned long number = 0;
	LogLevel level = LogLevel::Warn;
	parseSize(text, &bytes);
	parseBool(text, &flag);
	parseDuration(text, &number);
	parseDelay(text, &number);
	parseLogLevel(text, &level);
	return 0;
}
