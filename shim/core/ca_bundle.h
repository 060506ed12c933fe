#pragma once

#include <memory>
#include <string>
#include <vector>

#include "ca_api.h"
#include "ca_index.h"

namespace tlstune {

/*
 * The certificates and CRLs of one parsed CA file, shared read-only by every store filled
 * from it. A store holds its own X509_OBJECTs with their own references to these X509s,
 * so a bundle dropped from the cache leaves the stores filled from it intact.
 */
class CaBundle {
public:
	explicit CaBundle(const CaApi &api) noexcept : api_(api) {}
	~CaBundle();
	CaBundle(const CaBundle &) = delete;
	CaBundle &operator=(const CaBundle &) = delete;

	/* What loading the file returns: every certificate and CRL in it, repeats included. */
	int count() const noexcept { return static_cast<int>(sequence_.size()); }
	/* Every certificate and CRL in file order, repeats included: what the loader adds. */
	const std::vector<X509_OBJECT *> &sequence() const noexcept { return sequence_; }
	/* Distinct objects, in file order. */
	const std::vector<X509_OBJECT *> &objects() const noexcept { return objects_; }
	/* The file's last certificate or CRL repeats an earlier one. */
	bool endsWithRepeat() const noexcept { return endsWithRepeat_; }
	/* Loaded lazily (TLSTUNE_CA_LAZY): the file's index, and no objects. */
	const std::shared_ptr<const CaIndex> &index() const noexcept { return index_; }
	static std::shared_ptr<const CaBundle> lazy(const CaApi &api, std::shared_ptr<const CaIndex> index);

private:
	friend std::shared_ptr<const CaBundle> parseBundle(const CaApi &api,
							   const std::string &content,
							   const char *propq);

	const CaApi &api_;
	std::vector<X509_OBJECT *> sequence_;
	std::vector<X509_OBJECT *> objects_; /* the distinct ones of sequence_ */
	bool endsWithRepeat_ = false;
	std::shared_ptr<const CaIndex> index_;
};

/*
 * Parses a PEM file's content as X509_load_cert_crl_file(_ex) does for the default
 * library context and propq (a property query such as stunnel's "provider!=fips", or
 * null). Returns nullptr for anything that load would fail on (unreadable, malformed, no
 * certificate or CRL) and for a file whose load leaves errors although it succeeds (a
 * certificate with an invalid extension: OpenSSL notes it on the error queue when it
 * first compares that certificate, in every new store), with the error queue as it was:
 * the caller then lets the real loader answer in its own words.
 */
std::shared_ptr<const CaBundle> parseBundle(const CaApi &api, const std::string &content,
					    const char *propq);

/*
 * Adds the bundle's objects to store, as loading the file would: objects already in the
 * store are skipped, and the store's objects end up in the same order. Returns
 * bundle.count(), or -1 if memory ran out (then some objects may be in the store already;
 * loading the file again adds the rest).
 */
int fillStore(const CaApi &api, X509_STORE *store, const CaBundle &bundle);

/* The same, object by object through X509_STORE_add_cert/_crl: any OpenSSL's own order. */
int fillStoreByAdding(const CaApi &api, X509_STORE *store, const CaBundle &bundle);

} /* namespace tlstune */
