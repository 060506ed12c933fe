#include "error_queue.h"

#include <cstring>
#include <mutex>

namespace tlstune {

namespace {

/* ERR_TXT_STRING in both versions: the entry's data is a string. */
constexpr int kDataIsText = 0x02;

/* The packing of an error code, which 3.0 changed. */
struct Code {
	int lib;
	int func; /* 1.1.1 only */
	int reason;
};

Code unpack(unsigned long code, bool modern) noexcept
{
	if (!modern)
		return { static_cast<int>((code >> 24) & 0xff), static_cast<int>((code >> 12) & 0xfff),
			 static_cast<int>(code & 0xfff) };
	/* ERR_SYSTEM_FLAG: a system error, its errno in the low bits; lib ERR_LIB_SYS (2). */
	if (code & 0x80000000ul)
		return { 2, 0, static_cast<int>(code & 0x7fffffff) };
	return { static_cast<int>((code >> 23) & 0xff), 0, static_cast<int>(code & 0x7fffff) };
}

/* to, of size bytes, holds what it can of from (nothing for nullptr), ended. */
void copy(char *to, std::size_t size, const char *from) noexcept
{
	to[0] = '\0';
	if (from)
		std::strncat(to, from, size - 1);
}

/*
 * A source file's or function's name, kept for the rest of the process: there are few of
 * them (OpenSSL's own), and an entry put in a queue may point at them for as long.
 */
const char *intern(const char *name) noexcept
{
	constexpr int kNames = 128;
	constexpr std::size_t kLength = 96;
	static std::mutex mutex;
	static char names[kNames][kLength];
	static int count = 0;
	if (!name || !*name)
		return nullptr;
	std::lock_guard<std::mutex> lock(mutex);
	for (int i = 0; i < count; i++)
		if (std::strncmp(names[i], name, kLength - 1) == 0)
			return names[i];
	if (count == kNames)
		return nullptr;
	copy(names[count], kLength, name);
	return names[count++];
}

unsigned long takeOldest(const ErrorQueueApi &api, const char **file, int *line, const char **func,
			 const char **data, int *flags) noexcept
{
	*func = nullptr;
	if (api.modern())
		return api.ERR_get_error_all(file, line, func, data, flags);
	return api.ERR_get_error_line_data(file, line, data, flags);
}

unsigned long peekNewest(const ErrorQueueApi &api, const char **file, int *line, const char **func,
			 const char **data, int *flags) noexcept
{
	*func = nullptr;
	if (api.modern())
		return api.ERR_peek_last_error_all(file, line, func, data, flags);
	return api.ERR_peek_last_error_line_data(file, line, data, flags);
}

} /* namespace */

bool ErrorQueueApi::modern() const noexcept
{
	return ERR_get_error_all && ERR_peek_last_error_all && ERR_new && ERR_set_debug && ERR_set_error;
}

bool ErrorQueueApi::movable() const noexcept
{
	if (!ERR_peek_error || !ERR_set_mark || !ERR_pop_to_mark)
		return false;
	return modern() || (ERR_get_error_line_data && ERR_peek_last_error_line_data && ERR_put_error &&
			    ERR_add_error_data);
}

ErrorMark markErrors(const ErrorQueueApi &api) noexcept
{
	ErrorMark mark;
	if (!api.movable() || api.ERR_peek_error() == 0)
		return mark;
	mark.hadEntries = true;
	const char *func = nullptr;
	int flags = 0;
	mark.code = peekNewest(api, &mark.file, &mark.line, &func, &mark.data, &flags);
	mark.marked = api.ERR_set_mark() == 1;
	return mark;
}

void ErrorEntries::take(const ErrorQueueApi &api, const ErrorMark &mark, ErrorEntries *into) noexcept
{
	if (!api.movable())
		return;
	if (into)
		into->clear();
	const char *file = nullptr, *func = nullptr, *data = nullptr;
	int line = 0, flags = 0;
	if (!mark.hadEntries) {
		/* Everything in the queue is new. */
		while (const unsigned long code = takeOldest(api, &file, &line, &func, &data, &flags))
			if (into)
				into->add(code, file, line, func, data, flags);
		return;
	}
	/*
	 * The program's older entries stay below, marks and all: the public API reads only
	 * the newest entry without taking the older ones.
	 */
	const unsigned long code = peekNewest(api, &file, &line, &func, &data, &flags);
	const bool isNew = code != mark.code || file != mark.file || line != mark.line || data != mark.data;
	if (into && code && isNew)
		into->add(code, file, line, func, data, flags);
	if (mark.marked)
		api.ERR_pop_to_mark();
}

void ErrorEntries::add(unsigned long code, const char *file, int line, const char *func, const char *data,
		       int flags) noexcept
{
	/* Past kMax the oldest goes, as in OpenSSL's own queue. */
	if (count_ == kMax) {
		std::memmove(entries_, entries_ + 1, sizeof(Entry) * (kMax - 1));
		count_--;
	}
	Entry &entry = entries_[count_++];
	entry.code = code;
	entry.file = intern(file);
	entry.line = line;
	entry.func = intern(func);
	entry.hasData = data && *data && (flags & kDataIsText);
	copy(entry.data, sizeof(entry.data), entry.hasData ? data : nullptr);
}

void ErrorEntries::replay(const ErrorQueueApi &api) const noexcept
{
	if (!api.movable())
		return;
	const bool modern = api.modern();
	for (int i = 0; i < count_; i++) {
		const Entry &entry = entries_[i];
		const Code code = unpack(entry.code, modern);
		if (modern) {
			api.ERR_new();
			api.ERR_set_debug(entry.file, entry.line, entry.func);
			if (entry.hasData)
				api.ERR_set_error(code.lib, code.reason, "%s", entry.data);
			else
				api.ERR_set_error(code.lib, code.reason, nullptr);
			continue;
		}
		api.ERR_put_error(code.lib, code.func, code.reason, entry.file, entry.line);
		if (entry.hasData)
			api.ERR_add_error_data(1, entry.data);
	}
}

} /* namespace tlstune */
