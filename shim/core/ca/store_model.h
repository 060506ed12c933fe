#pragma once

#include <memory>
#include <vector>

#include "api.h"
#include "index.h"
#include "parsed_ahead.h"

namespace tlstune {

/*
 * An OpenSSL 3.5 store as eager loading would have left it, in which lazily loaded
 * certificates (issue 13) stand for certificates not parsed yet. 3.5's store is one stack
 * of objects (x509_lu.c):
 *  - X509_STORE_add_cert/_crl append. Their duplicate check (X509_OBJECT_retrieve_match)
 *    takes the first object of the same type and name, in stack order while the stack
 *    is unsorted, and compares only the run of such objects that starts there: twins
 *    apart in the stack are both kept, so the order decides what a store holds;
 *  - a lookup by subject (X509_STORE_CTX_get_by_subject, _get1_issuer, _get1_certs,
 *    _get1_crls, and by_dir.c within them) and X509_STORE_get1_all_certs sort it first,
 *    and nothing else does. The sort is stable (glibc's qsort merges).
 * So the model keeps every object in the order of the eager stack, each one either in
 * the real stack (which holds them in the same relative order) or still lazy. It sorts
 * when the store sorted (the stack's sorted flag says so: each change the model makes
 * clears it), and puts a lazy certificate into the store, at its place, before anything
 * could tell it is missing: a lookup of its subject, a duplicate check that reaches it,
 * an enumeration.
 *
 * The caller holds the store's lock around every call.
 */
class StoreModel {
public:
	/* ahead: where the lazy certificates are parsed, or were before a change in what decodes. */
	StoreModel(const CaApi &api, ParsedAhead &ahead) noexcept : api_(api), ahead_(ahead) {}
	StoreModel(const StoreModel &) = delete;
	StoreModel &operator=(const StoreModel &) = delete;

	/* Starts from what the store holds. */
	bool import(STACK_OF(X509_OBJECT) *objects);
	/* What loading the file adds, in its order, through the duplicate check. */
	bool load(STACK_OF(X509_OBJECT) *objects, std::shared_ptr<const CaIndex> index);
	/* Notes a sort the store did since the last call. */
	void sync(STACK_OF(X509_OBJECT) *objects);
	/* The lazy certificates with this subject, into the store. */
	void beforeLookup(STACK_OF(X509_OBJECT) *objects, const X509_NAME *subject);
	/*
	 * X509_STORE_add_cert (or _crl, one of the two null) as 3.5's x509_store_add does it:
	 * 1 added or found, -1 when the caller should call OpenSSL's own (nothing changed).
	 */
	int add(STACK_OF(X509_OBJECT) *objects, X509 *x, X509_CRL *crl);
	/* Every lazy certificate into the store: then it holds what eager loading leaves. */
	void fillAll(STACK_OF(X509_OBJECT) *objects);

	/* Some certificates are not in the store yet. */
	bool pending() const noexcept { return lazy_ > 0; }

private:
	struct Entry {
		X509_OBJECT *object;     /* in the store, or null while lazy */
		int type;                /* X509_LU_X509 or X509_LU_CRL */
		int name;                /* subject (issuer for a CRL), into names_ */
		int file;                /* a lazy certificate's file and place in it */
		int position;
	};

	int findName(const X509_NAME *name) const;
	int addName(const X509_NAME *name);
	void sortEntries();
	bool materialise(STACK_OF(X509_OBJECT) *objects, std::size_t at, int storeIndex);
	void beforeDuplicateCheck(STACK_OF(X509_OBJECT) *objects, int type, int name);
	bool sameLazyCertificate(std::size_t first, const CaIndex &index, int position) const;
	X509_OBJECT *append(STACK_OF(X509_OBJECT) *objects, X509 *x, X509_CRL *crl, int name, int *result);

	const CaApi &api_;
	ParsedAhead &ahead_;
	std::vector<std::shared_ptr<const CaIndex>> files_;
	std::vector<Entry> entries_;
	std::vector<const X509_NAME *> names_; /* owned by the indexes or the store's objects */
	std::vector<int> byName_;              /* names_, in X509_NAME_cmp order */
	bool sorted_ = false;                  /* the entries are in the order a sort left */
	int lazy_ = 0;
};

} /* namespace tlstune */
