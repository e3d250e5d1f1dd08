"""What a user installing npystore gets: the license, the default install, the extras' page."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _project() -> dict[str, object]:
    data = tomllib.loads((ROOT / "pyproject.toml").read_text())
    project = data["project"]
    assert isinstance(project, dict)
    return project


def test_license_is_the_mit_text_pyproject_names() -> None:
    text = (ROOT / "LICENSE").read_text()
    assert _project()["license"] == "MIT"
    assert text.startswith("MIT License")
    assert "Permission is hereby granted, free of charge" in text


def test_deflate_fast_path_is_part_of_the_default_install() -> None:
    # without an index builder, slices of deflated members inflate from the member's start
    deps = [re.split(r"[<>=\[ ]", d)[0].lower() for d in _project()["dependencies"]]  # type: ignore[attr-defined]
    assert "isal" in deps
    assert "indexed_gzip" in deps


def test_install_page_names_every_user_extra() -> None:
    extras = set(_project()["optional-dependencies"])  # type: ignore[arg-type]
    page = (ROOT / "docs" / "install.md").read_text()
    named = set(re.findall(r"^\| `([a-z0-9]+)` \|", page, flags=re.MULTILINE))
    assert named == extras


def test_no_document_outside_the_repository_is_cited() -> None:
    cited = [
        str(p.relative_to(ROOT))
        for top in ("src", "tests", "docs", "benchmarks")
        for p in (ROOT / top).rglob("*")
        if p.suffix in {".py", ".md"}
        and p.name != "test_packaging.py"
        and "DESIGN.md" in p.read_text()
    ]
    cited += ["README.md"] if "DESIGN.md" in (ROOT / "README.md").read_text() else []
    assert cited == []
