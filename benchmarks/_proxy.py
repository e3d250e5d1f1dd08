"""A loopback TCP proxy that adds a fixed delay to every HTTP request (helper of ``run.py``).

Remote benchmark rows talk to the S3 server through it, so every round trip costs what it
costs on a cloud store: each request (a chunk from the client that starts with an HTTP
method) waits ``--delay`` seconds before it is forwarded; response bytes flow back
unchanged. It runs in its own process, so its CPU time and its event loop never compete
for the benchmark process's GIL.

Usage: ``python benchmarks/_proxy.py --target 127.0.0.1:PORT --delay 0.03``; prints the
port it listens on (one line), then serves until terminated.

:func:`latency_proxy` starts it from Python as a context manager yielding the endpoint URL.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

#: How a request starts (HTTP/1.1 clients send each request in a new write).
METHODS = (b"GET ", b"HEAD ", b"PUT ", b"POST ", b"DELETE ", b"OPTIONS ")
#: Bytes per read of either direction.
PIECE = 1 << 20


async def _pump(src: asyncio.StreamReader, dst: asyncio.StreamWriter, delay: float | None) -> None:
    try:
        while data := await src.read(PIECE):
            if delay and data.startswith(METHODS):
                await asyncio.sleep(delay)
            dst.write(data)
            await dst.drain()
    except (ConnectionError, asyncio.IncompleteReadError):
        pass  # one side went away: close both below
    finally:
        with contextlib.suppress(OSError, RuntimeError):
            dst.close()


async def _serve(host: str, port: int, delay: float) -> None:
    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            up_reader, up_writer = await asyncio.open_connection(host, port, limit=PIECE)
        except OSError:
            writer.close()
            return
        await asyncio.gather(_pump(reader, up_writer, delay), _pump(up_reader, writer, None))

    server = await asyncio.start_server(handle, "127.0.0.1", 0, limit=PIECE)
    print(server.sockets[0].getsockname()[1], flush=True)
    async with server:
        await server.serve_forever()


@contextlib.contextmanager
def latency_proxy(endpoint: str, delay: float) -> Iterator[str]:
    """Run the proxy in front of ``endpoint`` (``http://host:port``); yields its URL."""
    target = endpoint.removeprefix("http://")
    proc = subprocess.Popen(
        [sys.executable, str(Path(__file__)), "--target", target, "--delay", str(delay)],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline().strip()
        if not line.isdigit():
            raise RuntimeError(f"latency proxy did not start (printed {line!r})")
        yield f"http://127.0.0.1:{line}"
    finally:
        proc.terminate()
        proc.wait(10)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--target", required=True, help="HOST:PORT of the server")
    parser.add_argument("--delay", type=float, default=0.03, help="seconds per request")
    args = parser.parse_args()
    host, _, port = args.target.rpartition(":")
    asyncio.run(_serve(host, int(port), args.delay))


if __name__ == "__main__":
    main()
