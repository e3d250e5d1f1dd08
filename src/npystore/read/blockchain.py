"""Which pieces of a block-indexed member passed their check, per member and process
(:mod:`npystore.read.blocks` reads through the chain; :class:`~npystore.read.slot.IndexSlot`
holds it and pickles how many pieces from the start passed), and the output of pieces
checked ahead of the reads they belong to, kept until those reads take it."""

from __future__ import annotations

import threading
from typing import Any

import numpy as np

__all__ = ["BlockChain"]

_UNCHECKED, _CHECKING, _CHECKED = 0, 1, 2


class BlockChain:
    """Which pieces of a block-indexed member passed their check in this process.

    Attributes
    ----------
    broken : bool
        A piece failed: the block index is not used for this member any more.
    """

    def __init__(self, count: int, checked: int = 0) -> None:
        self._state = bytearray([_CHECKED]) * min(checked, count) + bytearray(
            max(0, count - checked)
        )
        self.broken = False
        self._cond = threading.Condition()
        #: Pieces recorded as checked in the index cache directory (see
        #: :func:`npystore.read.blocks.read_blocks`).
        self.persisted = checked
        #: Output start -> buffer: pieces checked ahead of the read they belong to, their
        #: output kept until that read takes it (see
        #: :func:`npystore.read.blocks.read_blocks_array`).
        self._kept: dict[int, np.ndarray[Any, np.dtype[np.uint8]]] = {}
        #: Output ranges reads inflated themselves (no output kept for them is read).
        self._served: list[tuple[int, int]] = []
        #: The largest read seen: kept output is cut in ranges of this size.
        self.unit = 0
        #: Whether checked output may be kept (decided once, within the keep budget).
        self.keeping: bool | None = None
        self.deciding = threading.Lock()

    @property
    def checked(self) -> int:
        """How many pieces from the member's start passed (travels with a pickled slot)."""
        with self._cond:
            n = 0
            for s in self._state:
                if s != _CHECKED:
                    break
                n += 1
            return n

    def is_checked(self, k: int) -> bool:
        """Whether piece ``k`` passed."""
        return self._state[k] == _CHECKED

    def claim(self, lo: int, hi: int) -> list[int]:
        """Mark the unchecked pieces of ``[lo, hi)`` as being checked by the caller."""
        with self._cond:
            mine = [k for k in range(lo, hi) if self._state[k] == _UNCHECKED]
            for k in mine:
                self._state[k] = _CHECKING
            return mine

    def settle(self, k: int, *, passed: bool) -> None:
        """Record the result of checking piece ``k``."""
        with self._cond:
            self._state[k] = _CHECKED if passed else _UNCHECKED
            if not passed:
                self.broken = True
            self._cond.notify_all()

    def abandon(self, pieces: list[int]) -> None:
        """Give back pieces the caller claimed and did not check (its read failed)."""
        with self._cond:
            for k in pieces:
                if self._state[k] == _CHECKING:
                    self._state[k] = _UNCHECKED
            self._cond.notify_all()

    def keep(self, start: int, buf: np.ndarray[Any, np.dtype[np.uint8]]) -> None:
        """Keep output ``[start, start + len(buf))`` of checked pieces for the read of it
        (unless a read of a range overlapping it was served already)."""
        stop = start + buf.nbytes
        with self._cond:
            if self.keeping and not any(a < stop and start < b for a, b in self._served):
                self._kept[start] = buf

    def served(self, start: int, stop: int) -> None:
        """A read inflated output ``[start, stop)`` itself: no output kept for it (now or
        later) will be read."""
        with self._cond:
            if self.keeping:
                self._served.append((start, stop))
                for a, buf in list(self._kept.items()):
                    if a < stop and start < a + buf.nbytes:
                        del self._kept[a]

    def settle_wait(self, lo: int, hi: int) -> bool:
        """Wait until no piece of ``[lo, hi)`` is being checked; whether all passed."""
        with self._cond:
            self._cond.wait_for(
                lambda: self.broken or all(s != _CHECKING for s in self._state[lo:hi])
            )
            return not self.broken and all(s == _CHECKED for s in self._state[lo:hi])

    def take(self, start: int, nbytes: int) -> np.ndarray[Any, np.dtype[np.uint8]] | None:
        """The kept output ``[start, start + nbytes)`` (given up here), or None."""
        with self._cond:
            buf = self._kept.get(start)
            if buf is None or buf.nbytes != nbytes:
                return None
            del self._kept[start]
            return buf

    def holds(self) -> bool:
        """Whether output is kept, or may be kept by reads to come (pieces unchecked)."""
        with self._cond:
            unchecked = any(state != _CHECKED for state in self._state)
            return bool(self._kept) or bool(self.keeping and unchecked)

    def drop(self) -> None:
        """Let the kept output go and keep no more (the keep budget)."""
        with self._cond:
            self._kept.clear()
            self._served.clear()
            self.keeping = False

    def wait(self, hi: int) -> bool | None:
        """Wait until pieces ``[0, hi)`` passed (True), one failed (False), or one is
        unclaimed again (``None``: its reader gave up; the caller checks it)."""

        def settled() -> bool:
            if self.broken:
                return True
            return all(s != _CHECKING for s in self._state[:hi])

        with self._cond:
            self._cond.wait_for(settled)
            if self.broken:
                return False
            if all(s == _CHECKED for s in self._state[:hi]):
                return True
            return None
