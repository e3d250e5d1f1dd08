"""The cloud model on the other object stores: GCS and Azure rows, and a distributed read.

The model is ``cloud.py``'s (30 ms to first byte, 40 MiB/s per connection, paced by
``_proxy.py`` in its own process); the servers are the emulators the tests use, started by
``npystore.testing`` on loopback:

- ``cloud-gcs-npy``: fake-gcs-server behind the proxy. A 128 MiB ``.npy`` read whole:
  ``npystore.load("gs://...")`` vs gcsfs ``open`` + ``numpy.load`` (gcsfs's file defaults).
- ``cloud-azure-npy``: Azurite behind the proxy; ``npystore.load("az://...")`` vs adlfs
  ``open`` + ``numpy.load`` (adlfs's file defaults).
- ``cloud-distributed``: SeaweedFS behind the proxy. A ``dask.distributed.LocalCluster`` of
  2 worker processes (2 threads each) computes the row sums of a multi-GiB ``.npy`` read
  with ``npystore.open_npy`` (row slabs of 64 MiB), each worker through its own filesystem
  and connections; the sums equal those of the local file. The anchor is the same graph on
  dask's threaded scheduler in this one process. A second row holds each worker's peak
  RSS growth (``VmHWM``) against a bound of 3 chunks + 256 MiB.

fake-gcs-server holds its objects in memory, Azurite in a folder of the work directory,
SeaweedFS in a temporary folder; they are uploaded at full speed, not through the proxy.
Run through ``benchmarks/run.py`` (``--only stores`` runs all three, ``--only cloud`` them
and ``cloud.py``'s, which share their section; ``--quick`` uses small sizes); the rows go
to the cloud section of ``benchmarks/RESULTS.md``.
"""

from __future__ import annotations

import contextlib
import os
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

os.environ.setdefault("GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT", "false")  # before gcsfs loads

import numpy as np

import npystore
from _common import Row, Timing, _write_npy, rounds
from cloud import BANDWIDTH, BUCKET, DELAY, RANGES, SECTION, Cloud, _load_avg, npy_full_read

HERE = Path(__file__).resolve().parent
AZURITE = HERE.parent / "tests" / "servers" / "node_modules" / ".bin" / "azurite-blob"
#: Row slabs of the distributed read (at most; 32 chunks at least in a small run).
SLAB = 64 * 2**20


@contextlib.contextmanager
def gcs_cloud(workdir: Path, files: dict[str, Path]) -> Iterator[Cloud]:
    """fake-gcs-server behind the proxy, ``files`` (key -> local path) uploaded directly."""
    import fsspec

    from _proxy import shaping_proxy
    from npystore.testing.gcs import LocalGCS

    with LocalGCS() as server, shaping_proxy(server.url, DELAY, BANDWIDTH) as proxy:
        bucket = server.create_bucket(BUCKET)
        for key, path in files.items():
            server.put(bucket, key, path.read_bytes())
        opts = server.storage_options(endpoint_url=proxy.url)
        yield Cloud(fsspec.filesystem("gs", **opts), opts, proxy)


@contextlib.contextmanager
def azure_cloud(workdir: Path, files: dict[str, Path]) -> Iterator[Cloud]:
    """Azurite (its blobs in a folder of ``workdir``: it serves them faster than from
    memory) behind the proxy, ``files`` (key -> local path) uploaded directly."""
    import fsspec

    from _proxy import shaping_proxy
    from npystore.testing.azurite import LocalAzurite

    location = workdir / "azurite"
    shutil.rmtree(location, ignore_errors=True)  # a fresh store: a run's container is new
    with LocalAzurite(location, AZURITE) as server:
        endpoint = server.url.removesuffix("/" + server.ACCOUNT)
        with shaping_proxy(endpoint, DELAY, BANDWIDTH) as proxy:
            container = server.create_bucket(BUCKET)
            for key, path in files.items():
                client = server.service().get_blob_client(container, key)
                with path.open("rb") as f:
                    client.upload_blob(f, overwrite=True, max_concurrency=4)
            opts = server.storage_options(endpoint=proxy.url)
            yield Cloud(fsspec.filesystem("az", **opts), opts, proxy)


def _npy_rows(protocol: str, workdir: Path, size: int, repeat: int) -> list[Row]:
    path = workdir / f"cloud-{size >> 20}MiB.npy"
    _write_npy(path, size)
    load = _load_avg()
    store, lib = ("gcs", "gcsfs") if protocol == "gs" else ("azure", "adlfs")
    model = gcs_cloud if protocol == "gs" else azure_cloud
    with model(workdir, {path.name: path}) as c:
        t, requests, moved = npy_full_read(c, path, repeat, f"cloud-{store}-npy", protocol)
    mib = size / 2**20
    timing = Timing("npystore.load", t["npystore"])
    return [
        Row(
            scenario=f"cloud {store.upper() if store == 'gcs' else 'Azure'} .npy full read, "
            f"{mib:.0f} MiB: npystore.load vs {lib} open + numpy.load",
            ours=timing,
            anchor=Timing("numpy.load(fs.open())", t["anchor"]),
            target=0.2,
            note=f"{'fake-gcs-server' if store == 'gcs' else 'Azurite'} behind the proxy; "
            f"{lib} file defaults; npystore: {requests} requests, {moved / 2**20:.0f} MiB moved; "
            f"{lib} cat_ranges of {RANGES} ranges (the link's ceiling as {lib} reaches it): "
            f"{min(t['ceiling']):.3f} s best; load average {load} -> {_load_avg()}",
            section=SECTION,
        )
    ]


def bench_cloud_gcs_npy(workdir: Path, size: int, repeat: int) -> list[Row]:
    return _npy_rows("gs", workdir, size, repeat)


def bench_cloud_azure_npy(workdir: Path, size: int, repeat: int) -> list[Row]:
    return _npy_rows("az", workdir, size, repeat)


# -- the distributed read --------------------------------------------------------------------


def bench_cloud_distributed(workdir: Path, size: int, repeat: int) -> list[Row]:
    import distributed

    from _s3 import seaweed_cloud

    def hwm_mib() -> float:  # (closures: pickled by value to the workers)
        """This process's peak resident set (``VmHWM``) in MiB."""
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024
        return float("nan")

    def reset_hwm() -> float:
        """Reset ``VmHWM`` to the current RSS (Linux: 5 to clear_refs); that RSS in MiB."""
        with contextlib.suppress(OSError), open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        return hwm_mib()

    path = workdir / f"distributed-{size >> 20}MiB.npy"
    _write_npy(path, size)
    local = np.load(path, mmap_mode="r")
    slab = max(2**20, min(SLAB, size // 32))
    rows_per_slab = max(1, slab // (local.shape[1] * 8))
    want = np.concatenate(
        [local[i : i + rows_per_slab].sum(axis=1) for i in range(0, len(local), rows_per_slab)]
    )
    del local
    load = _load_avg()
    with (
        seaweed_cloud(DELAY, BANDWIDTH) as (direct, opts, proxy),
        distributed.LocalCluster(
            n_workers=2, threads_per_worker=2, processes=True, dashboard_address=":0"
        ) as cluster,
        distributed.Client(cluster) as client,
    ):
        import fsspec

        opened = proxy.stats()["connections"]
        up = fsspec.filesystem("s3", **direct)
        up.mkdir(BUCKET)
        up.put_file(str(path), f"{BUCKET}/{path.name}")
        url = f"s3://{BUCKET}/{path.name}"
        x = npystore.open_npy(url, chunks=(rows_per_slab, -1), storage_options=opts)
        sums = x.sum(axis=1)

        def on_cluster() -> Any:
            return client.compute(sums, sync=True)

        def in_process() -> Any:
            return sums.compute(scheduler="threads")

        for name, fn in (("cluster", on_cluster), ("threads", in_process)):
            if not np.array_equal(fn(), want):
                raise SystemExit(f"cloud-distributed: {name} computed other row sums")
        base = client.run(reset_hwm)
        t = rounds({"cluster": on_cluster, "threads": in_process}, repeat)
        peaks = client.run(hwm_mib)
        connections = proxy.stats()["connections"] - opened
        pids = client.run(os.getpid)
    grew = [peaks[w] - base[w] for w in peaks]
    chunk_mib = rows_per_slab * 1024 * 8 / 2**20
    bound = 3 * chunk_mib + 256
    gib = size / 2**30
    what = (
        f"cloud distributed read, {gib:.1f} GiB .npy on SeaweedFS, LocalCluster of 2 worker "
        f"processes (2 threads each)"
    )
    return [
        Row(
            scenario=f"{what}: row sums on the cluster vs the same graph on threads in one process",
            ours=Timing("client.compute", t["cluster"]),
            anchor=Timing("compute(scheduler='threads')", t["threads"]),
            target=None,
            note=f"{x.npartitions} chunks of {chunk_mib:.0f} MiB; sums equal the local file's "
            f"(checked); {len(set(pids.values()))} worker processes, each reading through its "
            f"own filesystem; {connections} connections through the proxy in all (workers and "
            f"this process); load average {load} -> {_load_avg()}",
            section=SECTION,
        ),
        Row(
            scenario=f"{what}: peak RSS growth per worker while timed",
            ours=Timing("worker peak RSS growth MB", grew, unit="MB"),
            anchor=Timing("object size MB", [size / 2**20], unit="MB"),
            target=None,
            absolute_target=bound,
            note=f"VmHWM of each worker after the timed runs minus its RSS before; bound: 3 "
            f"chunks + 256 MiB = {bound:.0f} MiB",
            section=SECTION,
        ),
    ]


#: name -> (benchmark, size in MiB of the full run, size in MiB with --quick)
SCENARIOS: dict[str, tuple[Callable[[Path, int, int], Row | list[Row]], int, int]] = {
    "cloud-gcs-npy": (bench_cloud_gcs_npy, 128, 16),
    "cloud-azure-npy": (bench_cloud_azure_npy, 128, 16),
    "cloud-distributed": (bench_cloud_distributed, 4096, 128),
}
