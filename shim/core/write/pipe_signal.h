#pragma once

namespace tlstune {

/*
 * SIGPIPE for a write that reports EPIPE the shim met earlier, or in a send of its own
 * that raised none: to this thread, with what the kernel's own carries (SI_USER, this
 * process's pid and uid), so that a handler reading its siginfo sees no difference (a
 * hunt: pthread_kill's SI_TKILL).
 */
void raisePipeSignal() noexcept;

} /* namespace tlstune */
