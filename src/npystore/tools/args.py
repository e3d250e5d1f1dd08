"""What the user typed, as values: fsspec storage options, ``URL:member``, numpy indexes.

The text parsers of the ``npystore`` command (:mod:`npystore.tools.cli`) and the error they
raise, :class:`CliError`: a problem with what the user asked for, printed as one line.

>>> from npystore.tools.args import parse_slice, parse_storage_options, split_member
>>> split_member("s3://bucket/run.npz:x")
('s3://bucket/run.npz', 'x')
>>> parse_slice("10:20, ::2, ..., -1")
(slice(10, 20, None), slice(None, None, 2), Ellipsis, -1)
>>> parse_storage_options(["anon=true", "client_kwargs.endpoint_url=http://h:9000"])
{'anon': True, 'client_kwargs': {'endpoint_url': 'http://h:9000'}}
"""

from __future__ import annotations

import argparse
import json
import os
import re
from collections.abc import Mapping, Sequence
from typing import Any, Final

__all__ = ["OUTPUT_KINDS", "CliError", "byte_size", "chunk_spec", "depth", "is_url",
           "missing_parent", "output_kind", "parse_slice", "parse_storage_options",
           "positive_int", "split_member"]  # fmt: skip

_MEMBER_SUFFIX: Final = re.compile(r"\.(npz|mat)$", re.IGNORECASE)

_INT: Final = re.compile(r"[+-]?\d+")


class CliError(Exception):
    """A problem with what the user asked for (printed as one line, exit status 1)."""


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


def is_url(path: str) -> bool:
    """Whether ``path`` is an fsspec URL or chain (written through fsspec), not a local path."""
    return ("://" in path or "::" in path) and not path.startswith("file://")


#: What ``convert`` writes, by the output name's extension.
OUTPUT_KINDS: Final = {"npy": "npy", "npz": "npz", "zarr": "zarr", "": "zarr"}


def output_kind(out: str) -> str:
    """What ``convert`` writes to ``out``: ``"npy"``, ``"npz"`` (npystore's writers) or
    ``"zarr"`` (a Zarr v3 group: a name ending in ``.zarr`` or without an extension).

    Raises
    ------
    ValueError
        A chained URL (``zip::...``, ``simplecache::s3://...``) or another extension
        (``.zip``, ``.h5``, ...), with what is accepted.
    """
    accepted = (
        "convert writes a Zarr group (a directory or URL ending in .zarr, or without an "
        "extension), an .npy or an .npz file"
    )
    if "::" in out:
        raise ValueError(
            f"{out}: chained URLs cannot be written to; {accepted}, at a local path or a "
            f"URL such as s3://bucket/out.zarr"
        )
    name = out.rstrip("/").rsplit("/", 1)[-1]
    ext = name.rpartition(".")[2] if "." in name[1:] else ""
    # .npy/.npz as numpy spells them (numpy.save would append ".npy" to "x.NPY")
    kind = OUTPUT_KINDS.get(ext if ext.lower() != "zarr" else "zarr")
    if kind is None:
        raise ValueError(f"{out}: unknown output extension '.{ext}'; {accepted}")
    return kind


def missing_parent(out: str) -> str | None:
    """The directory a local output ``out`` would be made in, when it does not exist
    (``convert``, like ``numpy.save``, makes no parent directories); None otherwise and for
    URLs."""
    if is_url(out):
        return None
    path = out.removeprefix("file://").rstrip("/") or "/"
    parent = os.path.dirname(path) or "."
    return None if os.path.isdir(parent) else parent


def depth(text: str) -> int:
    """``info --depth``: levels listed, ``-1`` for all (an argparse ``type``)."""
    if not _INT.fullmatch(text.strip()) or int(text) < -1:
        raise argparse.ArgumentTypeError(
            f"{text!r}: expected a number of levels (0, 1, 2, ...) or -1 for all"
        )
    return int(text)


def positive_int(text: str) -> int:
    """An integer of at least 1 (an argparse ``type``)."""
    if not _INT.fullmatch(text.strip()) or int(text) < 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not a positive integer")
    return int(text)


def byte_size(text: str) -> int:
    """A number of bytes, as an int or with a unit (``"16MiB"``, ``"1GB"``; an argparse
    ``type``)."""
    from dask.utils import parse_bytes  # noqa: PLC0415 - dask only for this option

    try:
        size = int(parse_bytes(text.strip()))
    except (ValueError, TypeError) as exc:
        raise argparse.ArgumentTypeError(f"{text!r} is not a size (16MiB, 1000000)") from exc
    if size < 0:
        raise argparse.ArgumentTypeError(f"{text!r} is negative")
    return size


def chunk_spec(text: str) -> Any:
    """Zarr chunks of ``--chunks``: leading-axis lengths (``"1000,-1"``) or a size (``"16MiB"``).

    Lengths become a tuple of int; anything else stays text (a size, checked by
    :func:`npystore.tools.convert.convert`).
    """
    text = text.strip()
    if re.fullmatch(r"[-+\d,\s]+", text):
        return tuple(int(p) for p in text.split(",") if p.strip())
    return text
