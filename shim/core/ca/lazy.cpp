#include "lazy.h"

#include <atomic>
#include <vector>

#include "parsed_ahead.h"
#include "store_model.h"

namespace tlstune {

namespace {

OPENSSL_STACK *stack(void *typed) { return static_cast<OPENSSL_STACK *>(typed); }

/*
 * The store's lock for a fill. X509_STORE_lock fails when this thread holds it already
 * (glibc's rwlock answers EDEADLK rather than hang): python takes it around
 * X509_STORE_get0_objects to copy the list. The store is then this thread's to fill, and
 * the lock its caller's to release.
 */
class StoreLock {
public:
	StoreLock(const CaApi &api, X509_STORE *store) noexcept
		: api_(api), store_(store), taken_(api.X509_STORE_lock(store) == 1) {}
	~StoreLock()
	{
		if (taken_)
			api_.X509_STORE_unlock(store_);
	}
	StoreLock(const StoreLock &) = delete;
	StoreLock &operator=(const StoreLock &) = delete;

	bool taken() const noexcept { return taken_; }

private:
	const CaApi &api_;
	X509_STORE *store_;
	const bool taken_;
};

} /* namespace */

/* What a store holds of its lazy files; changed only under the store's lock. */
struct LazyStores::State {
	struct File {
		std::shared_ptr<const CaIndex> index;
		std::vector<bool> inStore; /* per certificate: materialised (or found a repeat) */
	};
	std::vector<File> files;
	std::atomic<bool> complete{ true }; /* nothing lazy in it until a load attaches a file */
	bool listed = false; /* the program holds the store's object list */
	/*
	 * The object an eager load would have left last and unsorted in the stack: each
	 * X509_STORE_add_cert sorts the stack, then appends. Any later lookup sorts it.
	 */
	X509_OBJECT *unsortedLast = nullptr;
	/*
	 * Or, right after a lazy load, that load's last certificate if it was new. Which it
	 * was is known when its subject first goes in: nothing with that subject enters the
	 * store before (adds and lookups put it in first), so the answer is the one loading
	 * would have given. A file in files, or -1.
	 */
	int lastLoaded = -1;

	/* Its lazy files' certificates, parsed before a change in what decodes; while some are lazy. */
	std::shared_ptr<ParsedAhead> ahead;
	/* 3.5: the store's stack with its lazy certificates, while it has some. */
	std::unique_ptr<StoreModel> model;
};

bool LazyStores::init(const CaApi &api) noexcept
{
	if (!api.hasLazy() || !api.lazyKnown())
		return false;
	ordered_ = api.storeKeepsAddOrder();
	if (ordered_ ? !api.hasOrderedLazy() : !api.storeSortsOnLookup())
		return false;
	api_ = &api;
	slot_ = api.CRYPTO_get_ex_new_index(
		CRYPTO_EX_INDEX_X509_STORE, 0, nullptr, nullptr, nullptr,
		[](void *, void *state, CRYPTO_EX_DATA *, int, long, void *) {
			delete static_cast<State *>(state);
		});
	return slot_ >= 0;
}

LazyStores::State *LazyStores::state(X509_STORE *store) const noexcept
{
	return slot_ < 0 || !store ? nullptr
				   : static_cast<State *>(api_->X509_STORE_get_ex_data(store, slot_));
}

bool LazyStores::pending(X509_STORE *store) const noexcept
{
	/* Under the lock: the first lazy load into a store sets its ex_data, which may move. */
	if (slot_ < 0 || !store)
		return false;
	StoreLock lock(*api_, store);
	return unfilled(store) != nullptr;
}

LazyStores::State *LazyStores::unfilled(X509_STORE *store) const noexcept
{
	State *s = state(store);
	return s && !s->complete.load(std::memory_order_acquire) ? s : nullptr;
}

void LazyStores::markListed(X509_STORE *store) const noexcept
{
	if (slot_ < 0 || !store)
		return;
	StoreLock lock(*api_, store);
	if (State *s = stateOrNew(store))
		s->listed = true;
}

LazyStores::State *LazyStores::stateOrNew(X509_STORE *store) const noexcept
{
	if (State *s = state(store))
		return s;
	State *s = new (std::nothrow) State;
	if (s && !api_->X509_STORE_set_ex_data(store, slot_, s)) {
		delete s;
		s = nullptr;
	}
	return s;
}

bool LazyStores::listed(X509_STORE *store) const noexcept
{
	if (slot_ < 0 || !store)
		return false;
	StoreLock lock(*api_, store);
	const State *s = state(store);
	return s && s->listed;
}

namespace {

/*
 * Puts the file's certificate at position into objects unless an equal one is there,
 * as X509_STORE_add_cert does. Returns the object pushed, or null.
 */
X509_OBJECT *materialise(const CaApi &api, STACK_OF(X509_OBJECT) *objects, ParsedAhead &ahead,
			 const CaIndex &index, int position, bool *failed)
{
	X509 *x = ahead.take(index, position);
	X509_OBJECT *object = x ? api.X509_OBJECT_new() : nullptr;
	bool ok = object && api.X509_OBJECT_set1_X509(object, x);
	if (x)
		api.X509_free(x);
	if (ok && api.X509_OBJECT_retrieve_match(objects, object)) {
		api.X509_OBJECT_free(object);
		return nullptr;
	}
	ok = ok && api.OPENSSL_sk_push(stack(objects), object) > 0;
	if (!ok) {
		if (object)
			api.X509_OBJECT_free(object);
		*failed = true;
		return nullptr;
	}
	return object;
}

} /* namespace */

bool LazyStores::aheadFor(State *s, const std::shared_ptr<const CaIndex> &index) const noexcept
{
	try {
		if (!s->ahead) {
			s->ahead = std::make_shared<ParsedAhead>(*api_);
			ParsedAhead::enlist(s->ahead);
		}
		s->ahead->add(index);
		return true;
	} catch (const std::bad_alloc &) {
		/* Then OpenSSL loads the file itself. */
		return false;
	}
}

int LazyStores::attach(X509_STORE *store, const std::shared_ptr<const CaIndex> &index) const noexcept
{
	if (slot_ < 0)
		return -1;
	StoreLock lock(*api_, store);
	/*
	 * This thread holds the lock (a load from under X509_STORE_lock, a hunt): OpenSSL's
	 * adds cannot take it, and its load fails and adds nothing. Let it.
	 */
	if (!lock.taken())
		return -1;
	State *s = stateOrNew(store);
	bool ok = s != nullptr && aheadFor(s, index);
	if (ok && ordered_) {
		STACK_OF(X509_OBJECT) *objects = api_->X509_STORE_get0_objects(store);
		if (!s->model) {
			s->model.reset(new (std::nothrow) StoreModel(*api_, *s->ahead));
			if (!s->model || !s->model->import(objects)) {
				s->model.reset();
				settle(s);
				return -1;
			}
		}
		/* A load that ran out of memory half way leaves what it added, as OpenSSL's does. */
		ok = s->model->load(objects, index);
		settle(s);
		return ok ? index->count() : 0;
	}
	if (ok) {
		s->files.push_back({ index, std::vector<bool>(static_cast<std::size_t>(index->count())) });
		/* Loading looks the store up for every certificate it adds: then appends the last. */
		s->unsortedLast = nullptr;
		s->lastLoaded = static_cast<int>(s->files.size()) - 1;
		s->complete.store(false, std::memory_order_release);
		fillCompared(s, api_->X509_STORE_get0_objects(store));
	}
	return ok ? index->count() : -1;
}

/*
 * Loading compares each certificate with the store's of the same subject (X509_cmp, which
 * caches both certificates' extensions and puts an invalid one's error on the queue). The
 * attached file's subjects that the store or an earlier lazy file holds are filled now,
 * through the same duplicate check, so that what loading reports it reports at load time.
 */
void LazyStores::fillCompared(State *s, STACK_OF(X509_OBJECT) *objects) const noexcept
{
	const int file = static_cast<int>(s->files.size()) - 1;
	const CaIndex &index = *s->files.back().index;
	std::vector<bool> met(static_cast<std::size_t>(index.subjectCount()));
	const int held = api_->OPENSSL_sk_num(stack(objects));
	for (int i = 0; i < held; i++) {
		const X509_OBJECT *object = static_cast<const X509_OBJECT *>(api_->OPENSSL_sk_value(stack(objects), i));
		const X509 *x = api_->X509_OBJECT_get_type(object) == X509_LU_X509
			? api_->X509_OBJECT_get0_X509(object) : nullptr;
		for (int position : x ? index.withSubject(api_->X509_get_subject_name(x)) : std::vector<int>())
			met[static_cast<std::size_t>(index.subjectRank(position))] = true;
	}
	for (int position = 0; position < index.count(); position++) {
		const std::size_t rank = static_cast<std::size_t>(index.subjectRank(position));
		for (int f = 0; f < file && !met[rank]; f++)
			met[rank] = !s->files[static_cast<std::size_t>(f)].index->withCanonical(index.canonical(position)).empty();
	}
	bool failed = false;
	for (int position = 0; position < index.count() && !failed; position++) {
		const std::size_t rank = static_cast<std::size_t>(index.subjectRank(position));
		if (!met[rank])
			continue;
		met[rank] = false;
		const std::string &canon = index.canonical(position);
		/* The file's last certificate, if new, is what loading leaves unsorted at the end. */
		if (X509_OBJECT *last = fillSubject(s, objects,
				[&canon](const CaIndex &other) { return other.withCanonical(canon); }, &failed))
			s->unsortedLast = last;
	}
}

void LazyStores::beforeRead(X509_STORE *store, const X509_NAME *subject) const noexcept
{
	if (!subject)
		return;
	StoreLock lock(*api_, store);
	State *s = unfilled(store);
	if (!s)
		return;
	STACK_OF(X509_OBJECT) *objects = api_->X509_STORE_get0_objects(store);
	if (ordered_) {
		s->model->beforeLookup(objects, subject);
		settle(s);
		return;
	}
	bool failed = false;
	fillSubject(s, objects, [subject](const CaIndex &index) { return index.withSubject(subject); }, &failed);
}

template <typename PositionsOf>
X509_OBJECT *LazyStores::fillSubject(State *s, STACK_OF(X509_OBJECT) *objects, PositionsOf positionsOf,
				     bool *failed) const
{
	X509_OBJECT *newestLast = nullptr;
	for (State::File &file : s->files) {
		for (int position : positionsOf(*file.index)) {
			if (file.inStore[static_cast<std::size_t>(position)])
				continue;
			X509_OBJECT *pushed = materialise(*api_, objects, *s->ahead, *file.index, position, failed);
			file.inStore[static_cast<std::size_t>(position)] = !*failed;
			if (&file == &s->files.back() && position == file.index->count() - 1)
				newestLast = pushed;
		}
	}
	return newestLast;
}

void LazyStores::afterLookup(X509_STORE *store) const noexcept
{
	StoreLock lock(*api_, store);
	State *s = unfilled(store);
	if (!s)
		return;
	if (ordered_) {
		s->model->sync(api_->X509_STORE_get0_objects(store));
		return;
	}
	s->unsortedLast = nullptr;
	s->lastLoaded = -1;
}

int LazyStores::add(X509_STORE *store, X509 *x, X509_CRL *crl) const noexcept
{
	StoreLock lock(*api_, store);
	State *s = unfilled(store);
	if (!s || !ordered_)
		return -1;
	const int result = s->model->add(api_->X509_STORE_get0_objects(store), x, crl);
	settle(s);
	return result;
}

void LazyStores::settle(State *s) const noexcept
{
	/* Everything in the store: it is what eager loading leaves, and needs no model. */
	if (s->model && !s->model->pending())
		s->model.reset();
	s->complete.store(!s->model, std::memory_order_release);
	if (!s->model)
		s->ahead.reset();
}

int LazyStores::objectCount(X509_STORE *store) const noexcept
{
	if (!pending(store))
		return -1;
	StoreLock lock(*api_, store);
	return api_->OPENSSL_sk_num(stack(api_->X509_STORE_get0_objects(store)));
}

void LazyStores::afterAdd(X509_STORE *store, int before) const noexcept
{
	if (before < 0)
		return;
	StoreLock lock(*api_, store);
	State *s = state(store);
	if (!s)
		return;
	STACK_OF(X509_OBJECT) *objects = api_->X509_STORE_get0_objects(store);
	const int count = api_->OPENSSL_sk_num(stack(objects));
	/* The add looked the store up (sorted it), then appended its object, or found it. */
	s->unsortedLast = count > before
		? static_cast<X509_OBJECT *>(api_->OPENSSL_sk_value(stack(objects), count - 1)) : nullptr;
	s->lastLoaded = -1;
}

void LazyStores::beforeEnumeration(X509_STORE *store) const noexcept
{
	StoreLock lock(*api_, store);
	State *s = unfilled(store);
	if (!s)
		return;
	STACK_OF(X509_OBJECT) *objects = api_->X509_STORE_get0_objects(store);
	if (ordered_) {
		s->model->fillAll(objects);
		settle(s);
		return;
	}
	bool failed = false;
	X509_OBJECT *last = s->unsortedLast;
	for (std::size_t f = 0; f < s->files.size(); f++) {
		State::File &file = s->files[f];
		const int count = file.index->count();
		for (int position = 0; position < count && !failed; position++) {
			if (file.inStore[position])
				continue;
			X509_OBJECT *pushed = materialise(*api_, objects, *s->ahead, *file.index, position, &failed);
			file.inStore[position] = !failed;
			if (static_cast<int>(f) == s->lastLoaded && position == count - 1)
				last = pushed;
		}
	}
	/*
	 * Eagerly the stack would be sorted but for the object appended after the last
	 * lookup. The sort is stable (glibc's qsort merges): certificates sharing a subject
	 * keep the order they went in, which is the order loading adds them.
	 */
	if (last && api_->OPENSSL_sk_delete_ptr(stack(objects), last) == last) {
		api_->OPENSSL_sk_sort(stack(objects));
		api_->OPENSSL_sk_push(stack(objects), last);
	} else {
		api_->OPENSSL_sk_sort(stack(objects));
	}
	s->unsortedLast = nullptr;
	s->lastLoaded = -1;
	if (!failed) {
		s->complete.store(true, std::memory_order_release);
		s->ahead.reset();
	}
}

} /* namespace tlstune */
