"""What the tests' python servers share: one TLS client on a free port of 127.0.0.1."""
import socket, ssl


def accept_one(cert, key):
    """Listens, prints "port N" once listening, accepts one client; returns its TLS socket."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert, key)
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(1)
    print("port", listener.getsockname()[1], flush=True)
    conn, _ = listener.accept()
    listener.close()
    return context.wrap_socket(conn, server_side=True)
