"""The inline budget of one set of references: how many bytes of values the JSON may carry.

Chunks that no byte range of the file holds are inlined (base64 in kerchunk JSON). One
:class:`InlineBudget` is shared by every array of a call (:func:`npystore.to_kerchunk`), so
a small archive of many compressible members cannot turn into gigabytes of JSON: each array
reserves its inlined bytes *before* any of them is read or inflated, and once the budget is
spent nothing more is read; the arrays that did not fit are collected and refused together
(:meth:`InlineBudget.check`), each with what it would have cost and the way out.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Final, Literal

from npystore.errors import UnsupportedError

__all__ = ["MAX_INLINE", "InlineBudget", "OverBudget", "Why"]

#: Most inlined bytes (encoded, before base64) of one set of references, all arrays together.
MAX_INLINE: Final = 16 * 2**20
#: Arrays named one by one in the refusal (the rest are counted).
_NAMED: Final = 10

#: Why an array needs inlined bytes, which decides the way out offered:
#: ``deflated`` a deflate stream with no block index (numpy's ``savez_compressed``);
#: ``chunks`` chunks that are not byte ranges (an edge past the file's end, chunks that
#: split a fast axis); ``values`` values no range holds (compressed MAT v5, HDF5 compact
#: data, text, filters numcodecs lacks, HDF5 chunks stored without their filters).
Why = Literal["deflated", "chunks", "values"]

_WAYS: Final[dict[str, str]] = {
    "deflated": (
        "re-deflate the archive with a block index (`npystore convert IN.npz OUT.npz`, as "
        "npystore.savez_compressed writes it), whose references point at its blocks"
    ),
    "chunks": (
        "pass chunks= (--chunks) whose length along the split axis divides it and that split "
        "only the slowest-varying axis, or leave chunks=None"
    ),
    "values": "convert the file to Zarr instead (`npystore convert URL OUT.zarr`)",
}


class OverBudget(Exception):
    """An array's inlined bytes did not fit (recorded in the budget)."""


@dataclass
class InlineBudget:
    """Inlined bytes of one set of references.

    Attributes
    ----------
    limit : int
        Most bytes in all.
    used : int
        Bytes reserved so far.
    refused : dict
        Array (its source) -> ``(bytes, reason, why)`` for those that did not fit.
    """

    limit: int = MAX_INLINE
    used: int = 0
    refused: dict[str, tuple[int, str, Why]] = field(default_factory=dict)

    def take(self, source: str, nbytes: int, reason: str, why: Why) -> None:
        """Reserve ``nbytes`` for ``source`` before reading them.

        Raises
        ------
        OverBudget
            They do not fit (or an earlier array did not): recorded, nothing reserved.
        """
        if self.refused or self.used + nbytes > self.limit:
            self.refused[source] = (nbytes, reason, why)
            raise OverBudget(source)
        self.used += nbytes

    def settle(self, source: str, reserved: int, actual: int, reason: str, why: Why) -> None:
        """Replace a reservation by the bytes really inlined (an encoding's size).

        Raises
        ------
        OverBudget
            They do not fit: recorded, the reservation released.
        """
        self.used += actual - reserved
        if self.used > self.limit:
            self.used -= actual
            self.refused[source] = (actual, reason, why)
            raise OverBudget(source)

    def check(self, url: str) -> None:
        """Raise the refusal of every array that did not fit, if any.

        Raises
        ------
        UnsupportedError
            Names the arrays (the largest first), their bytes and why, and the ways out.
        """
        if not self.refused:
            return
        items = sorted(self.refused.items(), key=lambda kv: -kv[1][0])
        named = "; ".join(f"{src}: {n} bytes, {reason}" for src, (n, reason, _) in items[:_NAMED])
        more = f"; and {len(items) - _NAMED} more" if len(items) > _NAMED else ""
        needed = self.used + sum(n for n, _, _ in self.refused.values())
        whys = dict.fromkeys(why for _, _, why in self.refused.values())
        ways = "; or ".join(_WAYS[w] for w in whys)
        raise UnsupportedError(
            f"{url}: the references would inline at least {needed} bytes of values, more than "
            f"max_inline={self.limit} ({len(items)} array(s) do not fit: {named}{more}). "
            f"Ways out: {ways}; or raise max_inline"
        )
