#pragma once

#include "core/ca/api.h"
#include "core/openssl_api.h"
#include "libc_api.h"

namespace tlstune {

/* libc's definitions, the next ones after this library (dlsym RTLD_NEXT). */
void resolveLibc(LibcApi *libc) noexcept;

/*
 * Finds the libssl the program loaded and fills api from it. Returns false when there is
 * none. Every entry comes from that one libssl (and the libcrypto it depends on).
 */
bool resolveOpenSsl(OpenSslApi *api) noexcept;

/* The same for the libcrypto the program loaded. */
bool resolveCrypto(CaApi *api) noexcept;

} /* namespace tlstune */
