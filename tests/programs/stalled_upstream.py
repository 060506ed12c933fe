"""An HTTP upstream that accepts, then reads nothing until its stdin gives a line.

Usage: stalled_upstream.py. Prints "port N" once it listens on 127.0.0.1, "accepted" when
the proxy connects, then, after the line on stdin, reads one request and answers it with
the sha256 of its body, and prints "body N sha256 H".
"""
import hashlib
import socket
import sys


def main():
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(1)
    print("port", listener.getsockname()[1], flush=True)
    connection, _ = listener.accept()
    print("accepted", flush=True)
    sys.stdin.readline()

    stream = connection.makefile("rb")
    length = 0
    while True:
        line = stream.readline()
        if line in (b"\r\n", b""):
            break
        name, _, value = line.decode("latin-1").partition(":")
        if name.strip().lower() == "content-length":
            length = int(value)
    digest = hashlib.sha256()
    left = length
    while left:
        chunk = stream.read(min(left, 1 << 16))
        if not chunk:
            break
        digest.update(chunk)
        left -= len(chunk)
    answer = digest.hexdigest().encode()
    connection.sendall(b"HTTP/1.0 200 OK\r\nContent-Length: %d\r\n\r\n" % len(answer) + answer)
    connection.close()
    print("body", length - left, "sha256", digest.hexdigest(), flush=True)


main()
