"""The ``npystore`` command: ``info``, ``cat``, ``refs`` and ``convert`` on any fsspec URL.

Each subcommand is a thin layer over the library (:func:`npystore.read_header`,
:func:`npystore.open`, :func:`npystore.to_kerchunk`, :func:`npystore.tools.convert.convert`); errors
that npystore raises on purpose print as one line naming the URL (``--traceback`` shows the
whole traceback) and exit with status 1; usage errors exit with 2, an interruption with 130.

>>> from npystore.tools.cli import parse_slice, parse_storage_options, split_member
>>> split_member("s3://bucket/run.npz:x")
('s3://bucket/run.npz', 'x')
>>> parse_slice("10:20, ::2, ..., -1")
(slice(10, 20, None), slice(None, None, 2), Ellipsis, -1)
>>> parse_storage_options(["anon=true", "client_kwargs.endpoint_url=http://h:9000"])
{'anon': True, 'client_kwargs': {'endpoint_url': 'http://h:9000'}}
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import re
import sys
import traceback
import warnings
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Final, NoReturn, TextIO

import numpy as np

import npystore
from npystore.errors import NpystoreError, UnsupportedError
from npystore.fetch import RangeReader, write_object
from npystore.files.npy import header_from_prefix
from npystore.files.open import sniff_source
from npystore.formats.npy import DEFAULT_MAX_HEADER_SIZE

if TYPE_CHECKING:
    from npystore.files.mat.tree import MatNode, StructNode

# Each format's modules are imported where that format is handled: `npystore info` of an
# .npy file loads no ZIP or MATLAB code (and no dask, zarr, h5py or scipy).

__all__ = ["CliError", "build_parser", "info", "main", "parse_slice", "parse_storage_options",
           "run", "split_member"]  # fmt: skip

#: Exit status after an interruption (128 + SIGINT).
INTERRUPTED: Final = 130
#: Most elements of a container (cell, struct array) listed by ``info``.
MAX_TREE_ITEMS: Final = 100
#: Largest selection ``cat`` reads without ``--full`` (numpy would print only its corners).
MAX_CAT_BYTES: Final = 64 * 2**20
_PLAIN_CLASSES: Final = frozenset(
    ("double", "single", "logical", "char", "int8", "uint8", "int16", "uint16", "int32",
     "uint32", "int64", "uint64")
)  # fmt: skip
_MEMBER_SUFFIX: Final = re.compile(r"\.(npz|mat)$", re.IGNORECASE)
_INT: Final = re.compile(r"[+-]?\d+")


class CliError(Exception):
    """A problem with what the user asked for (printed as one line, exit status 1)."""


# ------------------------------------------------------------------------------ parsing


def _option_value(text: str) -> Any:
    try:
        return json.loads(text)
    except ValueError:
        return text


def _merge(into: dict[str, Any], add: Mapping[str, Any], where: str = "") -> None:
    for key, value in add.items():
        if isinstance(value, Mapping) and isinstance(into.get(key), dict):
            _merge(into[key], value, f"{where}{key}.")
        else:
            into[key] = dict(value) if isinstance(value, Mapping) else value


def parse_storage_options(
    pairs: Sequence[str] | None, json_text: str | None = None
) -> dict[str, Any]:
    """fsspec ``storage_options`` from ``key=value`` pairs and a JSON object.

    Parameters
    ----------
    pairs : sequence of str
        ``key=value``; the value is JSON when it parses (``true``, ``3``, ``{"a": 1}``), else
        a string; dotted keys nest (``client_kwargs.endpoint_url=...``).
    json_text : str, optional
        A JSON object (or ``@file.json``), merged first; pairs override it.

    Returns
    -------
    dict

    Raises
    ------
    CliError
        A pair without ``=``, an empty key, a key both a value and a parent, bad JSON.
    """
    options: dict[str, Any] = {}
    if json_text:
        text = json_text
        if text.startswith("@"):
            try:
                with open(text[1:], encoding="utf-8") as f:
                    text = f.read()
            except OSError as exc:
                raise CliError(f"--storage-options-json {json_text}: {exc}") from exc
        try:
            loaded = json.loads(text)
        except ValueError as exc:
            raise CliError(f"--storage-options-json: not valid JSON ({exc})") from exc
        if not isinstance(loaded, dict):
            raise CliError(f"--storage-options-json: {type(loaded).__name__}, expected an object")
        options.update(loaded)
    for pair in pairs or ():
        key, sep, raw = pair.partition("=")
        parts = key.strip().split(".")
        if not sep or any(not p for p in parts):
            raise CliError(f"--storage-option {pair!r}: expected key=value (key may be a.b.c)")
        nested: dict[str, Any] = {parts[-1]: _option_value(raw)}
        for part in reversed(parts[:-1]):
            nested = {part: nested}
        node: Any = options
        for part in parts[:-1]:
            node = node.get(part) if isinstance(node, dict) else None
            if node is not None and not isinstance(node, dict):
                raise CliError(f"--storage-option {pair!r}: {part!r} is already a value")
        _merge(options, nested)
    return options


def split_member(url: str) -> tuple[str, str | None]:
    """Split ``URL:member`` where the part before a ``:`` ends in ``.npz`` or ``.mat``.

    The first such colon wins (member names may hold colons); a colon that starts a path
    (``a.npz:/x``) or ends the text does not split; URLs with other colons (``s3://``,
    ``C:\\``) are left whole.
    """
    for match in re.finditer(":", url):
        head, tail = url[: match.start()], url[match.end() :]
        if _MEMBER_SUFFIX.search(head) and tail and not tail.startswith(("/", "\\")):
            return head, tail
    return url, None


def _index_part(text: str, whole: str) -> Any:
    text = text.strip()
    if text in ("...", "Ellipsis"):
        return Ellipsis
    if text in ("None", "newaxis"):
        return None
    if ":" not in text:
        if not _INT.fullmatch(text):
            raise ValueError(f"{text!r} in {whole!r} is not an integer, a:b:c slice or ...")
        return int(text)
    fields = text.split(":")
    if len(fields) > 3:
        raise ValueError(f"{text!r} in {whole!r} has {len(fields) - 1} colons, at most 2")
    values = []
    for f in (f.strip() for f in fields):
        if f and not _INT.fullmatch(f):
            raise ValueError(f"{f!r} in {whole!r} is not an integer")
        values.append(int(f) if f else None)
    if len(values) == 3 and values[2] == 0:
        raise ValueError(f"slice step 0 in {whole!r}")
    return slice(*values)


def parse_slice(text: str) -> tuple[Any, ...]:
    """A numpy index from text such as ``"10:20,3"``, ``"::2"``, ``"...,0"`` (never eval'd).

    Raises
    ------
    ValueError
        Anything but integers, ``start:stop:step`` slices, ``...`` and ``None``.
    """
    body = text.strip()
    if body.startswith("[") and body.endswith("]"):
        body = body[1:-1]
    if not body.strip():
        raise ValueError(f"empty index {text!r}")
    parts = tuple(_index_part(p, text) for p in body.split(","))
    if sum(p is Ellipsis for p in parts) > 1:
        raise ValueError(f"more than one ... in {text!r}")
    return parts


def _is_url(path: str) -> bool:
    return ("://" in path or "::" in path) and not path.startswith("file://")


# ------------------------------------------------------------------------------ info


def _descr(dtype: np.dtype[Any]) -> Any:
    return np.lib.format.dtype_to_descr(dtype)


def _dims(dims: Sequence[int]) -> str:
    return "x".join(map(str, dims)) if dims else "?"


def _npy_info(url: str, reader: RangeReader, prefix: bytes) -> dict[str, Any]:
    h = header_from_prefix(reader, prefix, DEFAULT_MAX_HEADER_SIZE)
    size = reader.size
    return {
        "url": url,
        "format": "npy",
        "version": f"{h.version[0]}.{h.version[1]}",
        "dtype": _descr(h.dtype),
        "shape": list(h.shape),
        "order": h.order,
        "data_offset": h.data_offset,
        "nbytes": None if h.is_pickled else h.nbytes,
        "file_size": size,
    }


def _npz_info(url: str, reader: RangeReader) -> dict[str, Any]:
    from npystore.faces.npz import npz_from_reader  # noqa: PLC0415 - see the imports

    npz = npz_from_reader(reader)
    size = reader.size
    npz.headers  # noqa: B018 - one batch of range reads for every member header
    members = []
    for key in npz.member_keys.values():  # one per member (x and x.npy are x and x.npy)
        info = npz.info(key)
        h, e = info.header, info.entry
        storage = {0: "stored", 8: "deflated"}.get(e.method, f"method {e.method}")
        members.append({
            "name": key,
            "member": e.name,
            "dtype": None if h is None else _descr(h.dtype),
            "shape": None if h is None else list(h.shape),
            "order": None if h is None else h.order,
            "storage": storage,
            "compressed_size": e.compressed_size,
            "size": e.uncompressed_size,
        })  # fmt: skip
    return {"url": url, "format": "npz", "file_size": size, "members": members}


def _tree(node: MatNode, path: str, name: str, depth: int | None) -> dict[str, Any]:
    from npystore.files.mat.tree import (  # noqa: PLC0415 - see the imports
        CellNode,
        NumericLeaf,
        SparseLeaf,
        StructNode,
        ValueLeaf,
    )

    entry: dict[str, Any] = {"name": name, "path": path, "class": node.matlab_class,
                             "size": list(node.dims)}  # fmt: skip
    if isinstance(node, SparseLeaf):
        entry["sparse"] = True
    if (
        (isinstance(node, SparseLeaf) and node.is_complex)
        or (isinstance(node, NumericLeaf) and node.array.dtype.kind == "c")
        or (isinstance(node, ValueLeaf) and node.value.dtype.kind == "c")
    ):
        entry["complex"] = True
    children: list[tuple[str, MatNode]] = []
    if isinstance(node, StructNode):
        if math.prod(node.dims) == 1 and len(node.elements) == 1:
            children = list(node.elements[0].items())
        else:
            children = [(str(i), _element(node, i)) for i in range(len(node.elements))]
    elif isinstance(node, CellNode):
        children = [(str(i), c) for i, c in enumerate(node.cells)]
    if children and (depth is None or depth > 0):
        more = None if depth is None else depth - 1
        entry["children"] = [
            _tree(child, f"{path}/{key}", key, more) for key, child in children[:MAX_TREE_ITEMS]
        ]
        if len(children) > MAX_TREE_ITEMS:
            entry["more"] = len(children) - MAX_TREE_ITEMS
    return entry


def _element(node: StructNode, i: int) -> StructNode:
    from npystore.files.mat.tree import StructNode  # noqa: PLC0415

    return StructNode((1, 1), node.fields, (node.elements[i],), node.matlab_class)


def _mat_info(url: str, reader: RangeReader, prefix: bytes, depth: int | None) -> dict[str, Any]:
    from npystore.faces.matfile import mat_from_reader  # noqa: PLC0415 - see the imports

    size = reader.size
    with mat_from_reader(reader, prefix) as mat:
        if depth is None:  # headers only: v7.3 structure is metadata, v5 structure is data
            depth = -1 if mat.version == "7.3" else 0
        if depth < 0:
            depth = None
        variables = []
        for name, info in mat.variables.items():
            entry: dict[str, Any] = {"name": name, "path": name, "class": info.matlab_class,
                                     "size": list(info.dims)}  # fmt: skip
            entry.update({k: True for k in ("sparse", "complex") if getattr(info, k)})
            if info.is_global:
                entry["global"] = True
            if info.refused:
                entry["refused"] = info.refused
            plain = info.matlab_class in _PLAIN_CLASSES or info.sparse or bool(info.refused)
            if not plain and (depth is None or depth > 0):
                try:
                    tree = _tree(mat.node(name), name, name, depth)
                except UnsupportedError as exc:  # e.g. a field behind an external link
                    entry["refused"] = str(exc)
                else:
                    entry.update({k: tree[k] for k in ("children", "more") if k in tree})
            variables.append(entry)
        return {"url": url, "format": "mat", "version": mat.version, "file_size": size,
                "header": mat.header_text, "variables": variables}  # fmt: skip


def info(
    url: str, options: Mapping[str, Any] | None = None, depth: int | None = None
) -> dict[str, Any]:
    """What ``npystore info`` reports, as JSON-ready data.

    Parameters
    ----------
    url : str
        Local path or fsspec URL of an ``.npy``, ``.npz`` or MATLAB file.
    options : mapping, optional
        fsspec storage options.
    depth : int, optional
        Levels of struct and cell contents listed for MATLAB files (``-1``: all; ``0``: the
        variables alone). ``None`` reads headers only: all levels of a v7.3 file (HDF5
        metadata), none of a v5/v4 file (whose struct and cell contents are stored with the
        data, compressed variables inflated whole).

    Returns
    -------
    dict
        ``format`` (``"npy"``, ``"npz"``, ``"mat"``), ``url``, ``file_size`` and the facts
        of that format (header fields; ``members``; ``version``, ``header``, ``variables``).

    Raises
    ------
    FormatError
        Not a file npystore knows.
    """
    found = sniff_source(url, options)  # one open serves the sniff and the format's reader
    if found.kind == "npy":
        return _npy_info(url, found.reader, found.prefix)
    if found.kind == "npz":
        return _npz_info(url, found.reader)
    return _mat_info(url, found.reader, found.prefix, depth)


def _table(rows: list[list[str]], out: TextIO) -> None:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    for r in rows:
        print("  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip(), file=out)


def _print_info(facts: dict[str, Any], out: TextIO) -> None:
    print(facts["url"], file=out)
    if facts["format"] == "npy":
        dtype = np.lib.format.descr_to_dtype(facts["dtype"])
        shape = " x ".join(map(str, facts["shape"])) or "() (one element)"
        _table([
            ["  format", f"npy {facts['version']}"],
            ["  dtype", f"{facts['dtype']} ({dtype})"],
            ["  shape", shape],
            ["  order", facts["order"]],
            ["  data offset", str(facts["data_offset"])],
            ["  data bytes", "pickled" if facts["nbytes"] is None else str(facts["nbytes"])],
            ["  file size", str(facts["file_size"])],
        ], out)  # fmt: skip
        return
    if facts["format"] == "npz":
        rows = [["Name", "Dtype", "Shape", "Order", "Storage", "Stored bytes", "Bytes"]]
        for m in facts["members"]:
            shape = "-" if m["shape"] is None else "x".join(map(str, m["shape"])) or "()"
            rows.append([m["name"], "-" if m["dtype"] is None else str(m["dtype"]), shape,
                         m["order"] or "-", m["storage"], str(m["compressed_size"]),
                         str(m["size"])])  # fmt: skip
        print(f"npz, {len(facts['members'])} members, {facts['file_size']} bytes", file=out)
        _table(rows, out)
        return
    print(f"MAT-file v{facts['version']}: {facts['header']}".rstrip(": "), file=out)
    rows = [["Name", "Class", "Size", "Attributes"]]

    def add(entry: dict[str, Any], level: int) -> None:
        attrs = " ".join(k for k in ("sparse", "complex", "global", "refused") if entry.get(k))
        rows.append(["  " * level + entry["name"], entry["class"], _dims(entry["size"]), attrs])
        for child in entry.get("children", ()):
            add(child, level + 1)
        if entry.get("more"):
            rows.append(["  " * (level + 1) + f"... {entry['more']} more", "", "", ""])

    for variable in facts["variables"]:
        add(variable, 0)
    _table(rows, out)
    for variable in facts["variables"]:
        if variable.get("refused"):
            print(f"{variable['name']}: refused: {variable['refused']}", file=out)


# ------------------------------------------------------------------------------ cat


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
            node = _element(node, int(part))
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
    opened = npystore.open(url, storage_options=options, allow_pickle=allow_pickle)
    if isinstance(opened, npystore.NpzFile | npystore.MatFile):
        names = list(opened)
        if member is None:
            if len(names) != 1:
                raise CliError(f"{url}: holds {len(names)} arrays {names}: name one as URL:NAME")
            member = names[0]
        if isinstance(opened, npystore.MatFile):
            return _mat_value(opened, member, url)
        if member not in opened:
            raise CliError(f"{url}: no member {member!r}; the members are {names}")
        return opened[member]
    if member is not None:
        raise CliError(f"{url}: an .npy file has no members (asked for {member!r})")
    return opened


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
        head = f"cell {_dims(value.shape)}" if value.ndim else "cell"
        lines = [head]
        lines += [
            _field(f"[{i}]", item, full) for i, item in enumerate(value.reshape(-1, order="F"))
        ]
        return "\n".join(lines)
    if not top and not full and math.prod(getattr(value, "shape", ())) > 100:
        return f"<{_dims(value.shape)} {value.dtype} array>"
    if hasattr(value, "compute"):
        if not full and value.nbytes > MAX_CAT_BYTES:
            raise CliError(
                f"the selection is {value.nbytes} bytes ({_dims(value.shape)} {value.dtype}); "
                "print part of it with --slice, or all of it with --full"
            )
        value = value.compute()
    return str(np.asarray(value))


def _cat(args: argparse.Namespace, options: Mapping[str, Any] | None, out: TextIO) -> int:
    try:
        value = _select(args.url, args.member, options, args.allow_pickle)
        if hasattr(value, "compute") and value.dtype.hasobject:
            value = value.compute()  # the pickle is read (and refused) here
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
            value = value[args.index]
        except (IndexError, ValueError, TypeError) as exc:
            raise CliError(f"{args.url}: --slice {args.slice!r}: {exc}") from exc
    threshold = sys.maxsize if args.full else np.get_printoptions()["threshold"]
    with np.printoptions(threshold=threshold):
        print(_render(value, full=args.full), file=out)
    return 0


# ------------------------------------------------------------------------------ commands


def _info_cmd(args: argparse.Namespace, options: Mapping[str, Any] | None, out: TextIO) -> int:
    facts = info(args.url, options, args.depth)
    if args.json:
        print(json.dumps(facts, indent=2), file=out)
    else:
        _print_info(facts, out)
    return 0


def _refs_cmd(args: argparse.Namespace, options: Mapping[str, Any] | None, out: TextIO) -> int:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        refs = npystore.to_kerchunk(args.url, storage_options=options)
    _say_warnings(caught)
    text = json.dumps(refs, indent=None if args.output else 2)
    if args.output in (None, "-"):
        print(text, file=out)
    elif _is_url(args.output):
        write_object(args.output, text.encode(), _out_options(args, options))
    else:
        with open(args.output, "w", encoding="utf-8") as f:
            f.write(text)
    ranged = sum(isinstance(v, list) for v in refs["refs"].values())
    where = "stdout" if args.output in (None, "-") else args.output
    print(f"{len(refs['refs'])} references ({ranged} byte ranges of {args.url}) -> {where}",
          file=sys.stderr)  # fmt: skip
    return 0


def _out_options(args: argparse.Namespace, options: Mapping[str, Any] | None) -> dict[str, Any]:
    """Storage options of an output URL: ``--out-storage-option``, else the input's."""
    own = parse_storage_options(args.out_storage_option, args.out_storage_options_json)
    return dict(own or options or {})


def _say_warnings(caught: Sequence[warnings.WarningMessage]) -> None:
    """Library warnings as one short line each on stderr (their first sentence, once)."""
    seen: set[str] = set()
    for w in caught:
        text = str(w.message).split(". ")[0].rstrip(".")
        if text not in seen:
            seen.add(text)
            print(f"npystore: warning: {type(w.message).__name__}: {text}", file=sys.stderr)


def _chunk_spec(text: str) -> Any:
    text = text.strip()
    if re.fullmatch(r"[-+\d,\s]+", text):
        return tuple(int(p) for p in text.split(",") if p.strip())
    return text


def _convert_cmd(args: argparse.Namespace, options: Mapping[str, Any] | None, out: TextIO) -> int:
    from npystore.tools.convert import convert, format_size  # noqa: PLC0415

    default, per_array = None, {}
    for item in args.chunks or ():
        name, sep, spec = item.rpartition("=")
        if sep:
            per_array[name] = _chunk_spec(spec)
        else:
            default = _chunk_spec(spec)
    result = convert(
        args.url,
        args.out,
        storage_options=options,
        out_storage_options=_out_options(args, options) if _is_url(args.out) else None,
        name=args.name,
        chunks=default,
        array_chunks=per_array,
        compressor=args.compressor,
        level=args.level,
        overwrite=args.overwrite,
        progress=not args.no_progress,
        workers=args.workers,
        checkpoint_interval=args.checkpoint_interval,
        log=lambda message: print(message, file=sys.stderr),
    )
    print(
        f"{result.out}: {len(result.arrays)} arrays, {format_size(result.nbytes)}, "
        f"{result.chunks_total} chunks ({result.chunks_written} written now, "
        f"{result.chunks_done_before} before)"
        + (f", {len(result.skipped)} skipped" if result.skipped else ""),
        file=out,
    )
    return 0


def _positive(text: str) -> int:
    if not _INT.fullmatch(text.strip()) or int(text) < 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not a positive integer")
    return int(text)


def _common() -> argparse.ArgumentParser:
    common = argparse.ArgumentParser(add_help=False)
    sup = argparse.SUPPRESS
    common.add_argument(
        "-s",
        "--storage-option",
        action="append",
        default=sup,
        metavar="KEY=VALUE",
        help="fsspec storage option (repeatable; JSON values; a.b=... nests)",
    )
    common.add_argument(
        "--storage-options-json",
        default=sup,
        metavar="JSON",
        help="storage options as a JSON object, or @file.json",
    )
    common.add_argument("--traceback", action="store_true", default=sup,
                        help="show the full traceback on errors")  # fmt: skip
    return common


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of ``npystore`` (subcommands info, cat, refs, convert)."""
    common = _common()
    parser = argparse.ArgumentParser(
        prog="npystore", parents=[common],
        description="Inspect and convert .npy, .npz and MATLAB .mat files on any fsspec URL.",
    )  # fmt: skip
    parser.add_argument("--version", action="version", version=f"npystore {npystore.__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    p = sub.add_parser("info", parents=[common], help="header facts, members or variables")
    p.add_argument("url", metavar="URL")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.add_argument(
        "--depth",
        type=int,
        default=None,
        help="levels of struct/cell contents listed for .mat (-1: all; default: what the "
        "headers hold: all for v7.3, none for v5/v4, whose contents are data)",
    )
    p.set_defaults(run=_info_cmd)

    p = sub.add_parser("cat", parents=[common], help="print values (URL or URL:member)")
    p.add_argument("url", metavar="URL[:MEMBER]")
    p.add_argument("--member", "-m", help="member (.npz) or variable path (.mat: s.field, c/0)")
    p.add_argument(
        "--slice", metavar="INDEX", help='numpy-style index, e.g. "10:20,3", "::2", "...,0"'
    )
    p.add_argument("--full", action="store_true", help="print every value (no summary)")
    p.add_argument(
        "--allow-pickle",
        action="store_true",
        help="read object arrays (pickles: loading runs code from the file; trusted files only)",
    )
    p.set_defaults(run=_cat)

    p = sub.add_parser("refs", parents=[common], help="write kerchunk references (JSON)")
    p.add_argument("url", metavar="URL")
    p.add_argument(
        "-o", "--output", metavar="FILE", help="output file or fsspec URL (default: stdout)"
    )
    p.add_argument(
        "--out-storage-option",
        action="append",
        metavar="KEY=VALUE",
        help="storage option for the output URL only (default: those of --storage-option)",
    )
    p.add_argument("--out-storage-options-json", metavar="JSON")
    p.set_defaults(run=_refs_cmd)

    p = sub.add_parser("convert", parents=[common], help="write a Zarr v3 store")
    p.add_argument("url", metavar="URL")
    p.add_argument("out", metavar="OUT", help="output group: directory or fsspec URL")
    p.add_argument("--name", help="array name for an .npy source (default: the file name)")
    p.add_argument(
        "--chunks",
        action="append",
        metavar="[ARRAY=]SPEC",
        help="Zarr chunks: leading-axis lengths (1000,-1), or a size (16MiB); "
        "ARRAY= for one array (repeatable)",
    )
    p.add_argument("--compressor", choices=("zstd", "blosc", "gzip", "none"), default="zstd")
    p.add_argument("--level", type=int, help="compression level (zstd 3, blosc 5, gzip 5)")
    p.add_argument("--workers", type=_positive, help="writer threads (default: CPUs, at least 4)")
    p.add_argument("--overwrite", action="store_true", help="replace what OUT holds")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.add_argument(
        "--checkpoint-interval",
        type=float,
        default=1.0,
        metavar="SECONDS",
        help="most seconds between progress-manifest updates (default 1)",
    )
    p.add_argument(
        "--out-storage-option",
        action="append",
        metavar="KEY=VALUE",
        help="storage option for OUT only (default: those of --storage-option)",
    )
    p.add_argument("--out-storage-options-json", metavar="JSON")
    p.set_defaults(run=_convert_cmd)  # fmt: skip
    return parser


def _message(exc: BaseException, url: str) -> str:
    text = str(exc) or type(exc).__name__
    if isinstance(exc, CliError):
        return text
    if isinstance(exc, FileNotFoundError):
        other = exc.filename and os.path.basename(str(exc.filename)) != os.path.basename(url)
        text = f"{exc.filename}: no such file" if other else f"{url}: no such file or object"
    elif isinstance(exc, KeyError) and exc.args:
        text = str(exc.args[0])
    return text if url and url in text else f"{url}: {text}" if url else text


def _join_slice(argv: list[str]) -> list[str]:
    """``--slice -5:`` as ``--slice=-5:`` (argparse takes ``-5:`` for an option)."""
    out: list[str] = []
    items = iter(argv)
    for item in items:
        if item == "--slice":
            value = next(items, None)
            out.append(item if value is None else f"--slice={value}")
        else:
            out.append(item)
    return out


def _usage(parser: argparse.ArgumentParser, message: str) -> int:
    parser.print_usage(sys.stderr)
    print(f"npystore: error: {message}", file=sys.stderr)
    return 2


def main(argv: Sequence[str] | None = None) -> int:
    """Run ``npystore`` with ``argv`` (default ``sys.argv[1:]``); return the exit status.

    Parameters
    ----------
    argv : sequence of str, optional
        The arguments after the program name.

    Returns
    -------
    int
        0 on success, 1 on errors, 2 on usage errors, 130 when interrupted.
    """
    parser = build_parser()
    try:
        args = parser.parse_args(_join_slice(sys.argv[1:] if argv is None else list(argv)))
    except SystemExit as exc:  # --help, --version, usage errors
        return exc.code if isinstance(exc.code, int) else 0 if exc.code is None else 2
    if args.command == "cat":
        url = args.url
        args.url, member = split_member(url)
        if args.member is not None and member is not None:
            return _usage(parser, f"cat: member given twice: in {url!r} and --member")
        args.member = args.member if args.member is not None else member
        try:
            args.index = None if args.slice is None else parse_slice(args.slice)
        except ValueError as exc:
            return _usage(parser, f"cat: --slice: {exc}")
    show_traceback = getattr(args, "traceback", False)
    run: Callable[[argparse.Namespace, Mapping[str, Any] | None, TextIO], int] = args.run
    try:
        options = parse_storage_options(
            getattr(args, "storage_option", None), getattr(args, "storage_options_json", None)
        )
        return run(args, options or None, sys.stdout)
    except KeyboardInterrupt:
        print(
            "npystore: interrupted"
            + ("; run the same command again to resume" if args.command == "convert" else ""),
            file=sys.stderr,
        )
        return INTERRUPTED
    except BrokenPipeError:  # e.g. `npystore cat ... | head`
        with contextlib.suppress(OSError, ValueError, AttributeError):
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 1
    except (NpystoreError, CliError, OSError, KeyError) as exc:
        if show_traceback:
            traceback.print_exc()
        print(f"npystore: error: {_message(exc, args.url)}", file=sys.stderr)
        return 1


def run() -> NoReturn:
    """The console script: :func:`main` on ``sys.argv``, then exit with its status.

    After an interruption it exits at once, without waiting for worker threads still in a
    range read or a chunk write: what ``convert`` finished is already in its manifest (a
    chunk cut mid-write is never recorded, and a rerun removes its leftovers), so Ctrl-C
    ends the command within a fraction of a second instead of after the reads in flight.
    """
    code = main()
    if code == INTERRUPTED:
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(OSError, ValueError):
                stream.flush()
        os._exit(code)
    sys.exit(code)
