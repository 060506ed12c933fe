#include "ca_bundle.h"

#include <cstdio>

namespace tlstune {

namespace {

OPENSSL_STACK *stack(void *typed) { return static_cast<OPENSSL_STACK *>(typed); }

/* A new X509_OBJECT holding its own reference to what original holds. */
X509_OBJECT *copyObject(const CaApi &api, X509_OBJECT *original)
{
	X509_OBJECT *copy = api.X509_OBJECT_new();
	if (!copy)
		return nullptr;
	const int ok = api.X509_OBJECT_get_type(original) == X509_LU_X509
		? api.X509_OBJECT_set1_X509(copy, api.X509_OBJECT_get0_X509(original))
		: api.X509_OBJECT_set1_X509_CRL(copy, api.X509_OBJECT_get0_X509_CRL(original));
	if (!ok) {
		api.X509_OBJECT_free(copy);
		return nullptr;
	}
	return copy;
}

} /* namespace */

CaBundle::~CaBundle()
{
	for (X509_OBJECT *object : sequence_)
		api_.X509_OBJECT_free(object);
}

std::shared_ptr<const CaBundle> CaBundle::lazy(const CaApi &api, std::shared_ptr<const CaIndex> index)
{
	auto bundle = std::make_shared<CaBundle>(api);
	bundle->index_ = std::move(index);
	return bundle;
}

std::shared_ptr<const CaBundle> parseBundle(const CaApi &api, const std::string &content,
					    const char *propq)
{
	if (propq && !api.PEM_X509_INFO_read_bio_ex)
		return nullptr;
	/*
	 * A stdio BIO, as BIO_new_file makes, over the bytes the cache read and keeps: the
	 * loader's fgets line rules (a NUL ends a line's text), and no second open by name.
	 */
	FILE *file = content.empty() ? nullptr
				     : fmemopen(const_cast<char *>(content.data()), content.size(), "r");
	if (!file)
		return nullptr;
	api.ERR_set_mark();
	BIO *in = api.BIO_new_fp(file, BIO_CLOSE);
	if (!in)
		fclose(file);
	/* The loader passes "" as the password: an encrypted key in the file is skipped. */
	char *password = const_cast<char *>("");
	STACK_OF(X509_INFO) *infos = nullptr;
	if (in)
		infos = propq ? api.PEM_X509_INFO_read_bio_ex(in, nullptr, nullptr, password, nullptr, propq)
			      : api.PEM_X509_INFO_read_bio(in, nullptr, nullptr, password);
	if (in)
		api.BIO_free(in);

	auto bundle = std::make_shared<CaBundle>(api);
	/* A scratch store finds the repeats exactly as the program's store would. */
	X509_STORE *seen = infos ? api.X509_STORE_new() : nullptr;
	bool ok = seen != nullptr;
	const int infoCount = infos ? api.OPENSSL_sk_num(stack(infos)) : 0;
	for (int i = 0; i < infoCount; i++) {
		auto *info = static_cast<X509_INFO *>(api.OPENSSL_sk_value(stack(infos), i));
		for (int isCrl = 0; ok && isCrl < 2; isCrl++) {
			if (isCrl ? !info->crl : !info->x509)
				continue;
			/*
			 * OpenSSL fills a certificate's derived fields (extensions, digest) on
			 * first use, under its own lock but behind a lock-free check TSan cannot
			 * see. These certificates go to every thread's stores; filling the fields
			 * now, before the cache publishes them, leaves nothing to write later.
			 * A certificate whose extensions do not decode would leave its error in
			 * every new store that compares it; such a file is not cached.
			 */
			if (!isCrl && api.X509_check_purpose(info->x509, -1, 0) != 1) {
				ok = false;
				continue;
			}
			X509_OBJECT *object = api.X509_OBJECT_new();
			ok = object && (isCrl ? api.X509_OBJECT_set1_X509_CRL(object, info->crl)
					      : api.X509_OBJECT_set1_X509(object, info->x509));
			if (!ok) {
				if (object)
					api.X509_OBJECT_free(object);
				continue;
			}
			bundle->sequence_.push_back(object);
			const int before = api.OPENSSL_sk_num(stack(api.X509_STORE_get0_objects(seen)));
			ok = isCrl ? api.X509_STORE_add_crl(seen, info->crl)
				   : api.X509_STORE_add_cert(seen, info->x509);
			bundle->endsWithRepeat_ =
				api.OPENSSL_sk_num(stack(api.X509_STORE_get0_objects(seen))) == before;
			if (ok && !bundle->endsWithRepeat_)
				bundle->objects_.push_back(object);
		}
	}
	if (seen)
		api.X509_STORE_free(seen);
	for (int i = 0; i < infoCount; i++)
		api.X509_INFO_free(static_cast<X509_INFO *>(api.OPENSSL_sk_value(stack(infos), i)));
	if (infos)
		api.OPENSSL_sk_free(stack(infos));
	api.ERR_pop_to_mark();
	return ok && bundle->count() > 0 ? bundle : nullptr;
}

int fillStoreByAdding(const CaApi &api, X509_STORE *store, const CaBundle &bundle)
{
	for (X509_OBJECT *object : bundle.sequence()) {
		const int ok = api.X509_OBJECT_get_type(object) == X509_LU_X509
			? api.X509_STORE_add_cert(store, api.X509_OBJECT_get0_X509(object))
			: api.X509_STORE_add_crl(store, api.X509_OBJECT_get0_X509_CRL(object));
		if (!ok)
			return -1;
	}
	return bundle.count();
}

int fillStore(const CaApi &api, X509_STORE *store, const CaBundle &bundle)
{
	if (!api.storeSortsOnLookup())
		return fillStoreByAdding(api, store, bundle);
	/*
	 * X509_STORE_add_cert looks each object up in the store's sorted stack and appends
	 * it, so the next lookup sorts the whole stack again: 0.24 ms for 144 certificates,
	 * measured. Doing the lookups first and the appends after sorts once (12 us). The
	 * appends use the store's own lock and stack, exactly as X509_STORE_add_cert does.
	 */
	std::vector<X509_OBJECT *> fresh;
	fresh.reserve(bundle.objects().size());
	bool freshEndsTheFile = false;
	if (!api.X509_STORE_lock(store))
		return -1;
	STACK_OF(X509_OBJECT) *objects = api.X509_STORE_get0_objects(store);
	bool ok = true;
	for (X509_OBJECT *object : bundle.objects()) {
		if (api.X509_OBJECT_retrieve_match(objects, object))
			continue;
		X509_OBJECT *copy = copyObject(api, object);
		ok = copy != nullptr;
		if (!ok)
			break;
		fresh.push_back(copy);
		freshEndsTheFile = object == bundle.objects().back() && !bundle.endsWithRepeat();
	}
	/*
	 * One at a time, each lookup sorts the stack: it ends sorted, but for the file's last
	 * object when that one was appended. Ending the same way keeps the order a program
	 * enumerating the store sees (the sort is stable: glibc's qsort is a merge sort).
	 */
	std::size_t pushed = 0;
	while (ok && pushed < fresh.size()) {
		if (pushed + 1 == fresh.size() && freshEndsTheFile)
			api.OPENSSL_sk_sort(stack(objects));
		ok = api.OPENSSL_sk_push(stack(objects), fresh[pushed]) > 0;
		pushed += ok;
	}
	if (ok && !freshEndsTheFile)
		api.OPENSSL_sk_sort(stack(objects));
	api.X509_STORE_unlock(store);
	for (std::size_t i = pushed; i < fresh.size(); i++)
		api.X509_OBJECT_free(fresh[i]);
	return ok ? bundle.count() : -1;
}

} /* namespace tlstune */
