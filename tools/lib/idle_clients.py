"""Holds N idle keep-alive TLS connections to a local server, as a busy server's clients do.

Usage: idle_clients.py N PORT. Each connection makes one GET / (HTTP/1.1, keep-alive) and
reads the answer's headers, then stays open. Prints "idle N" once all are open, then waits
for its standard input to end and closes them.
"""
import asyncio
import ssl
import sys


async def open_one(port, context, gate):
    async with gate:
        reader, writer = await asyncio.open_connection("127.0.0.1", port, ssl=context)
        writer.write(b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
        await writer.drain()
        await reader.readuntil(b"\r\n\r\n")
        return writer


async def main(count, port):
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    gate = asyncio.Semaphore(64)
    writers = await asyncio.gather(*(open_one(port, context, gate) for _ in range(count)))
    print("idle", len(writers), flush=True)
    await asyncio.get_running_loop().run_in_executor(None, sys.stdin.read)
    for writer in writers:
        writer.close()


asyncio.run(main(int(sys.argv[1]), int(sys.argv[2])))
