#pragma once

#include <cstdint>

namespace tlstune {

/*
 * The addresses a loaded object's segments span, first to last (the loader reserves the
 * whole span for it). Telling whether a return address is in libssl this way costs two
 * compares; dladdr, which also looks for the nearest symbol, cost some 110,000
 * instructions a call with libcrypto loaded.
 */
struct ObjectSpan {
	uintptr_t begin = 0, end = 0;
	bool contains(const void *address) const noexcept
	{
		const uintptr_t at = reinterpret_cast<uintptr_t>(address);
		return at >= begin && at < end;
	}
};

/*
 * The span of the loaded object that holds address, and its path ("" for the program
 * itself) in *path when path is not null. An empty span where no object holds it.
 */
ObjectSpan spanOf(const void *address, const char **path = nullptr) noexcept;

} /* namespace tlstune */
