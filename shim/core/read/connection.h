#pragma once

#include <atomic>
#include <cstdint>
#include <openssl/ssl.h>

#include "buffered_fds.h"
#include "socket_cache.h"

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
	 * -1).
	 */
	void noteSocketRead(int fd, ssize_t returned = 1) noexcept;
	/*
	 * The socket read tuning looked at (fstat, SSL_get_rfd) before the first read: the
	 * same, spared a stat; from then on reads of other fds are not the connection's.
	 */
	void noteSocket(int fd, ino_t ino) noexcept;

	/*
	 * After the program's outermost call on this SSL returned. queued: the shim's queue of
	 * its socket holds bytes (SocketCache), which the kernel would hold without it.
	 * Whether the call read new bytes into that queue (an arrival).
	 */
	bool afterCall(BufferedFds &buffered, bool queued) noexcept;

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
	void setReadAheadByShim(bool on) noexcept { readAheadByShim_ = on; }
	/* The bytes one read of its socket takes while the shim reads ahead for it (SocketCache). */
	std::size_t readAheadSize() const noexcept { return readAheadSize_; }
	void setReadAheadSize(std::size_t size) noexcept { readAheadSize_ = size; }
	bool programSetReadAhead() const noexcept { return programSetReadAhead_; }
	/* UnseenWaits::generation() when the connection last asked it (core/read/unseen_waits.h). */
	unsigned unseenSeen() const noexcept { return unseenSeen_; }
	void setUnseenSeen(unsigned generation) noexcept { unseenSeen_ = generation; }
	/*
	 * A BIO of the program's own whose socket became known after read-ahead went on:
	 * learnt, its socket not yet asked about (read_tuning.cpp); settled once asked, and
	 * for every other connection. Until settled each call fails its one compare, and asks.
	 */
	enum class OwnBio : uint8_t { settled, learnt };
	OwnBio ownBio() const noexcept { return ownBio_; }
	void setOwnBio(OwnBio stage) noexcept { ownBio_ = stage; }
	void noteProgramSetReadAhead() noexcept
	{
		programSetReadAhead_ = true;
		readAheadByShim_ = false;
	}

private:
	bool readTuningDecided_ = false;
	bool madeThroughShim_ = false;
	bool readAheadByShim_ = false;
	std::size_t readAheadSize_ = 0;
	bool programSetReadAhead_ = false;
	unsigned unseenSeen_ = 0;
	OwnBio ownBio_ = OwnBio::settled;
	/* fd_ is what the read BIO says it reads (SSL_get_rfd), not learnt from a read. */
	bool namedByBio_ = false;
	int fd_ = -1;
	ino_t ino_ = 0;
	bool buffered_ = false;
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

/* What a connection's end changes: its readiness, and the queue of its socket. */
struct ReadState {
	BufferedFds *buffered;
	SocketCache *cache;
};

/*
 * The ex_data slot that carries a Connection on every SSL. Its free callback forgets the
 * connection's buffered fd when the program frees the SSL; what the shim read ahead of
 * the socket stays readable, the socket's (a drain of the socket after SSL_free reads it).
 */
class ConnectionSlot {
public:
	bool init(const OpenSslApi &api, ReadState *read) noexcept;
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
	static bool noteSocketRead(int fd, ssize_t returned = 1) noexcept;
	/*
	 * How much of fd a read in this thread's innermost call may take at once: the size its
	 * connection reads ahead, where the shim reads ahead for it on fd; else 0.
	 */
	static std::size_t readAheadFor(int fd) noexcept;
	/* This thread is inside an OpenSSL call on some connection. */
	static bool active() noexcept;

private:
	static bool live(const CallScope *scope, uint64_t cookie, const void *below) noexcept;

	Connection *connection_;
	CallScope *previous_;
	uint64_t previousCookie_;
	const uint64_t cookie_; /* this scope's, unique in its thread */
	bool outermost_;
};

} /* namespace tlstune */
