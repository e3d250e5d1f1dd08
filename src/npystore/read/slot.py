"""A deflated member's checkpoint index, and its inflated bytes, shared by its chunk reads.

Every chunk of a deflated member (a ``savez_compressed`` member, a compressed MATLAB v5
variable) reads through the member's one :class:`IndexSlot`: the index is built at most
once per process (or read from the index cache), travels with pickled dask graphs, and
the slot can hold the whole member's inflated bytes for the reads of this process.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any, Final, Protocol, TypeVar

from npystore.formats.deflate import DeflateIndex
from npystore.read.crccheck import CrcLedger

__all__ = ["UNREAD_SLACK", "IndexSlot"]


class _Chain(Protocol):
    @property
    def checked(self) -> int: ...


_C = TypeVar("_C", bound=_Chain)


#: Bytes of a member kept ``until_read`` that may stay unread when it is released (its npy
#: header: chunk reads start at the array data).
UNREAD_SLACK: Final = 64 * 2**10


class IndexSlot:
    """A member's checkpoint index: empty until built, built at most once per process.

    Pickles with its current content (an index built on the client travels with the graph,
    as does how many pieces of a block index passed their check, :meth:`block_chain`); the
    lock does not travel, nor does a member's inflated bytes kept in this process
    (:meth:`keep`): a graph stays small, and a worker inflates what it reads itself.
    """

    def __init__(
        self,
        index: DeflateIndex | None = None,
        cache_dir: str | None = None,
        blocks_checked: int = 0,
    ) -> None:
        self._index = index
        self._blocks_checked = blocks_checked
        self._chain: Any = None
        self._chain_lock = threading.Lock()
        #: Local directory where indexes are kept between processes and sessions (or None).
        self.cache_dir = cache_dir
        self._lock = threading.Lock()
        self._inflated: bytes | bytearray | memoryview | None = None
        #: With ``until_read``: output bytes still to be served before the kept bytes go.
        self._unread: int | None = None
        self._unread_lock = threading.Lock()  # not ``_lock``: an index build holds that
        #: The CRC-32 ledger of the output read through an index, with that index.
        self._ledger: tuple[DeflateIndex, CrcLedger] | None = None

    def keep(self, inflated: bytes | bytearray | memoryview, *, until_read: bool = False) -> None:
        """Keep the whole member's inflated (and checked) bytes for reads in this process;
        with ``until_read``, only until all but :data:`UNREAD_SLACK` of them have been
        served (:meth:`serve`: a dask compute reads each chunk once; the npy header before
        the array data is read otherwise) or :meth:`drop`."""
        self._inflated = inflated
        self._unread = len(inflated) - UNREAD_SLACK if until_read else None

    def inflated(self) -> bytes | bytearray | memoryview | None:
        """The member's inflated bytes, when kept in this process (:meth:`keep`)."""
        return self._inflated

    def serve(self, start: int, out: memoryview) -> bool:
        """Copy kept output ``[start, start + len(out))`` into ``out``; False when nothing
        is kept."""
        kept = self._inflated
        if kept is None:
            return False
        out[:] = memoryview(kept)[start : start + out.nbytes]
        with self._unread_lock:
            if self._unread is not None:
                self._unread -= out.nbytes
                if self._unread <= 0:
                    self._inflated = self._unread = None
        return True

    def drop(self) -> None:
        """Forget the kept output (memory budget)."""
        self._inflated = self._unread = None

    def block_chain(self, make: Callable[[int], _C]) -> _C:
        """The member's block chain (:class:`npystore.read.blocks.BlockChain`), made once
        by ``make(pieces already checked)``."""
        with self._chain_lock:
            if self._chain is None:
                self._chain = make(self._blocks_checked)
            chain: _C = self._chain
            return chain

    def __reduce__(self) -> tuple[Callable[..., IndexSlot], tuple[Any, ...]]:
        chain = self._chain
        checked = self._blocks_checked if chain is None else chain.checked
        return (IndexSlot, (self._index, self.cache_dir, checked))

    def __repr__(self) -> str:
        state = "empty" if self._index is None else f"{len(self._index.checkpoints)} checkpoints"
        return f"IndexSlot({state})"

    def get(self) -> DeflateIndex | None:
        """The index, if built."""
        return self._index

    def ensure(self, build: Callable[[], DeflateIndex | None]) -> DeflateIndex | None:
        """Return the index, building it with ``build`` if nobody has yet (one at a time)."""
        if self._index is not None:
            return self._index
        with self._lock:
            if self._index is None:
                self._index = build()
            return self._index

    def set(self, index: DeflateIndex) -> None:
        """Install an index (built elsewhere or read from a cache)."""
        self._index = index

    def replace(
        self, old: DeflateIndex, build: Callable[[], DeflateIndex | None]
    ) -> DeflateIndex | None:
        """Replace ``old`` (found wrong) with what ``build`` returns, unless another thread
        replaced it already; return the index the slot holds then."""
        with self._lock:
            if self._index is old:
                self._index = build()
            return self._index

    def ledger(self, index: DeflateIndex, make: Callable[[], CrcLedger]) -> CrcLedger | None:
        """The CRC-32 ledger of the output read through ``index`` (made by ``make`` on first
        use); None when the slot no longer holds ``index`` (it was replaced)."""
        with self._unread_lock:
            if self._index is not index:
                return None
            if self._ledger is None or self._ledger[0] is not index:
                self._ledger = (index, make())
            return self._ledger[1]
