#include "coalescing_bio.h"

#include <atomic>
#include <cerrno>
#include <csignal>
#include <pthread.h>
#include <sys/socket.h>

namespace tlstune {

namespace {

/* The BIO callbacks are plain functions: they find these through the one method built. */
const OpenSslApi *g_api = nullptr;
Coalescer *g_coalescer = nullptr;

/* initial-exec: read on every write of a merged connection. */
__attribute__((tls_model("initial-exec"))) thread_local int directWrites = 0;
__attribute__((tls_model("initial-exec"))) thread_local bool deferredWrite = false;

PendingWrites *writesOf(BIO *bio)
{
	return static_cast<PendingWrites *>(g_api->BIO_get_data(bio));
}

void askRetry(BIO *bio)
{
	g_api->BIO_set_flags(bio, BIO_FLAGS_WRITE | BIO_FLAGS_SHOULD_RETRY);
}

/*
 * A send of the shim's found the connection broken, after the write that made those bytes
 * had returned: this write reports it, as the kernel would have. The kernel raises
 * SIGPIPE in the thread whose write meets a closed pipe; the shim's own send could not
 * (its thread's signals are not the program's), so it is raised here, in the program's.
 */
int failAsTheKernelWould(int error)
{
	if (error == EPIPE)
		pthread_kill(pthread_self(), SIGPIPE);
	errno = error;
	return -1;
}

/*
 * This write's own send (or its append) failed: errno says why. The write reports it, and
 * once only, as the kernel reports a socket's error: the next write meets EPIPE (a hunt:
 * ECONNRESET twice, and the second write escaped its SIGPIPE).
 */
int failedSend(PendingWrites *writes)
{
	const int error = errno;
	writes->reportError();
	return failAsTheKernelWould(error);
}

/* The outcome of sending what is pending, as a write or flush result for OpenSSL. */
bool flushed(BIO *bio, PendingWrites *writes)
{
	switch (g_coalescer->sendAsOwner(writes)) {
	case PendingWrites::Result::Done:
		return true;
	case PendingWrites::Result::Again:
		askRetry(bio);
		return false;
	default:
		failedSend(writes);
		return false;
	}
}

/*
 * A write of the connection's own straight to the socket. When it finds the connection
 * broken, the writes held after it must fail too, as the kernel would fail them: EPIPE.
 */
int passOn(BIO *bio, PendingWrites *writes, BIO *next, const char *data, int length)
{
	const int written = g_api->BIO_write(next, data, length);
	g_api->BIO_copy_next_retry(bio);
	if (written <= 0 && writes && (errno == EPIPE || errno == ECONNRESET)) {
		const int savedErrno = errno;
		writes->fail(EPIPE);
		errno = savedErrno;
	}
	return written;
}

/*
 * The program set a callback on its socket BIO (it can reach it: SSL_get_wbio answers
 * with it): every record goes through that BIO then, so the callback sees each one.
 */
bool hooked(BIO *socket)
{
	return (g_api->BIO_get_callback_ex && g_api->BIO_get_callback_ex(socket)) ||
	       (g_api->BIO_get_callback && g_api->BIO_get_callback(socket));
}

int filterWrite(BIO *bio, const char *data, int length)
{
	const OpenSslApi &api = *g_api;
	PendingWrites *writes = writesOf(bio);
	BIO *next = api.BIO_next(bio);
	api.BIO_clear_flags(bio, BIO_FLAGS_RWS | BIO_FLAGS_SHOULD_RETRY);
	if (!writes || !next || length <= 0)
		return next ? api.BIO_write(next, data, length) : -1;

	/*
	 * Closed under it and reused (SSL_clear, then a new socket on the same number): the
	 * socket BIO writes to that number as it would without the shim.
	 */
	if (writes->fd() < 0)
		return passOn(bio, nullptr, next, data, length);

	if (deferredWrite) {
		bool becameDirty = false;
		if (writes->appendOverflow(data, static_cast<std::size_t>(length), &becameDirty) !=
		    PendingWrites::Result::Done)
			return -1;
		if (becameDirty && !g_coalescer->dirtied(writes))
			writes->send();
		return length;
	}

	/*
	 * First: every write of the connection's own counts for "quiet", also a direct one. A
	 * batch begins only on a socket with room for it, so that what is held can always go
	 * to the kernel at once. A process that holds nothing any more (seccomp) reads no
	 * clock: strict mode turns the TSC off, and the vDSO's read of it faults.
	 */
	const bool holding = g_coalescer->holding();
	const bool quiet = holding && g_coalescer->quietWrite(writes);
	if (!holding || quiet || directWrites || writes->stalled() || writes->writesDirect() || hooked(next) ||
	    static_cast<std::size_t>(length) >= g_coalescer->limit()) {
		if (const int error = writes->reportError())
			return failAsTheKernelWould(error);
		if (!flushed(bio, writes))
			return -1;
		return passOn(bio, writes, next, data, length);
	}

	/* A cancellation point, as the socket write this replaces (holdWrite says why). */
	pthread_testcancel();
	bool becameDirty = false;
	switch (writes->append(data, static_cast<std::size_t>(length), &becameDirty)) {
	case PendingWrites::Result::Done:
		/*
		 * Without a flusher thread nothing would bound the wait: send now. Nor once holding
		 * stopped meanwhile (exit, in another thread): its drain may have been before this.
		 */
		if ((becameDirty && !g_coalescer->dirtied(writes)) || !g_coalescer->holding())
			g_coalescer->sendAsOwner(writes);
		/* As the socket BIO's write, which clears errno before a write that succeeds. */
		errno = 0;
		return length;
	case PendingWrites::Result::Again:
		g_coalescer->stalled(writes);
		askRetry(bio);
		return -1;
	case PendingWrites::Result::NoRoom:
		/*
		 * The write goes to the socket as it would without the shim, after what is held
		 * (none, but where a shutdown at rest found an append under way: writeOutAtRest).
		 */
		if (!flushed(bio, writes))
			return -1;
		return passOn(bio, writes, next, data, length);
	default:
		return failedSend(writes);
	}
}

int filterRead(BIO *bio, char *data, int length)
{
	BIO *next = g_api->BIO_next(bio);
	if (!next)
		return 0;
	g_api->BIO_clear_flags(bio, BIO_FLAGS_RWS | BIO_FLAGS_SHOULD_RETRY);
	const int n = g_api->BIO_read(next, data, length);
	g_api->BIO_copy_next_retry(bio);
	return n;
}

#ifdef BIO_CTRL_GET_KTLS_SEND
/*
 * A filter goes only over a socket BIO without kernel TLS (attached), which only a
 * BIO_set_ktls through a filter turns on: until one has passed, every answer is "no".
 * libssl 3 asks at every record it writes, ten times a request in nginx's HTTP/2 (issue
 * 24), and each ask went down to the socket BIO.
 */
std::atomic<bool> g_kernelTlsSet{false};
/* libssl's BIO_set_ktls (internal; bio.h names the number in a comment, 3.0 to 3.5). */
constexpr int kSetKernelTls = 72;
#endif

long passedOn(BIO *bio, int command, long number, void *pointer);

/* The ask of every record first, in a few instructions; the rest outlined. */
long filterCtrl(BIO *bio, int command, long number, void *pointer)
{
#ifdef BIO_CTRL_GET_KTLS_SEND
	if (command == BIO_CTRL_GET_KTLS_SEND && !g_kernelTlsSet.load(std::memory_order_relaxed))
		return 0;
#endif
	return passedOn(bio, command, number, pointer);
}

__attribute__((noinline)) long passedOn(BIO *bio, int command, long number, void *pointer)
{
	const OpenSslApi &api = *g_api;
#ifdef BIO_CTRL_GET_KTLS_SEND
	if (command == kSetKernelTls)
		g_kernelTlsSet.store(true, std::memory_order_relaxed);
#endif
	BIO *next = api.BIO_next(bio);
	PendingWrites *writes = writesOf(bio);
	switch (command) {
	case BIO_CTRL_FLUSH:
		/* OpenSSL flushes after each handshake flight and alert: send them now. */
		api.BIO_clear_flags(bio, BIO_FLAGS_RWS | BIO_FLAGS_SHOULD_RETRY);
		/* A key update going out with held plaintext: the flusher sends it, unblocking. */
		if (deferredWrite)
			return 1;
		if (writes && !flushed(bio, writes))
			return 0;
		break;
	case BIO_CTRL_WPENDING:
		return static_cast<long>(writes ? writes->pending() : 0) +
		       (next ? api.BIO_ctrl(next, command, number, pointer) : 0);
	default:
		break;
	}
	return next ? api.BIO_ctrl(next, command, number, pointer) : 0;
}

/* SSL_free or SSL_set_bio let go of the filter: the bytes go out first. */
int filterDestroy(BIO *bio)
{
	if (PendingWrites *writes = writesOf(bio))
		g_coalescer->release(writes);
	g_api->BIO_set_data(bio, nullptr);
	return 1;
}

} /* namespace */

bool CoalescingBio::init(const OpenSslApi &api, Coalescer *coalescer) noexcept
{
	if (!api.hasWritePath())
		return false;
	const int index = api.BIO_get_new_index();
	if (index < 0)
		return false;
	BIO_METHOD *method = api.BIO_meth_new(index | BIO_TYPE_FILTER, "tlstune write coalescing");
	if (!method || !api.BIO_meth_set_write(method, filterWrite) ||
	    !api.BIO_meth_set_read(method, filterRead) || !api.BIO_meth_set_ctrl(method, filterCtrl) ||
	    !api.BIO_meth_set_destroy(method, filterDestroy))
		return false;
	g_api = &api;
	g_coalescer = coalescer;
	method_ = method;
	type_ = index | BIO_TYPE_FILTER;
	return true;
}

PendingWrites *CoalescingBio::of(const OpenSslApi &api, SSL *ssl) const noexcept
{
	if (!method_ || !ssl)
		return nullptr;
	BIO *wbio = api.SSL_get_wbio(ssl);
	if (!wbio || api.BIO_method_type(wbio) != type_)
		return nullptr;
	return writesOf(wbio);
}

PendingWrites *CoalescingBio::attached(const OpenSslApi &api, SSL *ssl) const noexcept
{
	if (!method_ || !ssl)
		return nullptr;
	BIO *socket = api.SSL_get_wbio(ssl);
	const int type = socket ? api.BIO_method_type(socket) : 0;
	if (type == type_)
		return writesOf(socket);
	/* A confined process (seccomp) may forbid the getsockopt below and the sends after it. */
	if (type != BIO_TYPE_SOCKET || !g_coalescer->holding())
		return nullptr;
	/* A socket BIO the program hooked sees every write of its own, as without the shim. */
	if (hooked(socket))
		return nullptr;
#ifdef BIO_CTRL_GET_KTLS_SEND
	/* Kernel TLS sends each record with its own sendmsg: not ours to merge. */
	if (api.BIO_ctrl(socket, BIO_CTRL_GET_KTLS_SEND, 0, nullptr) > 0)
		return nullptr;
#endif
	int fd = -1;
	if (api.BIO_ctrl(socket, BIO_C_GET_FD, 0, &fd) < 0 || fd < 0)
		return nullptr;
	/*
	 * A stream socket only: over a pipe (SSL_set_wfd) send(2) would fail with ENOTSOCK,
	 * and a datagram or seqpacket socket keeps each write's boundaries, which merged sends
	 * would change (a hunt: DTLS over UDP got 3 datagrams of up to 15 KiB for 30 records,
	 * past the program's MTU).
	 */
	int socketType = 0;
	socklen_t typeLength = sizeof(socketType);
	const int savedErrno = errno;
	const bool stream = getsockopt(fd, SOL_SOCKET, SO_TYPE, &socketType, &typeLength) == 0 &&
			    socketType == SOCK_STREAM;
	errno = savedErrno;
	if (!stream)
		return nullptr;

	PendingWrites *writes = g_coalescer->open(fd);
	BIO *filter = writes ? api.BIO_new(method_) : nullptr;
	if (!filter) {
		if (writes)
			g_coalescer->release(writes);
		return nullptr;
	}
	api.BIO_set_data(filter, writes);
	api.BIO_set_init(filter, 1);
	/*
	 * The socket BIO is usually the read BIO too. SSL_set0_wbio lets go of the SSL's write
	 * reference; the filter's chain keeps its own, so SSL_free releases each once.
	 */
	api.BIO_up_ref(socket);
	api.BIO_push(filter, socket);
	api.SSL_set0_wbio(ssl, filter);
	return writes;
}

BIO *CoalescingBio::programsWriteBio(const OpenSslApi &api, SSL *ssl) const noexcept
{
	BIO *wbio = api.SSL_get_wbio(ssl);
	if (!method_ || !wbio || api.BIO_method_type(wbio) != type_)
		return wbio;
	BIO *socket = api.BIO_next(wbio);
	return socket ? socket : wbio;
}

bool CoalescingBio::socketHooked(const OpenSslApi &api, SSL *ssl) const noexcept
{
	BIO *socket = programsWriteBio(api, ssl);
	return socket && hooked(socket);
}

CoalescingBio::Deferred::Deferred(bool on) noexcept : on_(on)
{
	deferredWrite = on_;
}

CoalescingBio::Deferred::~Deferred()
{
	if (on_)
		deferredWrite = false;
}

CoalescingBio::Direct::Direct(bool on) noexcept : on_(on)
{
	directWrites += on_;
}

CoalescingBio::Direct::~Direct()
{
	directWrites -= on_;
}

} /* namespace tlstune */
