#include "parsed_ahead.h"

#include <atomic>
#include <new>

namespace tlstune {

namespace {

/* The stores parseAllStores() reaches. Never destroyed: a thread may change providers during exit. */
struct Registry {
	std::mutex mutex;
	std::vector<std::weak_ptr<ParsedAhead>> stores;
};

Registry &registry() noexcept
{
	static Registry *instance = new Registry;
	return *instance;
}

std::atomic<bool> enlisted{ false };

} /* namespace */

ParsedAhead::~ParsedAhead()
{
	for (File &file : files_)
		for (X509 *x : file.parsed)
			if (x)
				api_.X509_free(x);
}

ParsedAhead::File *ParsedAhead::find(const CaIndex &index) noexcept
{
	for (File &file : files_)
		if (file.index.get() == &index)
			return &file;
	return nullptr;
}

void ParsedAhead::add(const std::shared_ptr<const CaIndex> &index)
{
	std::lock_guard<std::mutex> lock(mutex_);
	if (!find(*index))
		files_.push_back({ index, {}, std::vector<bool>(static_cast<std::size_t>(index->count())) });
}

X509 *ParsedAhead::take(const CaIndex &index, int position) noexcept
{
	std::lock_guard<std::mutex> lock(mutex_);
	File *file = find(index);
	if (!file)
		return index.certificate(position);
	const std::size_t at = static_cast<std::size_t>(position);
	file->taken[at] = true;
	if (at < file->parsed.size() && file->parsed[at]) {
		X509 *x = file->parsed[at];
		file->parsed[at] = nullptr;
		return x;
	}
	/*
	 * Parsed under the lock: a parseAll() that has not put its certificates here yet has
	 * not returned either, so the change it runs before has not happened.
	 */
	return index.certificate(position);
}

void ParsedAhead::parseAll()
{
	struct Wanted {
		std::shared_ptr<const CaIndex> index;
		std::vector<int> positions;
		std::vector<X509 *> parsed;
	};
	std::vector<Wanted> wanted;
	{
		std::lock_guard<std::mutex> lock(mutex_);
		for (const File &file : files_) {
			if (!file.parsed.empty())
				continue;
			wanted.push_back({ file.index, {}, {} });
			for (int position = 0; position < file.index->count(); position++)
				if (!file.taken[static_cast<std::size_t>(position)])
					wanted.back().positions.push_back(position);
			/* Nothing below allocates until the error queue's mark is gone again. */
			wanted.back().parsed.reserve(wanted.back().positions.size());
		}
	}
	/*
	 * Errors of a parse here are nobody's: the index checked at load time that every key
	 * decodes, which is all a load reports of keys.
	 */
	api_.ERR_set_mark();
	for (Wanted &w : wanted) {
		for (int position : w.positions) {
			X509 *x = w.index->certificate(position);
			/*
			 * Loading compares certificates of one subject (X509_cmp), which caches their
			 * extensions and fingerprint under the state of the moment: as it would have.
			 */
			if (x && w.index->withCanonical(w.index->canonical(position)).size() > 1)
				api_.X509_check_purpose(x, -1, 0);
			w.parsed.push_back(x);
		}
	}
	api_.ERR_pop_to_mark();

	std::lock_guard<std::mutex> lock(mutex_);
	for (Wanted &w : wanted) {
		File *file = find(*w.index);
		if (file && file->parsed.empty())
			file->parsed.resize(file->taken.size());
		for (std::size_t i = 0; i < w.positions.size(); i++) {
			const std::size_t at = static_cast<std::size_t>(w.positions[i]);
			/* A take() parsed it meanwhile, before the change: that one is in the store. */
			if (!file || file->taken[at] || !w.parsed[i]) {
				if (w.parsed[i])
					api_.X509_free(w.parsed[i]);
				continue;
			}
			file->parsed[at] = w.parsed[i];
		}
	}
}

void ParsedAhead::enlist(const std::shared_ptr<ParsedAhead> &ahead)
{
	Registry &r = registry();
	std::lock_guard<std::mutex> lock(r.mutex);
	/* Stores freed, or filled, since: their entries go (python makes a context per request). */
	for (std::size_t i = 0; i < r.stores.size();) {
		if (r.stores[i].expired()) {
			r.stores[i] = r.stores.back();
			r.stores.pop_back();
		} else {
			i++;
		}
	}
	r.stores.push_back(ahead);
	enlisted.store(true, std::memory_order_release);
}

bool ParsedAhead::anyEnlisted() noexcept
{
	return enlisted.load(std::memory_order_acquire);
}

void ParsedAhead::parseAllStores() noexcept
{
	try {
		std::vector<std::shared_ptr<ParsedAhead>> alive;
		{
			Registry &r = registry();
			std::lock_guard<std::mutex> lock(r.mutex);
			for (const std::weak_ptr<ParsedAhead> &store : r.stores)
				if (std::shared_ptr<ParsedAhead> ahead = store.lock())
					alive.push_back(std::move(ahead));
		}
		for (const std::shared_ptr<ParsedAhead> &ahead : alive)
			ahead->parseAll();
	} catch (const std::bad_alloc &) {
		/* Out of memory: what was not parsed ahead is parsed when the store needs it. */
	}
}

void ParsedAhead::lockForFork() noexcept
{
	registry().mutex.lock();
}

void ParsedAhead::unlockAfterFork() noexcept
{
	registry().mutex.unlock();
}

} /* namespace tlstune */
