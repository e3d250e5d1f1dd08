"""Whether numpy can hold an array of a declared shape and dtype: one rule for every format.

A file declares a shape and a dtype; the bytes it must then hold (``prod(shape) * itemsize``)
are checked against the file by each format. Two kinds of array pass that check while
declaring far more than numpy can hold, because they need no bytes at all:

- an *empty* array (some dimension 0) whose other dimensions are huge, such as ``(0, 2**63)``
  or ``(2**62, 0)`` of ``<f8``. numpy refuses to create it ("array is too big" or "Maximum
  allowed dimension exceeded"): every dimension must fit in ``intp`` and the product of the
  non-zero dimensions times the itemsize must too, empty or not. ``|S0`` and ``<U0`` count
  as ``|S1`` and ``<U1``: numpy makes those of them whenever it creates or copies an array.
- an array of a *zero-itemsize* dtype (``[]``, ``|V0``, ``|S0``, ``<U0``) with a huge element
  count, such as ``(2**62,)`` of ``[]``. numpy creates it, but every copy, comparison or
  concatenation of it loops over its elements (a dask ``compute`` copies its result: 2**62
  elements never finish), and numpy turns ``|S0`` and ``<U0`` into ``|S1`` and ``<U1`` when it
  copies them, allocating a byte (four) per element. Such arrays are read up to
  :data:`MAX_ZERO_ITEMSIZE_ELEMENTS` elements.

:func:`shape_problem` says what is wrong, :func:`check_shape` raises it as an
:class:`~npystore.errors.UnsupportedError`: the header is consistent, numpy just cannot give
the array back. Each format calls :func:`check_shape` once, when it turns a header into an
array, after checking that the file holds the bytes the header declares. Pure: no IO.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any, Final

import numpy as np

from npystore.errors import UnsupportedError

__all__ = [
    "INTP_MAX",
    "MAX_ZERO_ITEMSIZE_ELEMENTS",
    "check_shape",
    "created_itemsize",
    "shape_problem",
]

#: numpy's largest dimension, element count and byte count (``np.iinfo(np.intp).max``).
INTP_MAX: Final = int(np.iinfo(np.intp).max)
#: Most elements an array of a zero-itemsize dtype may have (no bytes stand behind them;
#: numpy loops over them in every copy: about 0.15 s for this many).
MAX_ZERO_ITEMSIZE_ELEMENTS: Final = 2**24


def shape_problem(shape: Sequence[int], dtype: np.dtype[Any]) -> str | None:
    """Why numpy cannot hold (or npystore will not read) an array of ``shape`` and ``dtype``.

    Parameters
    ----------
    shape : sequence of int
        The declared shape: non-negative ints (checked by the format's parser).
    dtype : numpy.dtype
        The declared dtype.

    Returns
    -------
    str or None
        A sentence naming the shape, the dtype and the reason, or None when the array can be
        read. The shape is first checked as numpy checks it when creating an array: the
        product of the non-zero dimensions, times the itemsize, must fit in ``intp``.

    Examples
    --------
    >>> print(shape_problem((2**62, 0), np.dtype("<f8")))  # doctest: +ELLIPSIS
    numpy cannot make an array of shape (4611686018427387904, 0) and dtype float64, even ...
    >>> shape_problem((2**62, 0), np.dtype("|u1")) is None
    True
    """
    dims = tuple(shape)
    nonzero = math.prod(n for n in dims if n)
    itemsize = created_itemsize(dtype)
    if nonzero > INTP_MAX or nonzero * itemsize > INTP_MAX:
        empty = 0 in dims
        what = "elements" if nonzero > INTP_MAX else f"bytes ({nonzero} elements of {itemsize})"
        count = nonzero if nonzero > INTP_MAX else nonzero * itemsize
        unsized = (
            f" (numpy makes {dtype.str} arrays as {dtype.str[:-1]}1)"
            if itemsize != dtype.itemsize
            else ""
        )
        return (
            f"numpy cannot make an array of shape {dims} and dtype {dtype}"
            f"{', even empty' if empty else ''}: its{' non-zero' if empty else ''} dimensions "
            f"give {count} {what}, more than numpy's limit {INTP_MAX} (2**63 - 1){unsized}"
        )
    size = math.prod(dims)
    if dtype.itemsize == 0 and size > MAX_ZERO_ITEMSIZE_ELEMENTS:
        return (
            f"an array of shape {dims} and dtype {dtype} has {size} elements of 0 bytes, more "
            f"than the {MAX_ZERO_ITEMSIZE_ELEMENTS} npystore reads: no data stands behind them "
            "and numpy loops over every element whenever it copies the array"
        )
    return None


def created_itemsize(dtype: np.dtype[Any]) -> int:
    """The itemsize of the arrays numpy creates with ``dtype``: its own, except that numpy
    makes ``|S1`` and ``<U1`` arrays of the unsized ``|S0`` and ``<U0`` (``np.empty``, every
    copy); only ``np.ndarray(shape, dtype)`` keeps them unsized."""
    if dtype.itemsize == 0 and dtype.kind in "SU":
        return 1 if dtype.kind == "S" else 4
    return dtype.itemsize


def check_shape(shape: Sequence[int], dtype: np.dtype[Any], *, source: str) -> None:
    """Refuse an array that numpy cannot hold; see :func:`shape_problem`.

    Parameters
    ----------
    shape : sequence of int
        The declared shape.
    dtype : numpy.dtype
        The declared dtype.
    source : str
        The file, member or variable, named first in the message.

    Raises
    ------
    UnsupportedError
        If :func:`shape_problem` finds a problem.
    """
    problem = shape_problem(shape, dtype)
    if problem is not None:
        raise UnsupportedError(f"{source}: {problem}")
