"""The demo's table (issue 26 item 21): at most 100 columns, every row explained, and what a
slice of a deflated member costs a new process (not only this one, which keeps the
member's compressed bytes in memory after indexing it)."""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from npystore.tools import demo


@pytest.mark.s3
def test_the_npz_rows_show_a_fresh_slice_and_fit_100_columns(
    s3: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("NPYSTORE_INDEX_CACHE", str(tmp_path / "index-cache"))
    rng = np.random.default_rng(0)
    path = tmp_path / "run.npz"
    np.savez_compressed(path, temperature=rng.normal(size=(8, 90, 40)).astype("f4"))
    url = s3.put_file(path, "run.npz")
    steps: list[demo.Step] = []
    assert demo._demo_npz(s3, "run.npz", path, url, steps)
    by_action = {step.action: step for step in steps}
    assert by_action["slice [-1, 30:60]"].requests == 0  # this process's memory
    fresh = by_action["reopen, slice [-1, 30:60]"]
    assert fresh.requests >= 2  # the archive's tail and the compressed bytes, at least
    assert fresh.nbytes > 0
    out = io.StringIO()
    demo._report(steps, out)
    text = out.getvalue()
    assert max(len(line) for line in text.splitlines()) <= demo.WIDTH
    legend = text.split("What each row shows:")[1]
    for label in ("index 'temperature'", "slice (after index)", "reopen, slice"):
        assert f"  {label}: " in legend
    assert "npystore.read.memo.forget()" in legend
