#include "known_fds.h"

namespace tlstune {

namespace {
KnownFds process;
} /* namespace */

KnownFds &knownFds() noexcept
{
	return process;
}

} /* namespace tlstune */
