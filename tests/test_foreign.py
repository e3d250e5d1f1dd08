"""Issue 15: foreign servers and configuration mistakes.

- an http server that ignores ``Range`` (``python -m http.server``): a small object is read
  whole from its first answer, a large one is refused at once (never retried);
- one retry budget: npystore's S3 requests are not retried by botocore or s3fs as well, so
  an unreachable endpoint fails in seconds (it took 44 s), naming the URL and the problem;
- a missing object's ``FileNotFoundError`` names the URL (S3, http, local);
- an unknown protocol or a missing filesystem package is an ``UnsupportedError`` naming the
  protocol (and the package to install), and the command line prints one line.
"""

from __future__ import annotations

import contextlib
import functools
import io
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import fsspec
import numpy as np
import pytest

import npystore
from faultproxy import FaultProxy
from npystore.errors import (
    ConsistencyError,
    FetchError,
    MissingDependencyError,
    UnsupportedError,
)
from npystore.fetch import IGNORED_RANGE_MAX, REMOTE_ATTEMPTS, open_reader
from npystore.tools import cli

pytest.importorskip("aiohttp")


def _npy(arr: np.ndarray) -> bytes:
    buf = io.BytesIO()
    np.save(buf, arr)
    return buf.getvalue()


# -- a server that ignores Range -------------------------------------------------------------


class _Quiet(ThreadingHTTPServer):
    def handle_error(self, request: Any, client_address: Any) -> None:
        pass  # the client hung up on a whole body it refused: the test's point


@contextlib.contextmanager
def _plain_server(root: Path) -> Iterator[tuple[str, list[str]]]:
    """``python -m http.server`` over ``root`` (SimpleHTTPRequestHandler ignores Range):
    its URL and the requests it got (``"GET bytes=0-127"``, ``"HEAD -"``)."""
    log: list[str] = []

    class Handler(SimpleHTTPRequestHandler):
        def log_message(self, format: str, *args: object) -> None:
            log.append(f"{self.command} {self.headers.get('Range') or '-'}")

    server = _Quiet(("127.0.0.1", 0), functools.partial(Handler, directory=str(root)))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", log
    finally:
        server.shutdown()
        server.server_close()


def _gets(log: list[str]) -> int:
    return sum(entry.startswith("GET") for entry in log)


def test_small_npy_from_a_server_that_ignores_range(tmp_path: Path) -> None:
    arr = np.asfortranarray(np.arange(6000, dtype=">f4").reshape(60, 100))
    np.save(tmp_path / "a.npy", arr)
    with _plain_server(tmp_path) as (base, log):
        url = f"{base}/a.npy"
        got = npystore.load(url)
        np.testing.assert_array_equal(got, np.load(tmp_path / "a.npy"))
        assert got.dtype == arr.dtype
        assert got.flags.f_contiguous
        assert _gets(log) == 1  # the opening read got all of it; nothing asked again
        log.clear()
        a = npystore.open_npy(url, chunks=(60, 10))
        assert a.shape == arr.shape
        np.testing.assert_array_equal(a[:, 35:77].compute(), arr[:, 35:77])
        np.testing.assert_array_equal(a.compute(), arr)
        assert float(a.sum().compute()) == float(arr.sum(dtype=np.float64))
        assert _gets(log) == 1  # the header's read, kept: 10 chunks computed from it
        log.clear()
        header = npystore.read_header(url)
        assert (header.shape, header.fortran_order) == (arr.shape, True)
        assert _gets(log) == 1


def test_npz_and_reader_ranges_from_a_server_that_ignores_range(tmp_path: Path) -> None:
    x, y = np.arange(500.0), np.eye(7, dtype=np.int16)
    np.savez(tmp_path / "z.npz", x=x, y=y)
    data = (tmp_path / "z.npz").read_bytes()
    with _plain_server(tmp_path) as (base, log):
        with npystore.load(f"{base}/z.npz") as z:
            np.testing.assert_array_equal(z["x"], x)
            np.testing.assert_array_equal(z["y"], y)
        npz = npystore.open_npz(f"{base}/z.npz")
        np.testing.assert_array_equal(npz["y"].compute(), y)
        log.clear()
        reader = open_reader(f"{base}/z.npz")
        ranges = [(10, 20), (len(data) - 30, len(data)), (100, 400)]
        assert reader.read_many(ranges) == [data[a:b] for a, b in ranges]
        assert _gets(log) == len(ranges)  # each range of the first call, sent at once
        out = bytearray(50)
        reader.readinto_many([(7, memoryview(out))])
        assert bytes(out) == data[7:57]
        assert reader.read(0, len(data)) == data
        assert reader.read_many(ranges[::-1]) == [data[a:b] for a, b in ranges[::-1]]
        assert _gets(log) == len(ranges)  # then none: served from the whole answer


def test_large_object_from_a_server_that_ignores_range_is_refused_at_once(
    tmp_path: Path,
) -> None:
    arr = np.zeros(IGNORED_RANGE_MAX // 8 + 1000)
    np.save(tmp_path / "big.npy", arr)
    with _plain_server(tmp_path) as (base, log):
        url = f"{base}/big.npy"
        began = time.monotonic()
        with pytest.raises(
            UnsupportedError,
            match=r"big\.npy: the server ignores Range requests \(it answered a request for "
            r"bytes \[0, 128\) with status 200 and the whole object of \d+ bytes\).*up to "
            r"8388608 bytes.*'simplecache::http://127\.0\.0\.1:\d+/big\.npy'",
        ):
            npystore.open_npy(url)
        assert time.monotonic() - began < 5
        assert _gets(log) == 1  # never retried
        # what the message suggests works: a local copy made by fsspec
        cached = npystore.open_npy(
            f"simplecache::{url}",
            storage_options={"simplecache": {"cache_storage": str(tmp_path / "cache")}},
        )
        np.testing.assert_array_equal(cached[-5:].compute(), arr[-5:])


def test_a_server_that_ignores_range_and_sends_another_size(tmp_path: Path) -> None:
    """The file grew between the open (HEAD) and the first read: the whole answer has another
    length than the object opened, ConsistencyError (not a wrong array)."""
    np.save(tmp_path / "g.npy", np.arange(100.0))
    with _plain_server(tmp_path) as (base, _):
        reader = open_reader(f"{base}/g.npy")
        np.save(tmp_path / "g.npy", np.arange(200.0))
        with pytest.raises(ConsistencyError, match=r"g\.npy: .*sent 1728 bytes.*928 bytes"):
            reader.read(0, 128)


# -- one retry budget ------------------------------------------------------------------------


def _closed_port() -> int:
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port: int = sock.getsockname()[1]
    sock.close()
    return port


@pytest.mark.parametrize("how", ["open_npy", "load", "open_npz"])
def test_unreachable_s3_endpoint_fails_in_seconds(how: str) -> None:
    pytest.importorskip("s3fs")
    port = _closed_port()
    options = {
        "key": "k",
        "secret": "s",
        "client_kwargs": {"endpoint_url": f"http://127.0.0.1:{port}", "region_name": "us-east-1"},
    }
    began = time.monotonic()
    with pytest.raises(
        FetchError,
        match=rf"s3://bucket/x\.np[yz]: reading bytes .* at open failed after {REMOTE_ATTEMPTS} "
        rf"attempts: EndpointConnectionError: Could not connect to the endpoint URL: "
        rf"\"http://127\.0\.0\.1:{port}/bucket/x\.np[yz]\"",
    ) as info:
        getattr(npystore, how)(f"s3://bucket/x.{'npz' if how == 'open_npz' else 'npy'}",
                               storage_options=options)  # fmt: skip
    assert isinstance(info.value, OSError)
    assert time.monotonic() - began < 15  # was 44 s: 6 attempts x botocore's 5


def test_unreachable_http_endpoint_fails_in_seconds() -> None:
    port = _closed_port()
    began = time.monotonic()
    with pytest.raises(
        FetchError,
        match=rf"http://127\.0\.0\.1:{port}/a\.npy: reading the object's size and identity "
        rf"failed after {REMOTE_ATTEMPTS} attempts: ClientConnectorError: .*127\.0\.0\.1:{port}",
    ):
        npystore.open_npy(f"http://127.0.0.1:{port}/a.npy")
    assert time.monotonic() - began < 15


@pytest.mark.s3
def test_botocore_does_not_retry_npystore_requests(s3: Any) -> None:
    """Every GET answers 503 SlowDown; botocore's default configuration (which retries 503s)
    is left as it is. npystore's opening GET is sent exactly REMOTE_ATTEMPTS times (it was
    sent that many times botocore's attempts); the filesystem's own calls keep botocore's
    retries."""
    url = s3.put_bytes(_npy(np.arange(100.0)), "busy.npy")
    with FaultProxy(s3.server.endpoint_url, rate=1.0, faults=("503",)) as proxy:
        opts = s3.server.storage_options(client_kwargs={"endpoint_url": proxy.url})
        with pytest.raises(
            FetchError,
            match=rf"busy\.npy: reading bytes \[0, 128\) at open failed after "
            rf"{REMOTE_ATTEMPTS} attempts: .*(SlowDown|reduce your request rate)",
        ):
            npystore.open_npy(url, storage_options=opts)
        assert proxy.counts["503"] == REMOTE_ATTEMPTS
        fs, path = fsspec.core.url_to_fs(url, **opts)
        before = proxy.counts["503"]
        with pytest.raises(OSError):  # noqa: PT011 - s3fs's own error, whatever its type
            fs.cat_file(path, start=0, end=10)
        assert proxy.counts["503"] - before > 1  # botocore (and s3fs) retried their own call


# -- missing objects name their URL ----------------------------------------------------------


@pytest.mark.s3
@pytest.mark.parametrize("how", ["open_npy", "open_npz", "load", "read_header", "open_mat"])
def test_missing_s3_key_names_the_url(s3: Any, how: str) -> None:
    url = s3.url("missing.npy")
    with pytest.raises(FileNotFoundError, match=r"No such file or object .*'s3://.*/missing\.npy'"):
        getattr(npystore, how)(url, storage_options=s3.storage_options)
    with pytest.raises(FileNotFoundError) as info:
        npystore.open(url, storage_options=s3.storage_options)
    assert info.value.filename == url
    assert info.value.errno == 2


@pytest.mark.s3
def test_missing_s3_bucket_names_the_url(s3: Any) -> None:
    url = "s3://no-such-bucket-npystore/a.npy"
    with pytest.raises(FileNotFoundError) as info:
        npystore.open_npy(url, storage_options=s3.storage_options)
    assert info.value.filename == url
    assert "No such file or object" in str(info.value)


def test_missing_http_and_local_files_name_their_path(tmp_path: Path) -> None:
    with _plain_server(tmp_path) as (base, _):
        url = f"{base}/nothing.npy"
        with pytest.raises(FileNotFoundError, match=r"No such file or object: 'http://") as info:
            npystore.open_npy(url)
        assert (info.value.filename, info.value.errno) == (url, 2)
    path = str(tmp_path / "nothing.npy")
    with pytest.raises(FileNotFoundError) as info:
        npystore.load(path)
    assert info.value.filename == path


def test_missing_object_on_the_command_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with _plain_server(tmp_path) as (base, _):
        assert cli.main(["info", f"{base}/nothing.npy"]) == 1
    err = capsys.readouterr().err
    assert err == f"npystore: error: {base}/nothing.npy: no such file or object\n"


# -- unknown protocols and missing filesystem packages ---------------------------------------


@pytest.mark.parametrize("url", ["s4://bucket/key.npy", "simplecache::s4://bucket/key.npy"])
def test_unknown_protocol_is_unsupported(url: str) -> None:
    with pytest.raises(
        UnsupportedError, match=rf"^{url}: no filesystem is known for the protocol 's4'"
    ):
        npystore.open(url)
    with pytest.raises(UnsupportedError, match="'s4'"):
        npystore.load(url)


def test_known_protocol_without_its_package(monkeypatch: pytest.MonkeyPatch) -> None:
    if "gcs" in fsspec.registry:
        pytest.skip("gcsfs is imported already")
    monkeypatch.setitem(sys.modules, "gcsfs", None)
    with pytest.raises(
        MissingDependencyError,
        match=r"^gcs://b/k\.npy: the gcs:// protocol needs gcsfs, which is not installed or "
        r"cannot be imported \(ImportError: .*\); install it with: pip install "
        r"'npystore\[gcs\]'$",
    ) as info:
        npystore.open_npy("gcs://b/k.npy")
    assert isinstance(info.value, ImportError)
    assert isinstance(info.value, UnsupportedError)
    assert info.value.name == "gcsfs"


def _blocked(modules: list[str], code: str) -> subprocess.CompletedProcess[str]:
    """Run ``code`` in a fresh interpreter where ``modules`` cannot be imported (blocked
    after ``import npystore``, which is light and looks at which modules are loaded)."""
    prelude = "import sys, npystore\n" + "".join(f"sys.modules[{m!r}] = None\n" for m in modules)
    return subprocess.run(
        [sys.executable, "-c", prelude + code],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


@pytest.mark.parametrize(
    ("module", "url", "extra"),
    [("s3fs", "s3://bucket/a.npy", "s3"), ("aiohttp", "https://example.invalid/a.npy", "http")],
)
def test_s3_and_http_without_their_package_name_the_extra(
    module: str, url: str, extra: str
) -> None:
    protocol = url.split(":", maxsplit=1)[0]
    code = f"""
import npystore
try:
    npystore.open({url!r})
except npystore.MissingDependencyError as exc:
    assert isinstance(exc, ImportError) and isinstance(exc, npystore.UnsupportedError)
    print(exc)
"""
    done = _blocked([module], code)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith(f"{url}: the {protocol}:// protocol needs {module}")
    assert done.stdout.rstrip().endswith(f"install it with: pip install 'npystore[{extra}]'")
    command = f"from npystore.tools.cli import main\nsys.exit(main(['info', {url!r}]))"
    cli_run = _blocked([module], command)
    assert cli_run.returncode == 1
    assert cli_run.stderr.count("\n") == 1, cli_run.stderr
    assert cli_run.stderr.startswith(f"npystore: error: {url}: the {protocol}:// protocol needs")
    assert f"pip install 'npystore[{extra}]'" in cli_run.stderr


@pytest.mark.parametrize("url", ["s4://bucket/key.npy", "zip::s4://bucket/a.zip"])
def test_unknown_protocol_on_the_command_line(url: str, capsys: pytest.CaptureFixture[str]) -> None:
    for argv in (["info", url], ["cat", url], ["refs", url]):
        assert cli.main(argv) == 1
        _, err = capsys.readouterr()
        assert err == (
            f"npystore: error: {url}: no filesystem is known for the protocol 's4' (check the "
            f"URL; fsspec knows e.g. file, memory, http, https, s3, gcs, az, and the protocols "
            f"of installed packages that register one)\n"
        )
