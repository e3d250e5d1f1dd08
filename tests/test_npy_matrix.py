"""The dtype x shape x order matrix equals numpy.load, locally and through S3 (moto)."""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import npystore

from npy_cases import DTYPES, ORDERS, SHAPES, assert_same, write_case

pytestmark = pytest.mark.filterwarnings("ignore:Stored array in format 3.0:UserWarning")


def _expected(path: Path) -> Any:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return np.load(path)


@pytest.mark.parametrize("name", list(DTYPES))
def test_matrix_local(tmp_path: Path, name: str) -> None:
    for shape in SHAPES:
        for order in ORDERS:
            path, _ = write_case(tmp_path, name, shape, order)
            expected = _expected(path)
            header = npystore.read_header(str(path))
            assert header.dtype == expected.dtype
            assert header.shape == expected.shape
            assert header.fortran_order == (
                expected.flags.f_contiguous and not expected.flags.c_contiguous
            )
            lazy = npystore.open_npy(str(path))
            assert lazy.dtype == expected.dtype
            assert lazy.shape == expected.shape
            assert_same(lazy.compute(), expected)
            # small chunks on every axis: many non-contiguous pieces per chunk
            small = npystore.open_npy(path.as_uri(), chunks=2)
            assert_same(small.compute(), expected)
            eager = npystore.load(str(path))
            assert_same(eager, expected)
            assert eager.flags.f_contiguous == expected.flags.f_contiguous
            assert eager.flags.c_contiguous == expected.flags.c_contiguous
            assert eager.flags.writeable


@pytest.mark.parametrize("name", list(DTYPES))
def test_matrix_s3(tmp_path: Path, name: str, s3: Any) -> None:
    for shape in SHAPES:
        for order in ORDERS:
            path, _ = write_case(tmp_path, name, shape, order)
            expected = _expected(path)
            url = s3.put_file(path, path.name)
            opts = s3.storage_options
            assert_same(npystore.open_npy(url, storage_options=opts).compute(), expected)
            assert_same(npystore.open_npy(url, chunks=2, storage_options=opts).compute(), expected)
            assert_same(npystore.load(url, storage_options=opts), expected)
