"""Every fenced Python block of the docs runs as written (issue 26).

``>>>`` examples are doctests already (``--doctest-glob=*.md``). The other fenced
``python`` blocks are snippets against ``s3://bucket/...``: here each page that has one runs
top to bottom (its ``>>>`` examples as plain code, for the names they define) against a local
S3 server (moto) that holds the objects the snippets name, found through ``AWS_ENDPOINT_URL``
as a real endpoint would be. A block that needs something this test cannot provide (a
server at another host) says so on the line before its fence:
``<!-- docs-test: skip (reason) -->``; there are few, and each names its reason.
"""

from __future__ import annotations

import doctest
import io
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import npystore

DOCS = Path(__file__).resolve().parent.parent / "docs"
_FENCE = re.compile(r"^```(\w*)[^\n]*\n(.*?)^```", re.S | re.M)
_SKIP = re.compile(r"<!-- docs-test: skip \((?P<reason>[^)]+)\) -->\s*\Z")


def _blocks(page: Path) -> list[tuple[int, str, str | None]]:
    """The page's python blocks: (line, code, reason to skip or None)."""
    text = page.read_text()
    out = []
    for m in _FENCE.finditer(text):
        if m.group(1) != "python":
            continue
        before = text[: m.start()]
        skip = _SKIP.search(before)
        body = m.group(2)
        if ">>>" in body:
            body = "".join(map(_as_code, doctest.DocTestParser().get_examples(body)))
        out.append((before.count("\n") + 1, body, skip.group("reason") if skip else None))
    return out


#: Pages whose snippets take more than a few seconds (they write and read an 8 MB archive).
_SLOW_PAGES = {"howto-references.md"}


def _as_code(example: doctest.Example) -> str:
    """A doctest example as plain code; one that shows an exception raises it quietly."""
    if example.exc_msg is None:
        return example.source
    body = "".join(f"    {line}\n" for line in example.source.splitlines())
    return f"try:\n{body}except Exception:\n    pass\n"


def _snippet_pages() -> list[Any]:
    """Pages with a python block that is not a doctest."""
    pages = []
    for page in sorted(DOCS.glob("*.md")):
        text = page.read_text()
        if any(m.group(1) == "python" and ">>>" not in m.group(2) for m in _FENCE.finditer(text)):
            marks = [pytest.mark.slow] if page.name in _SLOW_PAGES else []
            pages.append(pytest.param(page, marks=marks, id=page.name))
    return pages


def _npy(a: np.ndarray) -> bytes:
    buf = io.BytesIO()
    np.save(buf, a)
    return buf.getvalue()


@pytest.fixture(scope="module")
def objects(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """What the snippets read from ``s3://bucket``, as local files (made once)."""
    import scipy.io

    rng = np.random.default_rng(0)
    root = tmp_path_factory.mktemp("bucket")
    (root / "run").mkdir()
    (root / "embeddings").mkdir()
    out = {key: root / key for key in ("big.npy", "small.npy", "run/field.npy")}
    for i in range(3):  # shards of a dataset (howto-many)
        key = f"embeddings/img_emb_{i}.npy"
        out[key] = root / key
        out[key].write_bytes(_npy(rng.normal(size=(40, 768)).astype("<f4")))
    out["big.npy"].write_bytes(_npy(rng.normal(size=(20_000, 8))))
    out["small.npy"].write_bytes(_npy(np.arange(10.0)))
    out["run/field.npy"].write_bytes(_npy(rng.normal(size=(100, 4))))
    out["run.npz"] = root / "run.npz"  # with npystore's block index
    npystore.savez_compressed(
        str(out["run.npz"]),
        field=rng.normal(size=(50_000, 8)),
        small=np.arange(5),
        x=np.arange(100),
        temps=np.linspace(0, 1, 50),
    )
    out["session.mat"] = root / "session.mat"
    scipy.io.savemat(
        out["session.mat"], {"lfp": rng.normal(size=(4000, 32)), "meta": {"subject": "m1"}}
    )
    return out


@pytest.fixture
def bucket(s3_server: Any, objects: dict[str, Path]) -> Iterator[Any]:
    """``s3://bucket`` holding :func:`objects`, public (the snippets' ``anon=True``; moto
    refuses unsigned requests otherwise), afresh for every page (a page may write to it)."""
    sandbox = s3_server.sandbox("bucket")
    sandbox.fs.call_s3("put_bucket_acl", Bucket="bucket", ACL="public-read")
    for key, path in objects.items():
        sandbox.put_file(path, key)
        sandbox.fs.chmod(f"bucket/{key}", "public-read")
    try:
        yield sandbox
    finally:
        sandbox.close()


@pytest.mark.s3
@pytest.mark.parametrize("page", _snippet_pages())
def test_every_python_block_of_the_page_runs(
    page: Path, bucket: Any, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    import s3fs

    server = bucket.server
    monkeypatch.setenv("AWS_ENDPOINT_URL", server.endpoint_url)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", server.KEY)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", server.SECRET)
    monkeypatch.setenv("AWS_DEFAULT_REGION", server.REGION)
    monkeypatch.setenv("NPYSTORE_INDEX_CACHE", str(tmp_path / "index-cache"))
    monkeypatch.chdir(tmp_path)
    s3fs.S3FileSystem.clear_instance_cache()  # instances made before the endpoint was set
    namespace: dict[str, Any] = {"__name__": f"docs_{page.stem.replace('-', '_')}"}
    ran = 0
    try:
        for line, code, skip in _blocks(page):
            if skip is not None:
                continue
            try:
                exec(compile(code, f"{page.name}:{line}", "exec"), namespace)
            except Exception as exc:
                raise AssertionError(f"{page.name}, the block at line {line}: {exc!r}") from exc
            ran += 1
    finally:
        s3fs.S3FileSystem.clear_instance_cache()
    assert ran > 0


def test_skipped_blocks_are_few_and_say_why() -> None:
    skipped = [
        (page.name, line, reason)
        for page in sorted(DOCS.glob("*.md"))
        for line, _, reason in _blocks(page)
        if reason is not None
    ]
    assert len(skipped) <= 3, skipped
    assert all(len(reason) > 10 for _, _, reason in skipped)
