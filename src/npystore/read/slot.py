"""A deflated member's checkpoint index, and its inflated bytes, shared by its chunk reads.

Every chunk of a deflated member (a ``savez_compressed`` member, a compressed MATLAB v5
variable) reads through the member's one :class:`IndexSlot`: the index is built at most
once per process (or read from the index cache), travels with pickled dask graphs, and
the slot can hold the whole member's inflated bytes for the reads of this process, or the
one pass over it that the chunk reads of a first compute share
(:class:`npystore.read.firstpass.FirstPass`).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

if TYPE_CHECKING:  # both load only for deflated data
    from npystore.formats.deflate import DeflateIndex
    from npystore.read.crccheck import CrcLedger

__all__ = ["IndexSlot"]


class _Chain(Protocol):
    @property
    def checked(self) -> int: ...

    def holds(self) -> bool: ...

    def drop(self) -> None: ...


class _Pass(Protocol):
    def holds(self) -> bool: ...

    def drop(self) -> None: ...


_C = TypeVar("_C", bound=_Chain)
_P = TypeVar("_P", bound=_Pass)


class IndexSlot:
    """A member's checkpoint index: empty until built, built at most once per process.

    Pickles with its current content (an index built on the client travels with the graph,
    as does how many pieces of a block index passed their check, :meth:`block_chain`); the
    locks do not travel, nor do a member's inflated bytes kept in this process
    (:meth:`keep`) or its first pass (:meth:`first_pass`): a graph stays small, and a
    worker inflates what it reads itself.
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
        self._pass: Any = None
        self._pass_lock = threading.Lock()  # not ``_lock``: an index build holds that
        #: The CRC-32 ledger of the output read through an index, with that index.
        self._ledger: tuple[DeflateIndex, CrcLedger] | None = None
        self._ledger_lock = threading.Lock()

    def keep(self, inflated: bytes | bytearray | memoryview) -> None:
        """Keep the whole member's inflated (and checked) bytes for reads in this process
        (until :meth:`drop`)."""
        self._inflated = inflated

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
        return True

    def first_pass(self, make: Callable[[], _P | None] | None = None) -> _P | None:
        """The member's first pass (:class:`npystore.read.firstpass.FirstPass`); when there
        is none, the one ``make`` gives (made once: the lock is held while it runs)."""
        first: _P | None = self._pass
        if first is not None or make is None:
            return first
        with self._pass_lock:
            if self._pass is None:
                self._pass = make()
            made: _P | None = self._pass
            return made

    def holds(self) -> bool:
        """Whether the slot holds inflated bytes for reads to come (kept whole, by its
        first pass, or by its block chain)."""
        first, chain = self._pass, self._chain
        return (
            self._inflated is not None
            or (first is not None and first.holds())
            or (chain is not None and chain.holds())
        )

    def drop(self) -> None:
        """Forget the kept output, stop the first pass, let the block chain's kept output
        go (memory budget)."""
        self._inflated = None
        for holder in (self._pass, self._chain):
            if holder is not None:
                holder.drop()

    def block_chain(self, make: Callable[[int], _C]) -> _C:
        """The member's block chain (:class:`npystore.read.blockchain.BlockChain`), made once
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
        with self._ledger_lock:
            if self._index is not index:
                return None
            if self._ledger is None or self._ledger[0] is not index:
                self._ledger = (index, make())
            return self._ledger[1]
