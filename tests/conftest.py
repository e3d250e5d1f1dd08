"""Shared pytest fixtures: an embedded moto S3 server.

* ``s3_server``: one :class:`~npystore.testing.LocalS3` for the whole session.
* ``s3``: a fresh bucket per test, as an :class:`~npystore.testing.S3Sandbox`
  with ``.bucket``, ``.url(key)``, ``.storage_options``, ``.fs``,
  ``.put_file(local_path, key)``, ``.put_bytes(data, key)`` and ``.counter``
  (a :class:`~npystore.testing.RequestCounter` attached to ``.fs``).

Tests using either fixture get the ``s3`` marker, so ``-m "not s3"`` skips them.
They are skipped when moto, boto3 or s3fs is not installed.

Real servers, each started once per session on 127.0.0.1 and stopped by its PID
(``npystore.testing``):

* ``seaweed_server`` / ``seaweed``: SeaweedFS's S3 gateway, and a fresh bucket per test as
  an :class:`~npystore.testing.S3Sandbox` (like ``s3``); marker ``seaweedfs``.
* ``gcs_server`` / ``gcs``: fake-gcs-server, and a fresh bucket per test as a
  :class:`~npystore.testing.servers.Sandbox` (``.url(key)``, ``.storage_options``,
  ``.put_bytes``, ``.put_file``, ``.fs``); marker ``gcs``.
* ``azure_server`` / ``azure``: Azurite, and a fresh container per test (a ``Sandbox``);
  marker ``azure``.
* ``rclone_strict``: ``rclone serve s3`` whose buffer for parts that arrive ahead of their
  turn holds one byte (any part ahead waits); marker ``rclone``.

A server that is not installed skips only its tests, unless ``NPYSTORE_REQUIRE_SERVERS=1``
(set by ``.ci/run``) makes that a failure. Azurite is looked for in
``tests/servers/node_modules`` (``npm install --prefix tests/servers``), then ``PATH``.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

# gcsfs reads this when it is imported: without it every bucket of the GCS emulator costs a
# 60 s gRPC lookup of its layout
os.environ.setdefault("GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT", "false")

import pytest

from npystore.testing import LocalS3, S3Sandbox
from npystore.testing.servers import Lifecycle, ServerUnavailable, servers_required

_MARKERS = {
    "s3": ("s3", "s3_server"),
    "seaweedfs": ("seaweed", "seaweed_server"),
    "gcs": ("gcs", "gcs_server"),
    "azure": ("azure", "azure_server"),
    "rclone": ("rclone_strict",),
}
AZURITE = Path(__file__).parent / "servers" / "node_modules" / ".bin" / "azurite-blob"
T = TypeVar("T", bound=Lifecycle)


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "s3: test uses the embedded moto S3 server")
    config.addinivalue_line("markers", "seaweedfs: test uses the SeaweedFS server")
    config.addinivalue_line("markers", "gcs: test uses the fake-gcs-server GCS emulator")
    config.addinivalue_line("markers", "azure: test uses the Azurite blob emulator")
    config.addinivalue_line("markers", "rclone: test uses rclone's S3 server")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        names = set(getattr(item, "fixturenames", ()))
        for marker, fixtures in _MARKERS.items():
            if names.intersection(fixtures):
                item.add_marker(getattr(pytest.mark, marker))


def _serve(make: Callable[[], T], *modules: str) -> Iterator[T]:
    """A session fixture's body: ``make().start()``, yielded, stopped at the end. A missing
    program or client package skips (fails when servers are required)."""
    try:
        for module in modules:
            __import__(module)
        server = make()
        server.start()
    except (ServerUnavailable, ImportError) as exc:
        if servers_required():
            pytest.fail(f"a required test server is missing: {exc}")
        pytest.skip(f"server not available: {exc}")
    try:
        yield server
    finally:
        server.stop()


def _sandbox(server: Any, *, s3fs_cache: bool = False) -> Iterator[Any]:
    """A test fixture's body: a fresh bucket of ``server`` (its ``sandbox()``), closed at the
    end. ``s3fs_cache``: an S3 server's, with a new S3FileSystem (client, listing cache) for
    the test; fsspec's instance cache then hands that same instance to code that opens URLs
    with the sandbox's ``storage_options``."""
    if s3fs_cache:
        import s3fs

        s3fs.S3FileSystem.clear_instance_cache()
    sandbox = server.sandbox()
    try:
        yield sandbox
    finally:
        sandbox.close()
        if s3fs_cache:
            s3fs.S3FileSystem.clear_instance_cache()


@pytest.fixture(scope="session")
def s3_server() -> Iterator[LocalS3]:
    """A running LocalS3, shared by the session and stopped at its end."""
    for module in ("moto.server", "boto3", "s3fs"):
        pytest.importorskip(module, reason=f"{module} is needed for the S3 tests")
    with LocalS3() as server:
        yield server


@pytest.fixture
def s3(s3_server: LocalS3) -> Iterator[S3Sandbox]:
    """A fresh bucket with its own filesystem and request counter; deleted afterwards."""
    yield from _sandbox(s3_server, s3fs_cache=True)


@pytest.fixture(scope="session")
def seaweed_server() -> Iterator[Any]:
    """SeaweedFS (``weed server -s3``), shared by the session."""
    from npystore.testing.seaweed import SeaweedS3

    yield from _serve(SeaweedS3, "s3fs", "boto3")


@pytest.fixture
def seaweed(seaweed_server: Any) -> Iterator[S3Sandbox]:
    """A fresh SeaweedFS bucket with its own filesystem and request counter."""
    yield from _sandbox(seaweed_server, s3fs_cache=True)


@pytest.fixture(scope="session")
def gcs_server() -> Iterator[Any]:
    """fake-gcs-server, shared by the session."""
    from npystore.testing.gcs import LocalGCS

    yield from _serve(LocalGCS, "gcsfs")


@pytest.fixture
def gcs(gcs_server: Any) -> Iterator[Any]:
    """A fresh bucket on the GCS emulator."""
    yield from _sandbox(gcs_server)


@pytest.fixture(scope="session")
def azure_server() -> Iterator[Any]:
    """Azurite, shared by the session."""
    from npystore.testing.azurite import LocalAzurite

    yield from _serve(lambda: LocalAzurite(None, AZURITE), "adlfs")


@pytest.fixture
def azure(azure_server: Any) -> Iterator[Any]:
    """A fresh container on Azurite."""
    yield from _sandbox(azure_server)


@pytest.fixture(scope="session")
def rclone_strict() -> Iterator[Any]:
    """``rclone serve s3`` taking multipart parts strictly in order, shared by the session."""
    from npystore.testing.rclone import RcloneS3

    yield from _serve(
        lambda: RcloneS3(None, "--multipart-streaming-buffer-limit", "1"), "s3fs", "boto3"
    )


@pytest.fixture
def inflated_pieces(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The ``limit`` of each :func:`npystore.formats.zblock.inflate_piece` call the test makes
    (a block of a block index checked or inflated), in order; the calls still inflate."""
    from npystore.formats import zblock

    calls: list[int] = []
    real = zblock.inflate_piece

    def counted(piece: Any, limit: int, on_output: Any = None, **kw: Any) -> Any:
        calls.append(limit)
        return real(piece, limit, on_output, **kw)

    monkeypatch.setattr(zblock, "inflate_piece", counted)
    return calls
