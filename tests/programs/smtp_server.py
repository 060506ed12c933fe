"""A small SMTP server over TLS (implicit, as SMTPS) for the tests: what smtplib sends.

Answers each command with one TLS record, as line servers write, and prints
"message N sha256 H" for each message it receives (the DATA lines, dot-unstuffed).
Usage: smtp_server.py CERT KEY   (prints "port N" once it listens; serves one client)
"""
import hashlib, sys

from tls_listener import accept_one

tls = accept_one(sys.argv[1], sys.argv[2])
reader = tls.makefile("rb")
tls.sendall(b"220 tlstune test server\r\n")
while True:
    line = reader.readline()
    if not line:
        break
    verb = line.split(b" ", 1)[0].strip().upper()
    if verb in (b"EHLO", b"HELO"):
        tls.sendall(b"250-tlstune\r\n")
        tls.sendall(b"250 8BITMIME\r\n")
    elif verb in (b"MAIL", b"RCPT", b"RSET", b"NOOP"):
        tls.sendall(b"250 ok\r\n")
    elif verb == b"DATA":
        tls.sendall(b"354 go ahead\r\n")
        body = []
        for data in iter(reader.readline, b""):
            if data == b".\r\n":
                break
            body.append(data[1:] if data.startswith(b"..") else data)
        message = b"".join(body)
        print("message", len(message), "sha256", hashlib.sha256(message).hexdigest(), flush=True)
        tls.sendall(b"250 queued\r\n")
    elif verb == b"QUIT":
        tls.sendall(b"221 bye\r\n")
        break
    else:
        tls.sendall(b"500 unknown\r\n")
tls.close()
