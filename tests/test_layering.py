"""The import rules that keep the layers apart (docs/architecture.md).

- ``formats/`` is pure (no fsspec/dask/zarr/IO): stdlib, numpy, codecs (isal, zlib_ng),
  scipy.sparse (lazily, for MATLAB sparse values) and npystore's errors/formats.
- ``layout`` does no IO and knows no face.
- all IO goes through ``fetch`` (and ``s3direct``, its presigned S3 GETs, ``opening``, its
  opening request, ``remote``, its retries, and ``fileobj``, open file objects): fsspec, s3fs,
  botocore are imported nowhere else (``testing/`` excepted, it builds servers for the
  tests and the demo).
- faces never parse bytes: they do not import ``npystore.formats``.
- dask is imported only by faces and by the tools that use the library like a user does:
  the demo, the command line and its Zarr conversion (``cli``, ``convert``).
- ``npzfs.py`` is an fsspec filesystem (the ``npz://`` protocol): it imports fsspec to
  subclass its base classes, but reads through ``fetch`` like everything else (no s3fs).
- h5py (HDF5 metadata of MAT v7.3 files) only by ``hdf5.py``, ``h5safe.py`` and
  ``mat_v73.py``.
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import pytest

import npystore

PACKAGE = Path(npystore.__file__).parent
#: The fetch layer: the reader, its direct S3 request path, the opening request and retries.
FETCH_LAYER = {"fetch.py", "s3direct.py", "opening.py", "remote.py", "fileobj.py"}
#: Modules that use npystore as a user would (dask allowed).
TOOLS = {"demo.py", "cli.py", "convert.py"}
#: Modules that subclass fsspec's filesystem classes (fsspec allowed, no other IO library).
FSSPEC_SUBCLASSES = {"npzfs.py"}
STDLIB = set(sys.stdlib_module_names)


def _runtime_nodes(tree: ast.AST) -> list[ast.AST]:
    """Every node except those under ``if TYPE_CHECKING:`` (annotations only)."""
    out: list[ast.AST] = []
    stack = [tree]
    while stack:
        node = stack.pop()
        if isinstance(node, ast.If) and ast.unparse(node.test) in (
            "TYPE_CHECKING",
            "typing.TYPE_CHECKING",
        ):
            stack.extend(node.orelse)
            continue
        out.append(node)
        stack.extend(ast.iter_child_nodes(node))
    return out


def _imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(), filename=str(path))
    names: set[str] = set()
    for node in _runtime_nodes(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
    return names


def _modules() -> list[Path]:
    return sorted(PACKAGE.rglob("*.py"))


def _rel(path: Path) -> str:
    return path.relative_to(PACKAGE).as_posix()


@pytest.mark.parametrize("path", _modules(), ids=_rel)
def test_import_rules(path: Path) -> None:
    rel = _rel(path)
    imports = _imports(path)
    roots = {name.split(".")[0] for name in imports}
    if rel.startswith("formats/"):
        # pure computation is allowed (no IO library): the fast inflaters, and scipy.sparse
        # for decoding MATLAB sparse matrices (imported lazily, only for sparse values)
        allowed = STDLIB | {"numpy", "npystore", "isal", "zlib_ng", "scipy"}
        assert roots <= allowed, f"{rel} imports {sorted(roots - allowed)}"
        own = {n for n in imports if n.startswith("npystore")}
        assert all(n == "npystore.errors" or n.startswith("npystore.formats") for n in own), own
    if rel == "layout.py":
        assert roots <= STDLIB | {"numpy", "npystore"}, roots
    if rel not in FETCH_LAYER and not rel.startswith("testing/"):
        io_libraries = {"s3fs", "aiobotocore", "botocore", "aiohttp"}
        if rel not in FSSPEC_SUBCLASSES:
            io_libraries.add("fsspec")
        assert not roots & io_libraries, f"{rel} does IO outside fetch.py: {sorted(roots)}"
    if rel.startswith("faces/"):
        assert not any(n.startswith("npystore.formats") for n in imports), (
            f"{rel} parses bytes: imports {sorted(imports)}"
        )
    if rel not in ("hdf5.py", "h5safe.py", "mat_v73.py"):
        assert "h5py" not in roots, f"{rel} imports h5py: HDF5 metadata is read in hdf5.py only"
    if not rel.startswith("faces/") and rel not in TOOLS:
        assert "dask" not in roots, f"{rel} imports dask outside faces/"


def test_rules_cover_every_layer() -> None:
    rels = {_rel(p) for p in _modules()}
    assert {"formats/npy.py", "layout.py", "fetch.py", "faces/dask.py"} <= rels
