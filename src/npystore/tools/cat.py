"""``npystore cat``: print the values of an array, an ``.npz`` member or a MATLAB variable.

A member or variable is chosen by name (``URL:member``, ``--member``; MATLAB paths go into
structs and cells: ``s.field``, ``c/0``), read lazily, cut with ``--slice`` and printed as numpy
prints it; structs, cells, char matrices and sparse matrices get a readable layout. A selection
larger than :data:`MAX_CAT_BYTES` is printed only with ``--full``.

An ``.npy`` file or an ``.npz`` member is read through its
:class:`~npystore.read.access.LayoutArray` (only the selection's bytes, and no dask: a small
file prints in about the time ``python -c "numpy.load(...)"`` takes); MATLAB variables go
through the dask face.
"""

from __future__ import annotations

import argparse
import math
import re
import sys
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Final, TextIO

import numpy as np

import npystore
from npystore.files.npy import open_layout_array
from npystore.files.open import sniff_source
from npystore.formats.npy import DEFAULT_MAX_HEADER_SIZE
from npystore.read.access import LayoutArray, normalize_key
from npystore.tools.args import CliError
from npystore.tools.info import dims_text, struct_element

if TYPE_CHECKING:
    from npystore.files.mat.tree import MatNode

__all__ = ["MAX_CAT_BYTES", "run_cat"]

#: Largest selection ``cat`` reads without ``--full`` (numpy would print only its corners).
MAX_CAT_BYTES: Final = 64 * 2**20


def _mat_value(mat: Any, member: str, url: str) -> Any:
    from npystore.faces.dask import to_dask  # noqa: PLC0415
    from npystore.files.mat.tree import CellNode, StructNode, to_value  # noqa: PLC0415

    var, *rest = re.split(r"[./]", member)
    if var not in mat:
        raise CliError(f"{url}: no variable {var!r}; the variables are {list(mat)}")
    node: MatNode = mat.node(var)
    here = var
    for part in rest:
        if isinstance(node, StructNode) and len(node.elements) == 1 and part in node.fields:
            node = node.elements[0][part]
        elif isinstance(node, StructNode) and part.isdigit() and int(part) < len(node.elements):
            node = struct_element(node, int(part))
        elif isinstance(node, CellNode) and part.isdigit() and int(part) < len(node.cells):
            node = node.cells[int(part)]
        else:
            expected = (
                f"a field of {list(node.fields)} or an element index below {len(node.elements)}"
                if isinstance(node, StructNode)
                else f"an index below {len(node.cells)}"
                if isinstance(node, CellNode)
                else f"nothing: {here} is a {node.matlab_class}, not a struct or cell"
            )
            raise CliError(f"{url}: {here}/{part}: no such part; expected {expected}")
        here = f"{here}/{part}"
    return to_value(node, numeric=lambda leaf: to_dask(leaf.array))


def _select(
    url: str, member: str | None, options: Mapping[str, Any] | None, allow_pickle: bool = False
) -> Any:
    """What ``URL[:member]`` names: a :class:`LayoutArray` (``.npy``, ``.npz`` member), the
    bytes of an ``.npz`` member that is not an ``.npy`` file, or a MATLAB value."""
    found = sniff_source(url, options)
    if found.kind == "npy":
        if member is not None:
            raise CliError(f"{url}: an .npy file has no members (asked for {member!r})")
        return open_layout_array(found.reader, found.prefix, allow_pickle, DEFAULT_MAX_HEADER_SIZE)
    opened: Any
    if found.kind == "npz":
        from npystore.faces.npz import npz_from_reader  # noqa: PLC0415 - archives only

        opened = npz_from_reader(found.reader, allow_pickle=allow_pickle)
    else:
        from npystore.faces.matfile import mat_from_reader  # noqa: PLC0415 - MATLAB only

        opened = mat_from_reader(found.reader, found.prefix)
    names = list(opened)
    if member is None:
        if len(names) != 1:
            raise CliError(f"{url}: holds {len(names)} arrays {names}: name one as URL:NAME")
        member = names[0]
    if found.kind == "mat":
        return _mat_value(opened, member, url)
    if member not in opened:
        raise CliError(f"{url}: no member {member!r}; the members are {names}")
    if opened.info(member).header is None:
        return opened[member]  # the member's bytes
    return opened.array(member)


def _check_size(nbytes: int, shape: tuple[int, ...], dtype: np.dtype[Any], full: bool) -> None:
    """Refuse a selection over :data:`MAX_CAT_BYTES` without ``--full`` (before reading it)."""
    if not full and nbytes > MAX_CAT_BYTES:
        raise CliError(
            f"the selection is {nbytes} bytes ({dims_text(shape)} {dtype}); "
            "print part of it with --slice, or all of it with --full"
        )


def _slice_layout(value: LayoutArray, index: Any, full: bool) -> np.ndarray[Any, Any]:
    """``value[index]``, its size checked before anything is read."""
    selection, _ = normalize_key(index, value.shape)
    shape = tuple(count for _, count, _ in selection)
    _check_size(math.prod(shape) * value.dtype.itemsize, shape, value.dtype, full)
    return value[index]


def _field(label: str, value: Any, full: bool) -> str:
    """One line ``  label: value``, or the label and the value indented below it."""
    text = _render(value, full=full, top=False)
    if "\n" not in text:
        return f"  {label}: {text}"
    return f"  {label}:\n" + "\n".join("    " + line for line in text.split("\n"))


def _render(value: Any, *, full: bool, top: bool = True) -> str:
    from npystore.files.mat.tree import MatlabObject, MatStruct  # noqa: PLC0415

    if isinstance(value, str):
        return value if top else repr(value)
    if isinstance(value, MatlabObject):
        return repr(value)
    if isinstance(value, MatStruct):
        kind = "struct" if value.matlab_class == "struct" else f"{value.matlab_class} object"
        lines = [f"{kind} with fields:"]
        lines += [_field(str(key), item, full) for key, item in value.items()]
        return "\n".join(lines)
    if hasattr(value, "tocsc"):  # scipy.sparse
        m = value.tocoo()
        head = f"<{m.shape[0]}x{m.shape[1]} sparse {m.dtype}, {m.nnz} nonzeros>"
        limit = m.nnz if full else min(m.nnz, np.get_printoptions()["threshold"])
        rows = [f"  ({r}, {c})  {v}" for r, c, v in zip(m.row[:limit], m.col[:limit],
                                                          m.data[:limit], strict=True)]  # fmt: skip
        return "\n".join([head, *rows] + (["  ..."] if limit < m.nnz else []))
    if isinstance(value, np.ndarray) and value.dtype == object:
        if all(isinstance(v, str) for v in value.flat):  # a char matrix: one str per row
            return "\n".join(value.reshape(-1).tolist()) if top else repr(value.tolist())
        head = f"cell {dims_text(value.shape)}" if value.ndim else "cell"
        lines = [head]
        lines += [
            _field(f"[{i}]", item, full) for i, item in enumerate(value.reshape(-1, order="F"))
        ]
        return "\n".join(lines)
    if not top and not full and math.prod(getattr(value, "shape", ())) > 100:
        return f"<{dims_text(value.shape)} {value.dtype} array>"
    if isinstance(value, LayoutArray):
        _check_size(value.nbytes, value.shape, value.dtype, full)
        value = value.read()
    elif hasattr(value, "compute"):
        _check_size(value.nbytes, value.shape, value.dtype, full)
        value = value.compute()
    return str(np.asarray(value))


def run_cat(args: argparse.Namespace, options: Mapping[str, Any] | None, out: TextIO) -> int:
    """The ``cat`` subcommand: print the selected values to ``out``.

    Parameters
    ----------
    args : argparse.Namespace
        ``url``, ``member``, ``index`` (parsed ``slice``), ``slice``, ``full``,
        ``allow_pickle``.
    options : mapping, optional
        fsspec storage options.
    out : text file
        Where to print (an ``.npz`` member that is not an ``.npy`` file goes to
        ``sys.stdout``'s bytes as it is).

    Returns
    -------
    int
        The exit status, 0.

    Raises
    ------
    CliError
        No such member or part, a bad ``--slice``, a selection too large without ``--full``,
        an object array without ``--allow-pickle``.
    """
    try:
        value = _select(args.url, args.member, options, args.allow_pickle)
        if isinstance(value, LayoutArray) and value.dtype.hasobject:
            value = value.read()  # the pickle is read (and refused) here
        elif hasattr(value, "compute") and value.dtype.hasobject:
            value = value.compute()
    except npystore.UnsupportedError as exc:
        if args.allow_pickle or "allow_pickle=True" not in str(exc):
            raise
        raise CliError(f"{exc} On the command line: --allow-pickle.") from exc
    if isinstance(value, bytes):  # an .npz member that is not an .npy file
        out.flush()
        sys.stdout.buffer.write(value)
        return 0
    if args.index is not None:
        if not (hasattr(value, "shape") and hasattr(value, "__getitem__")):
            raise CliError(f"{args.url}: --slice needs an array, got {type(value).__name__}")
        try:
            if isinstance(value, LayoutArray):
                value = _slice_layout(value, args.index, args.full)
            else:
                value = value[args.index]
        except (IndexError, ValueError, TypeError) as exc:
            raise CliError(f"{args.url}: --slice {args.slice!r}: {exc}") from exc
    threshold = sys.maxsize if args.full else np.get_printoptions()["threshold"]
    with np.printoptions(threshold=threshold):
        print(_render(value, full=args.full), file=out)
    return 0
