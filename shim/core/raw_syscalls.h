#pragma once

namespace tlstune {

/*
 * While one lives, this thread's syscall() goes straight to the kernel: the shim's own
 * raw calls (reading /proc without its read wrapper) and any call made inside a routed
 * one (interpose/syscall.cpp routes a program's syscall(SYS_read) to the read wrapper,
 * and a read hooked by another library as syscall(SYS_read) came back there for ever).
 */
class RawSyscalls {
public:
	RawSyscalls() noexcept;
	~RawSyscalls();
	RawSyscalls(const RawSyscalls &) = delete;
	RawSyscalls &operator=(const RawSyscalls &) = delete;

	static bool active() noexcept;

private:
	const bool outer_;
};

} /* namespace tlstune */
