#pragma once

#include "ca_api.h"
#include "ca_cache.h"
#include "ca_lazy.h"
#include "stats.h"

namespace tlstune {

/*
 * One load of a PEM CA file into store (for the default library context and propq),
 * served from the cache: what X509_load_cert_crl_file returns, or -1 when the file is not
 * cacheable or not loadable (then the caller passes the call on, and the program sees
 * OpenSSL's own result and errors). With lazy (TLSTUNE_CA_LAZY) a file that can be
 * indexed is, and its certificates reach the store when something reads it.
 */
int loadCaFile(const CaApi &api, CaCache &cache, Stats &stats, const LazyStores *lazy,
	       X509_STORE *store, const char *path, const char *propq);

} /* namespace tlstune */
