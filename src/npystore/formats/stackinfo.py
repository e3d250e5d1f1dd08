"""The ``info`` file of a ``dask.array.to_npy_stack`` folder, read without unpickling it.

``to_npy_stack(dirname, x, axis)`` writes ``0.npy``, ``1.npy``, ... (one per block along
``axis``) and ``info``: ``pickle.dump({"chunks": chunks, "dtype": x.dtype, "axis": axis})``.
``dask.array.from_npy_stack`` unpickles it, which runs whatever code the file names. Here the
pickle's opcodes are walked (:func:`pickletools.genops` decodes them, executes nothing) and
only two plain values are taken from the top-level dict: ``axis`` (an int) and ``chunks`` (a
tuple of tuples of ints, built from the integer and tuple opcodes alone). The dtype, a
``numpy.dtype`` reduce, is never rebuilt: the shards' own headers give it.

The writer (``npystore.write.stack``) makes the same pickle for ``save_stack``.
"""

from __future__ import annotations

import pickletools
from dataclasses import dataclass
from typing import Any, Final

from npystore.errors import FormatError

__all__ = ["StackInfo", "parse_stack_info"]

_INTS: Final = frozenset({"BININT", "BININT1", "BININT2", "LONG1", "LONG4", "INT", "LONG"})
_STRINGS: Final = frozenset({"SHORT_BINUNICODE", "BINUNICODE", "BINUNICODE8", "UNICODE"})
_PUT: Final = frozenset({"BINPUT", "LONG_BINPUT", "PUT"})
_GET: Final = frozenset({"BINGET", "LONG_BINGET", "GET"})
_TUPLE_N: Final = {"EMPTY_TUPLE": 0, "TUPLE1": 1, "TUPLE2": 2, "TUPLE3": 3}
_MARK: Final = object()
_OTHER: Final = object()


@dataclass(frozen=True, slots=True)
class StackInfo:
    """What a ``to_npy_stack`` ``info`` file says, as far as it can be read safely.

    Attributes
    ----------
    axis : int or None
        The axis the blocks were written along.
    chunks : tuple of tuple of int, or None
        The chunks of the stacked array (one block per shard along ``axis``).
    """

    axis: int | None
    chunks: tuple[tuple[int, ...], ...] | None


def parse_stack_info(data: bytes, source: str = "info") -> StackInfo:
    """``axis`` and ``chunks`` of a ``to_npy_stack`` ``info`` pickle, without unpickling.

    Raises
    ------
    FormatError
        Not a pickle.
    """
    stack: list[Any] = []
    memo: dict[int, Any] = {}
    found: dict[str, Any] = {}
    try:
        for op, arg, _ in pickletools.genops(data):
            name = op.name
            if name in _INTS:
                stack.append(int(arg))  # type: ignore[arg-type]
            elif name in _STRINGS:
                stack.append(str(arg))
            elif name == "MARK":
                stack.append(_MARK)
            elif name in ("TUPLE", "DICT", "SETITEMS"):
                k = len(stack) - 1 - stack[::-1].index(_MARK)
                items = stack[k + 1 :]
                del stack[k:]
                if name == "TUPLE":
                    stack.append(tuple(items))
                    continue
                _take(found, items)
                if name == "DICT":
                    stack.append(_OTHER)
            elif name == "SETITEM":
                _take(found, stack[-2:])
                del stack[-2:]
            elif name in _TUPLE_N:
                n = _TUPLE_N[name]
                items = stack[len(stack) - n :] if n else []
                del stack[len(stack) - n :]
                stack.append(tuple(items))
            elif name == "MEMOIZE":
                memo[len(memo)] = stack[-1]
            elif name in _PUT:
                memo[int(arg)] = stack[-1]  # type: ignore[arg-type]
            elif name in _GET:
                stack.append(memo.get(int(arg), _OTHER))  # type: ignore[arg-type]
            else:  # anything else (the dtype's reduce, ...) is opaque: its effect only
                _opaque(stack, op)
    except (ValueError, IndexError, TypeError) as exc:
        raise FormatError(f"{source}: not a pickle of dask's to_npy_stack ({exc})") from exc
    axis = found.get("axis")
    chunks = found.get("chunks")
    ok_chunks = isinstance(chunks, tuple) and all(
        isinstance(c, tuple) and all(isinstance(n, int) for n in c) for c in chunks
    )
    return StackInfo(axis if isinstance(axis, int) else None, chunks if ok_chunks else None)


def _take(found: dict[str, Any], items: list[Any]) -> None:
    """Record the ``axis`` and ``chunks`` items of a dict's ``key, value, ...`` run."""
    for key, value in zip(items[::2], items[1::2], strict=False):
        if key in ("axis", "chunks"):
            found.setdefault(key, value)


def _opaque(stack: list[Any], op: pickletools.OpcodeInfo) -> None:
    """Apply an opcode's stack effect (as :mod:`pickletools` documents it) without its
    meaning: what it takes is dropped, what it makes is opaque."""
    before = list(op.stack_before)
    if pickletools.markobject in before:
        k = len(stack) - 1 - stack[::-1].index(_MARK)
        del stack[k:]
        before = before[: before.index(pickletools.markobject)]
    if before:
        if len(before) > len(stack):
            raise ValueError(f"{op.name} needs {len(before)} values, the stack has {len(stack)}")
        del stack[len(stack) - len(before) :]
    stack.extend(_OTHER for _ in op.stack_after)
