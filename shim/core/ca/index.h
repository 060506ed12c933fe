#pragma once

#include <atomic>
#include <memory>
#include <string>
#include <vector>

#include "api.h"
#include "core/stats.h"

namespace tlstune {

/*
 * What decides at load time whether a certificate's public key decodes: the providers
 * active in the default library context and its default property query. A lazy load
 * reuses the decoding check of an index only while these are what they were then.
 */
struct DecodingState {
	std::vector<const void *> providers; /* OSSL_PROVIDER pointers, in the store's order */
	std::string properties;              /* 3.2+; before, only whether FIPS is asked for */
	bool fips = false;
	/* Every provider is the built-in "default", no FIPS, no properties: what most programs run. */
	bool builtinDefault = false;
	bool operator==(const DecodingState &other) const
	{
		return providers == other.providers && properties == other.properties &&
		       fips == other.fips;
	}
};
DecodingState decodingState(const CaApi &api);

/*
 * A CA file of PEM certificates, indexed without parsing them (issue 13): each
 * certificate's DER and decoded subject name, in file order. What is shared is the bytes
 * and the index, never an object: every store gets X509s of its own, parsed from the DER
 * when they enter it (OpenSSL's load gives every store fresh objects, and a program may
 * change one: trust and reject settings, aliases, ex_data).
 */
class CaIndex {
public:
	/* propq: the property query the file is loaded for (stunnel's "provider!=fips"), or "". */
	CaIndex(const CaApi &api, Stats &stats, std::string propq = std::string())
		: api_(api), stats_(stats), propq_(std::move(propq)) {}
	~CaIndex();
	CaIndex(const CaIndex &) = delete;
	CaIndex &operator=(const CaIndex &) = delete;

	/* Certificates in the file, repeats included: what loading it returns. */
	int count() const noexcept { return static_cast<int>(entries_.size()); }

	/* File positions of the certificates whose subject equals name, in file order. */
	std::vector<int> withSubject(const X509_NAME *name) const;
	/* The same by a subject's canonical encoding (name.h), and a certificate's subject's. */
	std::vector<int> withCanonical(const std::string &canon) const;
	const std::string &canonical(int position) const noexcept { return entries_[position]->canon; }
	/*
	 * The certificate's subject, decoded when first asked for (indexing does not decode
	 * names: it compares their canonical encodings); null if memory ran out.
	 */
	const X509_NAME *subject(int position) const noexcept;
	/* The certificate's bytes: equal bytes are what X509_cmp calls the same certificate. */
	const std::string &der(int position) const noexcept { return entries_[position]->der; }
	/* The distinct subjects in X509_NAME_cmp order, and which one a certificate has. */
	int subjectCount() const noexcept { return static_cast<int>(firstWithSubject_.size()); }
	const X509_NAME *distinctSubject(int rank) const noexcept
	{
		return subject(firstWithSubject_[rank]);
	}
	int subjectRank(int position) const noexcept { return subjectRank_[position]; }

	/* A new X509 of the certificate at position, the caller's to free; null if memory ran out. */
	X509 *certificate(int position) const;

	/*
	 * Whether an eager load now would decode every certificate's key and compare its
	 * same-subject certificates leaving nothing on the error queue, as it did when the file
	 * was indexed: true at once while the decoding state is the same, else the same-subject
	 * certificates and one certificate of each key algorithm the state is not known to
	 * decode are parsed to tell.
	 */
	bool keysDecodeNow() const;

private:
	friend std::shared_ptr<CaIndex> indexFile(const CaApi &api, Stats &stats,
						  const std::string &content, const std::string &propq);

	struct Entry {
		std::string der;
		std::size_t subjectAt = 0, subjectLength = 0; /* the subject's DER, in der */
		std::string canon; /* its canonical encoding (name.h), which X509_NAME_cmp compares */
		std::string keyAlgorithm; /* its key's AlgorithmIdentifier, DER */
		mutable std::atomic<X509_NAME *> subject{ nullptr };
	};

	X509 *parse(int position) const; /* certificate(), not counted in the stats */
	/*
	 * Whether loading's comparison of the certificates that share a subject (X509_cmp,
	 * which caches their extensions and SHA-1 fingerprint) succeeds and leaves nothing on
	 * the error queue now; decoded gets the key algorithms of the keys parsed for it.
	 */
	bool comparesQuietly(std::vector<std::string> *decoded) const;
	/*
	 * Whether a certificate of each key algorithm decodes under state, decoding those it
	 * must; decoded: algorithms of keys that decoded under it already.
	 */
	bool keysDecode(const DecodingState &state, const std::vector<std::string> &decoded = {}) const;

	const CaApi &api_;
	Stats &stats_;
	const std::string propq_;
	std::vector<std::unique_ptr<Entry>> entries_;
	std::vector<int> bySubject_; /* positions, in X509_NAME_cmp order, then file order */
	std::vector<int> firstWithSubject_; /* per distinct subject, in order: a position */
	std::vector<int> subjectRank_;      /* per position: its subject's rank */
	struct KeyAlgorithm {
		std::string id; /* the key's AlgorithmIdentifier, DER */
		int position;   /* the first certificate with it */
	};
	std::vector<KeyAlgorithm> keyAlgorithms_;
	DecodingState decodedUnder_;        /* when the index checked that every key decodes */
};

/*
 * Indexes a PEM file's content, or returns null when loading it lazily could differ in
 * any way from loading it: anything but CERTIFICATE blocks (CRLs, TRUSTED CERTIFICATE,
 * keys, headers), a certificate whose framing or subject does not decode or whose block
 * holds bytes after it, certificates that share a subject of which one has extensions
 * that do not decode (loading compares them and leaves that error), a key that does not
 * decode under the providers of the moment, an empty file. The error queue is left as
 * it was.
 */
std::shared_ptr<CaIndex> indexFile(const CaApi &api, Stats &stats, const std::string &content,
				   const std::string &propq = std::string());

/*
 * Whether d2i_X509 takes this DER certificate, and where its subject is (and, when asked,
 * the bytes of its key's AlgorithmIdentifier): every field decoded by OpenSSL's own
 * decoder but the public key, whose decoding d2i_X509 survives.
 * Stricter than OpenSSL where that is simpler (BER lengths, unique ids: false).
 */
bool checkCertificate(const CaApi &api, const unsigned char *der, std::size_t length,
		      const unsigned char **subject, std::size_t *subjectLength,
		      std::string *keyAlgorithm = nullptr) noexcept;

} /* namespace tlstune */
