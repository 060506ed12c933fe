#pragma once

#include "api.h"
#include "cache.h"
#include "lazy.h"
#include "core/stats.h"

namespace tlstune {

/*
 * One load of a PEM CA file into store (for the default library context and propq, a
 * property query or ""), served lazily from the cache: what X509_load_cert_crl_file
 * returns, or -1 when the file is not a readable regular file, not indexable, or holds a
 * key that would not decode now (then the caller passes the call on, and OpenSSL loads
 * the file itself, with its own result and errors). Certificates reach the store, each
 * store its own, when something reads it.
 */
int loadCaFile(const CaApi &api, CaCache &cache, Stats &stats, const LazyStores &lazy,
	       X509_STORE *store, const char *path, const std::string &propq);

} /* namespace tlstune */
