"""Small MAT-files of many elements (issue 14 item 7): npystore vs scipy / mat73.

Four files, each opened and read whole (``open_mat(p)[name]``: the cell or struct with
its small values, all read; ``load`` is checked to give the same) against the eager
readers people use:

- ``mat-small-cell``: a v5 1x100,000 cell of ``[]`` (16 KB compressed) vs ``scipy.io.loadmat``
- ``mat-small-struct``: a v5 1x20,000 struct array (3.5 KB) vs ``scipy.io.loadmat``
- ``mat-small-v73``: a v7.3 1x20,000 cell of 1x1 doubles (references into ``#refs#``) vs
  ``mat73.loadmat``
- ``mat-many-vars``: a v5 file of 200,000 scalar variables: open + ``load`` of every one vs
  ``scipy.io.loadmat`` (and, in the note, the listing alone vs ``scipy.io.whosmat``)

- ``mat-v73-shared``: a v7.3 1x100,000 cell of references to one empty dataset (807 KB)
  vs ``scipy.io.loadmat`` of the v5 equivalent (``mat-small-cell``'s file; mat73 takes
  minutes on it)

Each gives a time row (in this process, interleaved with the anchor) and a peak-RSS row
(a fresh interpreter per run: ``python benchmarks/mat_small.py probe SIDE PATH NAME``).

Small real files (issue 26 item 2), from the corpus of MATLAB-written files
(``../shared/testdata/mat``, or ``NPYSTORE_MAT_CORPUS``; the rows are left out without
it), plus a generated ``cell_struct_v7.mat`` (pymatreader's layout: a cell of 5 structs and
a 1x5 struct array, each holding a 100x100 double):

- ``mat-corpus-v5``, ``mat-corpus-v73``: every v5 (v7.3) file of the corpus, open and
  ``load`` of every variable, summed, vs ``scipy.io.loadmat`` (``mat73.loadmat``); target
  ratio <= 1 (steady state, CPU time of this process: reads of a warm local file)
- ``mat-first-v5``, ``mat-first-v73``: a fresh interpreter that imports npystore and
  loads a small file whole vs one that imports scipy.io (mat73) and loads it
The size run.py passes (its SCENARIOS column, in "MiB") is here the percentage of the
element counts above: 100 for the full run, 25 with --quick.
Targets: ratio <= 2 (time and memory).
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
import warnings
from pathlib import Path
from typing import Any

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from _common import Row, Timing, _interleaved, _time  # noqa: E402

TARGET = 2.0


def make_cell(workdir: Path, count: int) -> Path:
    import scipy.io as sio

    path = workdir / f"cell_{count}.mat"
    if not path.exists():
        cell = np.empty((1, count), dtype=object)
        for i in range(count):
            cell[0, i] = np.zeros((0, 0))
        sio.savemat(path, {"c": cell}, do_compression=True)
    return path


def make_struct(workdir: Path, count: int) -> Path:
    import scipy.io as sio

    path = workdir / f"struct_{count}.mat"
    if not path.exists():
        s = np.zeros((1, count), dtype=[("a", object)])
        for i in range(count):
            s[0, i]["a"] = np.zeros((0, 0))
        sio.savemat(path, {"s": s}, do_compression=True)
    return path


def make_v73_cell(workdir: Path, count: int) -> Path:
    import h5py

    path = workdir / f"cell73_{count}.mat"
    if not path.exists():
        with h5py.File(path, "w", userblock_size=512, libver="earliest") as f:
            refs = f.create_group("#refs#")
            out = np.empty((count, 1), dtype=h5py.ref_dtype)
            for i in range(count):
                d = refs.create_dataset(f"e{i}", data=np.array([[float(i)]]))
                d.attrs["MATLAB_class"] = np.bytes_("double")
                out[i, 0] = d.ref
            c = f.create_dataset("c", data=out)
            c.attrs["MATLAB_class"] = np.bytes_("cell")
        header = b"MATLAB 7.3 MAT-file, Platform: GLNXA64, Created on: never HDF5 schema 1.00 ."
        with path.open("r+b") as fh:
            fh.write(header.ljust(116) + b" " * 8 + b"\x00\x02IM")
    return path


def make_many(workdir: Path, count: int) -> Path:
    import scipy.io as sio

    path = workdir / f"many_{count}.mat"
    if not path.exists():
        sio.savemat(path, {f"v{i}": np.float64(i) for i in range(count)})
    return path


# -- the two sides ------------------------------------------------------------------------


def ours(path: Path, name: str) -> Any:
    import npystore

    if name == "*":
        m = npystore.open_mat(str(path))
        return {k: m.load(k) for k in m}
    return npystore.open_mat(str(path))[name]


def anchor(path: Path, name: str, version: str) -> Any:
    if version == "7.3":
        import logging

        import mat73

        logging.disable(logging.ERROR)  # mat73 logs each MATLAB object it cannot read
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                return mat73.loadmat(str(path))
        finally:
            logging.disable(logging.NOTSET)
    import scipy.io as sio

    return sio.loadmat(str(path))


def _check(path: Path, name: str, version: str) -> None:
    """The two sides read the same values (spot checks)."""
    got = ours(path, name)
    theirs = anchor(path, name, version)
    if name == "*":
        for k in list(got)[:: max(1, len(got) // 50)]:
            np.testing.assert_array_equal(got[k], theirs[k])
        return
    import npystore

    value, loaded = got, npystore.open_mat(str(path)).load(name)
    flat = value.reshape(-1, order="F")
    want = theirs[name]
    for i in range(0, len(flat), max(1, len(flat) // 50)):
        item, other = flat[i], loaded.reshape(-1, order="F")[i]
        if version == "7.3":
            ref = np.asarray(want[i])
        elif want.dtype.names:
            ref = want.reshape(-1, order="F")[i]["a"]
            item, other = item["a"], other["a"]
        else:
            ref = want.reshape(-1, order="F")[i]
        np.testing.assert_array_equal(np.asarray(item).reshape(ref.shape), ref)
        np.testing.assert_array_equal(np.asarray(other).reshape(ref.shape), ref)


# -- peak RSS in a fresh interpreter --------------------------------------------------------


def _peak_kib() -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
    raise SystemExit("no /proc/self/status VmHWM")


def probe(side: str, path: str, name: str, version: str) -> None:
    """Print the peak-RSS growth (MiB) and seconds of one side's read (imports first)."""
    import dask.array  # noqa: F401
    import h5py  # noqa: F401
    import mat73  # noqa: F401
    import scipy.io  # noqa: F401

    import npystore  # noqa: F401

    base = _peak_kib()
    t0 = time.perf_counter()
    result = ours(Path(path), name) if side == "ours" else anchor(Path(path), name, version)
    seconds = time.perf_counter() - t0
    del result
    print(json.dumps({"peak_mib": (_peak_kib() - base) / 1024, "seconds": seconds}))


def _probe(side: str, path: Path, name: str, version: str) -> dict[str, Any]:
    proc = subprocess.run(
        [sys.executable, str(HERE / "mat_small.py"), "probe", side, str(path), name, version],
        capture_output=True,
        text=True,
        check=False,
    )
    if proc.returncode != 0:
        raise SystemExit(f"mat_small.py probe {side} failed:\n{proc.stderr}")
    out: dict[str, Any] = json.loads(proc.stdout.strip().splitlines()[-1])
    return out


def _rows(what: str, path: Path, name: str, version: str, repeat: int, note: str) -> list[Row]:
    _check(path, name, version)
    a, b = _interleaved(lambda: ours(path, name), lambda: anchor(path, name, version), repeat)
    label = "mat73.loadmat" if version == "7.3" else "scipy.io.loadmat"
    mem_ours: list[float] = []
    mem_anchor: list[float] = []
    for _ in range(min(repeat, 3)):
        mem_anchor.append(_probe("anchor", path, name, version)["peak_mib"])
        mem_ours.append(_probe("ours", path, name, version)["peak_mib"])
    size = path.stat().st_size
    read = "open + load of every variable" if name == "*" else "open_mat(p)[name]"
    return [
        Row(
            scenario=f"{what} ({size / 1e3:.0f} kB): {read} vs {label}",
            ours=Timing("npystore", a),
            anchor=Timing(label, b),
            target=TARGET,
            note=note,
        ),
        Row(
            scenario=f"peak RSS growth of the same, {what}",
            ours=Timing("peak RSS MB", mem_ours, unit="MB"),
            anchor=Timing("peak RSS MB", mem_anchor, unit="MB"),
            target=TARGET,
            note="fresh process per run, growth of VmHWM over the RSS after the imports",
        ),
    ]


def bench_cell(workdir: Path, size: int, repeat: int) -> list[Row]:
    scale = size >> 20  # run.py passes its size column in MiB: here a percentage
    count = 100_000 * scale // 100
    path = make_cell(workdir, count)
    return _rows(f"MAT v5, 1x{count} cell of []", path, "c", "5", repeat,
                 "issue 14 item 7: was 52 s and 672 MiB (a dask array per element)")  # fmt: skip


def bench_struct(workdir: Path, size: int, repeat: int) -> list[Row]:
    scale = size >> 20  # run.py passes its size column in MiB: here a percentage
    count = 20_000 * scale // 100
    path = make_struct(workdir, count)
    return _rows(f"MAT v5, 1x{count} struct array", path, "s", "5", repeat,
                 "issue 14 item 7: was 8.6 s")  # fmt: skip


def bench_v73(workdir: Path, size: int, repeat: int) -> list[Row]:
    scale = size >> 20  # run.py passes its size column in MiB: here a percentage
    count = 20_000 * scale // 100
    path = make_v73_cell(workdir, count)
    note = "issue 14 item 7: was 11.3 s; both sides ask libhdf5 for every element"
    return _rows(f"MAT v7.3, 1x{count} cell of references", path, "c", "7.3", repeat, note)


def bench_many(workdir: Path, size: int, repeat: int) -> list[Row]:
    scale = size >> 20  # run.py passes its size column in MiB: here a percentage
    import scipy.io as sio

    import npystore

    count = 200_000 * scale // 100
    path = make_many(workdir, count)
    listing = _time(lambda: npystore.open_mat(str(path)).variables, repeat)
    whos = _time(lambda: sio.whosmat(str(path)), repeat)
    note = (
        f"issue 14 item 7: open was 11.2 s. Listing alone (open_mat(p).variables): "
        f"{Timing('', listing).cell()} s vs scipy.io.whosmat {Timing('', whos).cell()} s"
    )
    return _rows(f"MAT v5, {count} variables", path, "*", "5", repeat, note)


def make_v73_shared(workdir: Path, count: int) -> Path:
    """A v7.3 1xcount cell whose every element refers to one empty double in #refs#."""
    import h5py

    path = workdir / f"shared73_{count}.mat"
    if not path.exists():
        with h5py.File(path, "w", userblock_size=512, libver="earliest") as f:
            empty = f.create_group("#refs#").create_dataset("a", data=np.zeros(2, np.uint64))
            empty.attrs["MATLAB_class"] = np.bytes_("double")
            empty.attrs["MATLAB_empty"] = np.uint8(1)
            c = f.create_dataset("c", data=np.full((count, 1), empty.ref, dtype=h5py.ref_dtype))
            c.attrs["MATLAB_class"] = np.bytes_("cell")
        header = b"MATLAB 7.3 MAT-file, Platform: GLNXA64, Created on: never HDF5 schema 1.00 ."
        with path.open("r+b") as fh:
            fh.write(header.ljust(116) + b" " * 8 + b"\x00\x02IM")
    return path


def bench_v73_shared(workdir: Path, size: int, repeat: int) -> list[Row]:
    scale = size >> 20  # run.py passes its size column in MiB: here a percentage
    count = 100_000 * scale // 100
    ours_path, v5_path = make_v73_shared(workdir, count), make_cell(workdir, count)
    got = ours(ours_path, "c")
    if got.shape != (1, count) or any(v.shape != (0, 0) for v in got.flat):
        raise SystemExit("mat-v73-shared: npystore read something else than empty cells")
    a, b = _interleaved(lambda: ours(ours_path, "c"), lambda: anchor(v5_path, "c", "5"), repeat)
    return [
        Row(
            scenario=f"MAT v7.3, 1x{count} cell of references to one empty dataset "
            f"({ours_path.stat().st_size / 1e3:.0f} kB): open_mat(p)['c'] vs "
            "scipy.io.loadmat of the v5 equivalent",
            ours=Timing("npystore", a),
            anchor=Timing("scipy.io.loadmat (v5)", b),
            target=TARGET,
            note="issue 24 item 9: was not read in minutes (each element followed again); "
            "mat73.loadmat takes minutes",
        )
    ]


# -- small real files: the corpus ------------------------------------------------------------


def corpus_dir() -> Path | None:
    """The corpus of MATLAB-written files, or None."""
    import os

    env = os.environ.get("NPYSTORE_MAT_CORPUS")
    candidates = [Path(env)] if env else []
    candidates += [HERE.parents[1] / "shared" / "testdata" / "mat",
                   Path("/work/shared/testdata/mat")]  # fmt: skip
    return next((c for c in candidates if (c / "MANIFEST.tsv").is_file()), None)


def make_cell_struct_v7(workdir: Path) -> Path:
    """pymatreader's ``cell_struct_v7.mat`` layout: a 1x5 cell of structs and a 1x5 struct
    array, each element holding a float, an int, a 100x100 double and a string."""
    import scipy.io as sio

    path = workdir / "cell_struct_v7.mat"
    if not path.exists():
        rng = np.random.default_rng(0)
        fields = [("float", object), ("int", object), ("matrix", object), ("string", object)]
        cell = np.empty((1, 5), dtype=object)
        array = np.zeros((1, 5), dtype=fields)
        for i in range(5):
            cell[0, i] = {"float": i + 0.5, "int": i, "matrix": rng.random((100, 100)),
                          "string": f"text {i}"}  # fmt: skip
            for name, value in cell[0, i].items():
                array[0, i][name] = value
        sio.savemat(path, {"a_cell_array": cell, "a_struct_array": array}, do_compression=True)
    return path


def corpus_files(workdir: Path, version: str) -> list[Path]:
    """Every corpus file of one MAT version (v4 files and ``.set`` files left out)."""
    import csv

    root = corpus_dir()
    files: list[Path] = [make_cell_struct_v7(workdir)] if version == "5" else []
    if root is None:
        return files
    with (root / "MANIFEST.tsv").open() as f:
        rows = list(csv.DictReader(f, delimiter="\t"))
    files += [root / r["local_path"] for r in rows
              if r["mat_version"] == version and r["local_path"].endswith(".mat")]  # fmt: skip
    return files


def load_all(path: Path) -> dict[str, Any]:
    import npystore

    with npystore.open_mat(str(path)) as m:
        return {k: m.load(k) for k in m}


def _cpu(fn: Any, repeat: int) -> list[float]:
    """CPU seconds of this process (every thread) per call: a busy machine's waits left out."""
    out = []
    for _ in range(repeat):
        t0 = time.process_time()
        fn()
        out.append(time.process_time() - t0)
    return out


def bench_corpus(workdir: Path, size: int, repeat: int, version: str) -> list[Row]:
    del size
    files = corpus_files(workdir, version)
    if not files:
        return []
    label = "mat73.loadmat" if version == "7.3" else "scipy.io.loadmat"
    for path in files:
        load_all(path)
        anchor(path, "*", version)  # both warm (imports, page cache)
    ours_t: list[float] = []
    theirs_t: list[float] = []
    for _ in range(repeat):  # per file, best of 3 calls (ms-scale: noise), summed
        theirs_t.append(sum(min(_cpu(lambda p=p: anchor(p, "*", version), 3)) for p in files))
        ours_t.append(sum(min(_cpu(lambda p=p: load_all(p), 3)) for p in files))
    total = sum(p.stat().st_size for p in files) / 1e3
    return [
        Row(
            scenario=f"{len(files)} small MAT v{version} files ({total:.0f} kB in all): open + "
            f"load of every variable, summed, vs {label}",
            ours=Timing("npystore", ours_t),
            anchor=Timing(label, theirs_t),
            target=1.0,
            note="issue 26 item 2: CPU time in this process (best of 3 per file); the corpus "
            "of MATLAB-written files and, for v5, pymatreader's cell_struct_v7 layout",
        )
    ]


def _fresh(code: str) -> float:
    t0 = time.perf_counter()
    subprocess.run([sys.executable, "-c", code], check=True, capture_output=True)
    return time.perf_counter() - t0


def bench_first(workdir: Path, size: int, repeat: int, version: str) -> list[Row]:
    del size
    files = corpus_files(workdir, version)
    small = [p for p in files if "struct" in p.name and p.stat().st_size < 20_000]
    if not small:
        return []
    path = small[0]
    if version == "7.3":
        theirs_code = f"import mat73; mat73.loadmat({str(path)!r})"
        label = "mat73.loadmat"
    else:
        theirs_code = f"import scipy.io; scipy.io.loadmat({str(path)!r})"
        label = "scipy.io.loadmat"
    ours_code = (
        f"import npystore; m = npystore.open_mat({str(path)!r}); {{k: m.load(k) for k in m}}"
    )
    a: list[float] = []
    b: list[float] = []
    for _ in range(repeat):
        b.append(_fresh(theirs_code))
        a.append(_fresh(ours_code))
    return [
        Row(
            scenario=f"first call, fresh interpreter: import + load {path.name} "
            f"({path.stat().st_size / 1e3:.1f} kB) vs {label}",
            ours=Timing("npystore", a),
            anchor=Timing(label, b),
            target=1.0,
            note="issue 26 item 2: the first open_mat added 0.2-0.3 s",
        )
    ]


#: name -> (benchmark, percent of the counts in the full run, with --quick): run.py's
#: SCENARIOS
SCENARIOS = {
    "mat-small-cell": (bench_cell, 100, 25),
    "mat-small-struct": (bench_struct, 100, 25),
    "mat-small-v73": (bench_v73, 100, 25),
    "mat-many-vars": (bench_many, 100, 25),
    "mat-v73-shared": (bench_v73_shared, 100, 25),
    "mat-corpus-v5": (lambda w, s, r: bench_corpus(w, s, r, "5"), 100, 100),
    "mat-corpus-v73": (lambda w, s, r: bench_corpus(w, s, r, "7.3"), 100, 100),
    "mat-first-v5": (lambda w, s, r: bench_first(w, s, r, "5"), 100, 100),
    "mat-first-v73": (lambda w, s, r: bench_first(w, s, r, "7.3"), 100, 100),
}


if __name__ == "__main__":
    if len(sys.argv) == 6 and sys.argv[1] == "probe":
        probe(*sys.argv[2:6])
    else:
        raise SystemExit("usage: mat_small.py probe ours|anchor PATH NAME VERSION")
