"""http(s):// URLs through fsspec's HTTPFileSystem, against a range-capable loopback server."""

from __future__ import annotations

import re
import threading
import zlib
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import numpy as np
import pytest

import npystore
from npystore.errors import ConsistencyError

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
        self.wfile.write(body)


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
