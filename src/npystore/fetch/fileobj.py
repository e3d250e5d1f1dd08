"""Byte ranges of an open binary file object (part of the fetch layer).

:func:`npystore.load`, :func:`npystore.read_header`, :func:`npystore.open_npy` (and
:func:`npystore.open`) accept what :func:`numpy.load` accepts besides a path: an open,
seekable binary file object (``open(path, "rb")``, :class:`io.BytesIO`, an fsspec file).
:class:`FileSource` reads its ranges for a :class:`~npystore.fetch.RangeReader`:

- the object starts at the file's position when it is opened (as numpy reads from the
  current position: several arrays saved one after the other in one file load one by one)
  and ends at the end of the file;
- a file with a real descriptor (``fileno()``) is read with ``os.pread``, which neither
  moves the file's position nor needs a lock, and its device, inode, size, ``mtime_ns`` and
  ``ctime_ns`` are checked against those at open before and after every batch of reads (a
  file rewritten before or during the reads raises :class:`~npystore.errors.ConsistencyError`,
  as for a local path; see :mod:`npystore.fetch.identity`);
- any other file object (``io.BytesIO``, a remote fsspec file) is read with ``seek`` and
  ``readinto`` (or ``read``) under a lock, and its size is checked before every batch. Its
  identity is unique to the open (nothing kept for one open serves another).

The file's position while a lazy array over it is in use is unspecified (reads seek it);
:func:`npystore.load` leaves it just after the array, as :func:`numpy.load` does.

A dask graph over a file object runs in threads of the process that opened it. Pickled (to
send it to other processes), a reader over an :class:`io.BytesIO` carries its bytes (from
the position at open); one over any other file object cannot be pickled (a file handle
belongs to its process) and raises :class:`~npystore.errors.UnsupportedError` saying to open
the file by its path or URL instead.
"""

from __future__ import annotations

import io
import os
import threading
from collections.abc import Callable, Sequence
from typing import Any, Protocol, TypeGuard, runtime_checkable

from npystore.errors import ConsistencyError, UnsupportedError
from npystore.fetch.identity import ObjectIdentity, StatPin, stat_fields

__all__ = ["BinaryFile", "FileSource", "is_file_object"]


@runtime_checkable
class BinaryFile(Protocol):
    """What a file object must offer: ``read``, ``seek`` and ``tell`` (as numpy.load asks)."""

    def read(self, size: int = -1, /) -> bytes: ...

    def seek(self, offset: int, whence: int = 0, /) -> int: ...

    def tell(self) -> int: ...


def is_file_object(obj: object) -> TypeGuard[BinaryFile]:
    """Whether ``obj`` is a file object (not a path or URL)."""
    return not isinstance(obj, (str, bytes, os.PathLike)) and isinstance(obj, BinaryFile)


class FileSource:
    """Positional reads of ``[start, stop)`` of a binary file object, from its position at
    open to its end.

    Parameters
    ----------
    file : file object
        Open for reading in binary mode and seekable.

    Raises
    ------
    TypeError
        A text-mode file, or an object without ``read``/``seek``/``tell``.
    UnsupportedError
        A file that cannot seek (a pipe, a socket, a streamed HTTP body).
    """

    def __init__(self, file: object):
        if isinstance(file, io.TextIOBase):
            raise TypeError(
                f"{file!r} is open in text mode; open it in binary mode ('rb') to read arrays"
            )
        if not is_file_object(file):
            raise TypeError(
                f"expected a path, a URL or a binary file object with read, seek and tell, "
                f"got {type(file).__name__}"
            )
        seekable = getattr(file, "seekable", None)
        if callable(seekable) and not seekable():
            raise UnsupportedError(
                f"{_describe(file)}: the file object cannot seek, and npystore reads byte "
                f"ranges; read it into io.BytesIO first (io.BytesIO(f.read()))"
            )
        #: The file object.
        self.file: Any = file
        self._lock = threading.Lock()
        with self._lock:
            flush = _flush_of(file)
            if flush is not None:
                flush()  # buffered writes (np.save into it) reach the descriptor
            #: Where the object starts in the file (its position at open).
            self.base = file.tell()
            end = file.seek(0, io.SEEK_END)
            file.seek(self.base)
        #: The object's size: from the position at open to the end of the file.
        self.size = max(0, end - self.base)
        self._fd = _descriptor(file)
        st = os.fstat(self._fd) if self._fd is not None else None
        #: The object's name in messages, e.g. ``<BufferedReader /tmp/a.npy>``.
        self.name = _describe(file, self.base)
        #: Identity fields (as :class:`~npystore.fetch.ObjectIdentity` holds them).
        self.fields: tuple[tuple[str, str], ...]
        #: The descriptor's file at open, compared before and after every batch of reads.
        self._pin: StatPin | None = None
        if st is not None:
            self.fields = (*stat_fields(st), ("offset", str(self.base)))
            self._pin = StatPin(self.fields, st.st_size)
        else:  # nothing names an in-memory file's content: an identity of this open only
            self.fields = ObjectIdentity.pinned((("object", type(file).__name__),))

    def __reduce__(self) -> tuple[Callable[..., FileSource], tuple[Any, ...]]:
        if isinstance(self.file, io.BytesIO):
            with self.file.getbuffer() as buf:
                data = bytes(buf[self.base :])
            return (_from_bytes, (data,))
        raise UnsupportedError(
            f"{self.name}: a reader over an open file object cannot be pickled (sent to other "
            f"processes, e.g. dask's distributed workers); open the file by its path or URL "
            f"instead, or read its bytes into io.BytesIO"
        )

    def readinto_many(self, requests: Sequence[tuple[int, memoryview]]) -> None:
        """Fill each view with the object's bytes from its offset (relative to :attr:`base`)."""
        if getattr(self.file, "closed", False):
            raise ValueError(f"{self.name}: the file object was closed")
        fd = self._fd
        if fd is not None:
            self._check_descriptor(fd, "")
            for start, view in requests:
                self._pread(fd, start, view)
            self._check_descriptor(fd, " while it was being read")
            return
        with self._lock:
            end = self.file.seek(0, io.SEEK_END)
            if end - self.base != self.size:
                raise self._changed(f"size {self.size} -> {end - self.base}", "")
            for start, view in requests:
                self._read_locked(start, view)

    def move_to(self, offset: int) -> None:
        """Put the file's position at ``offset`` of the object (what numpy.load leaves)."""
        with self._lock:
            self.file.seek(self.base + offset)

    def _check_descriptor(self, fd: int, when: str) -> None:
        changed = None if self._pin is None else self._pin.changes(os.fstat(fd))
        if changed is not None:
            raise self._changed(changed, when)

    def _pread(self, fd: int, start: int, view: memoryview) -> None:
        done = 0
        while done < view.nbytes:
            n = os.preadv(fd, [view[done:]], self.base + start + done)
            if n <= 0:
                raise self._ended(start, view.nbytes, done)
            done += n

    def _read_locked(self, start: int, view: memoryview) -> None:
        file: Any = self.file
        file.seek(self.base + start)
        done = 0
        readinto = getattr(file, "readinto", None)
        while done < view.nbytes:
            if readinto is not None:
                n = readinto(view[done:])
            else:
                piece = file.read(view.nbytes - done)
                n = len(piece)
                view[done : done + n] = piece
            if not n:
                raise self._ended(start, view.nbytes, done)
            done += n

    def _changed(self, what: str, when: str) -> ConsistencyError:
        return ConsistencyError(f"{self.name}: the file changed since it was opened{when} ({what})")

    def _ended(self, start: int, count: int, done: int) -> ConsistencyError:
        return ConsistencyError(
            f"{self.name}: the file ended at byte {start + done} while reading "
            f"[{start}, {start + count}); it is shorter than when it was opened"
        )


def _from_bytes(data: bytes) -> FileSource:
    """Unpickle a :class:`FileSource` over an :class:`io.BytesIO`."""
    return FileSource(io.BytesIO(data))


def _flush_of(file: object) -> Callable[[], object] | None:
    """The ``flush`` of a file open for writing (None for a read-only file)."""
    writable = getattr(file, "writable", None)
    flush = getattr(file, "flush", None)
    try:
        return flush if callable(writable) and writable() and callable(flush) else None
    except (OSError, ValueError):
        return None


def _descriptor(file: Any) -> int | None:
    """The file's OS descriptor if it has a real one that ``os.preadv`` can read."""
    fileno = getattr(file, "fileno", None)
    if not callable(fileno) or not hasattr(os, "preadv"):
        return None
    try:
        fd = fileno()
    except (OSError, ValueError, io.UnsupportedOperation):
        return None
    if not isinstance(fd, int) or fd < 0:
        return None
    try:
        os.preadv(fd, [memoryview(bytearray(0))], 0)
    except OSError:  # a pipe, a socket: no positional reads
        return None
    return fd


def _describe(file: Any, base: int = 0) -> str:
    name = getattr(file, "name", None)
    if not isinstance(name, str):
        name = getattr(file, "path", None)
    kind = type(file).__name__
    where = f" at byte {base}" if base else ""
    return f"<{kind} {name}{where}>" if isinstance(name, str) else f"<{kind}{where}>"
