"""Fixtures for every test the suite runs (tests/, the docs' examples, the doctests).

Deflate checkpoint indexes are cached in a user directory by default
(:mod:`npystore.fetch.cache`): each test gets its own, so no test sees another's
indexes (or the developer's), and none writes into the home directory.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest


@pytest.fixture(autouse=True)
def _own_index_cache(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    path = tmp_path_factory.mktemp("index-cache")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("NPYSTORE_INDEX_CACHE", str(path))
        yield path
