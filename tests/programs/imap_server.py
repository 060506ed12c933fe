"""A small IMAP server over TLS for the tests: just what curl's IMAPS client asks for.

Each response line is its own TLS record, as line-by-line servers write; the FETCH
response goes out in one TCP segment (TCP_CORK), so a client with read-ahead takes the
message and the tagged OK into OpenSSL's buffer in one read: the seed's curl IMAPS stall.
Usage: imap_server.py CERT KEY LINES   (prints "port N" once it listens; serves one client)
"""
import socket, sys

from tls_listener import accept_one

lines = int(sys.argv[3])
tls = accept_one(sys.argv[1], sys.argv[2])
body = b"".join(b"line %06d of the message\r\n" % i for i in range(lines))
def send(*records):
    for record in records:  # one TLS record each, as a line-by-line server writes
        tls.sendall(record)
send(b"* OK IMAP4rev1 tlstune test server ready\r\n")
reader = tls.makefile("rb")
while True:
    line = reader.readline()
    if not line:
        break
    tag, command = line.split(b" ", 2)[:2]
    command = command.strip().upper()
    if command == b"CAPABILITY":
        send(b"* CAPABILITY IMAP4rev1\r\n", tag + b" OK done\r\n")
    elif command == b"LOGIN":
        send(tag + b" OK logged in\r\n")
    elif command in (b"SELECT", b"EXAMINE"):
        send(b"* 1 EXISTS\r\n", b"* FLAGS (\\Seen)\r\n", tag + b" OK [READ-ONLY] selected\r\n")
    elif command in (b"FETCH", b"UID"):
        tls.setsockopt(socket.IPPROTO_TCP, socket.TCP_CORK, 1)
        send(b"* 1 FETCH (BODY[] {%d}\r\n" % len(body))
        send(*body.splitlines(keepends=True))
        send(b")\r\n", tag + b" OK fetched\r\n")
        tls.setsockopt(socket.IPPROTO_TCP, socket.TCP_CORK, 0)
    elif command == b"LOGOUT":
        send(b"* BYE\r\n", tag + b" OK bye\r\n")
        break
    else:
        send(tag + b" BAD unknown\r\n")
tls.close()
