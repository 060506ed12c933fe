#pragma once
/*
 * An environment held in a map, parsed as the shim parses the process's: for the unit
 * tests and the fuzzer.
 */

#include <map>
#include <string>

#include "core/config.h"

namespace testsupport {

using Environment = std::map<std::string, std::string>;

inline tlstune::ParsedConfig parseEnvironment(const Environment &env)
{
	return tlstune::parseConfig(
		[](const char *name, void *context) -> const char * {
			const Environment &held = *static_cast<const Environment *>(context);
			const auto it = held.find(name);
			return it == held.end() ? nullptr : it->second.c_str();
		},
		const_cast<Environment *>(&env));
}

} /* namespace testsupport */
