"""The ``npystore`` command on datasets of many ``.npy`` files (a glob, a list, a folder):
``info`` summarizes them, ``convert`` writes them as one array.

Both open the files as :func:`npystore.open_npy` does (one listing, every opening request in
flight at once, shapes and dtypes checked).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, TextIO

from npystore.fetch.naming import is_folder, is_many
from npystore.tools.progress import CountProgress, format_size

__all__ = ["convert_dataset", "dataset_info", "names_dataset", "print_dataset_info"]


def names_dataset(url: str, options: Mapping[str, Any] | None = None) -> bool:
    """Whether ``url`` names many files (a glob, a folder). Asked of every ``info`` and
    ``convert``, so this module imports the many-files machinery (fsspec) only in the
    functions that open many files."""
    return is_many(url) or is_folder(url, options)


def dataset_info(url: str, options: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """What ``npystore info`` reports for a dataset of ``.npy`` files: the number of files,
    the total shape, the dtype, the axis, the data bytes and the files' bytes, the first and
    last file."""
    from npystore.files.many import sharded_npy  # noqa: PLC0415 - see names_dataset

    with CountProgress("open files") as progress:
        array = sharded_npy(url, storage_options=options, on_count=progress.start)
    dtype = array.dtype
    return {
        "format": "npy-dataset",
        "url": url,
        "files": len(array.shards),
        "shape": list(array.shape),
        "dtype": dtype.descr if dtype.names else dtype.str,
        "axis": array.axis,
        "nbytes": array.nbytes,
        "file_size": sum(s.reader.size for s in array.shards),
        "lengths": sorted({s.shape[array.axis] for s in array.shards}) if array.ndim else [],
        "first": array.shards[0].source,
        "last": array.shards[-1].source,
    }


def print_dataset_info(facts: Mapping[str, Any], out: TextIO) -> None:
    """Print :func:`dataset_info` as ``npystore info`` does."""
    lengths = facts["lengths"]
    shown = ", ".join(map(str, lengths[:5])) + (", ..." if len(lengths) > 5 else "")
    rows = [
        ["  format", f"{facts['files']} .npy files, concatenated along axis {facts['axis']}"],
        ["  dtype", str(facts["dtype"])],
        ["  shape", " x ".join(map(str, facts["shape"]))],
        ["  lengths", f"{shown} (along axis {facts['axis']})"],
        ["  data bytes", f"{facts['nbytes']} ({format_size(facts['nbytes'])})"],
        ["  files' bytes", f"{facts['file_size']} ({format_size(facts['file_size'])})"],
        ["  first", facts["first"]],
        ["  last", facts["last"]],
    ]
    print(facts["url"], file=out)
    width = max(len(r[0]) for r in rows)
    for label, value in rows:
        print(f"{label.ljust(width)}  {value}", file=out)


def convert_dataset(
    url: str,
    out: str,
    *,
    storage_options: Mapping[str, Any] | None = None,
    out_storage_options: Mapping[str, Any] | None = None,
    chunks: Any = None,
    name: str | None = None,
) -> tuple[str, tuple[int, ...], int]:
    """Write a dataset of ``.npy`` files as one array: an ``.npy`` file
    (:func:`npystore.save`), an ``.npz`` archive with one member (``name``, default
    ``data``; :func:`npystore.savez`), or a Zarr v3 array at ``out`` (regular chunks: the
    longest file's length along the axis unless ``chunks`` says otherwise).

    Returns
    -------
    tuple
        ``(out, shape, nbytes)``.
    """
    from npystore.faces.many import sharded_dask  # noqa: PLC0415 - see names_dataset
    from npystore.files.many import sharded_npy  # noqa: PLC0415

    with CountProgress("open files") as progress:
        array = sharded_npy(url, storage_options=storage_options, on_count=progress.start)
    x = sharded_dask(array)
    lower = out.lower()
    if lower.endswith(".npy"):
        from npystore.write import save  # noqa: PLC0415

        save(out, x, storage_options=out_storage_options)
    elif lower.endswith(".npz"):
        from npystore.write import savez  # noqa: PLC0415

        members: dict[str, Any] = {name or "data": x}
        savez(out, storage_options=out_storage_options, **members)
    else:
        axis = array.axis
        spec = chunks if chunks is not None else {axis: max(x.chunks[axis])}
        regular = x.rechunk(spec)  # type: ignore[no-untyped-call]
        regular.to_zarr(out, component=name, storage_options=out_storage_options, zarr_format=3)
    return out, array.shape, array.nbytes
