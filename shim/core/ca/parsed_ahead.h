#pragma once

#include <memory>
#include <mutex>
#include <vector>

#include "api.h"
#include "index.h"

namespace tlstune {

/*
 * A lazy store's certificates, parsed ahead of a change in what decodes their keys.
 *
 * OpenSSL's load decodes every key under the providers, the default properties and the
 * default library context of that moment. A lazy store parses a certificate when it
 * enters the store, later; a provider unloaded in between, or the properties or the
 * thread's default context changed, would leave a key undecoded that OpenSSL's load had
 * decoded (or the other way round). So the calls that change what decodes
 * (interpose/decoding.cpp) first parse, under the state still in force, every certificate
 * of every lazy store that has not entered it yet, and the store takes these when it
 * needs them.
 *
 * Nothing here touches a store: a store may be freed on another thread meanwhile, and
 * its lock is not this code's to take from inside a provider call. Each store's files
 * are kept here too, under a lock of their own, shared between the store's lazy state
 * and the registry that the change calls walk.
 */
class ParsedAhead {
public:
	explicit ParsedAhead(const CaApi &api) noexcept : api_(api) {}
	~ParsedAhead();
	ParsedAhead(const ParsedAhead &) = delete;
	ParsedAhead &operator=(const ParsedAhead &) = delete;

	/* A file lazily loaded into the store. */
	void add(const std::shared_ptr<const CaIndex> &index);
	/* The certificate at position of index, the caller's to free: parsed ahead, or now. */
	X509 *take(const CaIndex &index, int position) noexcept;
	/* Every certificate not taken yet, parsed now if it was not before; may throw bad_alloc. */
	void parseAll();

	/* Makes ahead one that parseAllStores() reaches, while its store's state holds it. */
	static void enlist(const std::shared_ptr<ParsedAhead> &ahead);
	/* Whether any store was ever enlisted: one load, for calls made before any CA load. */
	static bool anyEnlisted() noexcept;
	/* parseAll() for every enlisted store still alive. */
	static void parseAllStores() noexcept;
	/* fork() must not copy the registry's lock while another thread holds it. */
	static void lockForFork() noexcept;
	static void unlockAfterFork() noexcept;

private:
	struct File {
		std::shared_ptr<const CaIndex> index;
		std::vector<X509 *> parsed; /* per position: parsed ahead, not taken yet */
		std::vector<bool> taken;
	};
	File *find(const CaIndex &index) noexcept;

	const CaApi &api_;
	std::mutex mutex_; /* held across a take's parse, never across parseAll()'s */
	std::vector<File> files_;
};

} /* namespace tlstune */
