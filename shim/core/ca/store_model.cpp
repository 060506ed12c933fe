#include "store_model.h"

#include <algorithm>

namespace tlstune {

namespace {

OPENSSL_STACK *stack(void *typed) { return static_cast<OPENSSL_STACK *>(typed); }

/* What 3.5's x509_object_cmp sorts an object by, after its type. */
const X509_NAME *nameOf(const CaApi &api, X509_OBJECT *object)
{
	switch (api.X509_OBJECT_get_type(object)) {
	case X509_LU_X509:
		return api.X509_get_subject_name(api.X509_OBJECT_get0_X509(object));
	case X509_LU_CRL:
		return api.X509_CRL_get_issuer(api.X509_OBJECT_get0_X509_CRL(object));
	default:
		return nullptr;
	}
}

} /* namespace */

int StoreModel::findName(const X509_NAME *name) const
{
	auto it = std::lower_bound(byName_.begin(), byName_.end(), name, [&](int id, const X509_NAME *n) {
		return api_.X509_NAME_cmp(names_[id], n) < 0;
	});
	return it != byName_.end() && api_.X509_NAME_cmp(names_[*it], name) == 0 ? *it : -1;
}

int StoreModel::addName(const X509_NAME *name)
{
	auto it = std::lower_bound(byName_.begin(), byName_.end(), name, [&](int id, const X509_NAME *n) {
		return api_.X509_NAME_cmp(names_[id], n) < 0;
	});
	if (it != byName_.end() && api_.X509_NAME_cmp(names_[*it], name) == 0)
		return *it;
	const int id = static_cast<int>(names_.size());
	names_.push_back(name);
	byName_.insert(it, id);
	return id;
}

bool StoreModel::import(STACK_OF(X509_OBJECT) *objects)
{
	const int count = api_.OPENSSL_sk_num(stack(objects));
	for (int i = 0; i < count; i++) {
		auto *object = static_cast<X509_OBJECT *>(api_.OPENSSL_sk_value(stack(objects), i));
		const X509_NAME *name = nameOf(api_, object);
		if (!name)
			return false;
		entries_.push_back({ object, api_.X509_OBJECT_get_type(object), addName(name), -1, -1 });
	}
	sorted_ = api_.OPENSSL_sk_is_sorted(stack(objects));
	return true;
}

void StoreModel::sortEntries()
{
	std::vector<int> rank(names_.size());
	for (std::size_t r = 0; r < byName_.size(); r++)
		rank[static_cast<std::size_t>(byName_[r])] = static_cast<int>(r);
	std::stable_sort(entries_.begin(), entries_.end(), [&](const Entry &a, const Entry &b) {
		return a.type != b.type ? a.type < b.type : rank[a.name] < rank[b.name];
	});
	sorted_ = true;
}

void StoreModel::sync(STACK_OF(X509_OBJECT) *objects)
{
	/*
	 * Set only by a sort, cleared by every push and insert: the store sorted since the
	 * model last changed (each change clears it), as eager loading's store did then.
	 */
	if (!sorted_ && api_.OPENSSL_sk_is_sorted(stack(objects)))
		sortEntries();
}

bool StoreModel::materialise(STACK_OF(X509_OBJECT) *objects, std::size_t at, int storeIndex)
{
	Entry &entry = entries_[at];
	X509 *x = ahead_.take(*files_[static_cast<std::size_t>(entry.file)], entry.position);
	X509_OBJECT *object = x ? api_.X509_OBJECT_new() : nullptr;
	bool ok = object && api_.X509_OBJECT_set1_X509(object, x);
	if (x)
		api_.X509_free(x);
	ok = ok && api_.OPENSSL_sk_insert(stack(objects), object, storeIndex) > 0;
	if (!ok) {
		if (object)
			api_.X509_OBJECT_free(object);
		return false;
	}
	entry.object = object;
	lazy_--;
	return true;
}

void StoreModel::beforeLookup(STACK_OF(X509_OBJECT) *objects, const X509_NAME *subject)
{
	sync(objects);
	const int name = findName(subject);
	if (name < 0)
		return;
	int storeIndex = 0;
	for (std::size_t i = 0; i < entries_.size(); i++) {
		const Entry &entry = entries_[i];
		if (!entry.object && entry.type == X509_LU_X509 && entry.name == name)
			materialise(objects, i, storeIndex);
		storeIndex += entry.object != nullptr;
	}
}

/*
 * X509_OBJECT_retrieve_match reads the first object of this type and name, the run of
 * such objects after it, and the object that ends the run: those go into the store.
 */
void StoreModel::beforeDuplicateCheck(STACK_OF(X509_OBJECT) *objects, int type, int name)
{
	const std::size_t count = entries_.size();
	auto matches = [&](std::size_t i) { return entries_[i].type == type && entries_[i].name == name; };
	std::size_t first = 0;
	int storeIndex = 0;
	for (; first < count && !matches(first); first++)
		storeIndex += entries_[first].object != nullptr;
	for (std::size_t i = first; i < count; i++) {
		const bool inRun = matches(i);
		if (!entries_[i].object)
			materialise(objects, i, storeIndex);
		storeIndex += entries_[i].object != nullptr;
		if (!inRun)
			break;
	}
}

X509_OBJECT *StoreModel::append(STACK_OF(X509_OBJECT) *objects, X509 *x, X509_CRL *crl, int name,
				int *result)
{
	X509_OBJECT *object = api_.X509_OBJECT_new();
	bool ok = object && (x ? api_.X509_OBJECT_set1_X509(object, x) : api_.X509_OBJECT_set1_X509_CRL(object, crl));
	if (ok && api_.X509_OBJECT_retrieve_match(objects, object)) {
		api_.X509_OBJECT_free(object);
		*result = 1;
		return nullptr;
	}
	ok = ok && api_.OPENSSL_sk_push(stack(objects), object) > 0;
	if (!ok) {
		if (object)
			api_.X509_OBJECT_free(object);
		*result = 0;
		return nullptr;
	}
	entries_.push_back({ object, x ? X509_LU_X509 : X509_LU_CRL,
			     name >= 0 ? name : addName(nameOf(api_, object)), -1, -1 });
	sorted_ = false;
	*result = 1;
	return object;
}

int StoreModel::add(STACK_OF(X509_OBJECT) *objects, X509 *x, X509_CRL *crl)
{
	const X509_NAME *subject = x ? api_.X509_get_subject_name(x) : crl ? api_.X509_CRL_get_issuer(crl) : nullptr;
	if (!subject)
		return -1;
	sync(objects);
	const int name = findName(subject);
	if (name >= 0)
		beforeDuplicateCheck(objects, x ? X509_LU_X509 : X509_LU_CRL, name);
	int result = 0;
	append(objects, x, crl, name, &result);
	return result;
}

/*
 * Whether the run of lazy certificates from this index that starts at first holds the
 * certificate at position: the same bytes, which X509_cmp would call equal. The index
 * parsed every certificate that shares a subject with another (and refused the file if
 * one's extensions do not decode), so comparing them leaves nothing on the error queue.
 */
bool StoreModel::sameLazyCertificate(std::size_t first, const CaIndex &index, int position) const
{
	const Entry &head = entries_[first];
	for (std::size_t i = first; i < entries_.size(); i++) {
		const Entry &entry = entries_[i];
		if (entry.type != head.type || entry.name != head.name)
			break;
		if (index.der(entry.position) == index.der(position))
			return true;
	}
	return false;
}

bool StoreModel::load(STACK_OF(X509_OBJECT) *objects, std::shared_ptr<const CaIndex> index)
{
	sync(objects);
	/* The index decodes its names when first asked: only memory can fail that. */
	for (int rank = 0; rank < index->subjectCount(); rank++) {
		if (!index->distinctSubject(rank))
			return false;
	}
	const int file = static_cast<int>(files_.size());
	files_.push_back(index);

	/* The file's subjects among the model's names: two sorted lists merged. */
	std::vector<int> ids(static_cast<std::size_t>(index->subjectCount()));
	std::vector<int> merged;
	merged.reserve(byName_.size() + ids.size());
	std::size_t at = 0;
	for (int rank = 0; rank < index->subjectCount(); rank++) {
		const X509_NAME *subject = index->distinctSubject(rank);
		int order = -1;
		while (at < byName_.size() && (order = api_.X509_NAME_cmp(names_[byName_[at]], subject)) < 0)
			merged.push_back(byName_[at++]);
		if (at < byName_.size() && order == 0) {
			ids[rank] = byName_[at];
			merged.push_back(byName_[at++]);
		} else {
			ids[rank] = static_cast<int>(names_.size());
			names_.push_back(subject);
			merged.push_back(ids[rank]);
		}
	}
	merged.insert(merged.end(), byName_.begin() + static_cast<std::ptrdiff_t>(at), byName_.end());
	byName_.swap(merged);

	bool ok = true;
	bool appended = false;
	for (int position = 0; position < index->count(); position++) {
		const int name = ids[static_cast<std::size_t>(index->subjectRank(position))];
		std::size_t first = 0;
		while (first < entries_.size() &&
		       !(entries_[first].type == X509_LU_X509 && entries_[first].name == name))
			first++;
		/* Decided without parsing: nothing with this subject, or a run of this file's own. */
		bool ownRun = true;
		for (std::size_t i = first; i < entries_.size() && ownRun; i++) {
			if (entries_[i].type != X509_LU_X509 || entries_[i].name != name)
				break;
			ownRun = !entries_[i].object && files_[static_cast<std::size_t>(entries_[i].file)] == index;
		}
		if (ownRun) {
			if (first == entries_.size() || !sameLazyCertificate(first, *index, position)) {
				entries_.push_back({ nullptr, X509_LU_X509, name, file, position });
				lazy_++;
				appended = true;
			}
			continue;
		}
		/* The run holds the program's certificates or another file's: OpenSSL compares. */
		beforeDuplicateCheck(objects, X509_LU_X509, name);
		X509 *x = ahead_.take(*index, position);
		int result = 0;
		if (x)
			appended |= append(objects, x, nullptr, name, &result) != nullptr;
		if (x)
			api_.X509_free(x);
		ok = ok && result == 1;
	}
	if (appended) {
		sorted_ = false;
		/* The eager loader's pushes cleared the sorted flag: so must this load. */
		if (api_.OPENSSL_sk_push(stack(objects), nullptr) > 0)
			api_.OPENSSL_sk_pop(stack(objects));
	}
	return ok;
}

void StoreModel::fillAll(STACK_OF(X509_OBJECT) *objects)
{
	sync(objects);
	int storeIndex = 0;
	for (std::size_t i = 0; i < entries_.size(); i++) {
		if (!entries_[i].object)
			materialise(objects, i, storeIndex);
		storeIndex += entries_[i].object != nullptr;
	}
}

} /* namespace tlstune */
