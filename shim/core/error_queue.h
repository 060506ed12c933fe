#pragma once

namespace tlstune {

/*
 * libcrypto's error queue functions, typed here rather than by decltype: 3.0's headers
 * make ERR_put_error a macro, 1.1.1's lack ERR_new and the _all functions. Null where the
 * running libcrypto lacks one.
 */
struct ErrorQueueApi {
	unsigned long (*ERR_peek_error)() = nullptr;
	int (*ERR_set_mark)() = nullptr;
	int (*ERR_pop_to_mark)() = nullptr;
	/* 3.0 and later */
	unsigned long (*ERR_get_error_all)(const char **file, int *line, const char **func,
					   const char **data, int *flags) = nullptr;
	unsigned long (*ERR_peek_last_error_all)(const char **file, int *line, const char **func,
						 const char **data, int *flags) = nullptr;
	void (*ERR_new)() = nullptr;
	void (*ERR_set_debug)(const char *file, int line, const char *func) = nullptr;
	void (*ERR_set_error)(int lib, int reason, const char *fmt, ...) = nullptr;
	/* 1.1.1 */
	unsigned long (*ERR_get_error_line_data)(const char **file, int *line, const char **data,
						 int *flags) = nullptr;
	unsigned long (*ERR_peek_last_error_line_data)(const char **file, int *line,
						       const char **data, int *flags) = nullptr;
	void (*ERR_put_error)(int lib, int func, int reason, const char *file, int line) = nullptr;
	void (*ERR_add_error_data)(int num, ...) = nullptr;

	/* 3.0's set, or 1.1.1's: entries can be taken from one thread and put in another. */
	bool movable() const noexcept;
	/* 3.0's set: a function name per entry, and an error code without one. */
	bool modern() const noexcept;
};

/* A thread's error queue before a call whose entries belong to another thread's call. */
struct ErrorMark {
	bool hadEntries = false;
	bool marked = false;
	/* The newest entry then, to tell it from a new one. */
	unsigned long code = 0;
	const char *file = nullptr;
	int line = 0;
	const char *data = nullptr;
};

/* Before such a call on this thread. */
ErrorMark markErrors(const ErrorQueueApi &api) noexcept;

/*
 * Entries of OpenSSL's error queue taken from the thread that made them, to be put in the
 * thread whose call reports their failure (issue 14: the flusher or a wait encrypts held
 * plaintext, and the connection's next call fails as the write would have).
 */
class ErrorEntries {
public:
	/* OpenSSL keeps 16; a failed write of one record makes one or two. */
	static constexpr int kMax = 8;

	/*
	 * Takes the entries this thread made since mark out of its queue, which is left as
	 * it was; into nullptr drops them. A queue that held entries before keeps them (and
	 * its marks) exactly: then only the newest new entry can be read, and is taken.
	 */
	static void take(const ErrorQueueApi &api, const ErrorMark &mark, ErrorEntries *into) noexcept;

	/* Puts them in this thread's queue, oldest first, as OpenSSL had made them. */
	void replay(const ErrorQueueApi &api) const noexcept;

	int count() const noexcept { return count_; }
	void clear() noexcept { count_ = 0; }

private:
	struct Entry {
		unsigned long code;
		/* Kept for the process: 3.0 frees an entry's own copies with it, 1.1.1 keeps the pointer. */
		const char *file;
		int line;
		const char *func;
		bool hasData;
		char data[160];
	};

	void add(unsigned long code, const char *file, int line, const char *func, const char *data,
		 int flags) noexcept;

	Entry entries_[kMax];
	int count_ = 0;
};

} /* namespace tlstune */
