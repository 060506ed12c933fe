"""What python's ssl module answers about CA files, printed so that runs with and without
the shim can be compared line by line.

  store BADFILE...        the default store (counts, order) and the error for each bad file
  verify CAFILE PORT...   a fresh context per port, handshake as localhost, print the outcome
  rewrite CAFILE NEW PORT1 PORT2
                          verify both ports, rewrite CAFILE in place with NEW (same inode and
                          size, old mtime restored), verify both again
  vanish CAFILE PORT      verify; truncate CAFILE to half, then remove it, then put it back,
                          loading it into a fresh context after each step
  mix file:PATH|data:PATH...
                          one context loading each CA file (cafile) or its text (cadata),
                          in order; then its store's certificates in order
"""
import hashlib
import os
import socket
import ssl
import sys


def store(bad_files):
    context = ssl.create_default_context()
    print("stats", context.cert_store_stats())
    der = context.get_ca_certs(binary_form=True)
    print("ca certs", len(der), hashlib.sha256(b"".join(der)).hexdigest()[:16])
    for path in bad_files:
        try:
            ssl.create_default_context(cafile=path)
            print(os.path.basename(path), "loaded")
        except Exception as error:  # the exact type and text are what is compared
            print(os.path.basename(path), type(error).__name__, error)


def attempt(cafile, port):
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.load_verify_locations(cafile)
    try:
        with socket.create_connection(("127.0.0.1", int(port)), timeout=30) as raw:
            with context.wrap_socket(raw, server_hostname="localhost") as tls:
                while tls.recv(4096):  # all the server sends (tls_server --send N)
                    pass
                return "ok"
    except ssl.SSLCertVerificationError as error:
        return f"rejected {error.verify_code} {error.verify_message}"


def verify(cafile, ports):
    for port in ports:
        print("port", port, attempt(cafile, port))


def rewrite(cafile, new, port1, port2):
    print("before", attempt(cafile, port1), "/", attempt(cafile, port2))
    old = os.stat(cafile)
    with open(new, "rb") as source:
        content = source.read()
    with open(cafile, "r+b") as target:
        target.write(content)
        target.truncate()
    os.utime(cafile, ns=(old.st_atime_ns, old.st_mtime_ns))
    now = os.stat(cafile)
    print("same inode, size, mtime:", now.st_ino == old.st_ino, now.st_size == old.st_size,
          now.st_mtime_ns == old.st_mtime_ns)
    print("after", attempt(cafile, port1), "/", attempt(cafile, port2))


def load(cafile):
    try:
        ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT).load_verify_locations(cafile)
        return "loaded"
    except Exception as error:  # the exact type and text are what is compared
        return f"{type(error).__name__} {error}"


def vanish(cafile, port):
    with open(cafile, "rb") as source:
        content = source.read()
    print("whole", attempt(cafile, port))
    with open(cafile, "r+b") as target:
        target.truncate(len(content) // 2)
    print("truncated", load(cafile))
    os.remove(cafile)
    print("removed", load(cafile))
    with open(cafile, "wb") as target:
        target.write(content)
    print("restored", attempt(cafile, port))


def mix(loads):
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    for load in loads:
        kind, path = load.split(":", 1)
        if kind == "file":
            context.load_verify_locations(cafile=path)
        else:
            with open(path) as f:
                context.load_verify_locations(cadata=f.read())
    print("stats", context.cert_store_stats())
    for der in context.get_ca_certs(binary_form=True):
        print(" ", hashlib.sha256(der).hexdigest()[:16])


if __name__ == "__main__":
    command, arguments = sys.argv[1], sys.argv[2:]
    if command == "store":
        store(arguments)
    elif command == "verify":
        verify(arguments[0], arguments[1:])
    elif command == "rewrite":
        rewrite(*arguments)
    elif command == "vanish":
        vanish(*arguments)
    elif command == "mix":
        mix(arguments)
    else:
        sys.exit(f"unknown command {command}")
