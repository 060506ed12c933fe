/*
 * OpenSSL 3.5's QUIC beside a TLS connection: a forked QUIC server echoes one stream over
 * UDP on 127.0.0.1; the client connects (its default stream), writes a message, concludes
 * and reads the echo. Around the QUIC handshake the program asks its idle TLS connection
 * (a socket pair) for a read: the answer depends on the thread's error queue, which the
 * QUIC calls must leave as OpenSSL leaves it.
 *
 * Usage: quic_stream --cert FILE --key FILE
 * Prints "tls read before quic: error E", "quic connect R", "error queue after connect:
 * empty" (or "not empty"), "tls read after quic: error E", "echo N bytes" and exits 0.
 */

#include <fcntl.h>
#include <netinet/in.h>
#include <openssl/quic.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/example.h"

using namespace example;

namespace {

const unsigned char kAlpn[] = { 4, 't', 'e', 's', 't' };
const char kMessage[] = "a message over one QUIC stream";

int selectAlpn(SSL *, const unsigned char **out, unsigned char *outLength, const unsigned char *in,
	       unsigned inLength, void *)
{
	return SSL_select_next_proto(const_cast<unsigned char **>(out), outLength, kAlpn, sizeof(kAlpn), in,
				     inLength) == OPENSSL_NPN_NEGOTIATED
		       ? SSL_TLSEXT_ERR_OK
		       : SSL_TLSEXT_ERR_ALERT_FATAL;
}

/* The server, in a child: accepts one connection and one stream, echoes it, concludes. */
[[noreturn]] void serveQuic(int fd, const std::string &cert, const std::string &key)
{
	alarm(20);
	SSL_CTX *ctx = SSL_CTX_new(OSSL_QUIC_server_method());
	if (!ctx || SSL_CTX_use_certificate_chain_file(ctx, cert.c_str()) != 1 ||
	    SSL_CTX_use_PrivateKey_file(ctx, key.c_str(), SSL_FILETYPE_PEM) != 1)
		fail("QUIC server context");
	SSL_CTX_set_alpn_select_cb(ctx, selectAlpn, nullptr);
	SSL *listener = SSL_new_listener(ctx, 0);
	if (!listener || !SSL_set_fd(listener, fd) || !SSL_listen(listener))
		fail("SSL_listen");
	SSL *connection = SSL_accept_connection(listener, 0);
	SSL *stream = connection ? SSL_accept_stream(connection, 0) : nullptr;
	if (!stream)
		fail("SSL_accept_stream");
	std::string got;
	char buffer[4096];
	size_t n = 0;
	while (SSL_read_ex(stream, buffer, sizeof(buffer), &n))
		got.append(buffer, n);
	size_t written = 0;
	if (!SSL_write_ex(stream, got.data(), got.size(), &written) || !SSL_stream_conclude(stream, 0))
		fail("the echo");
	SSL_free(stream);
	for (int i = 0; i < 400 && SSL_shutdown(connection) != 1; i++)
		usleep(5000);
	_exit(0);
}

/* A TLS client and server over a non-blocking socket pair, handshake done. */
SSL *idleTlsClient(const std::string &cert, const std::string &key)
{
	int pair[2];
	if (socketpair(AF_UNIX, SOCK_STREAM, 0, pair) != 0)
		fail("socketpair");
	for (int end : pair)
		fcntl(end, F_SETFL, O_NONBLOCK);
	SSL *client = SSL_new(SSL_CTX_new(TLS_client_method()));
	SSL *server = SSL_new(serverContext(cert, key));
	SSL_set_fd(client, pair[0]);
	SSL_set_fd(server, pair[1]);
	int connected = 0, accepted = 0;
	for (int i = 0; i < 1000 && (connected != 1 || accepted != 1); i++) {
		if (connected != 1)
			connected = SSL_connect(client);
		if (accepted != 1)
			accepted = SSL_accept(server);
	}
	if (connected != 1 || accepted != 1)
		fail("the TLS handshake over a socket pair");
	return client;
}

void probeTls(SSL *tls, const char *when)
{
	char byte;
	const int result = SSL_read(tls, &byte, 1);
	std::printf("tls read %s: error %d\n", when, SSL_get_error(tls, result));
}

} /* namespace */

int main(int argc, char **argv)
{
	const std::string cert = option(argc, argv, "--cert", "");
	const std::string key = option(argc, argv, "--key", "");
	signal(SIGPIPE, SIG_IGN);
	struct sockaddr_in serverAddress = {}, clientAddress = {};
	serverAddress.sin_family = clientAddress.sin_family = AF_INET;
	serverAddress.sin_addr.s_addr = clientAddress.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	const int serverFd = socket(AF_INET, SOCK_DGRAM, 0);
	const int clientFd = socket(AF_INET, SOCK_DGRAM, 0);
	socklen_t length = sizeof(serverAddress);
	if (bind(serverFd, reinterpret_cast<struct sockaddr *>(&serverAddress), sizeof(serverAddress)) != 0 ||
	    getsockname(serverFd, reinterpret_cast<struct sockaddr *>(&serverAddress), &length) != 0 ||
	    bind(clientFd, reinterpret_cast<struct sockaddr *>(&clientAddress), sizeof(clientAddress)) != 0 ||
	    connect(clientFd, reinterpret_cast<struct sockaddr *>(&serverAddress), sizeof(serverAddress)) != 0)
		fail("UDP sockets");
	fcntl(serverFd, F_SETFL, O_NONBLOCK);
	fcntl(clientFd, F_SETFL, O_NONBLOCK);
	const pid_t server = fork();
	if (server == 0) {
		close(clientFd);
		serveQuic(serverFd, cert, key);
	}
	close(serverFd);
	alarm(20);

	SSL *tls = idleTlsClient(cert, key);
	probeTls(tls, "before quic");
	SSL_CTX *ctx = SSL_CTX_new(OSSL_QUIC_client_method());
	SSL_CTX_set_verify(ctx, SSL_VERIFY_NONE, nullptr);
	SSL *quic = SSL_new(ctx);
	BIO_ADDR *peer = BIO_ADDR_new();
	BIO_ADDR_rawmake(peer, AF_INET, &serverAddress.sin_addr, sizeof(serverAddress.sin_addr),
			 serverAddress.sin_port);
	SSL_set_fd(quic, clientFd);
	SSL_set1_initial_peer_addr(quic, peer);
	SSL_set_alpn_protos(quic, kAlpn, sizeof(kAlpn));
	std::printf("quic connect %d\n", SSL_connect(quic));
	std::printf("error queue after connect: %s\n", ERR_peek_error() ? "not empty" : "empty");
	probeTls(tls, "after quic");
	ERR_clear_error();

	size_t n = 0;
	if (!SSL_write_ex(quic, kMessage, sizeof(kMessage) - 1, &n) || !SSL_stream_conclude(quic, 0))
		fail("the QUIC write");
	std::string echo;
	char buffer[4096];
	while (SSL_read_ex(quic, buffer, sizeof(buffer), &n))
		echo.append(buffer, n);
	std::printf("echo %zu bytes\n", echo.size());
	for (int i = 0; i < 400 && SSL_shutdown(quic) != 1; i++)
		usleep(5000);
	SSL_free(quic);
	int status = 0;
	waitpid(server, &status, 0);
	return WIFEXITED(status) && WEXITSTATUS(status) == 0 ? 0 : 3;
}
