"""An embedded S3 server and an HTTP request counter for s3fs.

This module backs the test-suite and the demo. It is deliberately cheap to
import: moto, boto3 and s3fs are imported only when a server is started or a
filesystem is built.

* :class:`LocalS3` runs moto's S3 implementation in a background thread on a
  loopback port, with fixed fake credentials.
* :class:`RequestCounter` hooks the botocore events of an
  ``s3fs.S3FileSystem`` client and counts every HTTP attempt it sends, so that
  tests can assert how many requests (and which byte ranges) a read costs.
* :class:`S3Sandbox` bundles one bucket, a filesystem and a counter; it is what
  the ``s3`` pytest fixture hands to tests.
"""

from __future__ import annotations

import contextlib
import copy
import importlib
import logging
import os
import socket
import threading
import urllib.request
import uuid
from collections.abc import Mapping
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any, ClassVar, Self

from npystore.testing.counting import RequestCounter

if TYPE_CHECKING:
    from s3fs import S3FileSystem

__all__ = ["LocalS3", "S3Endpoint", "S3Sandbox", "s3_url", "split_s3_url"]

_SUB_DICT_OPTIONS = ("client_kwargs", "config_kwargs", "s3_additional_kwargs")


# --------------------------------------------------------------------------- urls


def s3_url(bucket: str, key: str = "") -> str:
    """Build an ``s3://`` URL.

    Parameters
    ----------
    bucket : str
        Bucket name.
    key : str, optional
        Object key; leading slashes are dropped.

    Returns
    -------
    str
        ``"s3://bucket/key"`` (or ``"s3://bucket"`` when `key` is empty).
    """
    key = key.lstrip("/")
    return f"s3://{bucket}/{key}" if key else f"s3://{bucket}"


def split_s3_url(url: str) -> tuple[str, str]:
    """Split ``s3://bucket/key`` (or ``bucket/key``) into bucket and key.

    Parameters
    ----------
    url : str
        An ``s3://`` URL or a bare ``bucket/key`` path.

    Returns
    -------
    tuple of str
        ``(bucket, key)``; `key` is ``""`` for a bare bucket.

    Raises
    ------
    ValueError
        If the URL has another scheme or no bucket.
    """
    path = url
    if "://" in path:
        scheme, path = path.split("://", 1)
        if scheme not in ("s3", "s3a"):
            raise ValueError(f"not an s3:// URL: {url!r}")
    bucket, _, key = path.lstrip("/").partition("/")
    if not bucket:
        raise ValueError(f"no bucket in {url!r}")
    return bucket, key


# --------------------------------------------------------------------- the server


class _DropBelowWarning(logging.Filter):
    """Drop werkzeug's per-request INFO lines while a quiet server runs."""

    def filter(self, record: logging.LogRecord) -> bool:
        return record.levelno >= logging.WARNING


def _stop_promptly(server: Any) -> None:
    """Stop a ThreadedMotoServer without waiting out its 0.5 s poll interval.

    ``socketserver``'s loop only notices a shutdown request between polls; a
    connection to the listening socket wakes it up at once.
    """
    address = server.get_host_and_port()
    done = threading.Event()

    def wake() -> None:
        for _ in range(200):  # bounded: at most ~2 s of pokes
            if done.wait(0.01):
                return
            try:
                socket.create_connection(address, timeout=0.5).close()
            except OSError:  # listening socket already closed: the loop has ended
                return

    waker = threading.Thread(target=wake, name="LocalS3-stop", daemon=True)
    waker.start()
    try:
        server.stop()
    finally:
        done.set()
        waker.join(timeout=5)


class S3Endpoint:
    """The client side of a local S3 server: options, filesystems, buckets and objects.

    :class:`LocalS3` (moto, in this process) and
    :class:`~npystore.testing.seaweed.SeaweedS3` (SeaweedFS, a child process) are its
    servers; a subclass sets :attr:`_endpoint_url` while it runs, and may override the
    credentials (:attr:`KEY`, :attr:`SECRET`, :attr:`REGION`) and :attr:`CONFIG` (extra
    ``config_kwargs`` of every filesystem).
    """

    KEY: ClassVar[str] = "testing"
    SECRET: ClassVar[str] = "testing"
    REGION: ClassVar[str] = "us-east-1"
    #: botocore ``config_kwargs`` every filesystem of this server gets (none for moto).
    CONFIG: ClassVar[dict[str, Any]] = {}

    def __init__(self) -> None:
        self._endpoint_url: str | None = None
        self._client: Any = None
        self._aio_session: Any = None
        self._lock = threading.Lock()

    @property
    def running(self) -> bool:
        """Whether the server is running."""
        return self._endpoint_url is not None

    @property
    def endpoint_url(self) -> str:
        """Base URL of the running server, e.g. ``"http://127.0.0.1:41234"``.

        Raises
        ------
        RuntimeError
            If the server is not running.
        """
        if self._endpoint_url is None:
            raise RuntimeError(
                f"{type(self).__name__} is not running; call start() or use it as a context manager"
            )
        return self._endpoint_url

    # client configuration -------------------------------------------------------

    def storage_options(self, **extra: Any) -> dict[str, Any]:
        """Keyword arguments for ``s3fs.S3FileSystem`` / fsspec ``storage_options``.

        Parameters
        ----------
        **extra
            Further options merged on top. ``client_kwargs``, ``config_kwargs``
            and ``s3_additional_kwargs`` are merged one level deep, so
            ``client_kwargs={"verify": False}`` keeps the endpoint.

        Returns
        -------
        dict
            A fresh dict; equal calls give equal dicts, so fsspec's instance
            cache returns the same filesystem for them.
        """
        options: dict[str, Any] = {
            "key": self.KEY,
            "secret": self.SECRET,
            "client_kwargs": {"endpoint_url": self.endpoint_url, "region_name": self.REGION},
        }
        if self.CONFIG:
            options["config_kwargs"] = dict(self.CONFIG)
        for name, value in extra.items():
            current = options.get(name)
            if (
                name in _SUB_DICT_OPTIONS
                and isinstance(current, dict)
                and isinstance(value, Mapping)
            ):
                options[name] = {**current, **value}
            else:
                options[name] = value
        return options

    def filesystem(self, **extra: Any) -> S3FileSystem:
        """An ``s3fs.S3FileSystem`` talking to this server.

        Parameters
        ----------
        **extra
            Extra options, merged as in :meth:`storage_options`.

        Returns
        -------
        s3fs.S3FileSystem
            Subject to fsspec's instance cache, like
            ``fsspec.core.url_to_fs(url, **storage_options())``.
        """
        import s3fs  # noqa: PLC0415 (keep imports cheap)

        return self._share_session(s3fs.S3FileSystem(**self.storage_options(**extra)))

    def _share_session(self, fs: S3FileSystem) -> S3FileSystem:
        """Let a not yet connected `fs` use this server's aiobotocore session.

        A fresh ``AioSession`` parses botocore's JSON service models again
        (~0.2-0.3 s); sharing one makes a new filesystem connect in ~10 ms.
        It is set on the instance, not passed as an option, so the storage
        options stay plain (picklable, same fsspec cache token).
        """
        if getattr(fs, "_s3", None) is None and getattr(fs, "session", None) is None:
            with self._lock:
                if self._aio_session is None:
                    # (import_module: aiobotocore ships no type information)
                    aio = importlib.import_module("aiobotocore.session")
                    self._aio_session = aio.AioSession()
                session = self._aio_session
            fs.session = session
            fs._session_is_owned = False  # s3fs's own flag for an injected session
        return fs

    def client(self) -> Any:
        """A (cached, synchronous) boto3 S3 client for this server.

        Requests made with it are *not* seen by a :class:`RequestCounter`,
        which makes it the right tool for setting up fixtures.

        Returns
        -------
        botocore.client.S3
            The boto3 client.
        """
        endpoint = self.endpoint_url
        with self._lock:
            if self._client is None:
                import boto3  # noqa: PLC0415 (keep imports cheap)
                from botocore.config import Config  # noqa: PLC0415

                self._client = boto3.client(
                    "s3",
                    endpoint_url=endpoint,
                    aws_access_key_id=self.KEY,
                    aws_secret_access_key=self.SECRET,
                    region_name=self.REGION,
                    config=Config(**self.CONFIG),
                )
            return self._client

    # buckets and objects ---------------------------------------------------------

    def create_bucket(self, name: str | None = None) -> str:
        """Create a bucket.

        Parameters
        ----------
        name : str, optional
            Bucket name; a unique ``"test-<12 hex digits>"`` when omitted.

        Returns
        -------
        str
            The bucket name.
        """
        bucket = name if name is not None else f"test-{uuid.uuid4().hex[:12]}"
        self.client().create_bucket(Bucket=bucket)
        return bucket

    def delete_bucket(self, name: str, *, missing_ok: bool = True) -> None:
        """Delete a bucket together with all its objects.

        Parameters
        ----------
        name : str
            Bucket name.
        missing_ok : bool, default True
            Return quietly if the bucket does not exist.
        """
        client = self.client()
        try:
            paginator = client.get_paginator("list_objects_v2")
            for page in paginator.paginate(Bucket=name):
                objects = [{"Key": item["Key"]} for item in page.get("Contents", [])]
                if objects:
                    client.delete_objects(Bucket=name, Delete={"Objects": objects, "Quiet": True})
            client.delete_bucket(Bucket=name)
        except client.exceptions.NoSuchBucket:
            if not missing_ok:
                raise

    def put(self, url: str, data: bytes) -> str:
        """Store `data` as one object.

        Parameters
        ----------
        url : str
            ``s3://bucket/key`` or ``bucket/key``; the bucket must exist.
        data : bytes
            Object contents.

        Returns
        -------
        str
            The object's ``s3://`` URL.
        """
        bucket, key = split_s3_url(url)
        if not key:
            raise ValueError(f"no object key in {url!r}")
        self.client().put_object(Bucket=bucket, Key=key, Body=bytes(data))
        return s3_url(bucket, key)

    def upload(self, local_path: str | os.PathLike[str], url: str) -> str:
        """Upload a local file as one object (a single PUT, no multipart).

        Parameters
        ----------
        local_path : str or os.PathLike
            File to upload.
        url : str
            ``s3://bucket/key`` or ``bucket/key``; if it ends with ``/`` the
            file name is appended.

        Returns
        -------
        str
            The object's ``s3://`` URL.
        """
        path = Path(local_path)
        bucket, key = split_s3_url(url)
        if not key or key.endswith("/"):
            key += path.name
        with path.open("rb") as stream:
            self.client().put_object(Bucket=bucket, Key=key, Body=stream)
        return s3_url(bucket, key)

    def sandbox(self, bucket: str | None = None, **fs_extra: Any) -> S3Sandbox:
        """Create a bucket plus a filesystem and an attached request counter.

        Parameters
        ----------
        bucket : str, optional
            Bucket name; unique when omitted.
        **fs_extra
            Extra filesystem options, merged as in :meth:`storage_options`.

        Returns
        -------
        S3Sandbox
            Call :meth:`S3Sandbox.close` when done.
        """
        name = self.create_bucket(bucket)
        options = self.storage_options(**fs_extra)
        import s3fs  # noqa: PLC0415 (keep imports cheap)

        fs = self._share_session(s3fs.S3FileSystem(**options))
        return S3Sandbox(self, name, fs, options, RequestCounter.attach(fs))


class LocalS3(S3Endpoint):
    """An in-process S3 server (moto) on a loopback port.

    Use it as a context manager, or call :meth:`start` and :meth:`stop`.
    Nothing global is configured: clients get the fixed fake credentials
    (:attr:`KEY`, :attr:`SECRET`) and region (:attr:`REGION`) explicitly,
    through :meth:`storage_options`, :meth:`filesystem` and :meth:`client`.

    Parameters
    ----------
    host : str, default "127.0.0.1"
        Address to bind. Keep it on loopback.
    port : int, default 0
        Port to bind; 0 picks a free one (read it back from
        :attr:`endpoint_url`).
    quiet : bool, default True
        Hide werkzeug's one-line-per-request INFO log while the server runs
        (a filter on the ``"werkzeug"`` logger, removed again by :meth:`stop`).

    Notes
    -----
    moto keeps its state in process-global backends, so every ``LocalS3`` in
    one process (and any ``moto.mock_aws`` in it) sees the same buckets. Use
    distinct bucket names; :meth:`create_bucket` makes unique ones.

    Filesystems made by :meth:`filesystem` and :meth:`sandbox` share one
    aiobotocore session (so botocore's service models are parsed once, not per
    filesystem); it is set on the instance, so :meth:`storage_options` stay
    plain and picklable.

    Examples
    --------
    >>> with LocalS3() as server:  # doctest: +SKIP
    ...     bucket = server.create_bucket()
    ...     url = server.put(s3_url(bucket, "a.bin"), b"hello")
    ...     server.filesystem().cat_file(url)
    b'hello'
    """

    def __init__(self, host: str = "127.0.0.1", port: int = 0, *, quiet: bool = True) -> None:
        super().__init__()
        self.host = host
        self.port = port
        self.quiet = quiet
        self._server: Any = None
        self._log_filter: logging.Filter | None = None

    # lifecycle ----------------------------------------------------------------

    def start(self) -> Self:
        """Start the server thread; a no-op if it is already running.

        Returns
        -------
        LocalS3
            ``self``, so that ``server = LocalS3().start()`` works.

        Raises
        ------
        OSError
            If an explicit `port` is already taken.
        """
        with self._lock:
            if self._server is not None:
                return self
            from moto.server import ThreadedMotoServer  # noqa: PLC0415 (keep imports cheap)

            if self.port:
                # ThreadedMotoServer.start() would wait forever if binding fails
                # in its thread, so fail early here instead.
                family = socket.AF_INET6 if ":" in self.host else socket.AF_INET
                with socket.socket(family, socket.SOCK_STREAM) as probe:
                    probe.bind((self.host, self.port))
            if self.quiet:
                self._log_filter = _DropBelowWarning()
                logging.getLogger("werkzeug").addFilter(self._log_filter)
            server = ThreadedMotoServer(ip_address=self.host, port=self.port, verbose=False)
            try:
                server.start()
                host, port = server.get_host_and_port()
            except BaseException:
                self._remove_log_filter()
                raise
            host_part = f"[{host}]" if ":" in host else host
            self._endpoint_url = f"http://{host_part}:{port}"
            self._server = server
        return self

    def stop(self) -> None:
        """Stop the server and close the cached boto3 client; idempotent."""
        with self._lock:
            server, self._server = self._server, None
            client, self._client = self._client, None
            self._endpoint_url = None
            if client is not None:
                with contextlib.suppress(Exception):
                    client.close()
            try:
                if server is not None:
                    _stop_promptly(server)
            finally:
                self._remove_log_filter()

    def _remove_log_filter(self) -> None:
        if self._log_filter is not None:
            logging.getLogger("werkzeug").removeFilter(self._log_filter)
            self._log_filter = None

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    def __repr__(self) -> str:
        state = self._endpoint_url or "stopped"
        return f"<LocalS3 {state}>"

    def reset(self) -> None:
        """Wipe all of moto's in-memory state (every bucket, in every ``LocalS3``)."""
        request = urllib.request.Request(f"{self.endpoint_url}/moto-api/reset", method="POST")
        with urllib.request.urlopen(request, timeout=10) as response:
            response.read()


# -------------------------------------------------------------------- the sandbox


class S3Sandbox:
    """One bucket on a :class:`LocalS3`, with a filesystem and a request counter.

    Made by :meth:`LocalS3.sandbox`; it is the object behind the ``s3`` pytest
    fixture. Uploads go through the server's boto3 client, so they are not
    counted, and they invalidate the filesystem's listing cache.

    Parameters
    ----------
    server : LocalS3
        The running server.
    bucket : str
        An existing bucket.
    fs : s3fs.S3FileSystem
        Filesystem built from `storage_options`.
    storage_options : dict
        Options that give `fs` back through fsspec's instance cache.
    counter : RequestCounter
        Counter attached to `fs`.
    """

    def __init__(
        self,
        server: S3Endpoint,
        bucket: str,
        fs: S3FileSystem,
        storage_options: dict[str, Any],
        counter: RequestCounter,
    ) -> None:
        self.server = server
        self.bucket = bucket
        self.fs = fs
        self._storage_options = copy.deepcopy(storage_options)
        self.counter = counter

    @property
    def storage_options(self) -> dict[str, Any]:
        """Options that give :attr:`fs` back through fsspec (a fresh copy each time)."""
        return copy.deepcopy(self._storage_options)

    def __repr__(self) -> str:
        return f"<S3Sandbox s3://{self.bucket} on {self.server!r}>"

    def url(self, key: str = "") -> str:
        """``s3://bucket/key`` in this sandbox's bucket."""
        return s3_url(self.bucket, key)

    def put_bytes(self, data: bytes, key: str) -> str:
        """Store `data` under `key`; returns its URL."""
        url = self.server.put(self.url(key), data)
        self.fs.invalidate_cache(url)
        return url

    def put_file(self, local_path: str | os.PathLike[str], key: str | None = None) -> str:
        """Upload a local file under `key` (default: its file name); returns its URL."""
        url = self.server.upload(local_path, self.url(key if key is not None else ""))
        self.fs.invalidate_cache(url)
        return url

    def close(self, *, delete_bucket: bool = True) -> None:
        """Detach the counter and (by default) delete the bucket and its objects."""
        self.counter.detach()
        if delete_bucket and self.server.running:
            self.server.delete_bucket(self.bucket)
        self.fs.invalidate_cache()

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()
