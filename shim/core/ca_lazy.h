#pragma once

#include <memory>

#include "ca_api.h"
#include "ca_index.h"

namespace tlstune {

/*
 * Lazily loaded CA files (issue 13, TLSTUNE_CA_LAZY). A store given an indexed file holds
 * none of its certificates at first. Before anything reads the store by a subject (chain
 * building asks for an issuer, the program adds a certificate, a CApath lookup adds one)
 * the file's certificates with that subject go into the store in file order, through the
 * same duplicate check loading does; before anything enumerates the store, all of them,
 * and the store's objects are put in the order loading would have left. OpenSSL only
 * reads a store by subject through the functions interposed for this (x509_lu.c,
 * x509_vfy.c in 3.0), so every lookup then finds what an eager load would have put
 * there. Only for 3.0, whose store is one stack sorted on lookup; elsewhere files load
 * eagerly.
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
	/* Around X509_STORE_add_cert/_crl: before is the store's object count before it. */
	int objectCount(X509_STORE *store) const noexcept;
	void afterAdd(X509_STORE *store, int before) const noexcept;
	/* Every lazy certificate in the store, in the order loading would have left them. */
	void beforeEnumeration(X509_STORE *store) const noexcept;

	/* Whether the store has lazy certificates not in it yet (a cheap check). */
	bool pending(X509_STORE *store) const noexcept;

private:
	struct State;
	State *state(X509_STORE *store) const noexcept;
	/* The store's state while some of its lazy certificates are not in it; the store's lock held. */
	State *unfilled(X509_STORE *store) const noexcept;

	const CaApi *api_ = nullptr;
	int slot_ = -1;
};

} /* namespace tlstune */
