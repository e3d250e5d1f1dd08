"""A loopback TCP proxy that adds a fixed delay to every HTTP request (helper of ``run.py``).

Remote benchmark rows talk to the S3 server through it, so every round trip costs what it
costs on a cloud store: each request (a chunk from the client that starts with an HTTP
method) waits ``--delay`` seconds before it is forwarded; response bytes flow back
unchanged. It runs in its own process, so it never competes for the benchmark process's
GIL.

The proxy models latency, not a CPU cost: on a cloud store the bytes do not pass through a
process on the client's cores. So response bodies are moved by the kernel (``os.splice``
from the server's socket into a pipe and on to the client's, no copy into Python) and each
direction of each connection is one blocking thread. Where ``os.splice`` is missing
(not Linux), bodies are relayed with ``recv``/``sendall``. Measured on the 2-core bench
machine: relaying one 86 MB MATLAB load took 0.07-0.10 CPU-s with the former asyncio relay,
0.04-0.07 CPU-s spliced (the rest is the kernel's loopback copies).

Usage: ``python benchmarks/_proxy.py --target 127.0.0.1:PORT --delay 0.03``; prints the
port it listens on (one line), then serves until terminated.

:func:`latency_proxy` starts it from Python as a context manager yielding the endpoint URL.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

#: How a request starts (HTTP/1.1 clients send each request in a new write).
METHODS = (b"GET ", b"HEAD ", b"PUT ", b"POST ", b"DELETE ", b"OPTIONS ")
#: Bytes per read or splice of either direction.
PIECE = 1 << 20


def _requests(src: socket.socket, dst: socket.socket, delay: float) -> None:
    """Client to server: each request waits ``delay`` seconds, then goes on unchanged."""
    with contextlib.suppress(OSError):
        while data := src.recv(PIECE):
            if delay and data.startswith(METHODS):
                time.sleep(delay)
            dst.sendall(data)
    _close_both(src, dst)


def _responses(src: socket.socket, dst: socket.socket) -> None:
    """Server to client: spliced by the kernel where it can, relayed otherwise."""
    with contextlib.suppress(OSError):
        splice = getattr(os, "splice", None)
        if splice is None:  # pragma: no cover - not Linux
            while data := src.recv(PIECE):
                dst.sendall(data)
        else:
            read_end, write_end = os.pipe()
            try:
                while n := splice(src.fileno(), write_end, PIECE):
                    while n:
                        n -= splice(read_end, dst.fileno(), n)
            finally:
                os.close(read_end)
                os.close(write_end)
    _close_both(src, dst)


def _close_both(a: socket.socket, b: socket.socket) -> None:
    for s in (a, b):
        with contextlib.suppress(OSError):
            s.shutdown(socket.SHUT_RDWR)


def _serve(host: str, port: int, delay: float) -> None:
    server = socket.create_server(("127.0.0.1", 0), backlog=256)
    print(server.getsockname()[1], flush=True)
    while True:
        client, _ = server.accept()
        try:
            upstream = socket.create_connection((host, port))
        except OSError:
            client.close()
            continue
        for s in (client, upstream):
            s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        threading.Thread(target=_requests, args=(client, upstream, delay), daemon=True).start()
        threading.Thread(target=_responses, args=(upstream, client), daemon=True).start()


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
    _serve(host, int(port), args.delay)


if __name__ == "__main__":
    main()
