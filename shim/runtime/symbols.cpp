#include "symbols.h"

#include <cstring>
#include <dlfcn.h>
#include <link.h>

#include "core/log.h"

namespace tlstune {

namespace {

template <typename Function>
void next(Function *slot, const char *name)
{
	*slot = reinterpret_cast<Function>(dlsym(RTLD_NEXT, name));
}

template <typename Function>
void from(void *handle, Function *slot, const char *name)
{
	*slot = reinterpret_cast<Function>(dlsym(handle, name));
}

int findLoadedLibssl(struct dl_phdr_info *info, size_t, void *data)
{
	const char *path = info->dlpi_name;
	if (!path || !*path)
		return 0;
	const char *base = std::strrchr(path, '/');
	base = base ? base + 1 : path;
	/* "libssl.so.3", "libssl.so.1.1"; not NSS's "libssl3.so". */
	if (std::strncmp(base, "libssl.so", 9) != 0)
		return 0;
	*static_cast<void **>(data) = dlopen(path, RTLD_NOLOAD | RTLD_LAZY);
	return *static_cast<void **>(data) != nullptr;
}

/*
 * A handle on the program's libssl. dlsym(RTLD_NEXT) sees only the global scope; python
 * loads _ssl, and with it libssl, RTLD_LOCAL, so there it finds nothing (measured: see
 * the design notes). The list of loaded objects has it either way.
 */
void *findLibssl() noexcept
{
	Dl_info info;
	void *symbol = dlsym(RTLD_NEXT, "SSL_CTX_new");
	if (symbol && dladdr(symbol, &info) && info.dli_fname) {
		void *handle = dlopen(info.dli_fname, RTLD_NOLOAD | RTLD_LAZY);
		if (handle)
			return handle;
	}
	void *handle = nullptr;
	dl_iterate_phdr(findLoadedLibssl, &handle);
	return handle;
}

} /* namespace */

void resolveLibc(LibcApi *libc) noexcept
{
	next(&libc->poll, "poll");
	next(&libc->poll_chk, "__poll_chk");
	next(&libc->ppoll, "ppoll");
	next(&libc->ppoll_chk, "__ppoll_chk");
	next(&libc->select, "select");
	next(&libc->pselect, "pselect");
	next(&libc->epoll_wait, "epoll_wait");
	next(&libc->epoll_pwait, "epoll_pwait");
	next(&libc->epoll_pwait2, "epoll_pwait2");
	next(&libc->read, "read");
	next(&libc->read_chk, "__read_chk");
	next(&libc->readv, "readv");
	next(&libc->recv, "recv");
	next(&libc->recv_chk, "__recv_chk");
	next(&libc->recvfrom, "recvfrom");
	next(&libc->recvfrom_chk, "__recvfrom_chk");
	next(&libc->recvmsg, "recvmsg");
	next(&libc->ioctl, "ioctl");
	next(&libc->close, "close");
	next(&libc->dup2, "dup2");
	next(&libc->dup3, "dup3");
	next(&libc->close_range, "close_range");
}

bool resolveOpenSsl(OpenSslApi *api) noexcept
{
	void *handle = findLibssl();
	if (!handle)
		return false;

	/* dlsym on a handle searches that object and its dependencies, not the preload. */
	from(handle, &api->SSL_CTX_new, "SSL_CTX_new");
	from(handle, &api->SSL_CTX_new_ex, "SSL_CTX_new_ex");
	from(handle, &api->SSL_new, "SSL_new");
	from(handle, &api->SSL_read, "SSL_read");
	from(handle, &api->SSL_read_ex, "SSL_read_ex");
	from(handle, &api->SSL_peek, "SSL_peek");
	from(handle, &api->SSL_peek_ex, "SSL_peek_ex");
	from(handle, &api->SSL_write, "SSL_write");
	from(handle, &api->SSL_write_ex, "SSL_write_ex");
	from(handle, &api->SSL_do_handshake, "SSL_do_handshake");
	from(handle, &api->SSL_connect, "SSL_connect");
	from(handle, &api->SSL_accept, "SSL_accept");

	from(handle, &api->SSL_CTX_ctrl, "SSL_CTX_ctrl");
	from(handle, &api->SSL_CTX_set_default_read_buffer_len, "SSL_CTX_set_default_read_buffer_len");
	from(handle, &api->SSL_has_pending, "SSL_has_pending");
	from(handle, &api->SSL_want, "SSL_want");
	from(handle, &api->CRYPTO_get_ex_new_index, "CRYPTO_get_ex_new_index");
	from(handle, &api->SSL_get_ex_data, "SSL_get_ex_data");
	from(handle, &api->SSL_set_ex_data, "SSL_set_ex_data");
	return true;
}

} /* namespace tlstune */
