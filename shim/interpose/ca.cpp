/*
 * CA files. Every loader programs call (SSL_CTX_set_default_verify_paths,
 * SSL_CTX_load_verify_locations/_file, X509_STORE_set_default_paths,
 * X509_STORE_load_locations/_file, the _ex forms) reads a PEM file through
 * X509_load_cert_crl_file(_ex), which libcrypto calls through its PLT: one interposition
 * serves them all, with OpenSSL itself resolving SSL_CERT_FILE and the default paths.
 * Directories (CApath) are looked up lazily by OpenSSL already and pass through.
 *
 * A cached file's certificates reach a store when something reads it: the store readers
 * below (chain building's issuer and certificate lookups, adds, enumeration) first let
 * core/ca/lazy put in what an eager load would have, then call OpenSSL. libcrypto calls them through its PLT or through pointers it took (X509_STORE_CTX_init), so its
 * own verification comes through here too (read in 3.0's and 3.5's libcrypto). On 3.5
 * an add to a store with lazy certificates is made by core/ca/lazy itself, under the
 * store's lock together with its model of the store's order.
 */

#include <cerrno>

#include "core/ca/load.h"
#include "interpose/export.h"
#include "runtime/runtime.h"

using namespace tlstune;

/* 3.0 made these parameters const; 1.1.1's headers (the 1.1.1 leg builds against them) do not. */
#if OPENSSL_VERSION_NUMBER < 0x30000000L
#define CONST_30
#else
#define CONST_30 const
#endif

namespace {

/* libcrypto 3 implements X509_load_cert_crl_file through the _ex form: one load per call. */
thread_local int loading = 0;

template <typename Load>
int loaded(X509_LOOKUP *lookup, const char *file, int type, OSSL_LIB_CTX *libctx,
	   const char *propq, Load load)
{
	const Crypto &crypto = tlstune::crypto();
	/*
	 * Only PEM files for the default library context: certificates made for another
	 * OSSL_LIB_CTX keep a pointer to it, which may be freed and its address reused.
	 */
	if (loading || !crypto.caching || type != X509_FILETYPE_PEM || !file || libctx)
		return load(crypto.api);

	loading++;
	const int savedErrno = errno;
	X509_STORE *store = crypto.api.X509_LOOKUP_get_store(lookup);
	int count = store ? loadCaFile(crypto.api, process().caCache, process().stats, crypto.lazy,
				       store, file, propq ? propq : "")
			  : -1;
	errno = savedErrno;
	if (count < 0)
		count = load(crypto.api);
	loading--;
	return count;
}

} /* namespace */

TLSTUNE_EXPORT int X509_load_cert_crl_file(X509_LOOKUP *lookup, const char *file, int type)
{
	return loaded(lookup, file, type, nullptr, nullptr, [&](const CaApi &api) {
		return api.X509_load_cert_crl_file ? api.X509_load_cert_crl_file(lookup, file, type) : 0;
	});
}

TLSTUNE_EXPORT int X509_load_cert_crl_file_ex(X509_LOOKUP *lookup, const char *file, int type,
					      OSSL_LIB_CTX *libctx, const char *propq)
{
	return loaded(lookup, file, type, libctx, propq, [&](const CaApi &api) {
		return api.X509_load_cert_crl_file_ex
			? api.X509_load_cert_crl_file_ex(lookup, file, type, libctx, propq) : 0;
	});
}

namespace {

/* The store's lazy certificates that a call is about to look for, put in first. */
const LazyStores *lazyFor(X509_STORE *store)
{
	const Crypto &crypto = tlstune::crypto();
	return crypto.caching && store && crypto.lazy.pending(store) ? &crypto.lazy : nullptr;
}

X509_STORE *storeOf(const X509_STORE_CTX *ctx)
{
	const CaApi &api = crypto().api;
	return ctx && api.X509_STORE_CTX_get0_store
		       ? api.X509_STORE_CTX_get0_store(const_cast<X509_STORE_CTX *>(ctx)) : nullptr;
}

/*
 * The store this thread is looking up by subject. libcrypto's CApath lookup (by_dir.c, 3.0)
 * finds what it loaded through X509_STORE_get0_objects: a search by that subject, whose
 * lazy certificates are in the store already, not an enumeration. Filling the whole store
 * there parsed the bundle at every unknown issuer (socat: three times the CPU of no shim).
 */
thread_local X509_STORE *lookingUp = nullptr;

/* A lookup by subject: the subject's lazy certificates first; the lookup sorts the store. */
template <typename Call>
auto lookedUp(X509_STORE *store, const X509_NAME *subject, Call call)
{
	const LazyStores *lazy = lazyFor(store);
	if (!lazy)
		return call(crypto().api);
	const int savedErrno = errno;
	lazy->beforeRead(store, subject);
	errno = savedErrno;
	X509_STORE *outer = lookingUp;
	lookingUp = store;
	auto result = call(crypto().api);
	lookingUp = outer;
	lazy->afterLookup(store);
	errno = savedErrno;
	return result;
}

template <typename Call>
int added(X509_STORE *store, X509 *x, X509_CRL *crl, const X509_NAME *subject, Call call)
{
	const LazyStores *lazy = lazyFor(store);
	if (!lazy)
		return call(crypto().api);
	const int savedErrno = errno;
	if (lazy->addsItself()) {
		const int result = lazy->add(store, x, crl);
		errno = savedErrno;
		return result >= 0 ? result : call(crypto().api);
	}
	if (subject)
		lazy->beforeRead(store, subject);
	const int before = lazy->objectCount(store);
	errno = savedErrno;
	const int result = call(crypto().api);
	lazy->afterAdd(store, before);
	errno = savedErrno;
	return result;
}

/*
 * caller: the return address of the interposed call. Only libcrypto's own search inside a
 * lookup of this store skips the fill; anything the program runs inside one (a
 * check_issued callback, a lookup method of its own) sees the store an eager load made.
 */
template <typename Call>
auto enumerated(X509_STORE *store, const void *caller, bool keepsList, Call call)
{
	const Crypto &crypto = tlstune::crypto();
	if (!crypto.caching || !store || (store == lookingUp && crypto.inLibcrypto(caller)))
		return call(crypto.api);
	const int savedErrno = errno;
	if (keepsList)
		crypto.lazy.markListed(store);
	if (const LazyStores *lazy = lazyFor(store))
		lazy->beforeEnumeration(store);
	errno = savedErrno;
	return call(crypto.api);
}

} /* namespace */

TLSTUNE_EXPORT int X509_STORE_add_cert(X509_STORE *store, X509 *x)
{
	const CaApi &api = crypto().api;
	const X509_NAME *subject = x && api.X509_get_subject_name ? api.X509_get_subject_name(x) : nullptr;
	return added(store, x, nullptr, subject, [&](const CaApi &real) {
		return real.X509_STORE_add_cert ? real.X509_STORE_add_cert(store, x) : 0;
	});
}

TLSTUNE_EXPORT int X509_STORE_add_crl(X509_STORE *store, X509_CRL *crl)
{
	return added(store, nullptr, crl, nullptr, [&](const CaApi &real) {
		return real.X509_STORE_add_crl ? real.X509_STORE_add_crl(store, crl) : 0;
	});
}

namespace {

/*
 * OpenSSL walks the store's certificates of one subject by index, under the store's lock,
 * calling the store's check_issued for each: a callback of the program's that reads the
 * store there (lists it) filled it, and the sort that follows moved the walk onto other
 * subjects (a hunt: the valid root of two skipped, "certificate has expired"). Such a
 * store gets everything in before the walk, as an enumeration would.
 */
void fillBeforeOwnCheckIssued(X509_STORE *store)
{
	const CaApi &api = crypto().api;
	if (!store || !api.X509_STORE_get_check_issued(store))
		return;
	if (const LazyStores *lazy = lazyFor(store)) {
		const int savedErrno = errno;
		lazy->beforeEnumeration(store);
		errno = savedErrno;
	}
}

} /* namespace */

TLSTUNE_EXPORT int X509_STORE_CTX_get1_issuer(X509 **issuer, X509_STORE_CTX *ctx, X509 *x)
{
	const CaApi &api = crypto().api;
	const X509_NAME *name = x && api.X509_get_issuer_name ? api.X509_get_issuer_name(x) : nullptr;
	fillBeforeOwnCheckIssued(storeOf(ctx));
	return lookedUp(storeOf(ctx), name, [&](const CaApi &real) {
		return real.X509_STORE_CTX_get1_issuer ? real.X509_STORE_CTX_get1_issuer(issuer, ctx, x) : -1;
	});
}

TLSTUNE_EXPORT STACK_OF(X509) *X509_STORE_CTX_get1_certs(X509_STORE_CTX *ctx, CONST_30 X509_NAME *name)
{
	return lookedUp(storeOf(ctx), name, [&](const CaApi &real) -> STACK_OF(X509) * {
		return real.X509_STORE_CTX_get1_certs ? real.X509_STORE_CTX_get1_certs(ctx, name) : nullptr;
	});
}

/* CRLs are never lazy; the lookup still sorts the store. */
TLSTUNE_EXPORT STACK_OF(X509_CRL) *X509_STORE_CTX_get1_crls(CONST_30 X509_STORE_CTX *ctx,
							      CONST_30 X509_NAME *name)
{
	return lookedUp(storeOf(ctx), nullptr, [&](const CaApi &real) -> STACK_OF(X509_CRL) * {
		return real.X509_STORE_CTX_get1_crls ? real.X509_STORE_CTX_get1_crls(ctx, name) : nullptr;
	});
}

TLSTUNE_EXPORT int X509_STORE_CTX_get_by_subject(CONST_30 X509_STORE_CTX *ctx, X509_LOOKUP_TYPE type,
						 CONST_30 X509_NAME *name, X509_OBJECT *ret)
{
	const X509_NAME *certificates = type == X509_LU_X509 ? name : nullptr;
	return lookedUp(storeOf(ctx), certificates, [&](const CaApi &real) {
		return real.X509_STORE_CTX_get_by_subject
			? real.X509_STORE_CTX_get_by_subject(ctx, type, name, ret) : 0;
	});
}

TLSTUNE_EXPORT X509_OBJECT *X509_STORE_CTX_get_obj_by_subject(X509_STORE_CTX *ctx,
							      X509_LOOKUP_TYPE type,
							      CONST_30 X509_NAME *name)
{
	const X509_NAME *certificates = type == X509_LU_X509 ? name : nullptr;
	return lookedUp(storeOf(ctx), certificates, [&](const CaApi &real) -> X509_OBJECT * {
		return real.X509_STORE_CTX_get_obj_by_subject
			? real.X509_STORE_CTX_get_obj_by_subject(ctx, type, name) : nullptr;
	});
}

TLSTUNE_EXPORT STACK_OF(X509_OBJECT) *X509_STORE_get0_objects(CONST_30 X509_STORE *store)
{
	X509_STORE *mutableStore = const_cast<X509_STORE *>(store);
	const void *caller = __builtin_return_address(0);
	return enumerated(mutableStore, caller, true, [&](const CaApi &real) -> STACK_OF(X509_OBJECT) * {
		return real.X509_STORE_get0_objects ? real.X509_STORE_get0_objects(mutableStore) : nullptr;
	});
}

/* 3.3+ (python 3.13 lists a store with it); absent from the 3.0 headers, so declared here. */
TLSTUNE_EXPORT STACK_OF(X509_OBJECT) *X509_STORE_get1_objects(X509_STORE *store)
{
	const void *caller = __builtin_return_address(0);
	return enumerated(store, caller, false, [&](const CaApi &real) -> STACK_OF(X509_OBJECT) * {
		return real.X509_STORE_get1_objects ? real.X509_STORE_get1_objects(store) : nullptr;
	});
}

TLSTUNE_EXPORT STACK_OF(X509) *X509_STORE_get1_all_certs(X509_STORE *store)
{
	const void *caller = __builtin_return_address(0);
	return enumerated(store, caller, false, [&](const CaApi &real) -> STACK_OF(X509) * {
		return real.X509_STORE_get1_all_certs ? real.X509_STORE_get1_all_certs(store) : nullptr;
	});
}
