"""Temporary files of the writers (part of the fetch layer): names, SIGTERM, sweeping.

A local write goes into a temporary file in the destination's directory (a spool, for other
filesystems, in the system's temporary directory) that :class:`Spool` creates with
``O_EXCL`` under a short, unpredictable name (:func:`temporary_name`:
``.npystore-HOST-PID-RANDOM.tmp``, at most 41 bytes, so a destination name of 255 bytes still
works). Two things keep them from piling up:

- :func:`track`: while one is being written in the main thread and SIGTERM has its default
  action, a handler removes them on SIGTERM and then ends the process with the signal, as
  the default action would (the exit status says "killed by SIGTERM");
- :func:`sweep`: a later write into the same directory removes those that dead processes of
  this host left (SIGKILL cannot be handled; nor can SIGTERM outside the main thread).
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import os
import re
import secrets
import signal
import socket
import stat
import threading
import time
from types import FrameType
from typing import Any, Final

__all__ = ["SWEEP_AGE", "Spool", "sweep", "temporary_name", "track", "untrack"]

log = logging.getLogger(__name__)

#: Seconds a dead process's temporary file must have been left alone before :func:`sweep`
#: removes it (a guard against a process of another PID namespace on the same host).
SWEEP_AGE: Final = 60.0
#: Largest single ``pwrite`` (Linux writes at most about 2 GiB per call).
_PWRITE_MAX: Final = 2**30

_TEMP_NAME: Final = re.compile(r"\.npystore-([0-9a-f]{6})-(\d+)-[0-9a-f]{12}\.tmp")
_host_tag: str | None = None


def _host() -> str:
    global _host_tag  # noqa: PLW0603 - computed once per process
    if _host_tag is None:
        _host_tag = hashlib.blake2s(socket.gethostname().encode(), digest_size=3).hexdigest()
    return _host_tag


def temporary_name() -> str:
    """A new temporary file name: ``.npystore-HOST-PID-RANDOM.tmp`` (HOST: 6 hex digits of
    the host name's hash, RANDOM: 48 random bits), at most 41 bytes."""
    return f".npystore-{_host()}-{os.getpid()}-{secrets.token_hex(6)}.tmp"


_live_lock = threading.Lock()
#: Temporary files being written: path -> the process that made it (a forked child must not
#: remove its parent's).
_live: dict[str, int] = {}
_handler_installed = False


def _on_sigterm(signum: int, frame: FrameType | None) -> None:
    """SIGTERM while a save runs: remove this process's temporary files, then die of the
    signal as the default action would (no lock: this runs between two bytecodes of the main
    thread, which may hold it)."""
    pid = os.getpid()
    for path, owner in list(_live.items()):
        if owner == pid:
            with contextlib.suppress(OSError):
                os.unlink(path)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    os.kill(pid, signal.SIGTERM)


def _in_main_thread() -> bool:
    return threading.current_thread() is threading.main_thread()


def track(path: str) -> None:
    """Register a temporary file being written. In the main thread, while SIGTERM has its
    default action, a handler is installed until the last one is untracked: SIGTERM then
    removes them and ends the process as before (killed by SIGTERM)."""
    global _handler_installed  # noqa: PLW0603
    with _live_lock:
        _live[path] = os.getpid()
        if _handler_installed or not _in_main_thread():
            return
        with contextlib.suppress(ValueError):  # not the main interpreter
            if signal.getsignal(signal.SIGTERM) is signal.SIG_DFL:
                signal.signal(signal.SIGTERM, _on_sigterm)
                _handler_installed = True


def untrack(path: str) -> None:
    """The temporary file ``path`` is gone (renamed into place or removed)."""
    global _handler_installed  # noqa: PLW0603
    with _live_lock:
        _live.pop(path, None)
        if _live or not _handler_installed or not _in_main_thread():
            return
        _handler_installed = False
        with contextlib.suppress(ValueError):
            if signal.getsignal(signal.SIGTERM) is _on_sigterm:
                signal.signal(signal.SIGTERM, signal.SIG_DFL)


_swept: set[str] = set()


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:  # another user's process (EPERM): alive
        return True
    return True


def sweep(directory: str) -> list[str]:
    """Remove the temporary files that dead processes of this host left in ``directory``
    (killed by SIGKILL, or by SIGTERM outside the main thread): regular files of this user,
    named by :func:`temporary_name` with this host's tag, whose process is gone and which
    were not modified for :data:`SWEEP_AGE` seconds. Once per directory and process (a
    directory listing per save would cost much in large directories). Never raises; returns
    the paths removed."""
    with _live_lock:
        if directory in _swept:
            return []
        _swept.add(directory)
    removed: list[str] = []
    try:
        entries = list(os.scandir(directory))
    except OSError:
        return removed
    host, now, me = _host(), time.time(), os.getpid()
    for entry in entries:
        match = _TEMP_NAME.fullmatch(entry.name)
        if match is None or match.group(1) != host:
            continue
        pid = int(match.group(2))
        try:
            st = entry.stat(follow_symlinks=False)
        except OSError:
            continue
        if (
            pid == me
            or not stat.S_ISREG(st.st_mode)
            or st.st_uid != os.geteuid()
            or now - st.st_mtime < SWEEP_AGE
            or _alive(pid)
        ):
            continue
        try:
            os.unlink(entry.path)
        except OSError as exc:
            log.debug("stale temporary file %s not removed: %s", entry.path, exc)
        else:
            removed.append(entry.path)
            log.info("removed %s, left by the dead process %d", entry.path, pid)
    return removed


def _pwrite_all(fd: int, data: Any, offset: int) -> None:
    view = memoryview(data).cast("B")
    done = 0
    while done < view.nbytes:
        n = os.pwrite(fd, view[done : done + _PWRITE_MAX], offset + done)
        if n <= 0:
            raise OSError(f"pwrite wrote {n} bytes at offset {offset + done}")
        done += n


class Spool:
    """A local temporary file written by parts (one descriptor per process)."""

    def __init__(self, directory: str, size: int | None, mode: int = 0o666) -> None:
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC | os.O_NOFOLLOW
        for attempt in range(8):
            tmp = os.path.join(directory, temporary_name())
            try:
                fd = os.open(tmp, flags, mode)
            except FileExistsError:
                if attempt == 7:
                    raise
                continue
            break
        self.tmp = tmp
        track(tmp)
        try:
            if size:
                try:
                    os.posix_fallocate(fd, 0, size)
                except OSError:  # a filesystem without fallocate: sparse, then filled
                    os.ftruncate(fd, size)
        except BaseException:
            os.close(fd)
            os.unlink(tmp)
            untrack(tmp)
            raise
        self._fd: int | None = fd
        self._pid = os.getpid()

    def __getstate__(self) -> dict[str, Any]:
        return {"tmp": self.tmp}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.tmp = state["tmp"]
        self._fd = None
        self._pid = -1

    def fd(self) -> int:
        if self._fd is None or self._pid != os.getpid():
            self._fd = os.open(self.tmp, os.O_WRONLY | os.O_CLOEXEC | os.O_NOFOLLOW)
            self._pid = os.getpid()
        return self._fd

    def write(self, offset: int, data: Any) -> None:
        _pwrite_all(self.fd(), data, offset)

    def close(self) -> None:
        if self._fd is not None and self._pid == os.getpid():
            with contextlib.suppress(OSError):
                os.close(self._fd)
        self._fd = None

    def remove(self) -> None:
        self.close()
        try:
            os.unlink(self.tmp)
        except FileNotFoundError:
            pass
        except OSError as exc:
            log.warning("temporary file %s not removed: %s", self.tmp, exc)
        untrack(self.tmp)
