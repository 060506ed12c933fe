#pragma once

#include <atomic>
#include <memory>
#include <string>
#include <vector>

#include "ca_api.h"
#include "stats.h"

namespace tlstune {

/*
 * A CA file of PEM certificates, indexed without parsing them (issue 13): each
 * certificate's DER and decoded subject name, in file order. A certificate is parsed the
 * first time a store needs its subject, once per process, and shared by every store after.
 */
class CaIndex {
public:
	explicit CaIndex(const CaApi &api, Stats &stats) noexcept : api_(api), stats_(stats) {}
	~CaIndex();
	CaIndex(const CaIndex &) = delete;
	CaIndex &operator=(const CaIndex &) = delete;

	/* Certificates in the file, repeats included: what loading it returns. */
	int count() const noexcept { return static_cast<int>(entries_.size()); }
	/* Certificates parsed so far. */
	int parsedCount() const noexcept { return parsedCount_.load(std::memory_order_relaxed); }

	/* File positions of the certificates whose subject equals name, in file order. */
	std::vector<int> withSubject(const X509_NAME *name) const;
	const X509_NAME *subject(int position) const noexcept { return entries_[position]->subject; }
	/* The certificate's bytes: equal bytes are what X509_cmp calls the same certificate. */
	const std::string &der(int position) const noexcept { return entries_[position]->der; }
	/* The distinct subjects in X509_NAME_cmp order, and which one a certificate has. */
	int subjectCount() const noexcept { return static_cast<int>(firstWithSubject_.size()); }
	const X509_NAME *distinctSubject(int rank) const noexcept
	{
		return entries_[firstWithSubject_[rank]]->subject;
	}
	int subjectRank(int position) const noexcept { return subjectRank_[position]; }

	/*
	 * The certificate at position, parsed on first use; null if memory ran out. A
	 * certificate whose extensions do not decode is parsed afresh for each caller (then
	 * *own is set and the caller frees it): OpenSSL notes that error on the queue the
	 * first time it looks at each such X509, and a shared one would do it once per process.
	 */
	X509 *certificate(int position, bool *own) const;

private:
	friend std::shared_ptr<CaIndex> indexFile(const CaApi &api, Stats &stats,
						  const std::string &content);

	struct Entry {
		std::string der;
		X509_NAME *subject = nullptr;
		mutable std::atomic<X509 *> parsed{ nullptr };
		mutable std::atomic<bool> invalid{ false };
	};

	X509 *parse(const Entry &entry) const;

	const CaApi &api_;
	Stats &stats_;
	std::vector<std::unique_ptr<Entry>> entries_;
	std::vector<int> bySubject_; /* positions, sorted by X509_NAME_cmp, then file order */
	std::vector<int> firstWithSubject_; /* per distinct subject, in order: a position */
	std::vector<int> subjectRank_;      /* per position: its subject's rank */
	mutable std::atomic<int> parsedCount_{ 0 };
};

/*
 * Indexes a PEM file's content, or returns null when loading it lazily could differ in
 * any way from loading it: anything but CERTIFICATE blocks (CRLs, TRUSTED CERTIFICATE,
 * keys, headers), a certificate whose framing or subject does not decode, certificates
 * that share a subject of which one has extensions that do not decode (loading compares
 * them and leaves that error), an empty file. The error queue is left as it was.
 */
std::shared_ptr<CaIndex> indexFile(const CaApi &api, Stats &stats, const std::string &content);

/*
 * Whether d2i_X509 takes this DER certificate, and where its subject is: every field
 * decoded by OpenSSL's own decoder but the public key, whose decoding d2i_X509 survives.
 * Stricter than OpenSSL where that is simpler (BER lengths, unique ids: false).
 */
bool checkCertificate(const CaApi &api, const unsigned char *der, std::size_t length,
		      const unsigned char **subject, std::size_t *subjectLength) noexcept;

} /* namespace tlstune */
