#pragma once

#include <atomic>
#include <cstdint>
#include <openssl/ssl.h>

#include "buffered_fds.h"

namespace tlstune {

struct OpenSslApi;

/*
 * What the shim knows about one SSL, carried as its ex_data. Only the thread inside a
 * call on that SSL touches it (OpenSSL forbids concurrent calls on one SSL), so it needs
 * no lock; what other threads must see goes through BufferedFds.
 */
class Connection {
public:
	/*
	 * The socket this connection reads from, learnt from the read syscalls made while
	 * it is inside an OpenSSL call, where its read BIO names none (SSL_get_rfd() is -1
	 * for a program's own BIO, curl 7.88's). returned: what the read returned (bytes, or
	 * -1); asked: the bytes the read asked the kernel for.
	 */
	void noteSocketRead(int fd, ssize_t returned = 1, size_t asked = kWholeBuffer) noexcept;
	/* What a read that says nothing of its length counts as: a read-ahead's whole buffer. */
	static constexpr size_t kWholeBuffer = ~static_cast<size_t>(0);
	/*
	 * The socket read tuning looked at (fstat, SSL_get_rfd) before the first read: the
	 * same, spared a stat; from then on reads of other fds are not the connection's.
	 */
	void noteSocket(int fd, ino_t ino) noexcept;

	/*
	 * After the program's outermost call on this SSL returned. progressed: it read
	 * (returned > 0, not a write); wantsRead: OpenSSL stopped waiting for the socket;
	 * hasPending: records or decrypted bytes are buffered (SSL_has_pending, unlike
	 * SSL_pending, counts both); recordsHeld: among them records not yet decrypted (no
	 * plaintext is pending), which without read-ahead the kernel would hold.
	 */
	void afterCall(BufferedFds &buffered, bool progressed, bool wantsRead, bool hasPending,
		       bool recordsHeld = true) noexcept;

	/*
	 * The program gave the SSL another fd to read (SSL_set_fd, SSL_set_rfd, SSL_set_bio,
	 * SSL_set0_rbio): fd, or -1 for a BIO without one, whose socket is learnt from reads.
	 * What OpenSSL holds now belongs to that fd (dup, SSL_set_fd, close of the old one).
	 */
	void rebind(BufferedFds &buffered, int fd) noexcept;

	int fd() const noexcept { return fd_; }
	/* The socket file's inode, 0 until one is known. */
	ino_t ino() const noexcept { return fd_ >= 0 ? ino_ : 0; }
	bool buffered() const noexcept { return buffered_; }
	/* The current call read bytes from the socket (until afterCall). */
	bool readDuringCall() const noexcept { return readBytes_; }

	/*
	 * Read tuning (core/read/read_tuning.h): decided once, at the program's own first call on
	 * the connection that may read; whether the shim turned read-ahead on; whether the
	 * program set read-ahead on the SSL itself (then it is the program's, as set).
	 */
	bool readTuningDecided() const noexcept { return readTuningDecided_; }
	/*
	 * The program made this SSL through the shim's SSL_new: not libssl (BIO_new_ssl), not
	 * a library bound past the shim (RTLD_DEEPBIND), whose later calls may bypass it too.
	 */
	bool madeThroughShim() const noexcept { return madeThroughShim_; }
	void noteMadeThroughShim() noexcept { madeThroughShim_ = true; }
	void decideReadTuning() noexcept { readTuningDecided_ = true; }
	bool readAheadByShim() const noexcept { return readAheadByShim_; }
	void setReadAheadByShim(bool on) noexcept
	{
		readAheadByShim_ = on;
		shimMayHold_ = shimMayHold_ || on;
	}
	/* The shim gave it a read buffer larger than OpenSSL's own (a client's four records). */
	bool enlargedByShim() const noexcept { return enlargedByShim_; }
	void setEnlargedByShim() noexcept
	{
		enlargedByShim_ = true;
		handshakeBufferKept_ = true;
	}
	/*
	 * Until the handshake is done: the enlarged buffer OpenSSL made for it, of whose pages
	 * the handshake fills a few, is let go then (ReadTuning::letEmptyBufferGo).
	 */
	bool handshakeBufferKept() const noexcept { return handshakeBufferKept_; }
	void handshakeBufferGone() noexcept { handshakeBufferKept_ = false; }
	/*
	 * What its socket reads returned since it last wrote, and since it last let its read
	 * buffer go (ReadTuning::letEmptyBufferGo); whether it let it go since it last wrote;
	 * whether the last read found the socket emptied (returned less than it asked, or
	 * nothing): the end of what the peer had sent.
	 */
	size_t receivedSinceWrite() const noexcept { return receivedSinceWrite_; }
	size_t receivedSinceLetGo() const noexcept { return receivedSinceLetGo_; }
	/* A let-go comes only after bytes since the write: then fewer came since it. */
	bool letGoSinceWrite() const noexcept { return receivedSinceLetGo_ < receivedSinceWrite_; }
	bool lastReadEmptied() const noexcept { return lastReadEmptied_; }
	void wrote() noexcept { receivedSinceWrite_ = 0; }
	void bufferLetGo() noexcept { receivedSinceLetGo_ = 0; }
	bool programSetReadAhead() const noexcept { return programSetReadAhead_; }
	/* UnseenWaits::generation() when the connection last asked it (core/read/unseen_waits.h). */
	unsigned unseenSeen() const noexcept { return unseenSeen_; }
	void setUnseenSeen(unsigned generation) noexcept { unseenSeen_ = generation; }
	/*
	 * A BIO of the program's own whose socket became known after read-ahead went on:
	 * learnt, its socket not yet asked about; then past the handshake, then its reads'
	 * asks of the kernel measured for one call (read_tuning.cpp judges them); settled
	 * once judged, and for every other connection. Until settled each call fails its one
	 * compare, and asks.
	 */
	enum class OwnBio : uint8_t { settled, learnt, handshaking, measuring };
	OwnBio ownBio() const noexcept { return ownBio_; }
	void setOwnBio(OwnBio stage) noexcept
	{
		ownBio_ = stage;
		largestAsk_ = 0;
	}
	/* The largest ask of the kernel the learnt socket's reads made while measuring; 0 before the first. */
	size_t largestAsk() const noexcept { return largestAsk_; }
	void noteProgramSetReadAhead() noexcept
	{
		programSetReadAhead_ = true;
		readAheadByShim_ = false;
	}

private:
	bool readTuningDecided_ = false;
	bool madeThroughShim_ = false;
	bool readAheadByShim_ = false;
	/*
	 * OpenSSL may hold what the shim's read-ahead took: from its turn-on until, read-ahead
	 * off again, OpenSSL holds nothing. Only then does a wait report what OpenSSL holds:
	 * what it holds on a connection the shim never read ahead for (the program's own
	 * read-ahead, the rest of a record read in part) the kernel would not report either (a
	 * hunt: a one-shot pool reading 1,000 bytes of each 2,000-byte record stalled at once
	 * without the shim, and was told of the rest with it; a level-triggered poll after a
	 * part of a record answered readable at once, for ever, where it waited without).
	 */
	bool shimMayHold_ = false;
	bool enlargedByShim_ = false;
	bool handshakeBufferKept_ = false;
	size_t receivedSinceWrite_ = 0;
	size_t receivedSinceLetGo_ = 0;
	bool lastReadEmptied_ = false;
	bool programSetReadAhead_ = false;
	unsigned unseenSeen_ = 0;
	OwnBio ownBio_ = OwnBio::settled;
	size_t largestAsk_ = 0;
	/* fd_ is what the read BIO says it reads (SSL_get_rfd), not learnt from a read. */
	bool namedByBio_ = false;
	int fd_ = -1;
	ino_t ino_ = 0;
	/*
	 * OpenSSL asked for more of a record it holds only part of. Reporting the fd
	 * readable then would make a poll loop spin (poll answers at once, SSL_read says
	 * WANT_READ): wait for the socket until a call makes progress again.
	 */
	bool partial_ = false;
	bool buffered_ = false;
	bool recordsHeld_ = false; /* what buffered_ was registered with */
	unsigned closings_ = 0; /* BufferedFds::closings() when buffered_ was registered */
	/*
	 * Edge-triggered epoll promises one event per arrival. A call that read bytes from the
	 * socket and left data in OpenSSL is such an arrival: had the bytes stayed in the
	 * socket, the kernel would have reported them (the handshake that took the first
	 * records with it is the case that stalls without this).
	 */
	bool readBytes_ = false; /* during the current call */
	unsigned long long arrivals_ = 0; /* the number of the last arrival, unique in the process */
};

/*
 * The ex_data slot that carries a Connection on every SSL. Its free callback forgets the
 * connection's buffered fd when the program frees the SSL.
 */
class ConnectionSlot {
public:
	bool init(const OpenSslApi &api, BufferedFds *buffered) noexcept;
	/* The SSL's Connection, attached on first use; nullptr when out of memory. */
	Connection *of(const OpenSslApi &api, SSL *ssl) const noexcept;
	/* The SSL's Connection if it has one. */
	Connection *existing(const OpenSslApi &api, SSL *ssl) const noexcept;
	/* SSL_new's hook: attach now so later calls find it. */
	bool attach(const OpenSslApi &api, SSL *ssl) const noexcept;

	/*
	 * Whether the process ever made a connection the shim follows: until then nothing can
	 * be held, and the epoll sets' registrations are not recorded (issue 24). One load.
	 */
	static bool anyMade() noexcept { return made_.load(std::memory_order_acquire); }

private:
	int index_ = -1;
	static std::atomic<bool> made_;
};

/*
 * Marks the connection this thread is inside an OpenSSL call on, so the read wrappers can
 * attribute the socket they read to it. Nested calls (libssl calling its own exported
 * functions, or a BIO that reads through another SSL) stack; the innermost one owns the
 * read. A scope whose destructor a longjmp skipped is told dead by its place on the stack
 * and its cookie, and left out.
 */
class CallScope {
public:
	explicit CallScope(Connection *connection) noexcept;
	~CallScope();
	CallScope(const CallScope &) = delete;
	CallScope &operator=(const CallScope &) = delete;

	/* False when an enclosing scope is for the same connection: only the outer acts. */
	bool outermost() const noexcept { return outermost_; }

	/*
	 * This thread read fd: every connection inside a call on it is waiting for that
	 * socket. Usually one; with TLS inside TLS (curl through an HTTPS proxy) the inner
	 * connection reads through the outer one, and its program polls the same socket.
	 * Returns false when the thread is inside no OpenSSL call.
	 */
	static bool noteSocketRead(int fd, ssize_t returned = 1,
				   size_t asked = Connection::kWholeBuffer) noexcept;
	/* This thread is inside an OpenSSL call on some connection. */
	static bool active() noexcept;
	/*
	 * A read of this thread was left by a cancellation or pthread_exit (no read returns
	 * into a C++ exception): the OpenSSL call around it, if any, was waiting for the
	 * socket. takeReadLeft answers once.
	 */
	static void readLeft() noexcept;
	static bool takeReadLeft() noexcept;

private:
	static bool live(const CallScope *scope, uint64_t cookie, const void *below) noexcept;

	Connection *connection_;
	CallScope *previous_;
	uint64_t previousCookie_;
	const uint64_t cookie_; /* this scope's, unique in its thread */
	bool outermost_;
};

} /* namespace tlstune */
