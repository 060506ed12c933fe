"""What the tests' python servers share: one client on a free port of 127.0.0.1."""
import socket, ssl


def server_context(cert, key):
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert, key)
    return context


def accept_plain():
    """Listens, prints "port N" once listening, accepts one client; returns its socket."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(1)
    print("port", listener.getsockname()[1], flush=True)
    conn, _ = listener.accept()
    listener.close()
    return conn


def accept_one(cert, key):
    """accept_plain(), then TLS: returns the client's TLS socket."""
    return server_context(cert, key).wrap_socket(accept_plain(), server_side=True)
