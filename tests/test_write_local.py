"""Local writes keep numpy.save's semantics: paths resolved by the kernel (``..`` after a
symlink, a missing directory), a symlinked destination followed, the mode, owner and extended
attributes of a rewritten file, names up to 255 bytes, the ``.npy``/``.npz`` extension rule,
file objects; no temporary file survives a SIGTERM, and a later save sweeps those a killed
process left. ``durable=True`` fsyncs, the default does not. Oracle: numpy.save itself."""

from __future__ import annotations

import io
import os
import signal
import stat
import subprocess
import sys
import threading
import time
import zipfile
from pathlib import Path
from typing import Any

import dask.array as da
import numpy as np
import pytest

import npystore
from npystore.fetch import tempfiles

A = np.arange(1000, dtype="<f8").reshape(10, 100)
WRITERS: dict[str, Any] = {
    "save": npystore.save,
    "savez": lambda p, a: npystore.savez(p, a=a),
    "savez_compressed": lambda p, a: npystore.savez_compressed(p, a=a),
}


def _npy(a: Any) -> bytes:
    f = io.BytesIO()
    np.save(f, a)
    return f.getvalue()


def _temps(directory: Path) -> list[str]:
    return sorted(n for n in os.listdir(directory) if n.startswith(".npystore-"))


@pytest.mark.parametrize("writer", list(WRITERS))
def test_a_rewrite_keeps_mode_owner_and_extended_attributes(tmp_path: Path, writer: str) -> None:
    path = tmp_path / ("f.npy" if writer == "save" else "f.npz")
    WRITERS[writer](str(path), A)
    os.chmod(path, 0o600)
    try:
        os.setxattr(path, "user.origin", b"lab-7")
        xattrs = True
    except OSError:  # a filesystem without user attributes
        xattrs = False
    owner = (os.stat(path).st_uid, os.stat(path).st_gid)
    if os.geteuid() == 0:  # only root may give a file away: then the owner must be kept
        owner = (12345, 23456)
        os.chown(path, *owner)
    WRITERS[writer](str(path), A + 1)
    st = os.stat(path)
    assert stat.S_IMODE(st.st_mode) == 0o600  # numpy's in-place write keeps it; was 0o644
    assert (st.st_uid, st.st_gid) == owner
    if xattrs:
        assert os.getxattr(path, "user.origin") == b"lab-7"
    assert _temps(tmp_path) == []


def test_a_new_file_gets_numpys_mode(tmp_path: Path) -> None:
    old = os.umask(0o027)
    try:
        np.save(tmp_path / "np.npy", A)
        npystore.save(str(tmp_path / "ns.npy"), A)
        npystore.savez(str(tmp_path / "ns.npz"), a=A)
    finally:
        os.umask(old)
    want = stat.S_IMODE(os.stat(tmp_path / "np.npy").st_mode)
    assert want == 0o640
    for name in ("ns.npy", "ns.npz"):
        assert stat.S_IMODE(os.stat(tmp_path / name).st_mode) == want


def test_dotdot_is_resolved_by_the_kernel_not_as_text(tmp_path: Path) -> None:
    (tmp_path / "x" / "real" / "sub").mkdir(parents=True)
    os.symlink("real/sub", tmp_path / "x" / "link")
    np.save(tmp_path / "x/link/../np.npy", A)  # lands in x/real, beside sub
    npystore.save(str(tmp_path / "x/link/../ns.npy"), A)
    npystore.savez(str(tmp_path / "x/link/../ns.npz"), a=A)
    assert sorted(os.listdir(tmp_path / "x" / "real")) == ["np.npy", "ns.npy", "ns.npz", "sub"]
    assert sorted(os.listdir(tmp_path / "x")) == ["link", "real"]
    assert (tmp_path / "x/real/ns.npy").read_bytes() == (tmp_path / "x/real/np.npy").read_bytes()
    # a missing directory before '..': numpy raises, and so does npystore, naming the path
    for write, name in ((np.save, "o.npy"), (npystore.save, "o.npy"), (npystore.savez, "o.npz")):
        with pytest.raises(FileNotFoundError) as info:
            write(str(tmp_path / "missing/.." / name), A)
        assert info.value.filename == str(tmp_path / "missing/.." / name)
    assert not (tmp_path / "o.npy").exists()
    assert not (tmp_path / "o.npz").exists()


def test_names_up_to_255_bytes(tmp_path: Path) -> None:
    name = "n" * 251 + ".npy"  # 255 bytes: the temporary name must not add to it
    (tmp_path / "np").mkdir()
    np.save(tmp_path / "np" / name, A)
    npystore.save(str(tmp_path / name), A)
    npystore.savez(str(tmp_path / ("z" * 251 + ".npz")), a=A)
    assert (tmp_path / name).read_bytes() == (tmp_path / "np" / name).read_bytes()
    assert len(tempfiles.temporary_name()) <= 41


def test_a_symlinked_destination_is_followed_as_numpy_follows_it(tmp_path: Path) -> None:
    for lib, write in (("np", np.save), ("ns", npystore.save)):
        d = tmp_path / lib
        d.mkdir()
        np.save(d / "target.npy", A)
        os.symlink("target.npy", d / "link.npy")
        os.symlink("made.npy", d / "dangling.npy")
        write(str(d / "link.npy"), A + 1)
        write(str(d / "dangling.npy"), A + 2)
        assert os.path.islink(d / "link.npy")
        assert os.readlink(d / "link.npy") == "target.npy"
        np.testing.assert_array_equal(np.load(d / "target.npy"), A + 1)
        np.testing.assert_array_equal(np.load(d / "made.npy"), A + 2)
        assert sorted(os.listdir(d)) == ["dangling.npy", "link.npy", "made.npy", "target.npy"]
    # a symlink loop fails as numpy's open fails
    os.symlink("loop.npy", tmp_path / "loop.npy")
    with pytest.raises(OSError, match="symbolic links"):
        np.save(tmp_path / "loop.npy", A)
    with pytest.raises(OSError, match="symbolic links"):
        npystore.save(str(tmp_path / "loop.npy"), A)


def test_a_hard_link_is_broken_by_the_atomic_rename(tmp_path: Path) -> None:
    """The documented difference (docs/reliability.md): numpy writes in place, so a hard
    link sees the new bytes; npystore replaces the name, the other link keeps the old file."""
    np.save(tmp_path / "a.npy", A)
    os.link(tmp_path / "a.npy", tmp_path / "b.npy")
    npystore.save(str(tmp_path / "a.npy"), A + 1)
    np.testing.assert_array_equal(np.load(tmp_path / "a.npy"), A + 1)
    np.testing.assert_array_equal(np.load(tmp_path / "b.npy"), A)


def test_directories_and_unwritable_files_fail_as_numpy_fails(tmp_path: Path) -> None:
    (tmp_path / "d.npy").mkdir()
    for write in (np.save, npystore.save):
        with pytest.raises(IsADirectoryError):
            write(str(tmp_path / "d.npy"), A)
    ro = tmp_path / "ro.npy"
    np.save(ro, A)
    os.chmod(ro, 0o444)
    outcomes = []
    for write in (np.save, npystore.save):
        try:
            write(str(ro), A + 1)
            outcomes.append("written")
        except PermissionError:
            outcomes.append("refused")
    assert outcomes[0] == outcomes[1]  # refused, unless root (who may write it)
    assert _temps(tmp_path) == []


def test_a_fifo_is_written_in_place(tmp_path: Path) -> None:
    fifo = tmp_path / "pipe.npy"
    os.mkfifo(fifo)
    got: list[bytes] = []
    reader = threading.Thread(target=lambda: got.append(fifo.read_bytes()))
    reader.start()
    npystore.save(str(fifo), da.from_array(A, chunks=(3, 100)))
    reader.join(10)
    assert got == [_npy(A)]
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode)


def test_file_objects_are_written_as_numpy_writes_them(tmp_path: Path) -> None:
    x = da.from_array(A, chunks=(3, 50))  # blocks computed and written in order
    for arr in (A, x, np.asfortranarray(A), np.float32(3.5), np.zeros((0, 2))):
        buf = io.BytesIO()
        buf.write(b"prefix")
        npystore.save(buf, arr)
        assert buf.getvalue() == b"prefix" + _npy(np.asarray(arr))
    with open(tmp_path / "h.npy", "wb") as f:
        npystore.save(f, x)
        f.write(b"after")  # left open, at the end of the array, as numpy leaves it
    assert (tmp_path / "h.npy").read_bytes() == _npy(A) + b"after"

    class WriteOnly:  # numpy.save needs nothing but write()
        def __init__(self) -> None:
            self.data = bytearray()

        def write(self, b: Any) -> None:  # no count returned: numpy ignores it too
            self.data += b

    w = WriteOnly()
    npystore.save(w, A)
    assert bytes(w.data) == _npy(A)
    for writer in (npystore.savez, npystore.savez_compressed):
        buf = io.BytesIO()
        buf.write(b"head")
        writer(buf, A, y=x)
        buf.seek(4)
        with zipfile.ZipFile(buf) as zf:
            assert zf.testzip() is None
            assert zf.read("arr_0.npy") == _npy(A)
            assert zf.read("y.npy") == _npy(A)
        buf.seek(4)
        with np.load(buf) as z:
            np.testing.assert_array_equal(z["y"], A)
    assert sorted(os.listdir(tmp_path)) == ["h.npy"]  # nothing named after an object


def test_local_paths_get_numpys_extension_urls_are_kept(tmp_path: Path) -> None:
    import fsspec

    np.save(tmp_path / "np_noext", A)
    npystore.save(str(tmp_path / "noext"), A)
    npystore.save(tmp_path / "path_noext", A)  # os.PathLike
    npystore.savez(str(tmp_path / "zip_noext"), a=A)
    npystore.savez_compressed(tmp_path / "zipc", a=A)
    npystore.save(str(tmp_path / "upper.NPY"), A)  # numpy's test is case-sensitive
    np.save(tmp_path / "np_upper.NPY", A)
    assert sorted(os.listdir(tmp_path)) == [
        "noext.npy",
        "np_noext.npy",
        "np_upper.NPY.npy",
        "path_noext.npy",
        "upper.NPY.npy",
        "zip_noext.npz",
        "zipc.npz",
    ]
    npystore.save("memory://ext/noext", A)
    npystore.savez("memory://ext/noextz", a=A)
    assert sorted(fsspec.filesystem("memory").ls("/ext", detail=False)) == [
        "/ext/noext",
        "/ext/noextz",
    ]


def test_durable_fsyncs_and_the_default_does_not(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    synced: list[int] = []
    real = os.fsync
    monkeypatch.setattr(os, "fsync", lambda fd: synced.append(fd) or real(fd))
    npystore.save(str(tmp_path / "a.npy"), A)
    npystore.savez_compressed(str(tmp_path / "a.npz"), a=A)
    assert synced == []
    npystore.save(str(tmp_path / "a.npy"), A, durable=True)
    assert len(synced) == 2  # the file, then its directory
    npystore.savez(str(tmp_path / "a.npz"), a=A, durable=True)
    assert len(synced) == 4
    assert (tmp_path / "a.npy").read_bytes() == _npy(A)


_KILLED_MID_WRITE = """
import sys, time
import dask.array as da
import npystore

def slow(b):
    time.sleep(0.02)
    return b

x = da.ones((400, 2**14), chunks=(4, 2**14)).map_blocks(slow, dtype=float)  # 50 MiB, 100 blocks
npystore.{call}
"""


@pytest.mark.parametrize(
    "call",
    [
        "save(sys.argv[1] + '/out.npy', x)",
        pytest.param("savez_compressed(sys.argv[1] + '/o.npz', x=x)", marks=pytest.mark.slow),
    ],
)
def test_sigterm_mid_write_leaves_no_temporary_file(tmp_path: Path, call: str) -> None:
    code = _KILLED_MID_WRITE.format(call=call)
    proc = subprocess.Popen([sys.executable, "-c", code, str(tmp_path)], stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 60
        while not _temps(tmp_path):  # wait until the write is under way
            assert proc.poll() is None, proc.stderr.read() if proc.stderr else ""
            assert time.monotonic() < deadline
            time.sleep(0.01)
        time.sleep(0.1)
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(30) == -signal.SIGTERM  # it still dies of the signal
    finally:
        if proc.poll() is None:
            proc.kill()
        if proc.stderr is not None:
            proc.stderr.close()
    assert os.listdir(tmp_path) == []


def test_a_later_save_sweeps_temporary_files_of_dead_processes(tmp_path: Path) -> None:
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True, check=True)  # fmt: skip
    pid = int(dead.stdout)
    host = tempfiles.temporary_name().split("-")[1]
    stale = tmp_path / f".npystore-{host}-{pid}-{'a' * 12}.tmp"
    recent = tmp_path / f".npystore-{host}-{pid}-{'b' * 12}.tmp"
    alive = tmp_path / f".npystore-{host}-{os.getppid()}-{'c' * 12}.tmp"
    other_host = tmp_path / f".npystore-ffffff-{pid}-{'d' * 12}.tmp"
    if host == "ffffff":
        other_host = tmp_path / f".npystore-eeeeee-{pid}-{'d' * 12}.tmp"
    for p in (stale, recent, alive, other_host):
        p.write_bytes(b"x" * 1000)
    old = time.time() - 2 * tempfiles.SWEEP_AGE
    for p in (stale, alive, other_host):
        os.utime(p, (old, old))
    npystore.save(str(tmp_path / "new.npy"), A)
    left = sorted(os.listdir(tmp_path))
    assert stale.name not in left  # dead, old, this host: removed
    assert {recent.name, alive.name, other_host.name, "new.npy"} == set(left)
