"""Shared pytest fixtures: an embedded moto S3 server.

* ``s3_server``: one :class:`~npystore.testing.LocalS3` for the whole session.
* ``s3``: a fresh bucket per test, as an :class:`~npystore.testing.S3Sandbox`
  with ``.bucket``, ``.url(key)``, ``.storage_options``, ``.fs``,
  ``.put_file(local_path, key)``, ``.put_bytes(data, key)`` and ``.counter``
  (a :class:`~npystore.testing.RequestCounter` attached to ``.fs``).

Tests using either fixture get the ``s3`` marker, so ``-m "not s3"`` skips them.
They are skipped when moto, boto3 or s3fs is not installed.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from npystore.testing import LocalS3, S3Sandbox

_S3_FIXTURES = frozenset({"s3", "s3_server"})


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "s3: test uses the embedded moto S3 server")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        if _S3_FIXTURES.intersection(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.s3)


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
    import s3fs

    # A new S3FileSystem (client, listing cache) per test; fsspec's instance cache
    # then hands that same instance to code that opens URLs with .storage_options.
    s3fs.S3FileSystem.clear_instance_cache()
    sandbox = s3_server.sandbox()
    try:
        yield sandbox
    finally:
        sandbox.close()
        s3fs.S3FileSystem.clear_instance_cache()
