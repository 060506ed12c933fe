#pragma once
/*
 * A BIO of the program's own over a socket, as curl and other libraries make theirs: the
 * SSL reads and writes through its methods, and OpenSSL's SSL_get_rfd knows no fd.
 */

#include <cstdint>
#include <string>
#include <sys/socket.h>

#include <openssl/bio.h>

namespace example {

inline int ownBioFd(BIO *bio)
{
	return static_cast<int>(reinterpret_cast<intptr_t>(BIO_get_data(bio)));
}

inline int ownBioWrite(BIO *bio, const char *data, int length)
{
	return static_cast<int>(send(ownBioFd(bio), data, static_cast<size_t>(length), MSG_NOSIGNAL));
}

/* As a BIO over a blocking stream often reads: all it was asked for, or the end. */
inline int ownBioReadFully(BIO *bio, char *data, int length)
{
	int got = 0;
	while (got < length) {
		const ssize_t n = recv(ownBioFd(bio), data + got, static_cast<size_t>(length - got), 0);
		if (n <= 0)
			return got ? got : static_cast<int>(n);
		got += static_cast<int>(n);
	}
	return got;
}

/* One recv per read, as a socket BIO does. */
inline int ownBioReadOnce(BIO *bio, char *data, int length)
{
	return static_cast<int>(recv(ownBioFd(bio), data, static_cast<size_t>(length), 0));
}

inline long ownBioControl(BIO *, int command, long, void *)
{
	return command == BIO_CTRL_FLUSH ? 1 : 0;
}

/* The method (free it with BIO_meth_free after the SSL): reading fully or once per call. */
inline BIO_METHOD *ownBioMethod(bool readFully, const char *name)
{
	BIO_METHOD *method = BIO_meth_new(BIO_get_new_index() | BIO_TYPE_SOURCE_SINK, name);
	BIO_meth_set_write(method, ownBioWrite);
	BIO_meth_set_read(method, readFully ? ownBioReadFully : ownBioReadOnce);
	BIO_meth_set_ctrl(method, ownBioControl);
	return method;
}

/* A BIO of method over fd (not closed with it). */
inline BIO *ownBio(BIO_METHOD *method, int fd)
{
	BIO *bio = BIO_new(method);
	BIO_set_data(bio, reinterpret_cast<void *>(static_cast<intptr_t>(fd)));
	BIO_set_init(bio, 1);
	return bio;
}

} /* namespace example */
