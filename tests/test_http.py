"""http(s):// URLs through fsspec's HTTPFileSystem, against a range-capable loopback server."""

from __future__ import annotations

import contextlib
import re
import threading
import time
import zlib
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import numpy as np
import pytest

import npystore
from npystore.errors import ConsistencyError, FetchError
from npystore.fetch import open_reader

pytest.importorskip("aiohttp")


class _RangeHandler(BaseHTTPRequestHandler):
    root: Path
    log: list[str]
    #: If-Match headers the GETs carried (None: none).
    matches: list[str | None]
    #: Serve ETags as weak ones (W/"..."), which cannot pin range requests.
    weak: bool = False
    #: Ignore If-Match (answer with the current bytes), like rclone's ``serve s3``.
    ignore_if_match: bool = False
    #: Send the ETag on HEAD only, not with the data (RFC 9110 says a 206 carries it).
    etag_on_get: bool = True
    #: If positive: a ranged GET gets half its body at once, then one byte every this many
    #: seconds (at most 60 of them, until the client goes away).
    trickle: float = 0.0

    def _etag(self, data: bytes) -> str:
        tag = f'"{zlib.crc32(data):08x}"'
        return f"W/{tag}" if self.weak else tag

    def log_message(self, format: str, *args: object) -> None:
        pass

    def _file(self) -> bytes | None:
        path = self.root / self.path.lstrip("/")
        return path.read_bytes() if path.is_file() else None

    def do_HEAD(self) -> None:
        data = self._file()
        if data is None:
            self.send_error(404)
            return
        self.send_response(200)
        self.send_header("Content-Length", str(len(data)))
        self.send_header("Accept-Ranges", "bytes")
        self.send_header("ETag", self._etag(data))
        self.end_headers()

    def do_GET(self) -> None:
        data = self._file()
        if data is None:
            self.send_error(404)
            return
        header = self.headers.get("Range")
        self.log.append(header or "")
        match_header = self.headers.get("If-Match")
        self.matches.append(match_header)
        if (
            match_header is not None
            and match_header not in ("*", self._etag(data))
            and not self.ignore_if_match
        ):
            self.send_error(412)
            return
        match = re.fullmatch(r"bytes=(\d+)-(\d*)", header or "")
        if match:
            start = int(match.group(1))
            end = int(match.group(2)) if match.group(2) else len(data) - 1
            body = data[start : end + 1]
            self.send_response(206)
            self.send_header("Content-Range", f"bytes {start}-{start + len(body) - 1}/{len(data)}")
        else:
            body = data
            self.send_response(200)
        if self.etag_on_get:
            self.send_header("ETag", self._etag(data))
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.trickle > 0 and match:
            half = len(body) // 2
            with contextlib.suppress(OSError):  # the client gave up: the test's point
                self.wfile.write(body[:half])
                self.wfile.flush()
                for i in range(half, min(len(body), half + 60)):
                    time.sleep(self.trickle)
                    self.wfile.write(body[i : i + 1])
                    self.wfile.flush()
            self.close_connection = True
            return
        self.wfile.write(body)


@contextlib.contextmanager
def _serve(root: Path, **attrs: object) -> Iterator[tuple[str, type[_RangeHandler]]]:
    """A loopback server over ``root`` (its handler class, whose flags may be changed)."""
    handler = type("Handler", (_RangeHandler,), {"root": root, "log": [], "matches": [], **attrs})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", handler
    finally:
        server.shutdown()
        server.server_close()


@pytest.fixture
def http_root(tmp_path: Path) -> Iterator[tuple[str, Path, list[str]]]:
    log: list[str] = []
    handler = type("Handler", (_RangeHandler,), {"root": tmp_path, "log": log, "matches": []})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", tmp_path, log
    finally:
        server.shutdown()
        server.server_close()


def test_http_range_reads(http_root: tuple[str, Path, list[str]]) -> None:
    base, root, log = http_root
    arr = np.asfortranarray(np.arange(20_000, dtype=">f4").reshape(100, 200))
    np.save(root / "a.npy", arr)
    header = npystore.read_header(f"{base}/a.npy")
    assert header.fortran_order
    assert len(log) <= 2
    a = npystore.open_npy(f"{base}/a.npy", chunks=(100, 50))
    log.clear()
    np.testing.assert_array_equal(a[:, 60:70].compute(), arr[:, 60:70])
    assert len(log) == 1
    assert log[0].startswith("bytes=")
    np.testing.assert_array_equal(npystore.load(f"{base}/a.npy"), arr)


def test_http_reads_are_pinned_to_the_strong_etag(
    http_root: tuple[str, Path, list[str]],
) -> None:
    base, root, _ = http_root
    np.save(root / "p.npy", np.arange(1000.0))
    a = npystore.open_npy(f"{base}/p.npy", chunks=100)
    np.testing.assert_array_equal(a[:10].compute(), np.arange(10.0))
    np.save(root / "p.npy", np.arange(1000.0) + 1)  # same size, other bytes, other ETag
    with pytest.raises(ConsistencyError, match=r"p\.npy: the object changed.*ETag"):
        a[500:510].compute()
    assert npystore.open_npy(f"{base}/p.npy")[:3].compute().tolist() == [1.0, 2.0, 3.0]


def test_http_weak_etag_reads_unpinned(tmp_path: Path) -> None:
    log: list[str] = []
    matches: list[str | None] = []
    attrs = {"root": tmp_path, "log": log, "matches": matches, "weak": True}
    server = ThreadingHTTPServer(("127.0.0.1", 0), type("Weak", (_RangeHandler,), attrs))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        np.save(tmp_path / "w.npy", np.arange(50))
        url = f"http://127.0.0.1:{server.server_address[1]}/w.npy"
        np.testing.assert_array_equal(npystore.open_npy(url)[40:].compute(), np.arange(40, 50))
    finally:
        server.shutdown()
        server.server_close()
    assert matches
    assert set(matches) == {None}  # a weak ETag never matches a range request: not sent


def test_http_server_that_ignores_if_match(tmp_path: Path) -> None:
    """The server answers a stale If-Match with 200/206 and the new bytes (as rclone's serve
    does for S3): the response's ETag differs from the one opened, ConsistencyError."""
    with _serve(tmp_path, ignore_if_match=True) as (base, _):
        old = np.arange(20_000.0)
        np.save(tmp_path / "m.npy", old)
        a = npystore.open_npy(f"{base}/m.npy", chunks=1000)
        np.testing.assert_array_equal(a[:3000].compute(), old[:3000])
        np.save(tmp_path / "m.npy", old + 1)  # same size, other bytes
        with pytest.raises(
            ConsistencyError,
            match=r"m\.npy: the answer for bytes \[\d+, \d+\) came with ETag \S+, but the "
            r"object was opened with ETag",
        ):
            a.compute()
        reader = open_reader(f"{base}/m.npy")  # reopened: the new bytes
        np.save(tmp_path / "m.npy", old + 2)
        with pytest.raises(ConsistencyError, match=r"m\.npy.*\[200, 300\)"):
            reader.read_many([(200, 300)])


def test_http_answers_without_etag_after_a_strong_one_are_refused(tmp_path: Path) -> None:
    """A strong ETag at open pins the reads; a range answer without one cannot be told
    apart from another object's (RFC 9110 requires a 206 to carry it): ConsistencyError."""
    with _serve(tmp_path, etag_on_get=False) as (base, _):
        np.save(tmp_path / "n.npy", np.arange(100.0))
        with pytest.raises(ConsistencyError, match=r"n\.npy: the answer .* came with no ETag"):
            npystore.open_npy(f"{base}/n.npy")


def test_http_trickling_body_is_cut_by_the_budget(tmp_path: Path) -> None:
    """Half the body, then one byte every 0.2 s: no single read ever times out, the budget
    ends it (the range, the budget and the problem named)."""
    arr = np.arange(10_000.0)
    np.save(tmp_path / "t.npy", arr)
    with _serve(tmp_path) as (base, handler):
        url = f"{base}/t.npy"
        a = npystore.open_npy(url, chunks=5000, storage_options={"npystore_read_budget": 2})
        assert a.shape == arr.shape  # opened normally: the header came at once
        handler.trickle = 0.2
        began = time.monotonic()
        with pytest.raises(
            FetchError,
            match=r"t\.npy: reading bytes \[\d+, \d+\) ran out of its time budget of 2 s after "
            r"1 attempt .*last problem: TimeoutError: attempt 1 .*stalled or too slow",
        ):
            a[:10].compute()
        assert time.monotonic() - began < 4.5
        # the opening read (the header) is cut the same way
        began = time.monotonic()
        with pytest.raises(FetchError, match=r"t\.npy: reading bytes \[0, \d+\) ran out"):
            npystore.open_npy(url, storage_options={"npystore_read_budget": 1.5})
        assert time.monotonic() - began < 4.5
