#pragma once

#include <cstddef>

#include <openssl/ssl.h>

#include "config.h"

namespace tlstune {

struct OpenSslApi;

/* Turns read-ahead on and sizes the read buffer of a context the program just created. */
void tuneContext(const OpenSslApi &api, const Config &config, SSL_CTX *ctx) noexcept;

} /* namespace tlstune */
