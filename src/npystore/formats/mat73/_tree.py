"""The walk over an HDF5 file that gives each variable its MATLAB meaning."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import numpy as np
import numpy.typing as npt

from npystore.errors import FormatError, NpystoreError, UnsupportedError
from npystore.formats.mat5 import char_dims_problem, chars_from_units
from npystore.formats.mat73._attrs import (
    count,
    dims_of,
    empty_dims,
    field_names,
    flag,
    is_ref_field,
    object_dims,
    optional,
    size,
    text,
)
from npystore.formats.mat73._nodes import (
    CLASS_DTYPES,
    DEFAULT_MAX_DEPTH,
    MAX_CHARS,
    MAX_DEPTH_LIMIT,
    MAX_ELEMENTS,
    RESERVED,
    SUBSYSTEM_REASON,
    CellArray,
    Chain,
    CharArray,
    H5Dataset,
    H5Group,
    MatNode,
    NumericArray,
    OpaqueObject,
    SparseArray,
    StructArray,
    VarInfo,
    char_value,
    is_dataset,
    is_group,
)
from npystore.formats.shapes import check_shape

__all__ = ["Mat73Tree"]

_BY_DTYPE = {dt: name for name, dt in CLASS_DTYPES.items()}


class Mat73Tree:
    """The variables of a v7.3 MAT-file, parsed into :data:`MatNode` trees on request.

    Parameters
    ----------
    root : H5Group
        The HDF5 root group (an open ``h5py.File``).
    source : str
        The URL, for messages.
    max_depth : int
        Deepest nesting of cells/structs accepted (deeper is a FormatError).
    eager_bytes : int
        Numeric arrays inside cells and structs whose values take at most this many bytes
        are read here, with their container (``NumericArray.value``); 0: none.

    Values reached through object references are parsed once per tree and shared: each
    distinct object a cell or struct array refers to is followed once, however many
    elements refer to it (known by the reference's address before it is followed).
    """

    def __init__(
        self,
        root: H5Group,
        *,
        source: str,
        max_depth: int = DEFAULT_MAX_DEPTH,
        eager_bytes: int = 0,
    ):
        if not 1 <= max_depth <= MAX_DEPTH_LIMIT:
            raise ValueError(f"max_depth must be in 1..{MAX_DEPTH_LIMIT}, got {max_depth}")
        self._root = root
        self.source = source
        self.max_depth = max_depth
        self.eager_bytes = eager_bytes
        self._done: dict[H5Dataset | H5Group, MatNode] = {}
        #: Values reached by reference and parsed, by the address the reference holds.
        self._by_address: dict[int, MatNode] = {}

    def names(self) -> list[str]:
        """Variable names in the file's (HDF5 link) order."""
        return [name for name in self._root if name not in RESERVED]

    def has(self, name: str) -> bool:
        """Whether ``name`` is a variable of the file."""
        return name not in RESERVED and "/" not in name and name in self._root

    def member(self, name: str) -> H5Dataset | H5Group:
        """The HDF5 object of a variable; KeyError naming it when there is none."""
        if name in RESERVED or "/" in name or name not in self._root:
            raise KeyError(f"{self.source}: no variable {name!r}")
        return self._root[name]

    def parse(self, name: str) -> MatNode:
        """The tree of one variable (numeric data not read)."""
        return self._node(self.member(name), name, 0, ())

    def info(self, name: str) -> VarInfo:
        """What ``whos`` shows, from attributes and shapes (plus the tiny dims dataset of
        an empty value or a classdef object header).

        A variable that cannot be read is still listed: without dims when malformed
        (``parse`` reports the problem), and with ``refused`` set to the reason when
        npystore refuses it (e.g. an external link, whose target is never looked at, or
        values in external storage).
        """
        try:
            obj = self.member(name)
        except UnsupportedError as exc:
            return VarInfo(name, "unknown", (), refused=str(exc))
        except FormatError:
            return VarInfo(name, "unknown", ())
        attrs = obj.attrs
        cls = text(attrs.get("MATLAB_class"))
        is_global = flag(optional(attrs, "MATLAB_global"))
        try:
            if is_dataset(obj):
                return self._dataset_info(name, obj, cls, is_global)
            if is_group(obj):
                return self._group_info(name, obj, cls, is_global)
        except FormatError:  # listed without dims; parse(name) reports the problem
            return VarInfo(name, cls or "unknown", (), is_global=is_global)
        except UnsupportedError as exc:
            return VarInfo(name, cls or "unknown", (), is_global=is_global, refused=str(exc))
        return VarInfo(name, cls or "unknown", (), is_global=is_global)

    # -- parsing ---------------------------------------------------------------------------

    def _where(self, path: str) -> str:
        return f"{self.source}: variable {path}"

    def _node(
        self,
        obj: H5Dataset | H5Group,
        path: str,
        depth: int,
        chain: Chain,
        shared: bool = False,
    ) -> MatNode:
        """Parse one object; containers recurse straight back here (few stack frames per
        level). ``shared``: reached by reference, keep the result for the next time."""
        if depth > self.max_depth:
            raise FormatError(
                f"{self._where(path)}: nested {depth} levels deep, more than max_depth="
                f"{self.max_depth}; pass open_mat(..., max_depth=N) (at most 256) to read "
                f"deeper values"
            )
        attrs = obj.attrs
        cls = text(attrs.get("MATLAB_class"))
        node: MatNode | None
        if is_dataset(obj):
            empty = flag(optional(attrs, "MATLAB_empty"))
            if cls is None and not empty:
                cls = self._implied_class(obj)
            if cls == "cell" and not empty:
                node = self._cell(obj, path, depth, chain)
            else:
                node = self._dataset(obj, cls, path, empty, depth)
        elif is_group(obj):
            node = self._group(obj, cls, path)
            if node is None:
                node = self._struct(obj, cls or "struct", path, depth, chain)
        else:
            kind = type(obj).__name__
            node = OpaqueObject(path, cls or "unknown", (), f"an HDF5 {kind} is not a MATLAB value")
        if (
            shared
            and isinstance(node, CellArray | StructArray | SparseArray | NumericArray)
            and (not isinstance(node, NumericArray) or node.dataset is not None)
        ):
            # kept (and with it the HDF5 object, open) only when it holds datasets or may
            # be reached again while being parsed; a leaf read already is parsed again if
            # another reference leads to it, and its dataset is closed meanwhile (an open
            # dataset costs libhdf5 some 18 KB: a cell of 20,000 would hold 360 MB)
            self._done[obj] = node
        return node

    def _child(
        self, ref: Any, path: str, depth: int, chain: Chain, address: int | None = None
    ) -> MatNode:
        """The value an object reference points to (parsed once, cycles refused);
        ``address``: what the reference holds, when known (a value parsed before is not
        looked up again: 100,000 references to one object cost one parse)."""
        if isinstance(ref, str | bytes | np.ndarray) or ref is None:
            raise FormatError(
                f"{self._where(path)}: holds a {type(ref).__name__} where an object "
                f"reference is expected"
            )
        if not ref:
            raise FormatError(
                f"{self._where(path)}: null object reference, expected one into #refs#"
            )
        if address is not None:
            # only values parsed to the end are here: one on the chain (a cycle) is not
            known = self._by_address.get(address)
            if known is not None:
                return known
        where = self._where(path)  # (no helper call: a frame per level of nesting counts)
        try:
            obj = self._root[ref]
        except (KeyError, ValueError, TypeError, OSError) as exc:
            raise FormatError(f"{where}: object reference does not resolve: {exc}") from exc
        # HDF5 objects hash and compare by file and address (h5py); their names are
        # costly for objects reached by reference (HDF5 searches the file for a path)
        if obj in chain:
            loop = " -> ".join(str(o.name) for o in (*chain[chain.index(obj) :], obj))
            raise FormatError(f"{where}: reference cycle {loop}")
        done = self._done.get(obj)
        if done is None:
            done = self._node(obj, path, depth, chain, shared=True)
        if address is not None:
            self._by_address[address] = done
        return done

    def _field(self, obj: H5Dataset | H5Group, path: str, depth: int, chain: Chain) -> MatNode:
        """A 1x1 struct's field: HDF5 hard links can make it a group being parsed (a loop,
        refused) or an object reached before (parsed once: a chain of groups each linking
        twice to the next would otherwise cost 2**depth parses)."""
        if obj in chain:
            raise FormatError(
                f"{self._where(path)}: the field is a hard link back to an enclosing group"
            )
        done = self._done.get(obj)
        if done is not None:
            return done
        return self._node(obj, path, depth, chain, shared=True)

    def _dataset(
        self, dset: H5Dataset, cls: str | None, path: str, empty: bool, depth: int = 0
    ) -> MatNode:
        """A dataset that is not a cell: a leaf (inside a container, ``depth > 0``, small
        numeric values are read now)."""
        if empty:
            node = self._empty(dset, cls, path)
            if (
                depth
                and self.eager_bytes
                and isinstance(node, NumericArray)
                and max(node.dims, default=0) <= 1
            ):
                value = np.empty(node.dims, node.dtype)
                value.setflags(write=False)
                return NumericArray(path, node.matlab_class, node.dims, node.dtype, None, value)
            return node
        cls = cls or self._implied_class(dset)
        if cls == "char":
            return self._chars(dset, path)
        if cls in CLASS_DTYPES and "MATLAB_object_decode" not in dset.attrs:
            node = self._numeric(dset, cls, path)
            if depth and self.eager_bytes:
                return self._read_small(node)
            return node
        if cls in ("struct", "canonical empty"):
            return OpaqueObject(path, cls, dims_of(dset, self._where(path)),
                                f"a non-empty {cls} stored as a dataset")  # fmt: skip
        dims = object_dims(dset, self._where(path))
        return OpaqueObject(path, cls, dims, f"{cls} objects are {SUBSYSTEM_REASON}")

    def _implied_class(self, dset: H5Dataset) -> str:
        """The class of a dataset without MATLAB_class (not written by MATLAB)."""
        dtype = dset.dtype
        if dtype.kind == "O":
            return "cell"
        if dtype.fields is not None and "real" in dtype.fields:
            dtype = dtype.fields["real"][0]
        return _BY_DTYPE.get(dtype.newbyteorder("="), f"HDF5 {dtype}")

    def _empty(self, dset: H5Dataset, cls: str | None, path: str) -> MatNode:
        where = self._where(path)
        dims = empty_dims(dset, where)
        cls = "double" if cls in (None, "canonical empty") else cls
        numel = math.prod(dims)
        if cls in CLASS_DTYPES or cls in ("struct", "cell"):  # numpy must hold even empty ones
            check_shape(dims, CLASS_DTYPES.get(cls, np.dtype(object)), source=where)
        if cls == "struct":
            fields = field_names(optional(dset.attrs, "MATLAB_fields"), (), where)
            if numel and fields:
                raise FormatError(f"{where}: an empty struct with fields {fields} has dims {dims}")
            if numel > MAX_ELEMENTS:
                raise UnsupportedError(f"{where}: struct of {numel} elements, limit {MAX_ELEMENTS}")
            return StructArray(path, dims, fields, ({},) * numel)
        if numel and cls in (*CLASS_DTYPES, "char", "cell"):
            raise FormatError(f"{where}: marked MATLAB_empty with dims {dims}, which hold values")
        if cls in CLASS_DTYPES:
            return NumericArray(path, cls, dims, CLASS_DTYPES[cls], None)
        if cls == "char":
            problem = char_dims_problem(dims)
            if problem:
                raise FormatError(f"{where}: {problem}")
            rows = chars_from_units(np.zeros(0, np.uint16), dims, where=where)
            return CharArray(path, dims, np.zeros(dims, np.uint16), char_value(rows))
        if cls == "cell":
            return CellArray(path, dims, ())
        return OpaqueObject(path, cls, dims, f"{cls} objects are {SUBSYSTEM_REASON}")

    def _numeric(self, dset: H5Dataset, cls: str, path: str) -> NumericArray:
        where = self._where(path)
        dims = dims_of(dset, where)
        stored = dset.dtype
        if stored.names is not None:
            parts: Mapping[str, Any] = stored.fields or {}
            if (
                set(stored.names) != {"real", "imag"}
                or cls == "logical"
                or any(parts[p][0].kind not in "iuf" for p in ("real", "imag"))
            ):
                raise FormatError(
                    f"{where}: {cls} stored as {stored}, expected numbers or a compound of "
                    "numeric fields 'real' and 'imag'"
                )
            dtype = np.dtype(np.complex64 if cls == "single" else np.complex128)
        elif stored.kind in "biuf":
            dtype = CLASS_DTYPES[cls]
        else:
            raise FormatError(f"{where}: {cls} stored as {stored}, expected numbers")
        return NumericArray(path, cls, dims, dtype, dset)

    def _read_small(self, node: NumericArray) -> NumericArray:
        """The node with its values, when they take at most ``eager_bytes`` and the HDF5
        library reads them (else as it was: read later, through its byte ranges, where an
        unsupported filter is reported)."""
        dset = node.dataset
        numel = math.prod(node.dims)
        if dset is None or numel * node.dtype.itemsize > self.eager_bytes:
            return node
        if node.dtype.kind == "c" and node.matlab_class not in ("double", "single"):
            return node  # complex integers: complex128 values would not tell their class
        try:
            stored = np.asarray(dset.read(self._where(node.path)))
        except NpystoreError:
            raise  # refused storage, a bad chunk index: not a reason to try another way
        except (OSError, ValueError, TypeError):
            return node
        if stored.size != numel:
            return node
        flat = stored.reshape(-1)  # C order of the HDF5 shape: MATLAB's column-major
        if stored.dtype.names is not None:
            values = np.empty(numel, node.dtype)
            values.real = flat["real"]
            values.imag = flat["imag"]
        else:
            with np.errstate(all="ignore"):
                values = flat.astype(node.dtype)
        values = values.reshape(node.dims, order="F")
        values.setflags(write=False)
        return NumericArray(node.path, node.matlab_class, node.dims, node.dtype, None, values)

    def _chars(self, dset: H5Dataset, path: str) -> CharArray:
        where = self._where(path)
        dims = dims_of(dset, where)
        stored = dset.dtype
        if stored.kind not in "iu" or stored.itemsize > 4:
            raise FormatError(f"{where}: char stored as {stored}, expected uint16 code units")
        numel = math.prod(dims)
        if numel > MAX_CHARS:
            raise UnsupportedError(f"{where}: {numel} characters, more than {MAX_CHARS}")
        problem = char_dims_problem(dims)
        if problem:
            raise FormatError(f"{where}: {problem}")
        units = np.asarray(dset.read(where)).reshape(-1)  # HDF5 C order = column-major
        if units.size and (units.min() < 0 or units.max() > 0x10FFFF):
            raise FormatError(f"{where}: char code {int(units.max())} is not a code unit")
        rows = chars_from_units(units, dims, where=where)
        return CharArray(path, dims, units.reshape(dims, order="F"), char_value(rows))

    def _cell(self, dset: H5Dataset, path: str, depth: int, chain: Chain) -> CellArray:
        where = self._where(path)
        dims = dims_of(dset, where)
        refs, addresses = self._refs(dset, dims, where)
        inner = (*chain, dset)
        cells: list[MatNode] = []
        child = self._child
        for i, ref in enumerate(refs):
            cells.append(child(ref, f"{path}{{{i}}}", depth + 1, inner, addresses[i]))
        return CellArray(path, dims, tuple(cells))

    def _refs(
        self, dset: H5Dataset, dims: tuple[int, ...], where: str
    ) -> tuple[npt.NDArray[Any], list[int] | list[None]]:
        """A dataset of object references, read once, in column-major order, and the
        address each holds (all None when the dataset does not give them)."""
        metadata: Mapping[str, Any] = dset.dtype.metadata or {}
        vlen = metadata.get("vlen")  # h5py's variable-length types: not references
        if dset.dtype.kind != "O" or vlen is not None:
            stored = dset.dtype if vlen is None else f"variable-length data of {vlen}"
            raise FormatError(f"{where}: holds {stored}, expected object references")
        numel = math.prod(dims)
        if numel > MAX_ELEMENTS:
            raise UnsupportedError(f"{where}: {numel} elements, more than {MAX_ELEMENTS}")
        refs = np.asarray(dset.read(where), dtype=object).reshape(-1)
        keys = dset.reference_keys(where)
        if keys is None or keys.size != refs.size:
            return refs, [None] * refs.size
        return refs, keys.tolist()

    def _group(self, group: H5Group, cls: str | None, path: str) -> MatNode | None:
        """A group that is a leaf (sparse, function handle, opaque), or None for a struct."""
        attrs = group.attrs
        if "MATLAB_sparse" in attrs:
            return self._sparse(group, cls, path)
        if cls == "function_handle":
            return OpaqueObject(path, cls, (1, 1), f"function handles are {SUBSYSTEM_REASON}")
        if cls in (*CLASS_DTYPES, "char", "cell"):
            return OpaqueObject(path, cls, (), f"a {cls} stored as an HDF5 group")
        has_fields = "MATLAB_fields" in attrs or any(True for _ in group)
        if cls not in (None, "struct") and not has_fields:
            return OpaqueObject(path, cls, (), f"{cls} objects are {SUBSYSTEM_REASON}")
        return None

    def _struct(self, group: H5Group, cls: str, path: str, depth: int, chain: Chain) -> StructArray:
        where = self._where(path)
        present = list(group)
        fields = field_names(optional(group.attrs, "MATLAB_fields"), present, where)
        members = {f: group[f] for f in fields if f in present}
        per_element = {f: m for f, m in members.items() if is_ref_field(m)}
        inner = (*chain, group)
        element: dict[str, MatNode] = {
            f: OpaqueObject(f"{path}.{f}", "missing", (), "missing field: named in "
                            "MATLAB_fields but absent from the struct group")
            for f in fields if f not in members
        }  # fmt: skip
        if not per_element:  # 1x1: one member per field
            for f in fields:
                if f in members:
                    element[f] = self._field(members[f], f"{path}.{f}", depth + 1, inner)
            return StructArray(path, (1, 1), fields, ({f: element[f] for f in fields},), cls)
        if len(per_element) != len(members):
            plain = sorted(set(members) - set(per_element))
            raise FormatError(
                f"{where}: fields {sorted(per_element)} hold one reference per element (a "
                f"struct array) but fields {plain} hold values (a 1x1 struct)"
            )
        shapes = {f: dims_of(m, f"{where}.{f}") for f, m in per_element.items()}
        dims = next(iter(shapes.values()))
        if any(s != dims for s in shapes.values()):
            raise FormatError(f"{where}: struct array fields have different sizes {shapes}")
        refs = {f: self._refs(m, dims, f"{where}.{f}") for f, m in per_element.items()}
        elements: list[Mapping[str, MatNode]] = []
        for i in range(math.prod(dims)):
            for f, (column, addresses) in refs.items():
                element[f] = self._child(
                    column[i], f"{path}({i}).{f}", depth + 1, inner, addresses[i]
                )
            elements.append({f: element[f] for f in fields})
        return StructArray(path, dims, fields, tuple(elements), cls)

    def _sparse(self, group: H5Group, cls: str | None, path: str) -> SparseArray:
        where = self._where(path)
        cls = cls or "double"
        rows = count(group.attrs.get("MATLAB_sparse"), where, "MATLAB_sparse (rows)")
        parts: dict[str, H5Dataset | None] = {}
        for part in ("data", "ir", "jc"):
            parts[part] = None
            if part in group:
                obj = group[part]
                if not is_dataset(obj):
                    raise FormatError(f"{where}: sparse member {part!r} is not a dataset")
                parts[part] = obj
        data, ir, jc = parts["data"], parts["ir"], parts["jc"]
        if jc is None:
            raise FormatError(f"{where}: sparse group without its column starts 'jc'")
        for part, dset in (("ir", ir), ("jc", jc)):
            if dset is not None and dset.dtype.kind not in "iu":
                raise FormatError(f"{where}: sparse {part} is {dset.dtype}, expected integers")
        cols = size(jc, where) - 1
        if cols < 0:
            raise FormatError(f"{where}: sparse jc is empty, expected columns + 1 values")
        if (data is None) != (ir is None) or (
            data is not None and ir is not None and size(data, where) != size(ir, where)
        ):
            raise FormatError(f"{where}: sparse data and ir differ in presence or length")
        if cls not in ("double", "logical", "single"):
            raise UnsupportedError(f"{where}: sparse of class {cls}, expected double or logical")
        dtype = CLASS_DTYPES[cls]
        if data is not None and data.dtype.names is not None:
            if cls == "logical" or set(data.dtype.names) != {"real", "imag"}:
                raise FormatError(f"{where}: sparse {cls} data stored as {data.dtype}")
            dtype = np.dtype(np.complex64 if cls == "single" else np.complex128)
        elif data is not None and data.dtype.kind not in "biuf":
            raise FormatError(f"{where}: sparse data stored as {data.dtype}, expected numbers")
        return SparseArray(path, (rows, cols), cls, dtype, data, ir, jc)

    # -- listing ---------------------------------------------------------------------------

    def _dataset_info(self, name: str, dset: H5Dataset, cls: str | None, glob: bool) -> VarInfo:
        where = self._where(name)
        dset.check(where)  # refused storage is listed as refused, not with its dims
        attrs = dset.attrs
        if flag(optional(attrs, "MATLAB_empty")):
            cls = "double" if cls in (None, "canonical empty") else cls
            return VarInfo(name, cls, empty_dims(dset, where), is_global=glob)
        cls = cls or self._implied_class(dset)
        if cls not in (*CLASS_DTYPES, "char", "cell", "struct", "canonical empty"):
            return VarInfo(name, cls, object_dims(dset, where), is_global=glob)
        is_complex = dset.dtype.names is not None
        return VarInfo(name, cls, dims_of(dset, where), complex=is_complex, is_global=glob)

    def _group_info(self, name: str, group: H5Group, cls: str | None, glob: bool) -> VarInfo:
        where = self._where(name)
        if "MATLAB_sparse" in group.attrs:
            sparse = self._sparse(group, cls, name)
            for part, dset in (("data", sparse.data), ("ir", sparse.ir), ("jc", sparse.jc)):
                if dset is not None:  # refused storage is listed as refused
                    dset.check(f"{where}.{part}")
            is_complex = sparse.dtype.kind == "c"
            return VarInfo(name, sparse.matlab_class, sparse.dims, True, is_complex, glob)
        for member in group:  # a struct array has references in every field: ask one
            obj = group[member]
            if is_ref_field(obj):
                return VarInfo(name, cls or "struct", dims_of(obj, where), is_global=glob)
            break
        return VarInfo(name, cls or "struct", (1, 1), is_global=glob)
