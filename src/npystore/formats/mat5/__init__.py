"""MATLAB Level-5 MAT-files (``save -v6``, ``-v7``), parsed from byte ranges into descriptions.

Reading order (what the IO layer does; every step gets only the bytes it names)::

    1. prefix = file[0:min(128, size)]                     -> parse_header (also spots v4
                                                              files: see mat4.py)
    2. windows of file[data_start:], e.g. 64 KiB at a time -> scan_elements: one
       VariableEntry per top-level element, from its 8-byte tag alone; it returns the
       offset of the next tag it could not see, read a window there and call it again
    3. per variable, uncompressed: file[entry.offset:entry.offset + n] for some n
                                                           -> parse_matrix_header (name,
                                                              class, dims: a listing), or
                                                              parse_variable (the tree)
       per variable, miCOMPRESSED: inflate file[entry.data_offset:entry.end] (a zlib stream,
       wbits 15) and pass the inflated bytes with ``inflated=True``; offsets in the result
       are then offsets into the inflated buffer
    4. per numeric leaf: the DataRef ranges (the values, never read before this step)
                                                           -> node.decode / node.convert
    A NeedMoreBytes from step 3 names a range inside the element (tags and small metadata
    only, never numeric data): read it and retry with it in ``extra``. It is not an error.

Byte layout (MathWorks, "MAT-File Format", Level 5; integers in the file's byte order)::

    File header, 128 bytes
    0    116  descriptive text, "MATLAB 5.0 MAT-file, Platform: ..., Created on: ..."; its
              first 4 bytes are never 0 (a zero there marks a Level-4 file)
    116  8    subsystem data offset: 0 or all spaces when there is none
    124  2    version: 0x0100 (0x0200 is v7.3, an HDF5 file with a 512-byte user block)
    126  2    endian indicator: b"IM" little endian, b"MI" big endian

    Data element: one after another from offset 128 to the end of the file
    0    4    data type (table below)           small data element (SDE), when the upper
    4    4    number of bytes n                 16 bits of the first word are not zero:
    8    n    data, then zero padding to a      0 2+2 type and n <= 4 (one uint32 word in
              multiple of 8 (not at top level)  the file's byte order: n << 16 | type)
                                                4 4  data, zero padded

    Data types: 1 miINT8, 2 miUINT8, 3 miINT16, 4 miUINT16, 5 miINT32, 6 miUINT32,
    7 miSINGLE, 9 miDOUBLE, 12 miINT64, 13 miUINT64, 14 miMATRIX, 15 miCOMPRESSED,
    16 miUTF8, 17 miUTF16, 18 miUTF32.

    miCOMPRESSED (15), top level only: n bytes of zlib stream (with zlib header) inflating
    to exactly one data element, normally a miMATRIX. Top-level elements are not padded
    (MATLAB and scipy write the next tag right after n bytes).

    miMATRIX (14): a sequence of subelements, each a data element as above
    array flags  miUINT32, 8 bytes: word 0 = class | flags << 8 (bit 9 logical, bit 10
                 global, bit 11 complex; MATLAB also sets bit 12 on sparse arrays);
                 word 1 = nzmax (sparse only)
    dimensions   miINT32, >= 2 values (column-major MATLAB dims)
    array name   miINT8 (ASCII; scipy tolerates miUTF8): "" below the top level
    then by class:
      6..15 numeric  real part (any numeric type: MATLAB stores values in the smallest
                     type that holds them, a double array of small integers as miUINT8),
                     imaginary part if complex; logical arrays are class uint8 + bit 9
      4  char        one element: miUTF8 (MATLAB: ASCII only), miUTF16 (UTF-16 code
                     units, surrogate pairs as two units), miUINT16 (MATLAB < 7, SOL2),
                     miUINT8/miINT8; characters in column-major order
      5  sparse      ir (row indices, miINT32, nzmax), jc (column starts, N + 1), pr
                     (values), pi if complex; logical sparse pr is declared miDOUBLE but
                     holds one byte per value
      1  cell        one miMATRIX per element, column-major; an element may be a
                     miMATRIX with n = 0, MATLAB's [] (0x0 double)
      2  struct      field name length L (miINT32, 1 value), field names (miINT8, L bytes
                     each, NUL padded), then per element (column-major) one miMATRIX per
                     field
      3  object      class name (miINT8), then as struct
      16 function    one miMATRIX (a struct describing the handle)
      17 opaque      no dimensions: three miINT8 strings (name, type system "MCOS",
                     class name "string"/"table"/"datetime"/a classdef), then one
                     miMATRIX (metadata; the object's properties are in the subsystem)

    Subsystem data: the element at the header's subsystem offset, an unnamed uint8
    miMATRIX holding a small MAT-file of its own (MCOS objects, function workspaces);
    scipy loads it as ``__function_workspace__``.

This package describes; it never copies numeric data. A :class:`MatVariable` holds a tree of
nodes (:data:`MatNode`): numeric and char leaves carry :class:`DataRef` ranges with the
stored dtype; every node has a ``decode`` that turns the bytes of a buffer into the value
with MATLAB's class and shape (Fortran order). Sparse decoding builds a
``scipy.sparse.csc_matrix``; scipy is imported only then (``decode_parts`` needs numpy
alone).

Decoding choices where scipy.io.loadmat (``mat_dtype=True``) answers otherwise:

- complex arrays keep their imaginary part (scipy's ``mat_dtype`` cast drops it); complex
  integer classes decode to complex128 (numpy has no complex integers), single to complex64
- a 0-byte miMATRIX (MATLAB's ``[]`` in a cell) is a 0x0 double (scipy: shape (1, 0))
- char: one str per row along ``dims[1]``, shape ``(dims[0],) + dims[2:]`` (scipy joins the
  last axis of N-d char); UTF-16 surrogate pairs joined per row after reshaping (scipy
  decodes the column-major stream and breaks on them); miUINT16 is UTF-16 (scipy keeps
  the low byte); NULs are kept (numpy's str dtype drops trailing ones: object arrays here)
- logical sparse is bool (scipy: uint8 when the values are declared miUINT8)
- a struct without fields is a structured array without fields (scipy: object array)
- decoded arrays are in native byte order (scipy: the file's)

This package is pure: bytes in, frozen dataclasses out. Its modules, each importing only
those listed before it:

- ``_tags``: type and class codes, limits, :class:`DataRef`, reading tags (``_Reader``)
- ``_file``: the file header (step 1) and the top-level element scan (step 2)
- ``_numeric``: numeric and sparse leaves; ``_char``: char leaves and string arrangement
- ``_nodes``: cell, struct and opaque nodes, :data:`MatNode`, :class:`MatVariable`
- ``_meta``: array flags, dimensions and names; :func:`parse_matrix_header` (step 3)
- ``_parse``: :func:`parse_variable`, the whole tree (step 3)
- ``_bulk`` (imported by ``_nodes`` and ``_parse``, importing ``_tags`` and ``_char``): the
  fast paths for many small matrices, :func:`quick_header` (a listing) and
  :func:`quick_leaf` (small values decoded with their container); ``_vector`` (importing
  ``_bulk``): many siblings decoded together with numpy
"""

from npystore.formats.mat5._bulk import (
    DecodedChars,
    QuickHeader,
    quick_chars,
    quick_header,
    quick_leaf,
    quick_numeric,
)
from npystore.formats.mat5._char import (
    CharArray,
    CharErrors,
    char_dims_problem,
    chars_from_units,
)
from npystore.formats.mat5._file import (
    MatHeader,
    Mopt,
    VariableEntry,
    decode_mopt,
    hdf5_superblock_offsets,
    is_v73,
    parse_header,
    plain_hdf5_refused,
    scan_elements,
    v73_header,
)
from npystore.formats.mat5._meta import MatrixHeader, parse_matrix_header
from npystore.formats.mat5._nodes import (
    CellArray,
    MatNode,
    MatVariable,
    OpaqueObject,
    StructArray,
    iter_data_refs,
    with_source,
)
from npystore.formats.mat5._numeric import NumericArray, SparseArray
from npystore.formats.mat5._parse import parse_variable
from npystore.formats.mat5._tags import (
    CLASS_NAMES,
    DEFAULT_MAX_DEPTH,
    HEADER_SIZE,
    MAX_DEPTH_LIMIT,
    MAX_FIELDS,
    MAX_NDIM,
    MAX_NUMEL,
    MAX_UNBACKED,
    MI_COMPRESSED,
    MI_MATRIX,
    TAG_SIZE,
    DataRef,
)
from npystore.formats.mat5._vector import VECTOR_MIN
from npystore.formats.need import NeedMoreBytes
from npystore.formats.sniff import HDF5_SIGNATURE

__all__ = [
    "CLASS_NAMES", "DEFAULT_MAX_DEPTH", "HEADER_SIZE", "MAX_DEPTH_LIMIT", "MAX_FIELDS",
    "MAX_NDIM", "MAX_NUMEL", "MAX_UNBACKED", "MI_COMPRESSED", "MI_MATRIX", "TAG_SIZE",
    "VECTOR_MIN",
    "CellArray", "CharArray", "DataRef", "DecodedChars", "MatHeader", "MatNode", "MatVariable",
    "MatrixHeader", "Mopt", "QuickHeader",
    "NeedMoreBytes", "NumericArray", "OpaqueObject", "SparseArray", "StructArray",
    "VariableEntry", "CharErrors", "char_dims_problem", "chars_from_units", "decode_mopt",
    "HDF5_SIGNATURE", "hdf5_superblock_offsets", "is_v73", "plain_hdf5_refused", "v73_header",
    "iter_data_refs", "parse_header", "parse_matrix_header", "parse_variable", "quick_chars",
    "quick_header", "quick_leaf", "quick_numeric", "scan_elements", "with_source",
]  # fmt: skip
