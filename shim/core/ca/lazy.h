#pragma once

#include <memory>

#include "api.h"
#include "index.h"

namespace tlstune {

/*
 * Lazily loaded CA files (issue 13, TLSTUNE_CA_LAZY). A store given an indexed file holds
 * none of its certificates at first. Before anything reads the store by a subject (chain
 * building asks for an issuer, the program adds a certificate, a CApath lookup adds one)
 * the file's certificates with that subject go into the store in file order, through the
 * same duplicate check loading does; before anything enumerates the store, all of them,
 * and the store's objects are put in the order loading would have left. OpenSSL only
 * reads a store by subject through the functions interposed for this (x509_lu.c,
 * x509_vfy.c, by_dir.c in 3.0 and 3.5), so every lookup then finds what an eager load
 * would have put there.
 *
 * 3.0 sorts the stack at every search, adds included: the lazy certificates of a subject
 * go in before it is read, and the order is mended at enumeration. 3.5 keeps the stack
 * in the order objects were added and sorts only at lookups: there a StoreModel follows
 * the whole stack, and adds to a store with lazy certificates are made by it, as 3.5's
 * x509_store_add makes them. Other versions load files eagerly.
 *
 * Every function takes the store's lock itself: call none with it held.
 */
class LazyStores {
public:
	/* False when this libcrypto cannot do it: then files load eagerly. */
	bool init(const CaApi &api) noexcept;

	/* Loads index into store lazily: returns what loading the file returns, -1 if it cannot. */
	int attach(X509_STORE *store, const std::shared_ptr<const CaIndex> &index) const noexcept;

	/* The store's lazy certificates with this subject, now in the store. */
	void beforeRead(X509_STORE *store, const X509_NAME *subject) const noexcept;
	/* After a call that looked the store up (and so sorted it). */
	void afterLookup(X509_STORE *store) const noexcept;
	/* Around X509_STORE_add_cert/_crl on 3.0: before is the store's object count before it. */
	int objectCount(X509_STORE *store) const noexcept;
	void afterAdd(X509_STORE *store, int before) const noexcept;
	/* 3.5: the store's adds are made here (add), not by OpenSSL. */
	bool addsItself() const noexcept { return ordered_; }
	/* X509_STORE_add_cert or _crl (the other null): what it returns, -1 to call OpenSSL's. */
	int add(X509_STORE *store, X509 *x, X509_CRL *crl) const noexcept;
	/* Every lazy certificate in the store, in the order loading would have left them. */
	void beforeEnumeration(X509_STORE *store) const noexcept;

	/*
	 * The program took the store's object list (X509_STORE_get0_objects): it may read that
	 * list at any later moment, without a call the shim sees, so every later load into
	 * the store is filled at once.
	 */
	void markListed(X509_STORE *store) const noexcept;
	bool listed(X509_STORE *store) const noexcept;

	/* Whether the store has lazy certificates not in it yet (a cheap check). */
	bool pending(X509_STORE *store) const noexcept;

private:
	struct State;
	State *state(X509_STORE *store) const noexcept;
	/* The store's state, made now if it has none; null if memory ran out. The store's lock held. */
	State *stateOrNew(X509_STORE *store) const noexcept;
	/* The store's state while some of its lazy certificates are not in it; the store's lock held. */
	State *unfilled(X509_STORE *store) const noexcept;
	/*
	 * 3.0: every file's lazy certificates at positionsOf(index), into the store in file
	 * order through the duplicate check; the object pushed for the newest file's last
	 * certificate, or null. The store's lock held.
	 */
	template <typename PositionsOf>
	X509_OBJECT *fillSubject(State *s, STACK_OF(X509_OBJECT) *objects, PositionsOf positionsOf,
				 bool *failed) const;
	/* 3.0: the attached file's subjects that loading would compare, in the store now. */
	void fillCompared(State *s, STACK_OF(X509_OBJECT) *objects) const noexcept;
	/* The state's ParsedAhead, made and enlisted if it has none, with index in it; false if memory ran out. */
	bool aheadFor(State *s, const std::shared_ptr<const CaIndex> &index) const noexcept;
	/* 3.5: drops the model (and what was parsed ahead) once every certificate is in the store. */
	void settle(State *s) const noexcept;

	const CaApi *api_ = nullptr;
	int slot_ = -1;
	bool ordered_ = false; /* 3.5: a StoreModel per store */
};

} /* namespace tlstune */
