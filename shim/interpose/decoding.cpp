/*
 * The calls that change what decodes a certificate's key: providers loaded (3.2 and later
 * load every provider through OSSL_PROVIDER_try_load_ex, by libcrypto's PLT) or unloaded,
 * default properties, FIPS asked for, the thread's default library context, a
 * configuration loaded (which can do any of these; libcrypto loads every configuration
 * through CONF_modules_load, by its PLT). OpenSSL's load decoded the keys of a CA file
 * under the state before such a call, so before it every lazy store's certificates not
 * in it yet are parsed under that state (core/ca/parsed_ahead.h). A process that has
 * loaded no CA file lazily pays one load.
 */

#include <cerrno>

#include "core/ca/parsed_ahead.h"
#include "interpose/export.h"
#include "runtime/symbols.h"

using namespace tlstune;

namespace {

const DecodingChangeApi &real() noexcept
{
	static const DecodingChangeApi api = [] {
		DecodingChangeApi found;
		resolveDecodingChanges(&found);
		return found;
	}();
	return api;
}

/* A parse ahead can reach these inside libcrypto (a configuration's provider): once is enough. */
thread_local bool parsing = false;

template <typename Call>
auto changing(Call call)
{
	if (ParsedAhead::anyEnlisted() && !parsing) {
		const int savedErrno = errno;
		parsing = true;
		ParsedAhead::parseAllStores();
		parsing = false;
		errno = savedErrno;
	}
	return call(real());
}

} /* namespace */

TLSTUNE_EXPORT OSSL_PROVIDER *OSSL_PROVIDER_load(OSSL_LIB_CTX *libctx, const char *name)
{
	return changing([&](const DecodingChangeApi &api) {
		return api.OSSL_PROVIDER_load ? api.OSSL_PROVIDER_load(libctx, name) : nullptr;
	});
}

TLSTUNE_EXPORT OSSL_PROVIDER *OSSL_PROVIDER_try_load(OSSL_LIB_CTX *libctx, const char *name,
						     int retain_fallbacks)
{
	return changing([&](const DecodingChangeApi &api) {
		return api.OSSL_PROVIDER_try_load ? api.OSSL_PROVIDER_try_load(libctx, name, retain_fallbacks)
						  : nullptr;
	});
}

TLSTUNE_EXPORT OSSL_PROVIDER *OSSL_PROVIDER_try_load_ex(OSSL_LIB_CTX *libctx, const char *name,
							OSSL_PARAM *params, int retain_fallbacks)
{
	return changing([&](const DecodingChangeApi &api) {
		return api.OSSL_PROVIDER_try_load_ex
			? api.OSSL_PROVIDER_try_load_ex(libctx, name, params, retain_fallbacks) : nullptr;
	});
}

TLSTUNE_EXPORT int OSSL_PROVIDER_unload(OSSL_PROVIDER *prov)
{
	return changing([&](const DecodingChangeApi &api) {
		return api.OSSL_PROVIDER_unload ? api.OSSL_PROVIDER_unload(prov) : 0;
	});
}

TLSTUNE_EXPORT int EVP_set_default_properties(OSSL_LIB_CTX *libctx, const char *propq)
{
	return changing([&](const DecodingChangeApi &api) {
		return api.EVP_set_default_properties ? api.EVP_set_default_properties(libctx, propq) : 0;
	});
}

TLSTUNE_EXPORT int EVP_default_properties_enable_fips(OSSL_LIB_CTX *libctx, int enable)
{
	return changing([&](const DecodingChangeApi &api) {
		return api.EVP_default_properties_enable_fips
			? api.EVP_default_properties_enable_fips(libctx, enable) : 0;
	});
}

/* libssl asks it with null (which changes nothing) for every SSL_CTX: only a switch is a change. */
TLSTUNE_EXPORT OSSL_LIB_CTX *OSSL_LIB_CTX_set0_default(OSSL_LIB_CTX *libctx)
{
	const DecodingChangeApi &api = real();
	if (!api.OSSL_LIB_CTX_set0_default)
		return nullptr;
	if (!libctx || api.OSSL_LIB_CTX_set0_default(nullptr) == libctx)
		return api.OSSL_LIB_CTX_set0_default(libctx);
	return changing([&](const DecodingChangeApi &) { return api.OSSL_LIB_CTX_set0_default(libctx); });
}

TLSTUNE_EXPORT int CONF_modules_load(const CONF *cnf, const char *appname, unsigned long flags)
{
	return changing([&](const DecodingChangeApi &api) {
		return api.CONF_modules_load ? api.CONF_modules_load(cnf, appname, flags) : 0;
	});
}
