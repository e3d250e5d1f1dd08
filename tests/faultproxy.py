"""A fault-injecting loopback HTTP proxy for the tests: put it in front of the moto server.

Each ranged ``GET`` (a data read) draws a fault with probability ``rate`` from a seeded
random generator:

- ``"503"``: answer ``503 SlowDown`` (S3's throttling error) without forwarding;
- ``"drop"``: forward, relay the response head and part of the body, then close the
  connection (a dropped connection / short body: fewer bytes than ``Content-Length``);
- ``"slow"``: wait ``slow_seconds`` before forwarding;
- ``"short"``: a lying server: the response head says ``Content-Length`` is half of what
  was asked, and exactly that many body bytes follow (the HTTP client sees a complete,
  short response; only the reader's own length check can notice);
- ``"trickle"``: relay the head and half the body at once, then one byte every
  ``trickle_seconds`` (each socket read stays inside any read timeout, the body never ends
  in time);
- ``"stall"``: relay the head and half the body, then nothing until the client gives up.
- ``"crowd"``: a server that serves its requests one at a time (as moto copies a whole
  object for each range): the request waits ``crowd_seconds`` times the number of
  ``"crowd"`` requests in flight (itself included) before it is forwarded, and a request
  the client gave up on still takes its time.

``ignore_pins=True`` makes the server behind the proxy one that ignores pins, as rclone's
``serve s3`` ignores ``If-Match``: every request loses its ``If-Match`` header and its
``versionId`` (S3, Azure) and ``generation`` (GCS) query parameters before the server sees
it (whatever ``rate`` says).

A ranged GET is one with a ``Range`` (or Azure's ``x-ms-range``) header.

Other requests (HEAD, PUT, listings) pass unchanged. ``counts`` tallies requests and faults.
Runs its own event loop in a daemon thread; use it as a context manager.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import re
import threading
from collections import Counter
from collections.abc import Sequence
from typing import Any

_SLOW_DOWN = (
    b'<?xml version="1.0" encoding="UTF-8"?>\n<Error><Code>SlowDown</Code>'
    b"<Message>Please reduce your request rate.</Message></Error>"
)
_503 = (
    b"HTTP/1.1 503 Slow Down\r\nContent-Type: application/xml\r\n"
    b"Content-Length: " + str(len(_SLOW_DOWN)).encode() + b"\r\nConnection: close\r\n\r\n"
) + _SLOW_DOWN
_METHODS = (b"GET ", b"HEAD ", b"PUT ", b"POST ", b"DELETE ")
_IF_MATCH = re.compile(rb"\r\nif-match:[^\r]*", re.IGNORECASE)
_VERSION_ID = re.compile(rb"([?&])(?:versionId|versionid|generation)=[^&\s]*&?")


def strip_pins(data: bytes) -> bytes:
    """A request without its ``If-Match`` header and its ``versionId``/``generation``
    query parameters."""
    end = data.find(b"\r\n\r\n")
    if end < 0:
        return data
    head, rest = data[:end], data[end:]
    line, sep, headers = head.partition(b"\r\n")
    line = _VERSION_ID.sub(lambda m: m.group(1), line).replace(b"? ", b" ").replace(b"& ", b" ")
    headers = _IF_MATCH.sub(b"", sep + headers)
    return line + headers + rest


class FaultProxy:
    """The proxy; ``url`` is its endpoint once entered."""

    def __init__(
        self,
        target: str,
        *,
        rate: float = 0.15,
        faults: Sequence[str] = ("503", "drop", "slow", "short"),
        slow_seconds: float = 0.2,
        trickle_seconds: float = 0.2,
        crowd_seconds: float = 0.05,
        ignore_pins: bool = False,
        seed: int = 0,
    ) -> None:
        host, _, port = target.removeprefix("http://").rpartition(":")
        self.host, self.port = host, int(port)
        self.rate = rate
        self.faults = tuple(faults)
        self.slow_seconds = slow_seconds
        self.trickle_seconds = trickle_seconds
        self.crowd_seconds = crowd_seconds
        #: ``"crowd"`` requests in flight now, and the most at once.
        self.crowd = 0
        self.crowd_most = 0
        self.ignore_pins = ignore_pins
        self.rng = random.Random(seed)
        self.counts: Counter[str] = Counter()
        self.url = ""
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._server: asyncio.AbstractServer | None = None
        self._lock = threading.Lock()

    def __enter__(self) -> FaultProxy:
        self._thread.start()
        future = asyncio.run_coroutine_threadsafe(self._start(), self._loop)
        self.url = f"http://127.0.0.1:{future.result(10)}"
        return self

    def __exit__(self, *exc: Any) -> None:
        async def stop() -> None:
            if self._server is not None:
                self._server.close()
            others = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
            for task in others:  # stalled and trickling relays
                task.cancel()
            await asyncio.gather(*others, return_exceptions=True)

        asyncio.run_coroutine_threadsafe(stop(), self._loop).result(10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)

    async def _start(self) -> int:
        self._server = await asyncio.start_server(self._handle, "127.0.0.1", 0)
        port: int = self._server.sockets[0].getsockname()[1]
        return port

    def _draw(self, head: bytes) -> str:
        with self._lock:
            self.counts["requests"] += 1
            lowered = head.lower()
            ranged = head.startswith(b"GET ") and (
                b"\r\nrange:" in lowered or b"\r\nx-ms-range:" in lowered
            )
            if not ranged or self.rng.random() >= self.rate:
                return "ok"
            fault = self.rng.choice(self.faults)
            self.counts[fault] += 1
            return fault

    @staticmethod
    async def _short(
        data: bytes, up_reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        """Relay one response with its Content-Length halved and its body cut to match."""
        while b"\r\n\r\n" not in data:
            more = await up_reader.read(1 << 16)
            if not more:
                return
            data += more
        end = data.index(b"\r\n\r\n")
        head, body = data[:end].split(b"\r\n"), data[end + 4 :]
        length = 0
        for i, line in enumerate(head):
            if line.lower().startswith(b"content-length:"):
                length = int(line.split(b":", 1)[1]) // 2
                head[i] = b"Content-Length: %d" % length
        while len(body) < length:
            more = await up_reader.read(1 << 16)
            if not more:
                break
            body += more
        writer.write(b"\r\n".join(head) + b"\r\n\r\n" + body[:length])
        await writer.drain()
        raise ConnectionResetError("short response sent")

    async def _slow(
        self, fault: str, data: bytes, up_reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        """Relay one response's head and half its body, then trickle or stall the rest."""
        while b"\r\n\r\n" not in data:
            more = await up_reader.read(1 << 16)
            if not more:
                return
            data += more
        end = data.index(b"\r\n\r\n") + 4
        match = re.search(rb"\r\ncontent-length:\s*(\d+)", data[:end], re.IGNORECASE)
        total = end + (int(match.group(1)) if match else 0)
        while len(data) < total:
            more = await up_reader.read(1 << 16)
            if not more:
                break
            data += more
        half = end + (total - end) // 2
        writer.write(data[:half])
        await writer.drain()
        if fault == "stall":
            await asyncio.sleep(3600)  # until the client gives up and this task is cancelled
        for i in range(half, total):
            await asyncio.sleep(self.trickle_seconds)
            writer.write(data[i : i + 1])
            await writer.drain()
        raise ConnectionResetError("trickled response sent")

    async def _crowded(self) -> None:
        """Wait as a server serving every ``"crowd"`` request in flight, one at a time."""
        with self._lock:
            self.crowd += 1
            self.crowd_most = max(self.crowd_most, self.crowd)
            wait = self.crowd_seconds * self.crowd

        async def serve() -> None:  # the server works on, even if the client gave up
            try:
                await asyncio.sleep(wait)
            finally:
                with self._lock:
                    self.crowd -= 1

        await asyncio.shield(asyncio.ensure_future(serve()))

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            up_reader, up_writer = await asyncio.open_connection(self.host, self.port)
        except OSError:
            writer.close()
            return
        current = {"fault": "ok"}

        async def client_to_server() -> None:
            while data := await reader.read(1 << 16):
                if data.startswith(_METHODS):
                    if self.ignore_pins:
                        data = strip_pins(data)
                    fault = self._draw(data)
                    current["fault"] = fault
                    if fault == "503":
                        writer.write(_503)
                        await writer.drain()
                        raise ConnectionResetError("503 injected")
                    if fault == "slow":
                        await asyncio.sleep(self.slow_seconds)
                    if fault == "crowd":
                        await self._crowded()
                up_writer.write(data)
                await up_writer.drain()

        async def server_to_client() -> None:
            while data := await up_reader.read(1 << 16):
                if current["fault"] == "short":
                    await self._short(data, up_reader, writer)
                    return
                if current["fault"] in ("trickle", "stall"):
                    await self._slow(current["fault"], data, up_reader, writer)
                    return
                if current["fault"] == "drop":
                    end = data.find(b"\r\n\r\n")
                    cut = end + 4 + max(0, len(data) - end - 4) // 2 if end >= 0 else 0
                    writer.write(data[:cut])
                    await writer.drain()
                    raise ConnectionResetError("connection dropped mid-body")
                writer.write(data)
                await writer.drain()

        tasks = [
            asyncio.ensure_future(client_to_server()),
            asyncio.ensure_future(server_to_client()),
        ]
        await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
        for task in tasks:
            task.cancel()
        for w in (writer, up_writer):
            with contextlib.suppress(OSError, RuntimeError):
                w.close()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError, ConnectionError, OSError):
                await task
