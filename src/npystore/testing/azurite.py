"""Azurite on loopback: Azure's own Blob storage emulator, for the tests and benchmarks.

:class:`LocalAzurite` runs ``azurite-blob`` (the ``azurite`` package of the npm registry,
a Node.js program) as a child process on 127.0.0.1 with telemetry off, its blobs in memory
(or in a folder). The program is found through :data:`AZURITE_ENV`, then the candidates the
caller names (the test suite's ``tests/servers/node_modules/.bin``, where ``.ci/run``
installs it), then ``PATH``. Clients use the emulator's well-known account
(:attr:`LocalAzurite.ACCOUNT`, :attr:`LocalAzurite.KEY`) through a connection string:
:meth:`LocalAzurite.storage_options` are adlfs's options.
"""

from __future__ import annotations

import shutil
import subprocess
import tempfile
import uuid
from pathlib import Path
from types import TracebackType
from typing import Any, Final, Self

from npystore.testing.servers import (
    Sandbox,
    find_program,
    free_ports,
    start_process,
    stop_process,
)

__all__ = ["AZURITE_ENV", "LocalAzurite"]

#: The environment variable naming the ``azurite-blob`` program.
AZURITE_ENV: Final = "NPYSTORE_AZURITE_BLOB"
_STARTS: Final = 3


class LocalAzurite:
    """``azurite-blob`` on 127.0.0.1, stopped by its PID.

    Parameters
    ----------
    root : path, optional
        Keep blobs in this folder instead of in memory.
    candidates : paths
        Where to look for ``azurite-blob`` before ``PATH``.

    Examples
    --------
    >>> with LocalAzurite() as server:  # doctest: +SKIP
    ...     container = server.create_bucket()
    ...     server.put(container, "a.bin", b"hello")
    """

    #: The emulator's well-known development account and key (public, documented by Azure).
    ACCOUNT: Final = "devstoreaccount1"
    KEY: Final = (
        "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="
    )

    def __init__(self, root: str | Path | None = None, *candidates: str | Path) -> None:
        self.root = Path(root) if root is not None else None
        self.candidates = candidates
        self._proc: subprocess.Popen[bytes] | None = None
        self._url: str | None = None
        self._tmp: str | None = None
        self._service: Any = None

    @property
    def url(self) -> str:
        """The blob endpoint (``http://127.0.0.1:PORT/devstoreaccount1``)."""
        if self._url is None:
            raise RuntimeError("LocalAzurite is not running; call start() or use a with block")
        return self._url

    @property
    def running(self) -> bool:
        """Whether the server is running."""
        return self._url is not None

    def start(self) -> Self:
        """Start the emulator and wait until it answers; a no-op if it is running.

        Raises
        ------
        ServerUnavailable
            ``azurite-blob`` is not installed.
        """
        if self._proc is not None:
            return self
        program = find_program("azurite-blob", AZURITE_ENV, *self.candidates)
        self._tmp = tempfile.mkdtemp(prefix="npystore-azurite-")
        store = ["--inMemoryPersistence"]
        if self.root is not None:
            self.root.mkdir(parents=True, exist_ok=True)
            store = ["--location", str(self.root)]
        problem: BaseException | None = None
        for _ in range(_STARTS):
            (port,) = free_ports(1)
            args = [program, "--blobHost", "127.0.0.1", "--blobPort", str(port), *store]
            # telemetry off (it reaches outside hosts); the SDK's newest API versions allowed
            args += ["--disableTelemetry", "--silent", "--skipApiVersionCheck"]
            try:
                self._proc = start_process(
                    args,
                    port,
                    what="azurite-blob",
                    log=Path(self._tmp) / "azurite.log",
                    cwd=Path(self._tmp),  # anything it writes lands in the temporary folder
                )
            except RuntimeError as exc:
                problem = exc
                continue
            self._url = f"http://127.0.0.1:{port}/{self.ACCOUNT}"
            return self
        self.stop()
        raise RuntimeError(f"Azurite did not start after {_STARTS} attempts: {problem}")

    def stop(self) -> None:
        """Stop the emulator by its PID; idempotent."""
        proc, self._proc = self._proc, None
        self._url = None
        service, self._service = self._service, None
        if service is not None:
            service.close()
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
        return f"<LocalAzurite {self._url or 'stopped'}>"

    # client side -----------------------------------------------------------------------

    @property
    def connection_string(self) -> str:
        """The connection string of the emulator's account."""
        return (
            f"DefaultEndpointsProtocol=http;AccountName={self.ACCOUNT};AccountKey={self.KEY};"
            f"BlobEndpoint={self.url};"
        )

    def storage_options(self, endpoint: str | None = None, **extra: Any) -> dict[str, Any]:
        """adlfs's options for this emulator (or for ``endpoint``, e.g. a proxy in front of
        it, given as ``http://host:port``), ``extra`` merged on top."""
        conn = self.connection_string
        if endpoint is not None:
            conn = conn.replace(self.url, f"{endpoint.rstrip('/')}/{self.ACCOUNT}")
        return {"connection_string": conn, **extra}

    def filesystem(self, **extra: Any) -> Any:
        """An ``adlfs.AzureBlobFileSystem`` for this emulator (fsspec's cached instance)."""
        import fsspec  # noqa: PLC0415

        return fsspec.filesystem("az", **self.storage_options(**extra))

    def sandbox(self) -> Sandbox:
        """A new container with this emulator's options (``az://`` URLs)."""
        return Sandbox(self, "az", self.create_bucket())

    def service(self) -> Any:
        """A synchronous ``BlobServiceClient`` (for setting up tests: not counted)."""
        if self._service is None:
            from azure.storage.blob import BlobServiceClient  # noqa: PLC0415

            self._service = BlobServiceClient.from_connection_string(self.connection_string)
        return self._service

    def create_bucket(self, name: str | None = None) -> str:
        """Create a container (a unique ``test-<hex>`` name when omitted); its name."""
        container = name or f"test-{uuid.uuid4().hex[:12]}"
        self.service().create_container(container)
        return container

    def put(self, container: str, blob: str, data: bytes) -> dict[str, Any]:
        """Store ``data`` as the blob (replacing it); its properties (``etag``, ...)."""
        client = self.service().get_blob_client(container, blob)
        answer: dict[str, Any] = client.upload_blob(bytes(data), overwrite=True)
        return answer

    def delete_bucket(self, container: str) -> None:
        """Delete a container and its blobs (quietly if it is gone)."""
        from azure.core.exceptions import ResourceNotFoundError  # noqa: PLC0415

        try:
            self.service().delete_container(container)
        except ResourceNotFoundError:
            return
