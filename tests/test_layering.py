"""The import rules that keep the layers apart (docs/architecture.md).

The folders are the layers, and imports go one way, down:
``tools -> faces -> write -> files -> read -> fetch -> formats`` (``errors`` everywhere; the
top-level ``__init__``, ``__main__``, ``api`` and ``virtualizarr`` above them all;
``codecs`` beside ``formats``: numcodecs codecs that peer tools load by entry point, which
decode bytes with ``formats`` and import nothing else of npystore; ``testing/`` beside).

- ``formats/`` is pure (no fsspec/dask/zarr/IO): stdlib, numpy, codecs (isal, zlib_ng, deflate),
  scipy.sparse (lazily, for MATLAB sparse values) and npystore's errors/formats.
- all IO goes through ``fetch/``: fsspec, s3fs, botocore, aiohttp are imported nowhere
  else (``testing/`` excepted, it builds servers for the tests and the demo; and
  ``faces/npzfs.py``, an fsspec filesystem, subclasses fsspec's base classes but reads
  through ``fetch``).
- parsing happens in ``formats/`` (driven by ``files/`` and ``read/``): faces, tools and
  ``api`` take only names of types and constants from ``formats`` (CamelCase or
  UPPER_CASE), never a parsing function or a whole format module.
- dask is imported only by the writers (``write/``), faces and tools.
- h5py only where HDF5 metadata is read through npystore's checks
  (``files/mat/hdf5.py``, ``files/mat/h5safe.py``, ``files/mat/v73.py``) and by the
  chunk decoder for filters npystore does not undo (``read/h5decode.py``).
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import pytest

import npystore

PACKAGE = Path(npystore.__file__).parent
#: The layers, lowest first: a module imports npystore modules of its own layer or below.
LAYERS = ("formats", "fetch", "read", "files", "write", "faces", "tools")
#: Top-level modules: errors below everything, the public entry points above.
TOP = {
    "__init__.py": len(LAYERS),
    "__main__.py": len(LAYERS),
    "api.py": len(LAYERS),
    "virtualizarr.py": len(LAYERS),  # the public path of the VirtualiZarr parser
    # numcodecs codecs for peer tools (entry points): decoders beside formats, which faces
    # may name; they import formats (and numcodecs, zarr) only
    "codecs.py": LAYERS.index("formats"),
}
#: Modules above formats that decode bytes with its functions (codecs for peer tools).
DECODERS = {"codecs.py"}
H5PY = {"files/mat/hdf5.py", "files/mat/h5safe.py", "files/mat/v73.py", "read/h5decode.py"}
FSSPEC_SUBCLASSES = {"faces/npzfs.py"}
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


def _layer(rel: str) -> int | None:
    """The rank of a module (path relative to the package, or dotted name below npystore)."""
    first = rel.removesuffix(".py").replace(".", "/").split("/")[0]
    if first in LAYERS:
        return LAYERS.index(first)
    return TOP.get(f"{first}.py")


def _imported_names(path: Path) -> list[tuple[str, list[str]]]:
    """``(module, names)`` of every runtime ``from npystore... import names``."""
    tree = ast.parse(path.read_text(), filename=str(path))
    out = []
    for node in _runtime_nodes(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("npystore"):
            out.append((node.module, [a.name for a in node.names]))
    return out


@pytest.mark.parametrize("path", _modules(), ids=_rel)
def test_import_rules(path: Path) -> None:
    rel = _rel(path)
    imports = _imports(path)
    roots = {name.split(".")[0] for name in imports}
    own = {n for n in imports if n.startswith("npystore.")}
    if rel.startswith("formats/"):
        # pure computation is allowed (no IO library): the fast inflaters, and scipy.sparse
        # for decoding MATLAB sparse matrices (imported lazily, only for sparse values)
        allowed = STDLIB | {"numpy", "npystore", "isal", "zlib_ng", "deflate", "scipy"}
        assert roots <= allowed, f"{rel} imports {sorted(roots - allowed)}"
    if rel == "errors.py":
        assert not own, f"errors imports {sorted(own)}"
    rank = _layer(rel)
    if rank is not None:
        for name in own:
            if name in ("npystore.errors",) or name.startswith("npystore.testing"):
                continue
            target = _layer(name.split(".", 1)[1])
            assert target is not None, f"{rel} imports {name}, which is in no layer"
            assert target <= rank, (
                f"{rel} imports {name}, a layer above it ({' -> '.join(reversed(LAYERS))})"
            )
    if not rel.startswith(("fetch/", "testing/")):
        io_libraries = {"s3fs", "aiobotocore", "botocore", "aiohttp"}
        if rel not in FSSPEC_SUBCLASSES:
            io_libraries.add("fsspec")
        assert not roots & io_libraries, f"{rel} does IO outside fetch/: {sorted(roots)}"
    if rel.startswith(("faces/", "tools/")) or (rel in TOP and rel not in DECODERS):
        for module, names in _imported_names(path):
            if module == "npystore.formats" or module.startswith("npystore.formats."):
                parsers = [n for n in names if not (n[0].isupper())]
                assert module != "npystore.formats", f"{rel} imports {names} from formats"
                assert not parsers, f"{rel} parses bytes: imports {parsers} from {module}"
    if rel not in H5PY:
        assert "h5py" not in roots, f"{rel} imports h5py: HDF5 metadata is read in files/mat/"
    if not rel.startswith(("write/", "faces/", "tools/")):
        assert "dask" not in roots, f"{rel} imports dask outside write/, faces/ and tools/"


def test_rules_cover_every_layer() -> None:
    rels = {_rel(p) for p in _modules()}
    for layer in LAYERS:
        assert any(r.startswith(f"{layer}/") for r in rels), layer
    top = {r for r in rels if "/" not in r}
    assert top <= {*TOP, "errors.py"}, f"modules outside the layers: {sorted(top)}"
    assert len(top) <= 8


def test_no_module_over_600_lines() -> None:
    sizes = {_rel(p): len(p.read_text().splitlines()) for p in _modules()}
    big = {r: n for r, n in sizes.items() if n > 600}
    assert not big, f"modules over 600 lines: {big}"


def test_format_magics_only_in_formats() -> None:
    magics = [b"\\x93NUMPY", b"PK\\x03\\x04", b"MATLAB 5.0", b"MATLAB 7.3", b"\\x89HDF"]
    for path in _modules():
        rel = _rel(path)
        if rel.startswith("formats/"):
            continue
        text = path.read_bytes()
        found = [m.decode() for m in magics if m in text]
        assert not found, f"{rel} spells format magic {found}: sniff in formats/"
