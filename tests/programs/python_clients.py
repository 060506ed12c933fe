"""Python's own TLS clients for the tests, each printing what it got for comparison.

  imap CAFILE PORT          imaplib.IMAP4_SSL: login, select, fetch message 1; prints the
                            number of body lines and their sha256
  smtp CAFILE PORT LINES    smtplib.SMTP_SSL: one message of LINES lines; prints its sha256
                            as the server will (the CRLF body smtplib sends)
  asyncio CAFILE PORT LINES asyncio streams with TLS against an echo server: writes LINES
                            lines, reads them back; prints their count and sha256
  ftp CAFILE PORT FILE      ftplib.FTP_TLS with a protected data channel: 100 NOOPs, stores
                            FILE, fetches it back; prints the sha256 of both
"""
import asyncio, ftplib, hashlib, imaplib, smtplib, ssl, sys


def context(cafile):
    return ssl.create_default_context(cafile=cafile)


def imap(cafile, port):
    client = imaplib.IMAP4_SSL("localhost", int(port), ssl_context=context(cafile), timeout=60)
    client.login("user", "pass")
    client.select("INBOX", readonly=True)
    _, data = client.fetch("1", "(BODY[])")
    body = data[0][1]
    client.logout()
    print("lines", body.count(b"\n"), "sha256", hashlib.sha256(body).hexdigest())


def smtp(cafile, port, lines):
    body = "".join("line %06d of the message\r\n" % i for i in range(int(lines)))
    with smtplib.SMTP_SSL("localhost", int(port), context=context(cafile), timeout=60) as client:
        client.sendmail("a@example.org", ["b@example.org"], body)
    print("message", len(body), "sha256", hashlib.sha256(body.encode()).hexdigest())


async def echo(cafile, port, lines):
    reader, writer = await asyncio.open_connection(
        "127.0.0.1", int(port), ssl=context(cafile), server_hostname="localhost")
    sent = hashlib.sha256()
    got = hashlib.sha256()
    count = 0
    for i in range(int(lines)):
        line = b"line %06d\n" % i
        sent.update(line)
        writer.write(line)
        if i % 100 == 99:
            await writer.drain()
    await writer.drain()
    while count < int(lines):
        line = await asyncio.wait_for(reader.readline(), 60)
        if not line:
            break
        got.update(line)
        count += 1
    writer.close()
    await writer.wait_closed()
    print("lines", count, "same" if got.digest() == sent.digest() else "different")


def ftp(cafile, port, path):
    client = ftplib.FTP_TLS(context=context(cafile), timeout=60)
    client.connect("localhost", int(port))
    client.login("user", "pass")
    client.prot_p()
    for _ in range(100):  # small commands, each answered before the next
        client.voidcmd("NOOP")
    with open(path, "rb") as source:
        client.storbinary("STOR upload", source)
    with open(path, "rb") as source:
        sent = hashlib.sha256(source.read()).hexdigest()
    got = hashlib.sha256()
    client.retrbinary("RETR upload", got.update)
    client.quit()
    print("stored", sent, "fetched", got.hexdigest())


if __name__ == "__main__":
    command, arguments = sys.argv[1], sys.argv[2:]
    if command == "imap":
        imap(*arguments)
    elif command == "smtp":
        smtp(*arguments)
    elif command == "asyncio":
        asyncio.run(echo(*arguments))
    elif command == "ftp":
        ftp(*arguments)
    else:
        sys.exit(f"unknown command {command}")
