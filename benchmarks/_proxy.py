"""A loopback TCP proxy that adds a fixed delay to every HTTP request (helper of ``run.py``).

Remote benchmark rows talk to the S3 server through it, so every round trip costs what it
costs on a cloud store: each request (a chunk from the client that starts with an HTTP
method) waits ``--delay`` seconds before it is forwarded; response bytes flow back
unchanged. It runs in its own process, so it never competes for the benchmark process's
GIL. With ``--rate`` each connection's responses are also paced to that many bytes per second
(a cloud store's connection carries ~40-100 MiB/s), so one large range is as slow as it is
there and only many concurrent ranges fill the link.

The proxy models latency, not a CPU cost: on a cloud store the bytes do not pass through a
process on the client's cores. So response bodies are moved by the kernel (``os.splice``
from the server's socket into a pipe and on to the client's, no copy into Python) and each
direction of each connection is one blocking thread. Where ``os.splice`` is missing
(not Linux), bodies are relayed with ``recv``/``sendall``. Measured on the 2-core bench
machine: relaying one 86 MB MATLAB load took 0.07-0.10 CPU-s with the former asyncio relay,
0.04-0.07 CPU-s spliced (the rest is the kernel's loopback copies).

Usage: ``python benchmarks/_proxy.py --target 127.0.0.1:PORT --delay 0.03 [--rate BYTES/S]``;
prints the port it listens on (one line), then serves until terminated.

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


class _Pace:
    """Holds a connection's responses to ``rate`` bytes per second (0: unlimited); idle time
    earns no credit."""

    def __init__(self, rate: float) -> None:
        self.rate = rate
        self.free = 0.0  # when the link is free again

    def piece(self) -> int:
        """Bytes to move at once (small when paced, so the pace is smooth)."""
        return PIECE if not self.rate else min(PIECE, max(1 << 14, int(self.rate / 100)))

    def sent(self, n: int) -> None:
        if self.rate:
            now = time.monotonic()
            self.free = max(self.free, now) + n / self.rate
            if self.free > now:
                time.sleep(self.free - now)


def _responses(src: socket.socket, dst: socket.socket, rate: float) -> None:
    """Server to client: spliced by the kernel where it can, relayed otherwise."""
    pace = _Pace(rate)
    piece = pace.piece()
    with contextlib.suppress(OSError):
        splice = getattr(os, "splice", None)
        if splice is None:  # pragma: no cover - not Linux
            while data := src.recv(piece):
                dst.sendall(data)
                pace.sent(len(data))
        else:
            read_end, write_end = os.pipe()
            try:
                while n := splice(src.fileno(), write_end, piece):
                    left = n
                    while left:
                        left -= splice(read_end, dst.fileno(), left)
                    pace.sent(n)
            finally:
                os.close(read_end)
                os.close(write_end)
    _close_both(src, dst)


def _close_both(a: socket.socket, b: socket.socket) -> None:
    for s in (a, b):
        with contextlib.suppress(OSError):
            s.shutdown(socket.SHUT_RDWR)


def _serve(host: str, port: int, delay: float, rate: float) -> None:
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
        threading.Thread(target=_responses, args=(upstream, client, rate), daemon=True).start()


@contextlib.contextmanager
def latency_proxy(endpoint: str, delay: float, rate: float = 0) -> Iterator[str]:
    """Run the proxy in front of ``endpoint`` (``http://host:port``), each response paced
    to ``rate`` bytes per second and connection (0: unlimited); yields its URL."""
    target = endpoint.removeprefix("http://")
    args = ["--target", target, "--delay", str(delay), "--rate", str(rate)]
    proc = subprocess.Popen(
        [sys.executable, str(Path(__file__)), *args],
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
    parser.add_argument(
        "--rate", type=float, default=0, help="bytes per second per connection (0: unlimited)"
    )
    args = parser.parse_args()
    host, _, port = args.target.rpartition(":")
    _serve(host, int(port), args.delay, args.rate)


if __name__ == "__main__":
    main()
