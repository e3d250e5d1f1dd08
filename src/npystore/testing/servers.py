"""Starting and stopping the object-store servers the tests and benchmarks run on loopback.

SeaweedFS (:mod:`npystore.testing.seaweed`), fake-gcs-server (:mod:`npystore.testing.gcs`)
and Azurite (:mod:`npystore.testing.azurite`) are separate programs: each is started as a
child process bound to 127.0.0.1 on free ports, waited for until it answers, and stopped by
its PID (terminate, then kill). A program that is not installed raises
:class:`ServerUnavailable`, which the test fixtures turn into a skip of that server's tests,
or into a failure when :data:`REQUIRE_ENV` is set (CI sets it: there a missing server is a
broken install, not a reason to test less).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Final, Protocol

__all__ = [
    "REQUIRE_ENV",
    "Sandbox",
    "ServerUnavailable",
    "find_program",
    "free_ports",
    "servers_required",
    "start_process",
    "stop_process",
]

#: Set to ``1`` to make a server that cannot start fail the tests instead of skipping them.
REQUIRE_ENV: Final = "NPYSTORE_REQUIRE_SERVERS"


class ServerUnavailable(RuntimeError):
    """A server's program is not installed here (its tests are skipped, unless required)."""


def servers_required() -> bool:
    """Whether :data:`REQUIRE_ENV` asks for every server (``1``, ``true``, ``yes``)."""
    return os.environ.get(REQUIRE_ENV, "").strip().lower() in ("1", "true", "yes")


def find_program(name: str, env: str, *candidates: str | Path) -> str:
    """The path of program ``name``: the environment variable ``env`` if set, else the
    ``candidates`` that exist, else the one beside this Python (a virtual environment's
    ``bin``), else ``PATH``.

    Raises
    ------
    ServerUnavailable
        None of them is there.
    """
    chosen = os.environ.get(env)
    if chosen:
        if not Path(chosen).exists():
            raise ServerUnavailable(f"{env}={chosen!r} does not exist")
        return str(Path(chosen).resolve())
    for candidate in (*candidates, Path(sys.executable).parent / name):
        if Path(candidate).is_file():
            return str(Path(candidate).resolve())
    found = shutil.which(name)
    if found is None:
        raise ServerUnavailable(f"{name} is not installed (set {env} to its path)")
    return found


def free_ports(count: int) -> list[int]:
    """``count`` distinct ports free on 127.0.0.1 now (a server started on them may still
    lose one to another process: :func:`start_process` callers retry)."""
    sockets = []
    try:
        for _ in range(count):
            s = socket.socket()
            s.bind(("127.0.0.1", 0))
            sockets.append(s)
        return [s.getsockname()[1] for s in sockets]
    finally:
        for s in sockets:
            s.close()


def _answers(port: int) -> bool:
    with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 0.2):
        return True
    return False


def start_process(
    args: Sequence[str],
    port: int,
    *,
    what: str,
    log: Path,
    cwd: Path | None = None,
    timeout: float = 60.0,
    ready: Callable[[], bool] | None = None,
) -> subprocess.Popen[bytes]:
    """Start ``args`` (output to ``log``) and wait until ``port`` accepts connections and
    ``ready()`` (if given) is true.

    Raises
    ------
    RuntimeError
        The process exited, or was not ready within ``timeout`` seconds (it is stopped);
        the message holds the end of its log.
    """
    with log.open("ab") as out:
        proc = subprocess.Popen(
            list(args), stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, cwd=cwd
        )
    deadline = time.monotonic() + timeout
    try:
        while True:
            if proc.poll() is not None:
                raise RuntimeError(f"{what} exited with status {proc.returncode}{_tail(log)}")
            if _answers(port) and (ready is None or ready()):
                return proc
            if time.monotonic() > deadline:
                raise RuntimeError(f"{what} did not answer within {timeout:g} s{_tail(log)}")
            time.sleep(0.1)
    except BaseException:
        stop_process(proc)
        raise


def _tail(log: Path, size: int = 1500) -> str:
    try:
        text = log.read_bytes()[-size:].decode("utf-8", "replace")
    except OSError:
        return ""
    return f"; the end of its log ({log}):\n{text}" if text else ""


def stop_process(proc: subprocess.Popen[bytes] | None, timeout: float = 10.0) -> None:
    """Stop ``proc`` by its PID: SIGTERM, then SIGKILL if it has not exited in ``timeout``
    seconds. Safe to call twice."""
    if proc is None or proc.poll() is not None:
        return
    proc.terminate()
    try:
        proc.wait(timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(timeout)


class _Store(Protocol):
    """What a :class:`Sandbox` needs of its server."""

    def storage_options(self) -> dict[str, Any]: ...

    def filesystem(self) -> Any: ...

    def put(self, bucket: str, key: str, data: bytes) -> dict[str, Any]: ...

    def delete_bucket(self, bucket: str) -> None: ...


class Sandbox:
    """One bucket (a container on Azure) of a GCS or Azure emulator, for one test: its
    URLs, options and filesystem, objects put without going through the filesystem (so no
    request of the test's is spent on them).

    Parameters
    ----------
    server : LocalGCS or LocalAzurite
        The running server.
    protocol : str
        ``"gs"`` or ``"az"``.
    bucket : str
        An existing bucket (container), deleted by :meth:`close`.
    """

    def __init__(self, server: _Store, protocol: str, bucket: str) -> None:
        self.server = server
        self.protocol = protocol
        self.bucket = bucket

    def __repr__(self) -> str:
        return f"<Sandbox {self.protocol}://{self.bucket}>"

    @property
    def storage_options(self) -> dict[str, Any]:
        """The filesystem's options (a fresh dict each time)."""
        return self.server.storage_options()

    @property
    def fs(self) -> Any:
        """The filesystem (fsspec's cached instance for :attr:`storage_options`)."""
        return self.server.filesystem()

    def url(self, key: str = "") -> str:
        """``protocol://bucket/key``."""
        return f"{self.protocol}://{self.bucket}/{key.lstrip('/')}"

    def put_bytes(self, data: bytes, key: str) -> str:
        """Store ``data`` under ``key`` (replacing it); its URL."""
        self.server.put(self.bucket, key, data)
        url = self.url(key)
        self.fs.invalidate_cache(url)
        return url

    def put_file(self, local_path: str | os.PathLike[str], key: str | None = None) -> str:
        """Upload a local file under ``key`` (default: its name); its URL."""
        path = Path(local_path)
        return self.put_bytes(path.read_bytes(), key if key is not None else path.name)

    def close(self) -> None:
        """Delete the bucket and its objects."""
        self.server.delete_bucket(self.bucket)
