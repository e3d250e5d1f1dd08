"""A loopback TCP proxy that shapes HTTP traffic like a cloud store (helper of the benchmarks).

Remote benchmark rows talk to the S3 server through it, so every request costs what it costs
on a cloud object store:

- **first-byte delay**: each request (a chunk from the client that starts with an HTTP
  method) waits ``--delay`` seconds before it is forwarded;
- **per-connection bandwidth**: with ``--bandwidth`` N (MiB/s, 0 = unlimited) the responses
  of each connection flow back at most N MiB/s (and request bodies, uploads, go up at most
  N MiB/s), as one TCP stream from a cloud store does
  (S3 serves roughly 40-90 MiB/s per connection; a client gets more only by opening more
  connections). Each connection has its own token bucket, one piece deep (no bursts): a piece
  of the response is handed on only when the link would have finished sending it.

It runs in its own process, so it never competes for the benchmark process's GIL. The
proxy models the network, not a CPU cost: on a cloud store the bytes do not pass through a
process on the client's cores. So response bodies are moved by the kernel (``os.splice``
from the server's socket into a pipe and on to the client's, no copy into Python); pacing
splices in pieces (at most 256 KiB, about 5 ms of the link) and sleeps between them. Each
direction of each connection is one blocking thread. Where ``os.splice`` is missing (not
Linux), bodies are relayed with ``recv``/``sendall``. Measured on the 2-core bench machine:
relaying one 86 MB MATLAB load took 0.07-0.10 CPU-s with the former asyncio relay, 0.04-0.07
CPU-s spliced (the rest is the kernel's loopback copies).

Usage: ``python benchmarks/_proxy.py --target 127.0.0.1:PORT --delay 0.03 --bandwidth 40``;
prints the port it listens on (one line), then serves until terminated. Lines on its
standard input control it while it runs, each answered by one line on standard output:

- ``stats``: a JSON object of counters since the start (``connections``, ``requests``,
  ``response_bytes``: every byte sent back to clients, HTTP headers included);
- ``set DELAY BANDWIDTH``: new shaping for every connection, open ones included (``ok``).

:func:`shaping_proxy` starts it from Python as a context manager yielding a
:class:`ShapingProxy` (its URL, counters and settings); :func:`latency_proxy` yields only
the URL of a delay-only proxy.
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import json
import os
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

#: How a request starts (HTTP/1.1 clients send each request in a new write).
METHODS = (b"GET ", b"HEAD ", b"PUT ", b"POST ", b"DELETE ", b"OPTIONS ")
#: Bytes per read or splice of either direction when not paced.
PIECE = 1 << 20
#: Largest piece of a paced response, and the link time a piece should take.
PACED_PIECE = 256 << 10
PACED_SECONDS = 0.005
#: Smallest piece of a paced response (a slow link still moves pieces this big).
PACED_MIN = 64 << 10
#: The GIL's switch interval in the proxy (Python's default: 5 ms, a whole piece).
SWITCH_INTERVAL = 0.0002
#: ``fcntl`` command to resize a pipe (Linux); the default pipe holds 64 KiB.
F_SETPIPE_SZ = 1031


class Shaping:
    """The shaping in force and the counters, shared by every connection's threads."""

    def __init__(self, delay: float, bandwidth_mib: float) -> None:
        self.delay = delay
        self.rate = bandwidth_mib * 2**20  # bytes per second; 0 = unlimited
        self._lock = threading.Lock()
        self.connections = 0
        self.requests = 0
        self.response_bytes = 0

    def set(self, delay: float, bandwidth_mib: float) -> None:
        self.delay = delay
        self.rate = bandwidth_mib * 2**20

    def piece(self) -> int:
        """Bytes to move at once: about :data:`PACED_SECONDS` of the link when paced."""
        rate = self.rate
        if not rate:
            return PIECE
        return max(PACED_MIN, min(PACED_PIECE, int(rate * PACED_SECONDS)))

    def count(self, requests: int = 0, response_bytes: int = 0, connections: int = 0) -> None:
        with self._lock:
            self.requests += requests
            self.response_bytes += response_bytes
            self.connections += connections

    def stats(self) -> dict[str, int]:
        with self._lock:
            return {
                "connections": self.connections,
                "requests": self.requests,
                "response_bytes": self.response_bytes,
            }


class _Link:
    """One connection's downstream link: a token bucket holding at most one piece's worth
    (:data:`PACED_SECONDS`) of credit, so a late wake-up is made up but an idle link
    gains no burst."""

    def __init__(self, shaping: Shaping) -> None:
        self.shaping = shaping
        self.free_at = 0.0  # monotonic time at which the link has sent all it was given

    def send(self, nbytes: int) -> None:
        """Wait until ``nbytes`` more would have crossed the link (no wait if unlimited)."""
        rate = self.shaping.rate
        if not rate:
            return
        now = time.monotonic()
        # an idle link earns at most PACED_SECONDS of credit: enough to make up for a sleep
        # that overslept, too little for a burst
        self.free_at = max(self.free_at, now - PACED_SECONDS) + nbytes / rate
        if self.free_at > now:
            time.sleep(self.free_at - now)


def _requests(src: socket.socket, dst: socket.socket, shaping: Shaping) -> None:
    """Client to server: each request waits the first-byte delay, then goes on, its body
    paced like responses (uploads get the same per-connection bandwidth; a read's request
    is a few hundred bytes, which the pacing does not delay measurably)."""
    link = _Link(shaping)
    with contextlib.suppress(OSError):
        while data := src.recv(shaping.piece()):
            if data.startswith(METHODS):
                shaping.count(requests=1)
                if shaping.delay:
                    time.sleep(shaping.delay)
            link.send(len(data))
            dst.sendall(data)
    _close_both(src, dst)


def _responses(src: socket.socket, dst: socket.socket, shaping: Shaping) -> None:
    """Server to client, paced per connection: spliced by the kernel where it can, relayed
    otherwise."""
    link = _Link(shaping)
    with contextlib.suppress(OSError):
        splice = getattr(os, "splice", None)
        if splice is None:  # pragma: no cover - not Linux
            while data := src.recv(shaping.piece()):
                link.send(len(data))
                dst.sendall(data)
                shaping.count(response_bytes=len(data))
        else:
            read_end, write_end = os.pipe()
            try:
                with contextlib.suppress(OSError):  # a bigger pipe: fewer splices per piece
                    fcntl.fcntl(write_end, F_SETPIPE_SZ, PIECE)
                while n := splice(src.fileno(), write_end, shaping.piece()):
                    link.send(n)
                    shaping.count(response_bytes=n)
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


def _control(shaping: Shaping) -> None:
    """Answer ``stats`` and ``set DELAY BANDWIDTH`` lines on standard input."""
    for line in sys.stdin:
        words = line.split()
        if words == ["stats"]:
            print(json.dumps(shaping.stats()), flush=True)
        elif len(words) == 3 and words[0] == "set":
            shaping.set(float(words[1]), float(words[2]))
            print("ok", flush=True)
        elif words:
            print(json.dumps({"error": f"unknown command {line.strip()!r}"}), flush=True)


def _serve(host: str, port: int, shaping: Shaping) -> None:
    # a paced thread wakes every few ms and must get the GIL at once to keep its pace
    sys.setswitchinterval(SWITCH_INTERVAL)
    server = socket.create_server(("127.0.0.1", 0), backlog=256)
    print(server.getsockname()[1], flush=True)
    threading.Thread(target=_control, args=(shaping,), daemon=True).start()
    while True:
        client, _ = server.accept()
        try:
            upstream = socket.create_connection((host, port))
        except OSError:
            client.close()
            continue
        for s in (client, upstream):
            s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        shaping.count(connections=1)
        threading.Thread(target=_requests, args=(client, upstream, shaping), daemon=True).start()
        threading.Thread(target=_responses, args=(upstream, client, shaping), daemon=True).start()


@dataclass
class ShapingProxy:
    """A running proxy (from :func:`shaping_proxy`): its URL, counters and settings."""

    url: str
    proc: subprocess.Popen[str]
    delay: float
    bandwidth: float

    def _ask(self, line: str) -> str:
        if self.proc.stdin is None or self.proc.stdout is None:
            raise RuntimeError("the proxy was started without a control pipe")
        self.proc.stdin.write(line + "\n")
        self.proc.stdin.flush()
        return self.proc.stdout.readline().strip()

    def stats(self) -> dict[str, int]:
        """Counters since the proxy started: connections, requests, response_bytes."""
        out: dict[str, int] = json.loads(self._ask("stats"))
        return out

    def set(self, delay: float, bandwidth: float) -> None:
        """New first-byte delay (s) and per-connection bandwidth (MiB/s, 0 = unlimited)."""
        answer = self._ask(f"set {delay!r} {bandwidth!r}")
        if answer != "ok":
            raise RuntimeError(f"proxy refused the settings: {answer}")
        self.delay, self.bandwidth = delay, bandwidth


@contextlib.contextmanager
def shaping_proxy(endpoint: str, delay: float, bandwidth: float) -> Iterator[ShapingProxy]:
    """Run the proxy in front of ``endpoint`` (``http://host:port``): ``delay`` seconds
    before each request, responses at ``bandwidth`` MiB/s per connection (0 = unlimited)."""
    target = endpoint.removeprefix("http://")
    proc = subprocess.Popen(
        [sys.executable, str(Path(__file__)), "--target", target,
         "--delay", str(delay), "--bandwidth", str(bandwidth)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )  # fmt: skip
    try:
        line = proc.stdout.readline().strip() if proc.stdout is not None else ""
        if not line.isdigit():
            raise RuntimeError(f"shaping proxy did not start (printed {line!r})")
        yield ShapingProxy(f"http://127.0.0.1:{line}", proc, delay, bandwidth)
    finally:
        proc.terminate()
        proc.wait(10)


@contextlib.contextmanager
def latency_proxy(endpoint: str, delay: float, rate: float = 0.0) -> Iterator[str]:
    """Run the proxy in front of ``endpoint`` with ``delay`` seconds per request and, if
    ``rate`` is given, each connection's responses paced to ``rate`` bytes per second;
    yields its URL."""
    with shaping_proxy(endpoint, delay, rate / 2**20) as proxy:
        yield proxy.url


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--target", required=True, help="HOST:PORT of the server")
    parser.add_argument("--delay", type=float, default=0.03, help="seconds before each request")
    parser.add_argument(
        "--bandwidth",
        type=float,
        default=40.0,
        help="MiB/s of responses per connection (0 = unlimited)",
    )
    args = parser.parse_args()
    host, _, port = args.target.rpartition(":")
    _serve(host, int(port), Shaping(args.delay, args.bandwidth))


if __name__ == "__main__":
    main()
