#pragma once

#include "object_span.h"

#include "core/ca/api.h"
#include "core/openssl_api.h"
#include "libc_api.h"

namespace tlstune {

/*
 * The one symbol the library exports without interposing anything: an object that has it
 * is a copy of tlstune, never the libssl the program loaded (a later copy defers to the
 * first: runtime.cpp).
 */
constexpr const char *kCopyMarker = "tlstune_version";

/* libc's definitions, the next ones after this library (dlsym RTLD_NEXT). */
void resolveLibc(LibcApi *libc) noexcept;

/*
 * Finds the libssl the program loaded and fills api from it. Returns false when there is
 * none. Every entry comes from that one libssl (and the libcrypto it depends on).
 */
bool resolveOpenSsl(OpenSslApi *api) noexcept;

/* The same for the libcrypto the program loaded. */
bool resolveCrypto(CaApi *api) noexcept;
bool resolveDecodingChanges(DecodingChangeApi *api) noexcept;

} /* namespace tlstune */
