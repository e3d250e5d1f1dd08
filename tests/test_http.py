"""http(s):// URLs through fsspec's HTTPFileSystem, against a range-capable loopback server."""

from __future__ import annotations

import re
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import numpy as np
import pytest

import npystore

pytest.importorskip("aiohttp")


class _RangeHandler(BaseHTTPRequestHandler):
    root: Path
    log: list[str]

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
        self.send_header("ETag", f'"{hash(data) & 0xFFFFFFFF:x}"')
        self.end_headers()

    def do_GET(self) -> None:
        data = self._file()
        if data is None:
            self.send_error(404)
            return
        header = self.headers.get("Range")
        self.log.append(header or "")
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
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


@pytest.fixture
def http_root(tmp_path: Path) -> Iterator[tuple[str, Path, list[str]]]:
    log: list[str] = []
    handler = type("Handler", (_RangeHandler,), {"root": tmp_path, "log": log})
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
