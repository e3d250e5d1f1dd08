"""MATLAB v7.3 MAT-files: MATLAB semantics over an injected HDF5 reader.

A v7.3 MAT-file is an HDF5 file behind a 512-byte user block (the MAT header text). This
module never opens anything: it walks an HDF5 root group handed to it
(:func:`npystore.files.mat.h5safe.safe_root` of an h5py ``File``: links are checked before they are
followed, and a dataset's values are read only through ``read(where)``, which refuses
external storage and virtual datasets) and reads attributes, shapes and the small datasets
that are metadata in MATLAB's scheme (characters, object references, the dims of empty
arrays, classdef object headers). Numeric datasets are never read here: a
:class:`NumericArray` or :class:`SparseArray` holds the dataset handles, and the IO layer
(:mod:`npystore.files.mat.v73`) turns them into byte-range layouts.

How MATLAB maps values to HDF5 (checked against real MATLAB-written files)::

    root member               one variable; "#refs#" (referenced values) and "#subsystem#"
                              (classdef object data, undocumented) are not variables
    MATLAB_class attribute    fixed-length ASCII string: "double" ... "uint64", "logical",
                              "char", "cell", "struct", "function_handle", a class name
    dataset shape             MATLAB dims reversed (MATLAB is column-major): the dataset's
                              C-order elements are MATLAB's column-major elements
    numeric                   dataset of the class's type; logical: uint8; complex: the
                              compound {real, imag}
    MATLAB_empty = 1          empty value: the dataset holds MATLAB's dims (uint64, in
                              MATLAB order); class "canonical empty" is ``[]``
    char                      uint16 UTF-16 code units (hdf5storage: uint32 code points
                              when a string leaves the BMP)
    cell                      dataset of object references, each to a value in "#refs#"
    struct                    group; field order from MATLAB_fields (vlen arrays of 1-byte
                              strings). 1x1: one member per field. Struct array: each field
                              is a dataset of references, one per element, no MATLAB_class
    sparse                    group with MATLAB_sparse = rows, members data (nnz values),
                              ir (row indices) and jc (column starts); data and ir are
                              absent when there are no nonzeros
    function_handle           group (MATLAB_object_decode = 1)
    old-style class           group, MATLAB_class = class name, MATLAB_object_decode = 2,
                              fields as members
    classdef object, string,  uint32 dataset, MATLAB_object_decode = 3:
    table, datetime, ...      [0xDD000000, ndims, dims..., object ids..., class id]
"""

from npystore.formats.mat73._nodes import (
    CLASS_DTYPES,
    DEFAULT_MAX_DEPTH,
    MAX_DEPTH_LIMIT,
    MAX_ELEMENTS,
    RESERVED,
    Attrs,
    CellArray,
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
from npystore.formats.mat73._tree import Mat73Tree

__all__ = [
    "CLASS_DTYPES", "DEFAULT_MAX_DEPTH", "MAX_DEPTH_LIMIT", "MAX_ELEMENTS", "RESERVED",
    "Attrs", "CellArray", "CharArray", "H5Dataset", "H5Group", "Mat73Tree", "MatNode",
    "NumericArray", "OpaqueObject", "SparseArray", "StructArray", "VarInfo", "char_value",
    "is_dataset", "is_group",
]  # fmt: skip
