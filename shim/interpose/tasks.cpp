/*
 * The calls that make a task: pthread_create and fork. The user's task limit
 * (RLIMIT_NPROC, for a user without CAP_SYS_RESOURCE) counts every thread, the shim's
 * too: a program that had room for its own threads alone was refused one (EAGAIN) where
 * the shim's thread took the last place. Refused so, the shim gives its thread up
 * (Process::yieldThreadToTheProgram) and the call is made again; a call that succeeds, or
 * fails for another reason, costs a compare.
 */

#include <cerrno>
#include <pthread.h>
#include <unistd.h>

#include "interpose/export.h"
#include "runtime/runtime.h"

using namespace tlstune;

namespace {

/* Whether the shim had a thread to give up: a process that built no state has none. */
bool madeRoom()
{
	Process *built = builtProcess();
	return built && built->yieldThreadToTheProgram();
}

} /* namespace */

TLSTUNE_EXPORT int pthread_create(pthread_t *thread, const pthread_attr_t *attributes, void *(*start)(void *),
				  void *argument)
{
	const int result = libc().pthread_create(thread, attributes, start, argument);
	if (result != EAGAIN || !madeRoom())
		return result;
	return libc().pthread_create(thread, attributes, start, argument);
}

TLSTUNE_EXPORT pid_t fork()
{
	const pid_t child = libc().fork();
	if (child >= 0 || errno != EAGAIN || !madeRoom())
		return child;
	return libc().fork();
}
