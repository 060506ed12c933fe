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

/* api->NAME from the symbol NAME in handle: the name written once. */
#define RESOLVE(name) from(handle, &api->name, #name)
#define RESOLVE_ERROR(name) from(handle, &api->errors.name, #name)

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

struct Sought {
	uintptr_t address;
	ObjectSpan span;
	const char *path;
};

int findHolder(struct dl_phdr_info *info, size_t, void *data)
{
	Sought *sought = static_cast<Sought *>(data);
	ObjectSpan span;
	for (int i = 0; i < info->dlpi_phnum; i++) {
		const ElfW(Phdr) &segment = info->dlpi_phdr[i];
		if (segment.p_type != PT_LOAD)
			continue;
		const uintptr_t begin = info->dlpi_addr + segment.p_vaddr;
		const uintptr_t end = begin + segment.p_memsz;
		if (span.end == 0 || begin < span.begin)
			span.begin = begin;
		if (end > span.end)
			span.end = end;
	}
	if (!span.contains(reinterpret_cast<const void *>(sought->address)))
		return 0;
	sought->span = span;
	sought->path = info->dlpi_name ? info->dlpi_name : "";
	return 1;
}

/*
 * A handle on the program's copy of a library, found by one of its symbols. dlsym(RTLD_NEXT)
 * sees only the global scope; python loads _ssl, and with it libssl and libcrypto,
 * RTLD_LOCAL, so there it finds nothing (measured: see the design notes). The list of
 * loaded objects has it either way.
 */
void *findLibrary(const char *prefix, const char *symbol) noexcept
{
	const char *path = nullptr;
	void *address = dlsym(RTLD_NEXT, symbol);
	if (address && spanOf(address, &path).end != 0 && *path) {
		void *handle = dlopen(path, RTLD_NOLOAD | RTLD_LAZY);
		/* Another copy of tlstune, later in the order, is not the library (kCopyMarker). */
		if (handle && !dlsym(handle, kCopyMarker))
			return handle;
		if (handle)
			dlclose(handle);
	}
	Wanted wanted = { prefix, nullptr };
	dl_iterate_phdr(findLoaded, &wanted);
	return wanted.handle;
}

} /* namespace */

ObjectSpan spanOf(const void *address, const char **path) noexcept
{
	Sought sought = { reinterpret_cast<uintptr_t>(address), {}, "" };
	if (address)
		dl_iterate_phdr(findHolder, &sought);
	if (path)
		*path = sought.path;
	return sought.span;
}

void resolveLibc(LibcApi *libc) noexcept
{
	next(&libc->poll, "poll");
	next(&libc->poll_chk, "__poll_chk");
	next(&libc->ppoll, "ppoll");
	next(&libc->ppoll_chk, "__ppoll_chk");
	next(&libc->select, "select");
	next(&libc->pselect, "pselect");
	next(&libc->epoll_create, "epoll_create");
	next(&libc->epoll_create1, "epoll_create1");
	next(&libc->epoll_ctl, "epoll_ctl");
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
	next(&libc->sendmsg, "sendmsg");
	next(&libc->write, "write");
	next(&libc->writev, "writev");
	next(&libc->send, "send");
	next(&libc->sendto, "sendto");
	next(&libc->sendfile, "sendfile");
	next(&libc->splice, "splice");
	next(&libc->sendmmsg, "sendmmsg");
	next(&libc->recvmmsg, "recvmmsg");
	next(&libc->setsockopt, "setsockopt");
	next(&libc->ioctl, "ioctl");
	next(&libc->close, "close");
	next(&libc->dup, "dup");
	next(&libc->dup2, "dup2");
	next(&libc->dup3, "dup3");
	next(&libc->pidfd_getfd, "pidfd_getfd");
	next(&libc->close_range, "close_range");
	next(&libc->closefrom, "closefrom");
	next(&libc->fclose, "fclose");
	next(&libc->freopen, "freopen");
	next(&libc->freopen64, "freopen64");
	next(&libc->shutdown, "shutdown");
	next(&libc->fcntl, "fcntl");
	next(&libc->fcntl64, "fcntl64");
	next(&libc->_exit, "_exit");
	next(&libc->quick_exit, "quick_exit");
	next(&libc->pthread_exit, "pthread_exit");
	next(&libc->abort, "abort");
	next(&libc->assert_fail, "__assert_fail");
	next(&libc->execve, "execve");
	next(&libc->execv, "execv");
	next(&libc->execvp, "execvp");
	next(&libc->execvpe, "execvpe");
	next(&libc->fexecve, "fexecve");
	next(&libc->execveat, "execveat");
	next(&libc->prctl, "prctl");
	next(&libc->unshare, "unshare");
	next(&libc->setns, "setns");
	next(&libc->syscall, "syscall");
	next(&libc->clone, "clone");
	next(&libc->pthread_create, "pthread_create");
	next(&libc->fork, "fork");
	next(&libc->vfork, "vfork");
	next(&libc->posix_spawn, "posix_spawn");
	next(&libc->posix_spawnp, "posix_spawnp");
	next(&libc->popen, "popen");
	next(&libc->system, "system");
}

bool resolveOpenSsl(OpenSslApi *api) noexcept
{
	void *handle = findLibrary("libssl.so", "SSL_CTX_new");
	if (!handle)
		return false;

	/* dlsym on a handle searches that object and its dependencies, not the preload. */
	RESOLVE(SSL_CTX_new);
	RESOLVE(SSL_CTX_new_ex);
	RESOLVE(SSL_new);
	RESOLVE(SSL_read);
	RESOLVE(SSL_read_ex);
	RESOLVE(SSL_peek);
	RESOLVE(SSL_peek_ex);
	RESOLVE(SSL_write);
	RESOLVE(SSL_write_ex);
	RESOLVE(SSL_write_ex2);
	RESOLVE(SSL_do_handshake);
	RESOLVE(SSL_connect);
	RESOLVE(SSL_accept);
	RESOLVE(SSL_shutdown);
	RESOLVE(SSL_set_fd);
	RESOLVE(SSL_set_rfd);
	RESOLVE(SSL_set_wfd);
	RESOLVE(SSL_set_bio);
	RESOLVE(SSL_set0_rbio);
	RESOLVE(SSL_free);
	RESOLVE(SSL_clear);
	RESOLVE(SSL_get_error);
	RESOLVE(SSL_CTX_callback_ctrl);
	RESOLVE(SSL_callback_ctrl);
	RESOLVE(BIO_f_ssl);
	RESOLVE(SSL_CTX_set_record_padding_callback);
	RESOLVE(SSL_set_record_padding_callback);
	RESOLVE(SSL_version);
	RESOLVE(SSL_is_init_finished);
	RESOLVE(SSL_renegotiate_pending);
	RESOLVE(SSL_get_key_update_type);
	RESOLVE(SSL_ctrl);
	RESOLVE(SSL_set_options);
	RESOLVE(SSL_clear_options);
	RESOLVE(SSL_set_block_padding);
	RESOLVE(SSL_pending);
	RESOLVE(SSL_key_update);
	RESOLVE(SSL_renegotiate);
	RESOLVE(SSL_renegotiate_abbreviated);
	RESOLVE(SSL_set_connect_state);
	RESOLVE(SSL_set_accept_state);
	RESOLVE(SSL_set_ssl_method);
	RESOLVE(SSL_set_session);
	RESOLVE(SSL_copy_session_id);
	RESOLVE_ERROR(ERR_peek_error);
	RESOLVE_ERROR(ERR_set_mark);
	RESOLVE_ERROR(ERR_pop_to_mark);
	RESOLVE_ERROR(ERR_get_error_all);
	RESOLVE_ERROR(ERR_peek_last_error_all);
	RESOLVE_ERROR(ERR_new);
	RESOLVE_ERROR(ERR_set_debug);
	RESOLVE_ERROR(ERR_set_error);
	RESOLVE_ERROR(ERR_get_error_line_data);
	RESOLVE_ERROR(ERR_peek_last_error_line_data);
	RESOLVE_ERROR(ERR_put_error);
	RESOLVE_ERROR(ERR_add_error_data);

	RESOLVE(SSL_CTX_ctrl);
	RESOLVE(SSL_CTX_set_default_read_buffer_len);
	RESOLVE(SSL_set_default_read_buffer_len);
	RESOLVE(SSL_set_read_ahead);
	RESOLVE(SSL_get_read_ahead);
	RESOLVE(SSL_get_SSL_CTX);
	RESOLVE(SSL_CTX_get_ex_data);
	RESOLVE(SSL_CTX_set_ex_data);
	RESOLVE(SSL_has_pending);
	RESOLVE(SSL_want);
	RESOLVE(SSL_get_rfd);
	RESOLVE(SSL_is_server);
	RESOLVE(SSL_is_dtls);
	RESOLVE(SSL_is_quic);
	RESOLVE(SSL_get_shutdown);
	RESOLVE(SSL_set_shutdown);
	RESOLVE(CRYPTO_get_ex_new_index);
	RESOLVE(SSL_get_ex_data);
	RESOLVE(CRYPTO_get_ex_data);
	RESOLVE(SSL_set_ex_data);

	RESOLVE(SSL_get_wbio);
	RESOLVE(SSL_get_rbio);
	RESOLVE(SSL_set0_wbio);
	RESOLVE(BIO_get_new_index);
	RESOLVE(BIO_meth_new);
	RESOLVE(BIO_meth_set_write);
	RESOLVE(BIO_meth_set_read);
	RESOLVE(BIO_meth_set_ctrl);
	RESOLVE(BIO_meth_set_destroy);
	RESOLVE(BIO_new);
	RESOLVE(BIO_up_ref);
	RESOLVE(BIO_push);
	RESOLVE(BIO_next);
	RESOLVE(BIO_get_callback_ex);
	RESOLVE(BIO_get_callback);
	RESOLVE(BIO_get_data);
	RESOLVE(BIO_set_data);
	RESOLVE(BIO_set_init);
	RESOLVE(BIO_write);
	RESOLVE(BIO_read);
	RESOLVE(BIO_ctrl);
	RESOLVE(BIO_set_flags);
	RESOLVE(BIO_clear_flags);
	RESOLVE(BIO_copy_next_retry);
	RESOLVE(BIO_method_type);
	RESOLVE(BIO_method_name);
	return true;
}

bool resolveCrypto(CaApi *api) noexcept
{
	void *handle = findLibrary("libcrypto.so", "X509_STORE_new");
	if (!handle)
		return false;

	RESOLVE(X509_load_cert_crl_file);
	RESOLVE(X509_load_cert_crl_file_ex);
	RESOLVE(ERR_set_mark);
	RESOLVE(ERR_pop_to_mark);
	RESOLVE(ERR_peek_last_error);
	RESOLVE(X509_check_purpose);
	RESOLVE(X509_get0_pubkey);
	RESOLVE(OSSL_PROVIDER_do_all);
	RESOLVE(OSSL_PROVIDER_get0_name);
	RESOLVE(EC_get_builtin_curves);
	RESOLVE(EVP_default_properties_is_fips_enabled);
	RESOLVE(EVP_get1_default_properties);
	RESOLVE(CRYPTO_free);
	RESOLVE(OpenSSL_version_num);
	RESOLVE(OPENSSL_sk_num);
	RESOLVE(OPENSSL_sk_value);
	RESOLVE(OPENSSL_sk_push);
	RESOLVE(OPENSSL_sk_sort);
	RESOLVE(X509_LOOKUP_get_store);
	RESOLVE(X509_STORE_add_cert);
	RESOLVE(X509_STORE_add_crl);
	RESOLVE(X509_STORE_lock);
	RESOLVE(X509_STORE_unlock);
	RESOLVE(X509_STORE_get0_objects);
	RESOLVE(X509_OBJECT_new);
	RESOLVE(X509_OBJECT_free);
	RESOLVE(X509_OBJECT_get_type);
	RESOLVE(X509_OBJECT_get0_X509);
	RESOLVE(X509_OBJECT_get0_X509_CRL);
	RESOLVE(X509_OBJECT_set1_X509);
	RESOLVE(X509_OBJECT_set1_X509_CRL);
	RESOLVE(X509_OBJECT_retrieve_match);
	RESOLVE(d2i_X509);
	RESOLVE(X509_new_ex);
	RESOLVE(X509_free);
	RESOLVE(d2i_X509_NAME);
	RESOLVE(X509_NAME_free);
	RESOLVE(X509_NAME_cmp);
	RESOLVE(X509_NAME_get0_der);
	RESOLVE(ASN1_item_d2i);
	RESOLVE(ASN1_item_free);
	RESOLVE(ASN1_INTEGER_it);
	RESOLVE(ASN1_BIT_STRING_it);
	RESOLVE(ASN1_TIME_it);
	RESOLVE(X509_ALGOR_it);
	RESOLVE(X509_NAME_it);
	RESOLVE(X509_EXTENSIONS_it);
	RESOLVE(X509_get_subject_name);
	RESOLVE(X509_get_issuer_name);
	RESOLVE(OPENSSL_sk_delete_ptr);
	RESOLVE(CRYPTO_get_ex_new_index);
	RESOLVE(X509_STORE_get_ex_data);
	RESOLVE(X509_STORE_set_ex_data);
	RESOLVE(X509_STORE_CTX_get0_store);
	RESOLVE(X509_STORE_get_check_issued);
	RESOLVE(X509_STORE_CTX_get1_issuer);
	RESOLVE(X509_STORE_CTX_get1_certs);
	RESOLVE(X509_STORE_CTX_get1_crls);
	RESOLVE(X509_STORE_CTX_get_by_subject);
	RESOLVE(X509_STORE_CTX_get_obj_by_subject);
	RESOLVE(X509_STORE_get1_all_certs);
	RESOLVE(X509_STORE_get1_objects);
	RESOLVE(OPENSSL_sk_insert);
	RESOLVE(OPENSSL_sk_pop);
	RESOLVE(OPENSSL_sk_is_sorted);
	RESOLVE(X509_CRL_get_issuer);
	return true;
}

bool resolveDecodingChanges(DecodingChangeApi *api) noexcept
{
	void *handle = findLibrary("libcrypto.so", "CONF_modules_load");
	if (!handle)
		return false;

	RESOLVE(OSSL_PROVIDER_load);
	RESOLVE(OSSL_PROVIDER_try_load);
	RESOLVE(OSSL_PROVIDER_try_load_ex);
	RESOLVE(OSSL_PROVIDER_unload);
	RESOLVE(EVP_set_default_properties);
	RESOLVE(EVP_default_properties_enable_fips);
	RESOLVE(OSSL_LIB_CTX_set0_default);
	RESOLVE(CONF_modules_load);
	return true;
}

} /* namespace tlstune */
