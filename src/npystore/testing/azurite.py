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

import uuid
from pathlib import Path
from typing import Any, ClassVar, Final

from npystore.testing.servers import ChildServer, Launch, Sandbox, find_program, free_ports

__all__ = ["AZURITE_ENV", "LocalAzurite"]

#: The environment variable naming the ``azurite-blob`` program.
AZURITE_ENV: Final = "NPYSTORE_AZURITE_BLOB"


class LocalAzurite(ChildServer):
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

    NAME: ClassVar[str] = "azurite-blob"
    #: The emulator's well-known development account and key (public, documented by Azure).
    ACCOUNT: Final = "devstoreaccount1"
    KEY: Final = (
        "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="
    )

    def __init__(self, root: str | Path | None = None, *candidates: str | Path) -> None:
        self.root = Path(root) if root is not None else None
        self.candidates = candidates
        self._service: Any = None

    def _program(self) -> str:
        return find_program("azurite-blob", AZURITE_ENV, *self.candidates)

    def _launch(self, program: str, folder: Path) -> Launch:
        store = ["--inMemoryPersistence"]
        if self.root is not None:
            self.root.mkdir(parents=True, exist_ok=True)
            store = ["--location", str(self.root)]
        (port,) = free_ports(1)
        args = [program, "--blobHost", "127.0.0.1", "--blobPort", str(port), *store]
        # telemetry off (it reaches outside hosts); the SDK's newest API versions allowed
        args += ["--disableTelemetry", "--silent", "--skipApiVersionCheck"]
        return Launch(args, port, f"http://127.0.0.1:{port}/{self.ACCOUNT}")

    def _attach(self, url: str | None) -> None:
        # the blob endpoint is http://127.0.0.1:PORT/devstoreaccount1: the service client
        # made for one run is closed when it stops
        service, self._service = self._service, None
        if service is not None:
            service.close()

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
