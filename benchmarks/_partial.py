"""A loopback HTTP relay that answers ranged GETs with ``206`` (helper of ``obstore_eval.py``).

``rclone serve s3`` answers a ranged ``GetObject`` with ``200 OK`` and a ``Content-Range``
header (the right bytes, the wrong status). botocore and aiohttp take the bytes; obstore
(Rust ``object_store``) refuses the answer ("Received non-partial response when range
requested"). moto answers ``206`` but copies the whole object per range request, so it
cannot serve a throughput row. This relay sits in front of rclone and changes only the
status line of such answers to ``206 Partial Content``; headers and bodies pass unchanged
(bodies spliced by the kernel, as in ``_proxy.py``). Every client of a comparison goes
through it, so it costs them alike, and it runs in its own process.

It parses each response's header block to know where the next one starts
(``Content-Length``; no body for ``HEAD``, ``204`` and ``304``); a chunked or unframed body
is relayed until the server closes. It assumes no pipelining (each request waits for its
answer), as botocore, aiohttp and object_store do.

Usage: ``python benchmarks/_partial.py --target 127.0.0.1:PORT``; prints the port it
listens on (one line), then serves until terminated. :func:`partial_relay` starts it from
Python as a context manager yielding the endpoint URL.
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import os
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

#: Bytes per read or splice.
PIECE = 1 << 20
METHODS = (b"GET ", b"HEAD ", b"PUT ", b"POST ", b"DELETE ", b"OPTIONS ")


def _requests(src: socket.socket, dst: socket.socket, methods: collections.deque[bytes]) -> None:
    """Client to server, unchanged; the method of each request is queued for its answer."""
    with contextlib.suppress(OSError):
        while data := src.recv(PIECE):
            if data.startswith(METHODS):
                methods.append(data.split(b" ", 1)[0])
            dst.sendall(data)
    _close_both(src, dst)


def _header_block(src: socket.socket, buf: bytearray) -> bytes | None:
    """Read until the end of a response's header block; the block, the rest left in ``buf``."""
    while (end := buf.find(b"\r\n\r\n")) < 0:
        data = src.recv(PIECE)
        if not data:
            return None
        buf += data
    block = bytes(buf[: end + 4])
    del buf[: end + 4]
    return block


def _relay_body(src: socket.socket, dst: socket.socket, buf: bytearray, n: int) -> None:
    """Send ``n`` body bytes: first what ``buf`` holds, the rest spliced from ``src``."""
    head = bytes(buf[:n])
    del buf[:n]
    dst.sendall(head)
    n -= len(head)
    splice = getattr(os, "splice", None)
    if splice is None:  # pragma: no cover - not Linux
        while n:
            data = src.recv(min(n, PIECE))
            if not data:
                raise OSError("server closed mid-body")
            dst.sendall(data)
            n -= len(data)
        return
    read_end, write_end = os.pipe()
    try:
        while n:
            got = splice(src.fileno(), write_end, min(n, PIECE))
            if not got:
                raise OSError("server closed mid-body")
            n -= got
            while got:
                got -= splice(read_end, dst.fileno(), got)
    finally:
        os.close(read_end)
        os.close(write_end)


def _responses(src: socket.socket, dst: socket.socket, methods: collections.deque[bytes]) -> None:
    """Server to client: ``200`` with ``Content-Range`` becomes ``206``; bodies unchanged."""
    buf = bytearray()
    with contextlib.suppress(OSError):
        while (block := _header_block(src, buf)) is not None:
            method = methods.popleft() if methods else b"GET"
            status_line, _, rest = block.partition(b"\r\n")
            headers = {
                k.strip().lower(): v.strip()
                for k, _, v in (line.partition(b":") for line in rest.split(b"\r\n") if line)
            }
            parts = status_line.split(b" ", 2)
            status = int(parts[1])
            if status == 200 and b"content-range" in headers:
                status_line = parts[0] + b" 206 Partial Content"
            dst.sendall(status_line + b"\r\n" + rest)
            if method == b"HEAD" or status in (204, 304) or 100 <= status < 200:
                continue
            length = headers.get(b"content-length")
            if length is None:  # chunked or until close: relay the rest as it comes
                dst.sendall(bytes(buf))
                while data := src.recv(PIECE):
                    dst.sendall(data)
                break
            _relay_body(src, dst, buf, int(length))
    _close_both(src, dst)


def _close_both(a: socket.socket, b: socket.socket) -> None:
    for s in (a, b):
        with contextlib.suppress(OSError):
            s.shutdown(socket.SHUT_RDWR)


def _serve(host: str, port: int) -> None:
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
        methods: collections.deque[bytes] = collections.deque()
        threading.Thread(target=_requests, args=(client, upstream, methods), daemon=True).start()
        threading.Thread(target=_responses, args=(upstream, client, methods), daemon=True).start()


@contextlib.contextmanager
def partial_relay(endpoint: str) -> Iterator[str]:
    """Run the relay in front of ``endpoint`` (``http://host:port``); yields its URL."""
    target = endpoint.removeprefix("http://")
    proc = subprocess.Popen(
        [sys.executable, str(Path(__file__)), "--target", target],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        if proc.stdout is None:
            raise RuntimeError("no stdout from the relay")
        line = proc.stdout.readline().strip()
        if not line.isdigit():
            raise RuntimeError(f"partial relay did not start (printed {line!r})")
        yield f"http://127.0.0.1:{line}"
    finally:
        proc.terminate()
        proc.wait(10)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--target", required=True, help="HOST:PORT of the server")
    args = parser.parse_args()
    host, _, port = args.target.rpartition(":")
    _serve(host, int(port))


if __name__ == "__main__":
    main()
