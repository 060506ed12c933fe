#include "known_fds.h"

namespace tlstune {

/* Constant-initialised (zeroes): usable before any constructor runs. */
KnownFds g_knownFds;
FdBitmap g_copiedFds;

} /* namespace tlstune */
