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

struct Wanted {
	const char *prefix; /* "libssl.so": matches "libssl.so.3", not NSS's "libssl3.so" */
	void *handle;
};

int findLoaded(struct dl_phdr_info *info, size_t, void *data)
{
	Wanted *wanted = static_cast<Wanted *>(data);
	const char *path = info->dlpi_name;
	if (!path || !*path)
		return 0;
	const char *base = std::strrchr(path, '/');
	base = base ? base + 1 : path;
	if (std::strncmp(base, wanted->prefix, std::strlen(wanted->prefix)) != 0)
		return 0;
	wanted->handle = dlopen(path, RTLD_NOLOAD | RTLD_LAZY);
	return wanted->handle != nullptr;
}

/*
 * A handle on the program's copy of a library, found by one of its symbols. dlsym(RTLD_NEXT)
 * sees only the global scope; python loads _ssl, and with it libssl and libcrypto,
 * RTLD_LOCAL, so there it finds nothing (measured: see the design notes). The list of
 * loaded objects has it either way.
 */
void *findLibrary(const char *prefix, const char *symbol) noexcept
{
	Dl_info info;
	void *address = dlsym(RTLD_NEXT, symbol);
	if (address && dladdr(address, &info) && info.dli_fname) {
		void *handle = dlopen(info.dli_fname, RTLD_NOLOAD | RTLD_LAZY);
		if (handle)
			return handle;
	}
	Wanted wanted = { prefix, nullptr };
	dl_iterate_phdr(findLoaded, &wanted);
	return wanted.handle;
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
	next(&libc->shutdown, "shutdown");
}

bool resolveOpenSsl(OpenSslApi *api) noexcept
{
	void *handle = findLibrary("libssl.so", "SSL_CTX_new");
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
	from(handle, &api->SSL_shutdown, "SSL_shutdown");

	from(handle, &api->SSL_CTX_ctrl, "SSL_CTX_ctrl");
	from(handle, &api->SSL_CTX_set_default_read_buffer_len, "SSL_CTX_set_default_read_buffer_len");
	from(handle, &api->SSL_has_pending, "SSL_has_pending");
	from(handle, &api->SSL_want, "SSL_want");
	from(handle, &api->CRYPTO_get_ex_new_index, "CRYPTO_get_ex_new_index");
	from(handle, &api->SSL_get_ex_data, "SSL_get_ex_data");
	from(handle, &api->SSL_set_ex_data, "SSL_set_ex_data");

	from(handle, &api->SSL_get_wbio, "SSL_get_wbio");
	from(handle, &api->SSL_set0_wbio, "SSL_set0_wbio");
	from(handle, &api->BIO_get_new_index, "BIO_get_new_index");
	from(handle, &api->BIO_meth_new, "BIO_meth_new");
	from(handle, &api->BIO_meth_set_write, "BIO_meth_set_write");
	from(handle, &api->BIO_meth_set_read, "BIO_meth_set_read");
	from(handle, &api->BIO_meth_set_ctrl, "BIO_meth_set_ctrl");
	from(handle, &api->BIO_meth_set_create, "BIO_meth_set_create");
	from(handle, &api->BIO_meth_set_destroy, "BIO_meth_set_destroy");
	from(handle, &api->BIO_new, "BIO_new");
	from(handle, &api->BIO_free, "BIO_free");
	from(handle, &api->BIO_up_ref, "BIO_up_ref");
	from(handle, &api->BIO_push, "BIO_push");
	from(handle, &api->BIO_next, "BIO_next");
	from(handle, &api->BIO_get_data, "BIO_get_data");
	from(handle, &api->BIO_set_data, "BIO_set_data");
	from(handle, &api->BIO_set_init, "BIO_set_init");
	from(handle, &api->BIO_write, "BIO_write");
	from(handle, &api->BIO_read, "BIO_read");
	from(handle, &api->BIO_ctrl, "BIO_ctrl");
	from(handle, &api->BIO_set_flags, "BIO_set_flags");
	from(handle, &api->BIO_clear_flags, "BIO_clear_flags");
	from(handle, &api->BIO_copy_next_retry, "BIO_copy_next_retry");
	from(handle, &api->BIO_method_type, "BIO_method_type");
	return true;
}

bool resolveCrypto(CaApi *api) noexcept
{
	void *handle = findLibrary("libcrypto.so", "X509_STORE_new");
	if (!handle)
		return false;

	from(handle, &api->X509_load_cert_crl_file, "X509_load_cert_crl_file");
	from(handle, &api->X509_load_cert_crl_file_ex, "X509_load_cert_crl_file_ex");
	from(handle, &api->BIO_new_file, "BIO_new_file");
	from(handle, &api->BIO_free, "BIO_free");
	from(handle, &api->PEM_X509_INFO_read_bio, "PEM_X509_INFO_read_bio");
	from(handle, &api->PEM_X509_INFO_read_bio_ex, "PEM_X509_INFO_read_bio_ex");
	from(handle, &api->X509_INFO_free, "X509_INFO_free");
	from(handle, &api->ERR_set_mark, "ERR_set_mark");
	from(handle, &api->ERR_pop_to_mark, "ERR_pop_to_mark");
	from(handle, &api->OPENSSL_sk_num, "OPENSSL_sk_num");
	from(handle, &api->OPENSSL_sk_value, "OPENSSL_sk_value");
	from(handle, &api->OPENSSL_sk_push, "OPENSSL_sk_push");
	from(handle, &api->OPENSSL_sk_sort, "OPENSSL_sk_sort");
	from(handle, &api->OPENSSL_sk_free, "OPENSSL_sk_free");
	from(handle, &api->X509_LOOKUP_get_store, "X509_LOOKUP_get_store");
	from(handle, &api->X509_STORE_new, "X509_STORE_new");
	from(handle, &api->X509_STORE_free, "X509_STORE_free");
	from(handle, &api->X509_STORE_add_cert, "X509_STORE_add_cert");
	from(handle, &api->X509_STORE_add_crl, "X509_STORE_add_crl");
	from(handle, &api->X509_STORE_lock, "X509_STORE_lock");
	from(handle, &api->X509_STORE_unlock, "X509_STORE_unlock");
	from(handle, &api->X509_STORE_get0_objects, "X509_STORE_get0_objects");
	from(handle, &api->X509_OBJECT_new, "X509_OBJECT_new");
	from(handle, &api->X509_OBJECT_free, "X509_OBJECT_free");
	from(handle, &api->X509_OBJECT_get_type, "X509_OBJECT_get_type");
	from(handle, &api->X509_OBJECT_get0_X509, "X509_OBJECT_get0_X509");
	from(handle, &api->X509_OBJECT_get0_X509_CRL, "X509_OBJECT_get0_X509_CRL");
	from(handle, &api->X509_OBJECT_set1_X509, "X509_OBJECT_set1_X509");
	from(handle, &api->X509_OBJECT_set1_X509_CRL, "X509_OBJECT_set1_X509_CRL");
	from(handle, &api->X509_OBJECT_retrieve_match, "X509_OBJECT_retrieve_match");
	return true;
}

} /* namespace tlstune */
