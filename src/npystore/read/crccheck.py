"""CRC-32 checks of stored ZIP members read in pieces: :class:`CrcLedger`.

A stored (uncompressed) ``.npz`` member is read by byte ranges: dask chunks, Zarr chunks and
slices each read their own part, in parallel and in any order. No single read sees the whole
member, so none can check the CRC-32 the ZIP directory records for it. A :class:`CrcLedger`
collects, per process, the CRC-32 of every byte range of the member read so far (each byte
is summed once: a range that overlaps what is already recorded contributes only its new
bytes) and joins adjacent ranges with :func:`crc32_combine`. When the ranges cover the whole
member (the npy header is summed when the member is opened), the combined CRC-32 is compared
with the directory's: a mismatch raises :class:`~npystore.errors.FormatError` in the read
that completed the member, a match ends the bookkeeping (later reads cost nothing).

A read of only a part of a member cannot be checked: it returns the bytes as they are.

No IO here: the caller passes a ``fetch`` callable for the few trailing bytes some writers
leave after the array data.
"""

from __future__ import annotations

import bisect
import threading
from collections.abc import Callable
from typing import Any, Final

from isal import isal_zlib

from npystore.errors import FormatError
from npystore.formats.deflate import crc32

__all__ = ["MAX_EXPORT", "MAX_SPANS", "TAIL_READ", "CrcLedger", "crc32_combine"]

#: Most separate (non-adjacent) ranges a ledger keeps; reads scattered over more stop the
#: bookkeeping for that member (memory stays bounded; the member is then not checked).
MAX_SPANS: Final = 100_000
#: Most separate ranges :meth:`CrcLedger.export` writes (a conversion's manifest stays small).
MAX_EXPORT: Final = 10_000
#: Most bytes after the array data (not part of any array read) that are fetched to finish a
#: check; a member with more is not checked.
TAIL_READ: Final = 64 * 2**10


def crc32_combine(crc1: int, crc2: int, len2: int) -> int:
    """The CRC-32 of ``A + B`` from ``crc32(A)``, ``crc32(B)`` and ``len(B)``: zlib's
    ``crc32_combine`` (Python's zlib does not expose it; ISA-L's binding does).

    Examples
    --------
    >>> import zlib
    >>> a, b = b"hello ", b"world"
    >>> crc32_combine(zlib.crc32(a), zlib.crc32(b), len(b)) == zlib.crc32(a + b)
    True
    """
    if len2 < 0:
        raise ValueError(f"len2 must be >= 0, got {len2}")
    return int(isal_zlib.crc32_combine(crc1, crc2, len2))


_TRACKING, _VERIFIED, _ABANDONED = "tracking", "verified", "abandoned"


class CrcLedger:
    """The CRC-32s of the parts of one stored member read so far, in one process.

    Parameters
    ----------
    source : str
        ``url:member``, for messages.
    start : int
        Absolute offset of the member's data in the archive.
    size : int
        The member's size (its uncompressed size: stored members are not compressed).
    expected : int
        The CRC-32 the ZIP directory records.
    head_size, head_crc : int
        Bytes at the member's start that no array read covers (the npy header), and their
        CRC-32, summed when the member's header was read.
    data_size : int
        Bytes of array data after the head; what follows (``size - head_size - data_size``
        bytes) is fetched to finish the check when it is at most :data:`TAIL_READ` bytes,
        else the member is never checked.
    verified : bool
        Already checked (a ledger pickled after its member was checked stays checked).

    Notes
    -----
    Pickles as its static description (and the verified flag): the ranges recorded in one
    process do not travel, so the members of a computation spread over several processes
    are checked only where one process reads all of a member.
    """

    def __init__(
        self,
        source: str,
        start: int,
        size: int,
        expected: int,
        head_size: int,
        head_crc: int,
        data_size: int,
        verified: bool = False,
    ) -> None:
        self.source = source
        self.start = start
        self.size = size
        self.expected = expected
        self.head_size = head_size
        self.head_crc = head_crc
        self.data_size = data_size
        self._lock = threading.Lock()
        self._starts: list[int] = []
        self._spans: dict[int, tuple[int, int]] = {}  # start -> (stop, crc)
        tail = size - head_size - data_size
        if verified:
            self._state = _VERIFIED
        elif tail < 0 or tail > TAIL_READ:
            self._state = _ABANDONED
        else:
            self._state = _TRACKING
            self._reset()

    def __reduce__(self) -> tuple[Callable[..., CrcLedger], tuple[Any, ...]]:
        return (
            CrcLedger,
            (
                self.source,
                self.start,
                self.size,
                self.expected,
                self.head_size,
                self.head_crc,
                self.data_size,
                self._state == _VERIFIED,
            ),
        )

    def __repr__(self) -> str:
        return f"CrcLedger({self.source!r}, {self._state}, spans={len(self._starts)})"

    @property
    def state(self) -> str:
        """``"tracking"``, ``"verified"`` (checked, matching) or ``"abandoned"`` (the
        member cannot be checked: too much trailing data, or too scattered reads)."""
        return self._state

    @property
    def end(self) -> int:
        """Absolute offset just past the member."""
        return self.start + self.size

    # -- recording -------------------------------------------------------------------------

    def record(
        self,
        offset: int,
        data: bytes | bytearray | memoryview,
        fetch: Callable[[int, int], bytes] | None = None,
    ) -> None:
        """Record bytes ``[offset, offset + len(data))`` of the archive as read.

        Parameters
        ----------
        offset : int
            Absolute offset of ``data`` in the archive (bytes outside the member are
            ignored).
        data : bytes-like
            What was read.
        fetch : callable, optional
            ``fetch(start, stop) -> bytes`` reads the member's trailing bytes (or at most
            :data:`TAIL_READ` leading ones) when everything else has been recorded.

        Raises
        ------
        FormatError
            The recorded ranges now cover the whole member and their CRC-32 is not the
            directory's.
        """
        if self._state != _TRACKING:
            return
        view = memoryview(data).cast("B")
        lo, hi = max(offset, self.start), min(offset + view.nbytes, self.end)
        sums: list[tuple[int, int, int]] = []
        tail: tuple[int, int] | None = None
        if lo < hi:
            with self._lock:
                gaps = self._gaps(lo, hi)
            # summed outside the lock: other threads record their own ranges meanwhile
            sums = [(a, b, crc32(view[a - offset : b - offset])) for a, b in gaps]
        with self._lock:
            if self._state != _TRACKING:
                return
            for a, b, crc in sums:
                now = self._gaps(a, b)
                if now == [(a, b)]:
                    self._insert(a, b, crc)
                    continue
                for a2, b2 in now:  # another thread recorded part of it meanwhile
                    self._insert(a2, b2, crc32(view[a2 - offset : b2 - offset]))
            if len(self._starts) > MAX_SPANS:
                self._state = _ABANDONED
                self._starts.clear()
                self._spans.clear()
                return
            computed = self._whole()
            if computed is None:
                tail = self._missing_tail()
            elif computed == self.expected:
                self._state = _VERIFIED
                self._starts.clear()
                self._spans.clear()
                return
            else:
                self._reset()  # a later full read checks (and fails) again
        if computed is not None:
            raise FormatError(
                f"{self.source}: CRC-32 of the member's data is {computed:08x}, the ZIP "
                f"directory says {self.expected:08x}: the member is corrupt (numpy.load "
                "raises BadZipFile)"
            )
        if tail is not None and fetch is not None:
            self.record(tail[0], fetch(*tail))

    # -- persistence (a resumable conversion keeps the ranges it read) -------------------

    def export(self) -> dict[str, Any] | None:
        """The state as JSON: ``{"verified": true}``, or ``{"spans": [[start, stop, crc],
        ...]}`` (absolute offsets) while tracking; ``None`` when the member cannot be
        checked or more than :data:`MAX_EXPORT` ranges are apart."""
        with self._lock:
            if self._state == _VERIFIED:
                return {"verified": True}
            if self._state != _TRACKING or len(self._starts) > MAX_EXPORT:
                return None
            return {"spans": [[a, *self._spans[a]] for a in self._starts]}

    def restore(self, doc: Any, *, where: str) -> None:
        """Add what :meth:`export` returned (in an earlier process, for the same object:
        the caller checks the object's identity).

        Raises
        ------
        FormatError
            ``doc`` is not what :meth:`export` writes for this member.
        """
        if not isinstance(doc, dict):
            raise FormatError(f"{where}: CRC state is {type(doc).__name__}, expected an object")
        if doc.get("verified") is True:
            with self._lock:
                self._state = _VERIFIED
                self._starts.clear()
                self._spans.clear()
            return
        spans = doc.get("spans")
        if not isinstance(spans, list):
            raise FormatError(f"{where}: CRC state without a list of spans")
        for span in spans:
            ok = (
                isinstance(span, list)
                and len(span) == 3
                and all(isinstance(v, int) and not isinstance(v, bool) for v in span)
                and self.start <= span[0] < span[1] <= self.end
                and 0 <= span[2] < 2**32
            )
            if not ok:
                raise FormatError(
                    f"{where}: CRC span {span!r} is not [start, stop, crc] within the member's "
                    f"bytes [{self.start}, {self.end})"
                )
        with self._lock:
            if self._state != _TRACKING:
                return
            self._starts.clear()  # what was exported includes the head
            self._spans.clear()
            for a, b, crc in spans:
                if self._gaps(a, b) == [(a, b)]:
                    self._insert(a, b, crc)
            head = (self.start, self.start + self.head_size)
            if self.head_size and self._gaps(*head) == [head]:
                self._insert(*head, self.head_crc)

    # -- bookkeeping (under the lock) ------------------------------------------------------

    def _reset(self) -> None:
        self._starts.clear()
        self._spans.clear()
        if self.head_size:
            self._starts.append(self.start)
            self._spans[self.start] = (self.start + self.head_size, self.head_crc)

    def _gaps(self, lo: int, hi: int) -> list[tuple[int, int]]:
        """The parts of ``[lo, hi)`` not recorded yet."""
        gaps: list[tuple[int, int]] = []
        i = max(0, bisect.bisect_right(self._starts, lo) - 1)
        pos = lo
        while i < len(self._starts) and pos < hi:
            s = self._starts[i]
            if s >= hi:
                break
            stop = self._spans[s][0]
            if s > pos:
                gaps.append((pos, s))
            pos = max(pos, stop)
            i += 1
        if pos < hi:
            gaps.append((pos, hi))
        return gaps

    def _insert(self, a: int, b: int, crc: int) -> None:
        """Add the unrecorded range ``[a, b)``, joining it to its neighbours."""
        i = bisect.bisect_left(self._starts, a)
        if i > 0:
            left = self._starts[i - 1]
            stop, left_crc = self._spans[left]
            if stop == a:
                crc = crc32_combine(left_crc, crc, b - a)
                a = left
                del self._spans[left]
                del self._starts[i - 1]
                i -= 1
        if i < len(self._starts) and self._starts[i] == b:
            stop, right_crc = self._spans.pop(b)
            crc = crc32_combine(crc, right_crc, stop - b)
            b = stop
            del self._starts[i]
        self._starts.insert(i, a)
        self._spans[a] = (b, crc)

    def _whole(self) -> int | None:
        """The member's CRC-32 when one recorded range covers it."""
        if len(self._starts) == 1 and self._starts[0] == self.start:
            stop, crc = self._spans[self.start]
            if stop == self.end:
                return crc
        if self.size == 0:
            return 0
        return None

    def _missing_tail(self) -> tuple[int, int] | None:
        """The trailing bytes, when they are all that is missing; or the leading bytes (at
        most :data:`TAIL_READ`: an npy header no array read covers) when they are."""
        if len(self._starts) != 1:
            return None
        first = self._starts[0]
        stop = self._spans[first][0]
        if first == self.start:
            tail_start = self.start + self.head_size + self.data_size
            return (tail_start, self.end) if stop == tail_start < self.end else None
        if stop == self.end and first - self.start <= TAIL_READ:
            return (self.start, first)
        return None
