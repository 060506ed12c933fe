"""A small FTP server with explicit TLS (AUTH TLS, PROT P) for the tests: just what
python's ftplib.FTP_TLS asks for to store a file and fetch it back, in one directory.

Every reply is its own TLS record, and each data connection is TLS too, ended by a
close_notify exchange (ftplib unwraps it). Prints "received N sha256 H" for each STOR.
Usage: ftp_server.py CERT KEY DIR   (prints "port N" once it listens; serves one client)
"""
import hashlib, os, socket, sys

from tls_listener import accept_plain, server_context

cert, key, directory = sys.argv[1:4]
context = server_context(cert, key)
control = accept_plain()  # plain until AUTH TLS
passive = None


def reply(text):
    control.sendall(text.encode() + b"\r\n")


def data_connection():
    global passive
    conn, _ = passive.accept()
    passive.close()
    passive = None
    return context.wrap_socket(conn, server_side=True)


reply("220 tlstune test server ready")
reader = control.makefile("rb")
while True:
    line = reader.readline()
    if not line:
        break
    verb, _, argument = line.decode().strip().partition(" ")
    verb = verb.upper()
    if verb == "AUTH":
        reply("234 AUTH TLS ok")
        control = context.wrap_socket(control, server_side=True)
        reader = control.makefile("rb")
    elif verb == "USER":
        reply("331 password please")
    elif verb in ("PASS", "PBSZ", "PROT", "TYPE"):
        reply("230 logged in" if verb == "PASS" else "200 ok")
    elif verb == "PASV":
        passive = socket.socket()
        passive.bind(("127.0.0.1", 0))
        passive.listen(1)
        port = passive.getsockname()[1]
        reply("227 Entering Passive Mode (127,0,0,1,%d,%d)" % (port >> 8, port & 255))
    elif verb == "STOR":
        reply("150 send it")
        data = data_connection()
        digest, size = hashlib.sha256(), 0
        with open(os.path.join(directory, os.path.basename(argument)), "wb") as out:
            while chunk := data.recv(65536):
                out.write(chunk)
                digest.update(chunk)
                size += len(chunk)
        data.unwrap().close()
        print("received", size, "sha256", digest.hexdigest(), flush=True)
        reply("226 stored")
    elif verb == "RETR":
        reply("150 here it comes")
        data = data_connection()
        with open(os.path.join(directory, os.path.basename(argument)), "rb") as source:
            while chunk := source.read(4096):
                data.sendall(chunk)
        data.unwrap().close()
        reply("226 sent")
    elif verb == "NOOP":
        reply("200 still here")
    elif verb == "QUIT":
        reply("221 bye")
        break
    else:
        reply("502 not here")
control.close()
