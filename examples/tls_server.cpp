/*
 * A small TLS server for the tests, serving --connections clients one after another:
 *   --send BYTES [--seed S]  send the data pattern, then close_notify
 *   --burst LINES            send LINES short lines, one record each, in one TCP segment
 *                            (TCP_CORK), then wait for the client to close; with
 *                            --hangup, close_notify and FIN go in the same segment;
 *                            with --line-length N, each line is N bytes (padded with x)
 *   --sink                   read until the client closes; print "received N sha256 H"
 *   --echo                   send back everything read, until the client closes
 *     --key-update           TLS 1.3: before each echo, a KeyUpdate that asks the client
 *                            to update its keys too (update_requested)
 *     --renegotiate          TLS 1.2: before the first echo, a HelloRequest: the client
 *                            renegotiates when it next reads; with --renegotiations N,
 *                            before each of the first N echoes
 *   --lines                  print each line read as "line TEXT" as soon as it arrives
 *   --close-after BYTES      with --sink: after reading BYTES, send close_notify, then
 *                            read on until the client closes
 *   --hold                   with --sink (--reset-after too): read a line from stdin
 *                            before reading the client, so that the client's socket
 *                            buffer fills up first, or its writes are all made
 *   --stamps SIZE --requests N
 *                            read N requests of SIZE bytes, noting the monotonic clock
 *                            (ns) as each is complete, then send the N times back (8
 *                            bytes each, little-endian) and read until the client closes
 *   --reset-after BYTES      with --sink: after reading BYTES, reset the connection (RST);
 *                            with --send: after sending BYTES (what the kernel has not
 *                            sent yet is lost, as a reset does)
 * Prints "port N" on stdout once it listens (--port 0 picks a free one).
 */

#include <ctime>
#include <netinet/in.h>
#include <vector>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

#include "common/example.h"

using namespace example;

namespace {

void writeAll(SSL *ssl, const unsigned char *data, size_t n)
{
	size_t written = 0;
	while (written < n) {
		size_t chunk = 0;
		if (!SSL_write_ex(ssl, data + written, n - written, &chunk))
			fail("SSL_write");
		written += chunk;
	}
}

/* Reads until the peer closes, feeding what arrives to digest (if any). */
uint64_t drain(SSL *ssl, Sha256 *digest)
{
	unsigned char buffer[16384];
	uint64_t total = 0;
	size_t n = 0;
	while (SSL_read_ex(ssl, buffer, sizeof(buffer), &n)) {
		total += n;
		if (digest)
			digest->update(buffer, n);
	}
	return total;
}

/*
 * Queue the records in 1 MiB writes, as a server with a large output buffer does, so the
 * client's read sizes show its read buffer rather than the pace of our 16 KiB writes.
 */
void bufferWrites(SSL *ssl)
{
	BIO *socket = SSL_get_wbio(ssl);
	BIO *buffer = BIO_new(BIO_f_buffer());
	if (!buffer || !BIO_up_ref(socket) || BIO_set_write_buffer_size(buffer, 1 << 20) <= 0)
		fail("cannot buffer the writes");
	SSL_set0_wbio(ssl, BIO_push(buffer, socket));
}

void cork(int fd, int on)
{
	setsockopt(fd, IPPROTO_TCP, TCP_CORK, &on, sizeof(on));
}

/* Ends the connection with a RST instead of a FIN, and says so on stdout. */
void reset(SSL *ssl, int fd)
{
	struct linger now = { 1, 0 };
	setsockopt(fd, SOL_SOCKET, SO_LINGER, &now, sizeof(now));
	close(fd);
	SSL_free(ssl);
	std::printf("reset\n");
	std::fflush(stdout);
}

} /* namespace */

int main(int argc, char **argv)
{
	const std::string cert = option(argc, argv, "--cert", "");
	const std::string key = option(argc, argv, "--key", "");
	const std::string tls = option(argc, argv, "--tls", "1.3");
	const uint64_t sendBytes = number(argc, argv, "--send", 0);
	const uint64_t burstLines = number(argc, argv, "--burst", 0);
	const uint64_t lineLength = number(argc, argv, "--line-length", 0);
	const uint64_t seed = number(argc, argv, "--seed", 1);
	const uint64_t connections = number(argc, argv, "--connections", 1);
	bool sink = false, hangup = false, echo = false, lines = false, hold = false, keyUpdate = false;
	bool renegotiate = false;
	uint64_t renegotiations = number(argc, argv, "--renegotiations", 1);
	const uint64_t closeAfter = number(argc, argv, "--close-after", 0);
	const uint64_t resetAfter = number(argc, argv, "--reset-after", 0);
	const uint64_t stampSize = number(argc, argv, "--stamps", 0);
	const uint64_t stampCount = number(argc, argv, "--requests", 0);
	for (int i = 1; i < argc; i++) {
		sink = sink || std::string(argv[i]) == "--sink";
		hangup = hangup || std::string(argv[i]) == "--hangup";
		echo = echo || std::string(argv[i]) == "--echo";
		hold = hold || std::string(argv[i]) == "--hold";
		lines = lines || std::string(argv[i]) == "--lines";
		keyUpdate = keyUpdate || std::string(argv[i]) == "--key-update";
		renegotiate = renegotiate || std::string(argv[i]) == "--renegotiate";
	}

	SSL_CTX *ctx = serverContext(cert, key);
	if (tls == "1.2") {
		SSL_CTX_set_max_proto_version(ctx, TLS1_2_VERSION);
		SSL_CTX_set_cipher_list(ctx, "ECDHE-RSA-AES256-GCM-SHA384");
	}

	int port = 0;
	int listener = listenOn(static_cast<int>(number(argc, argv, "--port", 0)), &port);
	std::printf("port %d\n", port);
	std::fflush(stdout);

	for (uint64_t served = 0; served < connections; served++) {
		int fd = accept4(listener, nullptr, nullptr, SOCK_CLOEXEC);
		if (fd < 0)
			fail("accept");
		SSL *ssl = SSL_new(ctx);
		SSL_set_fd(ssl, fd);
		if (SSL_accept(ssl) != 1) {
			std::fprintf(stderr, "handshake failed\n");
			SSL_free(ssl);
			close(fd);
			continue;
		}

		if (stampSize && stampCount) {
			/* When each request is whole here: write_burst --latency subtracts its last write's time. */
			std::vector<uint64_t> stamps;
			unsigned char buffer[16384];
			uint64_t received = 0;
			size_t n = 0;
			while (stamps.size() < stampCount && SSL_read_ex(ssl, buffer, sizeof(buffer), &n)) {
				received += n;
				while (stamps.size() < stampCount && received >= (stamps.size() + 1) * stampSize) {
					struct timespec now;
					clock_gettime(CLOCK_MONOTONIC, &now);
					stamps.push_back(static_cast<uint64_t>(now.tv_sec) * 1000000000u +
							 static_cast<uint64_t>(now.tv_nsec));
				}
			}
			writeAll(ssl, reinterpret_cast<const unsigned char *>(stamps.data()), stamps.size() * sizeof(uint64_t));
			drain(ssl, nullptr);
		} else if (sendBytes) {
			bufferWrites(ssl);
			Pattern pattern(seed);
			unsigned char chunk[16384];
			uint64_t sent = 0;
			for (; sent < sendBytes && !(resetAfter && sent >= resetAfter); sent += sizeof(chunk)) {
				size_t n = static_cast<size_t>(std::min<uint64_t>(sizeof(chunk), sendBytes - sent));
				pattern.fill(chunk, n);
				writeAll(ssl, chunk, n);
			}
			(void)BIO_flush(SSL_get_wbio(ssl));
			if (resetAfter) {
				reset(ssl, fd);
				continue;
			}
			SSL_shutdown(ssl);
			drain(ssl, nullptr);
		} else if (burstLines) {
			cork(fd, 1);
			for (uint64_t i = 0; i < burstLines; i++) {
				char number[32];
				std::snprintf(number, sizeof(number), "line %06llu", static_cast<unsigned long long>(i));
				std::string line = number;
				if (line.size() + 1 < lineLength)
					line.append(lineLength - line.size() - 1, 'x');
				line += '\n';
				writeAll(ssl, reinterpret_cast<const unsigned char *>(line.data()), line.size());
			}
			if (hangup) {
				SSL_shutdown(ssl);
				shutdown(fd, SHUT_WR);
			}
			cork(fd, 0);
			drain(ssl, nullptr);
		} else if (echo) {
			unsigned char buffer[16384];
			size_t n = 0;
			while (SSL_read_ex(ssl, buffer, sizeof(buffer), &n)) {
				if (keyUpdate && !SSL_key_update(ssl, SSL_KEY_UPDATE_REQUESTED))
					fail("SSL_key_update");
				if (renegotiate) {
					if (!SSL_renegotiate(ssl) || SSL_do_handshake(ssl) != 1)
						fail("SSL_renegotiate");
					renegotiate = --renegotiations > 0;
				}
				writeAll(ssl, buffer, n);
			}
		} else if (lines) {
			std::string line;
			char c = 0;
			size_t n = 0;
			while (SSL_read_ex(ssl, &c, 1, &n)) {
				if (c != '\n') {
					line += c;
					continue;
				}
				std::printf("line %s\n", line.c_str());
				std::fflush(stdout);
				line.clear();
			}
		} else if (sink && resetAfter) {
			if (hold) {
				char line[64];
				if (!std::fgets(line, sizeof(line), stdin))
					fail("--hold: stdin closed");
			}
			unsigned char buffer[16384];
			size_t n = 0;
			for (uint64_t received = 0; received < resetAfter && SSL_read_ex(ssl, buffer, sizeof(buffer), &n);)
				received += n;
			reset(ssl, fd);
			continue;
		} else if (sink && closeAfter) {
			unsigned char buffer[16384];
			size_t n = 0;
			Sha256 digest;
			uint64_t received = 0;
			while (received < closeAfter && SSL_read_ex(ssl, buffer, sizeof(buffer), &n)) {
				digest.update(buffer, n);
				received += n;
			}
			SSL_shutdown(ssl);
			while (SSL_read_ex(ssl, buffer, sizeof(buffer), &n)) {
				digest.update(buffer, n);
				received += n;
			}
			std::printf("received %llu sha256 %s\n", static_cast<unsigned long long>(received),
				    digest.hex().c_str());
			std::fflush(stdout);
		} else if (sink) {
			if (hold) {
				char line[64];
				if (!std::fgets(line, sizeof(line), stdin))
					fail("--hold: stdin closed");
			}
			Sha256 digest;
			uint64_t received = drain(ssl, &digest);
			std::printf("received %llu sha256 %s\n", static_cast<unsigned long long>(received),
				    digest.hex().c_str());
			std::fflush(stdout);
		}
		SSL_shutdown(ssl);
		SSL_free(ssl);
		close(fd);
	}
	SSL_CTX_free(ctx);
	return 0;
}
