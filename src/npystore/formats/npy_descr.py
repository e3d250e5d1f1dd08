"""``descr`` (the header's dtype description) to :class:`numpy.dtype`, as ``numpy.load`` does it.

A ``descr`` is either a dtype string such as ``'<f8'``, ``'|S5'``, ``'<M8[ns]'``, or a list of
fields, each ``(name, descr)`` or ``(name, descr, shape)``, where ``name`` may be a
``(title, name)`` pair and ``descr`` recurses. Fields named ``''`` with a plain void type are
padding: they advance the offset and are dropped, which rebuilds explicit offsets, aligned
layouts and trailing padding exactly as ``numpy.lib.format.descr_to_dtype`` does.

Everything here validates its input: a hostile header gets a :class:`FormatError`, never a
``TypeError`` from numpy or a dtype with an unbounded size.
"""

from __future__ import annotations

from typing import Any, Final

import numpy as np

from npystore.errors import FormatError

__all__ = ["MAX_DTYPE_DEPTH", "MAX_FIELDS", "descr_to_dtype"]

#: Most levels a ``descr`` nests (a list of fields or a ``(descr, shape)`` pair is a level):
#: a structured dtype nested 99 deep is the deepest that numpy.load reads back (its header
#: then has 199 brackets open, one short of the 200 of ast.literal_eval; see
#: :data:`npystore.formats.npy.MAX_HEADER_NESTING`).
MAX_DTYPE_DEPTH: Final = 99
#: Limit on the total number of fields across all nesting levels.
MAX_FIELDS: Final = 100_000
#: Longest dtype string accepted (e.g. '<U10', '(2,3)<f8', '<M8[ns]').
_MAX_DTYPE_STR: Final = 64


def descr_to_dtype(descr: object, *, source: str = "<bytes>") -> np.dtype[Any]:
    """Build the dtype that ``numpy.load`` builds from a header's ``descr`` value.

    Parameters
    ----------
    descr : object
        The parsed ``descr`` value: a str, a list of field tuples, or a ``(descr, shape)``
        tuple.
    source : str
        Name of the file for error messages.

    Returns
    -------
    numpy.dtype

    Raises
    ------
    FormatError
        The description is not a valid dtype description.
    """
    counter = [0]
    return _build(descr, source, 0, counter)


def _fail(source: str, descr: object, why: str) -> FormatError:
    text = repr(descr)
    if len(text) > 120:
        text = text[:117] + "..."
    return FormatError(f"{source}: invalid .npy descr {text}: {why}")


def _from_str(descr: str, source: str) -> np.dtype[Any]:
    if len(descr) > _MAX_DTYPE_STR:
        raise _fail(source, descr, f"dtype strings are at most {_MAX_DTYPE_STR} characters")
    try:
        return np.dtype(descr)
    except (TypeError, ValueError, OverflowError, KeyError, SyntaxError) as exc:
        raise _fail(source, descr, f"numpy rejects it ({exc})") from None


def _subarray(base: np.dtype[Any], shape: object, source: str, descr: object) -> np.dtype[Any]:
    if isinstance(shape, int) and not isinstance(shape, bool):
        dims: tuple[int, ...] = (shape,)
    elif isinstance(shape, tuple) and all(
        isinstance(n, int) and not isinstance(n, bool) for n in shape
    ):
        dims = tuple(n for n in shape if isinstance(n, int))
    else:
        raise _fail(source, descr, "a subarray shape must be an int or a tuple of ints")
    if any(n < 0 for n in dims):
        raise _fail(source, descr, "a subarray shape must not be negative")
    try:
        return np.dtype((base, dims))
    except (TypeError, ValueError, OverflowError) as exc:
        raise _fail(source, descr, f"numpy rejects the subarray ({exc})") from None


def _build(descr: object, source: str, depth: int, counter: list[int]) -> np.dtype[Any]:
    if depth > MAX_DTYPE_DEPTH:
        raise _fail(
            source,
            descr,
            f"the dtype nests deeper than {MAX_DTYPE_DEPTH} levels (as deep as numpy.load reads)",
        )
    if isinstance(descr, str):
        return _from_str(descr, source)
    if isinstance(descr, tuple):
        if len(descr) != 2:
            raise _fail(source, descr, "a subarray description is (descr, shape)")
        return _subarray(_build(descr[0], source, depth + 1, counter), descr[1], source, descr)
    if not isinstance(descr, list):
        raise _fail(source, descr, "expected a dtype string or a list of fields")

    titles: list[str | None] = []
    names: list[str] = []
    formats: list[np.dtype[Any]] = []
    offsets: list[int] = []
    offset = 0
    for field in descr:
        counter[0] += 1
        if counter[0] > MAX_FIELDS:
            raise _fail(source, "...", f"more than {MAX_FIELDS} fields")
        if not isinstance(field, tuple) or len(field) not in (2, 3):
            raise _fail(source, field, "a field is (name, descr) or (name, descr, shape)")
        name = field[0]
        dt = _build(field[1], source, depth + 1, counter)
        if len(field) == 3:
            dt = _subarray(dt, field[2], source, field)
        is_pad = name == "" and dt.type is np.void and dt.names is None
        if not is_pad:
            if isinstance(name, tuple):
                if len(name) != 2 or not all(isinstance(part, str) for part in name):
                    raise _fail(source, field, "a titled field name is (title, name)")
                title, plain = name
            elif isinstance(name, str):
                title, plain = None, name
            else:
                raise _fail(source, field, "a field name must be a str")
            titles.append(title)
            names.append(plain)
            formats.append(dt)
            offsets.append(offset)
        offset += dt.itemsize
    try:
        return np.dtype(
            {
                "names": names,
                "formats": formats,
                "titles": titles,
                "offsets": offsets,
                "itemsize": offset,
            }
        )
    except (TypeError, ValueError, OverflowError) as exc:
        raise _fail(source, descr, f"numpy rejects the fields ({exc})") from None
