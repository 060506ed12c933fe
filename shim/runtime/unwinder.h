#pragma once

namespace tlstune {

/*
 * Opens the process's C++ unwinder (libgcc_s.so.1) for the library's exceptions, once:
 * called where the library starts TLS work, so that an exception or a cancellation that
 * crosses its frames later finds it open (unwinder.cpp).
 */
void loadUnwinder() noexcept;

} /* namespace tlstune */
