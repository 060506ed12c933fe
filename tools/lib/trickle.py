"""Trickle traffic for tools/tlstune-bench: small writes spaced further apart than the
coalescing delay, where coalescing can merge nothing and must cost nothing.

Usage:
  trickle.py backend PORT SECONDS             plain TCP: each connection gets 1000 B every
                                              8 ms for SECONDS, then the end of stream
  trickle.py tls-server PORT SECONDS CERT KEY the same over TLS, from python's threading
                                              server (one thread per connection)
  trickle.py clients PORT N                   N TLS clients at once, each reading to the end;
                                              prints "bytes TOTAL"; fails if any
                                              client received nothing
Every server prints "ready" once it listens, and serves until killed.
"""
import socket
import socketserver
import ssl
import sys
import threading
import time

CHUNK = b"t" * 1000
INTERVAL = 0.008


def trickle(send, seconds):
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        send(CHUNK)
        time.sleep(INTERVAL)


class Trickler(socketserver.BaseRequestHandler):
    seconds = 1.0
    context = None

    def handle(self):
        connection = self.request
        if self.context:
            connection = self.context.wrap_socket(connection, server_side=True)
        try:
            trickle(connection.sendall, self.seconds)
        except OSError:
            return
        if self.context:
            try:
                connection.unwrap()
            except (OSError, ssl.SSLError):
                pass


class Server(socketserver.ThreadingTCPServer):
    allow_reuse_address = True
    daemon_threads = True
    # 20 clients connect at once: with the default backlog of 5 a relay's connection can
    # be dropped from the full queue after its handshake, and then waits forever.
    request_queue_size = 128


def serve(port, seconds, context=None):
    Trickler.seconds = seconds
    Trickler.context = context
    with Server(("127.0.0.1", port), Trickler) as server:
        print("ready", flush=True)
        server.serve_forever()


def clients(port, count):
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    total = [0] * count

    def read(index):
        try:
            read_all(index)
        except OSError as error:
            print("client", index, "failed:", error, file=sys.stderr, flush=True)

    def read_all(index):
        with socket.create_connection(("127.0.0.1", port)) as raw:
            with context.wrap_socket(raw) as connection:
                while True:
                    try:
                        data = connection.recv(65536)
                    except (ssl.SSLEOFError, ConnectionResetError):
                        break
                    if not data:
                        break
                    total[index] += len(data)

    threads = [threading.Thread(target=read, args=(i,)) for i in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    print("bytes", sum(total), flush=True)
    # A client that could not connect or read got nothing: the run failed, not a number.
    if not all(total):
        sys.exit("trickle.py: %d of %d clients received nothing" % (total.count(0), count))


def main(argv):
    role, port = argv[1], int(argv[2])
    if role == "backend":
        serve(port, float(argv[3]))
    elif role == "tls-server":
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(argv[4], argv[5])
        serve(port, float(argv[3]), context)
    elif role == "clients":
        clients(port, int(argv[3]))
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main(sys.argv)
