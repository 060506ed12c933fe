#pragma once

#include <memory>
#include <vector>

#include "ca_api.h"

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
	int count() const noexcept { return count_; }
	/* Distinct objects, in file order. */
	const std::vector<X509_OBJECT *> &objects() const noexcept { return objects_; }
	/* The file's last certificate or CRL repeats an earlier one. */
	bool endsWithRepeat() const noexcept { return endsWithRepeat_; }

private:
	friend std::shared_ptr<const CaBundle> parseBundle(const CaApi &api, const char *path,
							   const char *propq);

	const CaApi &api_;
	int count_ = 0;
	std::vector<X509_OBJECT *> objects_;
	bool endsWithRepeat_ = false;
};

/*
 * Parses a PEM file as X509_load_cert_crl_file(_ex) does for the default library context
 * and propq (a property query such as stunnel's "provider!=fips", or null). Returns
 * nullptr for anything that load would fail on (missing, unreadable, malformed, no
 * certificate or CRL), with the error queue as it was: the caller then lets the real
 * loader fail in its own words.
 */
std::shared_ptr<const CaBundle> parseBundle(const CaApi &api, const char *path, const char *propq);

/*
 * Adds the bundle's objects to store, as loading the file would: objects already in the
 * store are skipped, and the store's object stack ends up in the same order. Returns
 * bundle.count(), or -1 if memory ran out (then some objects may be in the store already;
 * loading the file again adds the rest).
 */
int fillStore(const CaApi &api, X509_STORE *store, const CaBundle &bundle);

} /* namespace tlstune */
