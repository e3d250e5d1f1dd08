"""Developer sessions: ``nox -s tests lint typecheck docs bench``."""

from __future__ import annotations

import nox

nox.options.sessions = ["tests", "lint", "typecheck"]
nox.options.default_venv_backend = "venv"
PYTHON = "3.11"


@nox.session(python=PYTHON)
def tests(session: nox.Session) -> None:
    """The whole test suite (what the README's test command and CI run)."""
    session.install("-e", ".[test]")
    session.run("python", "-m", "pytest", "-q", *session.posargs)


@nox.session(python=PYTHON)
def lint(session: nox.Session) -> None:
    """ruff: lint and formatting."""
    session.install("ruff>=0.6")
    session.run("ruff", "check", "src", "tests", "benchmarks", "noxfile.py")
    session.run("ruff", "format", "--check", "src", "tests", "benchmarks", "noxfile.py")


@nox.session(python=PYTHON)
def typecheck(session: nox.Session) -> None:
    """mypy --strict over src/npystore."""
    session.install("-e", ".[test]")
    session.run("mypy")


@nox.session(python=PYTHON)
def docs(session: nox.Session) -> None:
    """Build the mkdocs site strictly and run the examples in the docs as doctests."""
    session.install("-e", ".[docs,test]")
    session.run("mkdocs", "build", "--strict", "--site-dir", "site")
    session.run(
        "python", "-m", "pytest", "-q", "--doctest-glob=*.md", "docs", "-p", "no:cacheprovider"
    )


@nox.session(python=PYTHON)
def bench(session: nox.Session) -> None:
    """Benchmarks against their anchors (benchmarks/RESULTS.md, the cloud model's rows
    included), the cloud sweep's plots (docs/img/cloud-*.png) and the scaling plots
    (docs/img/scaling-*.png); ``-- --quick`` for small sizes, ``-- --only cloud`` for the
    cloud model alone."""
    # hdf5storage writes the cloud model's MAT v7.3 file (as its users save them)
    session.install("-e", ".[bench]", "hdf5storage>=0.2")
    session.run("python", "benchmarks/run.py", *session.posargs)
    session.run("python", "benchmarks/scaling.py", *session.posargs)
