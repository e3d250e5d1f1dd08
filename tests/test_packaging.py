"""What a user installing npystore gets: the license, the default install, the extras' page."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

from packaging.version import Version

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


def test_python_versions_agree_across_pyproject_docs_and_ci() -> None:
    """requires-python, the classifiers, docs/install.md and the two CI legs name the same
    Python versions: 3.11 (the floor, CI's oldest leg) to 3.13 (CI's newest leg)."""
    project = _project()
    assert project["requires-python"] == ">=3.11"
    classifiers = project["classifiers"]
    assert isinstance(classifiers, list)
    versions = [c.rsplit(" :: ", 1)[1] for c in classifiers if re.match(r".*:: 3\.\d+$", c)]
    assert versions == ["3.11", "3.12", "3.13"]
    page = (ROOT / "docs" / "install.md").read_text()
    assert "Python 3.11 or newer" in page
    assert re.search(r"\| oldest \| 3\.11 \|", page)
    assert re.search(r"\| newest \| 3\.13 \|", page)
    ci = (ROOT / ".ci" / "run").read_text()
    assert "python3.13.sh" in ci
    assert ".ci/oldest.txt" in ci
    assert ".ci/newest.txt" in ci


def test_no_upper_bound_but_zarrs_next_major_version() -> None:
    """Dependencies have floors only; zarr's ``<4`` is the one upper bound. The oldest leg's
    pins are the declared floors."""
    project = _project()
    extras = project["optional-dependencies"]
    assert isinstance(extras, dict)
    specs = [*project["dependencies"], *(s for group in extras.values() for s in group)]  # type: ignore[attr-defined]
    capped = [s for s in specs if "<" in s.split(";")[0]]
    assert capped == ["zarr>=3.1.3,<4"]
    floors = {}
    for spec in specs:
        found = re.match(r"([A-Za-z0-9_.-]+)(?:\[[^\]]*\])?>=([0-9.]+)", spec)
        if found:
            floors[found.group(1).lower()] = found.group(2)
    pins = dict(
        line.split("==")
        for line in (ROOT / ".ci" / "oldest.txt").read_text().splitlines()
        if "==" in line and not line.startswith("#")
    )
    named = {"zarr", "virtualizarr", "numpy", "dask", "fsspec", "s3fs", "xarray", "h5py", "scipy"}
    assert named <= set(pins)
    for name, pinned in pins.items():  # a declared floor, exactly (else a resolution hint)
        if name in floors:
            assert Version(pinned) == Version(floors[name]), (name, pinned)
