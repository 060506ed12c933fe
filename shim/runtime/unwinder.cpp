/*
 * The unwinder of the process, borrowed rather than carried or required.
 *
 * libstdc++ is linked into the library statically, and its exception machinery calls the
 * eleven _Unwind_* functions defined here. Needing libgcc_s.so.1 for them made every
 * process the library is preloaded into map one more library at start, about half of
 * what the library cost a /bin/true (docs/measurements.md). A static copy of the unwinder
 * cannot stand in: when a program's exception or a thread's cancellation crosses the
 * library's frames, their personality routine reads a context made by the process's
 * unwinder (tests/programs/test_unwinding_cases.cpp). So each function forwards to the
 * libgcc_s.so.1 of the process: the one a C++ program or glibc's cancellation has loaded
 * already (a process can unwind only with it), opened here the first time the library
 * does TLS work (loadUnwinder), out of any lock and signal handler, or at the first
 * exception of a process that did none.
 */

#include "runtime/unwinder.h"

#include <atomic>
#include <cstdlib>
#include <dlfcn.h>
#include <pthread.h>
#include <unwind.h>

#include "core/log.h"

namespace tlstune {

namespace {

struct Unwinder {
	_Unwind_Reason_Code (*raiseException)(_Unwind_Exception *);
	void (*resume)(_Unwind_Exception *);
	_Unwind_Reason_Code (*resumeOrRethrow)(_Unwind_Exception *);
	void (*deleteException)(_Unwind_Exception *);
	_Unwind_Ptr (*getDataRelBase)(_Unwind_Context *);
	_Unwind_Ptr (*getTextRelBase)(_Unwind_Context *);
	_Unwind_Ptr (*getRegionStart)(_Unwind_Context *);
	void *(*getLanguageSpecificData)(_Unwind_Context *);
	_Unwind_Ptr (*getIPInfo)(_Unwind_Context *, int *);
	void (*setGR)(_Unwind_Context *, int, _Unwind_Word);
	void (*setIP)(_Unwind_Context *, _Unwind_Ptr);
};

template <typename Function>
bool found(void *handle, Function *slot, const char *name)
{
	*slot = reinterpret_cast<Function>(dlsym(handle, name));
	return *slot != nullptr;
}

_Unwind_Reason_Code stopAtOnce(_Unwind_Context *, void *)
{
	return _URC_END_OF_STACK;
}

/*
 * A program linked with its own static copy of the unwinder (-static-libgcc) unwinds with
 * that copy, and the library's personality routine then asks libgcc_s about a context the
 * copy made: libgcc_s answers only once it has unwound something itself (it learns the
 * registers' sizes then, and aborted before: a hunt's -static-libgcc program whose verify
 * callback threw). One frame of a backtrace teaches it.
 */
void unwindOnce(void *handle) noexcept
{
	using Backtrace = _Unwind_Reason_Code (*)(_Unwind_Trace_Fn, void *);
	const auto backtrace = reinterpret_cast<Backtrace>(dlsym(handle, "_Unwind_Backtrace"));
	if (backtrace)
		backtrace(stopAtOnce, nullptr);
}

/*
 * Null when libgcc_s.so.1 cannot be opened (a machine without the C++ runtime, a sandbox
 * that forbids the open): tried again at the next call. Under `opening`.
 */
const Unwinder *openUnwinder() noexcept
{
	static Unwinder unwinder;
	void *handle = dlopen("libgcc_s.so.1", RTLD_LAZY | RTLD_LOCAL);
	Unwinder &u = unwinder;
	if (handle && found(handle, &u.raiseException, "_Unwind_RaiseException") &&
	    found(handle, &u.resume, "_Unwind_Resume") &&
	    found(handle, &u.resumeOrRethrow, "_Unwind_Resume_or_Rethrow") &&
	    found(handle, &u.deleteException, "_Unwind_DeleteException") &&
	    found(handle, &u.getDataRelBase, "_Unwind_GetDataRelBase") &&
	    found(handle, &u.getTextRelBase, "_Unwind_GetTextRelBase") &&
	    found(handle, &u.getRegionStart, "_Unwind_GetRegionStart") &&
	    found(handle, &u.getLanguageSpecificData, "_Unwind_GetLanguageSpecificData") &&
	    found(handle, &u.getIPInfo, "_Unwind_GetIPInfo") && found(handle, &u.setGR, "_Unwind_SetGR") &&
	    found(handle, &u.setIP, "_Unwind_SetIP")) {
		unwindOnce(handle);
		return &unwinder;
	}
	/* Not a warning: nothing is amiss until an exception crosses the library's frames. */
	logLine(LogLevel::Info, "cannot open the C++ unwinder libgcc_s.so.1: %s",
		handle ? "a function is missing" : dlerror());
	return nullptr;
}

std::atomic<const Unwinder *> opened{ nullptr };
pthread_mutex_t opening = PTHREAD_MUTEX_INITIALIZER;

const Unwinder *unwinder() noexcept
{
	const Unwinder *u = opened.load(std::memory_order_acquire);
	if (u)
		return u;
	pthread_mutex_lock(&opening);
	u = opened.load(std::memory_order_relaxed);
	if (!u && (u = openUnwinder()))
		opened.store(u, std::memory_order_release);
	pthread_mutex_unlock(&opening);
	return u;
}

/* Only an unwinder can have made the exception or context a caller passes. */
const Unwinder &required() noexcept
{
	const Unwinder *u = unwinder();
	if (!u)
		abort();
	return *u;
}

} /* namespace */

void loadUnwinder() noexcept
{
	unwinder();
}

} /* namespace tlstune */

using tlstune::required;

extern "C" {

_Unwind_Reason_Code _Unwind_RaiseException(_Unwind_Exception *exception)
{
	return required().raiseException(exception);
}

void _Unwind_Resume(_Unwind_Exception *exception)
{
	required().resume(exception);
	abort(); /* it does not return */
}

_Unwind_Reason_Code _Unwind_Resume_or_Rethrow(_Unwind_Exception *exception)
{
	return required().resumeOrRethrow(exception);
}

void _Unwind_DeleteException(_Unwind_Exception *exception)
{
	required().deleteException(exception);
}

_Unwind_Ptr _Unwind_GetDataRelBase(_Unwind_Context *context)
{
	return required().getDataRelBase(context);
}

_Unwind_Ptr _Unwind_GetTextRelBase(_Unwind_Context *context)
{
	return required().getTextRelBase(context);
}

_Unwind_Ptr _Unwind_GetRegionStart(_Unwind_Context *context)
{
	return required().getRegionStart(context);
}

void *_Unwind_GetLanguageSpecificData(_Unwind_Context *context)
{
	return required().getLanguageSpecificData(context);
}

_Unwind_Ptr _Unwind_GetIPInfo(_Unwind_Context *context, int *beforeInstruction)
{
	return required().getIPInfo(context, beforeInstruction);
}

void _Unwind_SetGR(_Unwind_Context *context, int index, _Unwind_Word value)
{
	required().setGR(context, index, value);
}

void _Unwind_SetIP(_Unwind_Context *context, _Unwind_Ptr value)
{
	required().setIP(context, value);
}

} /* extern "C" */
