"""Scaling plots for the docs: time vs file size, and S3 requests vs .npz member count.

Run with ``python benchmarks/scaling.py`` (``nox -s bench`` runs it after ``run.py``);
``--quick`` uses small sizes. Writes ``docs/img/scaling-size.png``,
``docs/img/scaling-members.png`` and the numbers behind them, ``docs/img/scaling.json``.

- Time vs size: a local ``.npy`` of 64 MiB .. 4 GiB read whole, ``npystore.load`` vs
  ``numpy.load`` (page cache warm, median of 3), and the same file read whole over S3
  (rclone behind the 30 ms proxy) by ``npystore.load`` vs ``fs.cat_file``, up to 1 GiB.
- Requests vs member count: ``.npz`` archives of 10 .. 10,000 small members on S3; the GET
  requests of ``open_npz`` + listing, and of reading one member, counted.
"""

from __future__ import annotations

import argparse
import io
import json
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import npystore  # noqa: E402
from _common import LATENCY, _time, _warm, _write_npy  # noqa: E402

DOCS_IMG = HERE.parent / "docs" / "img"


def _median(fn: Any, repeat: int) -> float:
    fn()  # warm-up: pools, imports and first-touch memory are not what a size costs
    return statistics.median(_time(fn, repeat))


def time_vs_size(workdir: Path, sizes_mib: list[int], remote_max: int) -> dict[str, Any]:
    import fsspec

    from _s3 import s3_with_latency

    out: dict[str, Any] = {"size_mib": sizes_mib, "npystore": [], "numpy": [], "remote": []}
    (workdir / "s3" / "bench").mkdir(parents=True, exist_ok=True)
    with s3_with_latency(workdir / "s3", LATENCY) as (direct, slow):
        up = fsspec.filesystem("s3", **direct)
        fs = fsspec.filesystem("s3", **slow)
        for mib in sizes_mib:
            path = workdir / f"full-{mib}MiB.npy"
            _write_npy(path, mib * 2**20)
            _warm(path)
            out["npystore"].append(_median(lambda p=path: npystore.load(str(p)), 3))
            out["numpy"].append(_median(lambda p=path: np.load(p), 3))
            if mib <= remote_max:
                key = f"bench/scaling-{mib}.npy"
                up.put_file(str(path), key)
                url = f"s3://{key}"
                ours = _median(lambda u=url: npystore.load(u, storage_options=slow), 3)
                floor = _median(lambda k=key: fs.cat_file(k), 3)
                out["remote"].append({"size_mib": mib, "npystore": ours, "cat_file": floor})
                up.rm(key)
            print(f"[scaling] {mib} MiB done", flush=True)
    return out


def requests_vs_members(workdir: Path, counts: list[int]) -> dict[str, Any]:
    import fsspec

    from _s3 import s3_with_latency
    from npystore.testing.counting import RequestCounter

    out: dict[str, Any] = {"members": counts, "open": [], "member": [], "seconds": []}
    (workdir / "s3" / "bench").mkdir(parents=True, exist_ok=True)
    with s3_with_latency(workdir / "s3", LATENCY) as (direct, slow):
        up = fsspec.filesystem("s3", **direct)
        fs = fsspec.filesystem("s3", **slow)
        counter = RequestCounter.attach(fs)
        rng = np.random.default_rng(5)
        for n in counts:
            buf = io.BytesIO()
            np.savez_compressed(buf, **{f"a{i:05d}": rng.standard_normal(64) for i in range(n)})
            key = f"bench/members-{n}.npz"
            up.pipe_file(key, buf.getvalue())
            url = f"s3://{key}"
            with counter.measure() as m_open:
                z = npystore.open_npz(url, storage_options=slow)
                names = list(z)
            with counter.measure() as m_member:
                z.load(names[n // 2])
            out["open"].append(m_open.requests)
            out["member"].append(m_member.requests)
            out["seconds"].append(
                _median(lambda u=url: list(npystore.open_npz(u, storage_options=slow)), 3)
            )
            up.rm(key)
            print(f"[scaling] {n} members done", flush=True)
    return out


def plot(size: dict[str, Any], members: dict[str, Any], dest: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    dest.mkdir(parents=True, exist_ok=True)
    fig, ax = plt.subplots(figsize=(7, 4.2))
    mib = size["size_mib"]
    ax.loglog(mib, size["npystore"], "o-", label="npystore.load (local)")
    ax.loglog(mib, size["numpy"], "s--", label="numpy.load (local)")
    if size["remote"]:
        r_mib = [r["size_mib"] for r in size["remote"]]
        ax.loglog(r_mib, [r["npystore"] for r in size["remote"]], "^-", label="npystore.load (S3)")
        ax.loglog(r_mib, [r["cat_file"] for r in size["remote"]], "v--", label="fs.cat_file (S3)")
    ax.set_xlabel("file size (MiB)")
    ax.set_ylabel("seconds (median of 3)")
    ax.set_title("Full read of a .npy: time vs size (S3 with +30 ms per request)")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(dest / "scaling-size.png", dpi=110)
    plt.close(fig)

    fig, ax = plt.subplots(figsize=(7, 4.2))
    ax.semilogx(members["members"], members["open"], "o-", label="open_npz + list (GETs)")
    ax.semilogx(members["members"], members["member"], "s--", label="read one member (GETs)")
    ax.set_xlabel("members in the archive")
    ax.set_ylabel("S3 requests")
    ax.set_title(".npz on S3: requests vs member count")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(dest / "scaling-members.png", dpi=110)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small sizes")
    parser.add_argument("--workdir", type=Path, default=None, help="where data files go")
    parser.add_argument("--output", type=Path, default=DOCS_IMG)
    args, _ = parser.parse_known_args(argv)  # nox passes run.py's options on too
    sizes = [16, 64] if args.quick else [64, 256, 1024, 4096]
    counts = [10, 100] if args.quick else [10, 100, 1000, 10000]
    with tempfile.TemporaryDirectory(prefix="npystore-scaling-") as tmp:
        workdir = args.workdir or Path(tmp)
        workdir.mkdir(parents=True, exist_ok=True)
        size = time_vs_size(workdir, sizes, remote_max=64 if args.quick else 1024)
        members = requests_vs_members(workdir, counts)
    args.output.mkdir(parents=True, exist_ok=True)
    (args.output / "scaling.json").write_text(
        json.dumps({"size": size, "members": members}, indent=1) + "\n"
    )
    plot(size, members, args.output)
    print(json.dumps({"size": size, "members": members}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
