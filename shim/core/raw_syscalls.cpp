#include "raw_syscalls.h"

namespace tlstune {

namespace {
thread_local bool rawHere = false;
} /* namespace */

RawSyscalls::RawSyscalls() noexcept : outer_(rawHere)
{
	rawHere = true;
}

RawSyscalls::~RawSyscalls()
{
	rawHere = outer_;
}

bool RawSyscalls::active() noexcept
{
	return rawHere;
}

} /* namespace tlstune */
