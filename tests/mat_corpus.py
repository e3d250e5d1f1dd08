"""Where the real MATLAB-written corpus (``../shared/testdata/mat``) is, for the tests.

``NPYSTORE_MAT_CORPUS`` overrides; otherwise ``shared/testdata/mat`` beside the checkout,
then ``/work/shared/testdata/mat``. Tests that need it skip when none exists.
"""

from __future__ import annotations

import os
from pathlib import Path


def _find() -> Path:
    env = os.environ.get("NPYSTORE_MAT_CORPUS")
    beside = Path(__file__).resolve().parents[2] / "shared" / "testdata" / "mat"
    candidates = [Path(env)] if env else [beside, Path("/work/shared/testdata/mat")]
    for path in candidates:
        if (path / "MANIFEST.tsv").is_file():
            return path
    return candidates[0]


#: The corpus directory (it may not exist: check ``CORPUS_FOUND``).
CORPUS = _find()
CORPUS_FOUND = (CORPUS / "MANIFEST.tsv").is_file()
