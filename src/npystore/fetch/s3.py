"""S3 range reads (s3fs), pinned to the object opened (part of the fetch layer).

:class:`S3Ranges` sends one ``GetObject`` per range, all in flight at once on fsspec's event
loop, each *pinned* to the object opened: ``VersionId`` when the store reported one, else
``If-Match: <ETag>``; a replaced object answers 412 and the read raises
:class:`~npystore.errors.ConsistencyError` (old and new bytes never mix in one result).
Servers that ignore the pin exist (rclone's ``serve s3`` answers ``If-Match`` with 200), so
every response's ``ETag`` (and ``VersionId``, when both sides have one) and its
``Content-Range`` total are checked before its body is read
(:meth:`~npystore.fetch.transport.PinnedRanges.check_answer`).

The GETs go over a presigned URL and a bare aiohttp session when possible
(:mod:`npystore.fetch.s3direct`); a reader whose presigning or direct GET fails once reads
through botocore for the rest of its life.
"""

from __future__ import annotations

import logging
from typing import Any

from npystore.fetch import opening, remote, s3direct
from npystore.fetch.identity import ObjectIdentity
from npystore.fetch.transport import PinnedRanges

__all__ = ["S3Ranges", "is_s3"]

_log = logging.getLogger(__name__)


def is_s3(fs: Any) -> bool:
    """Whether ``fs`` is an s3fs filesystem (checked without importing s3fs)."""
    return any(
        cls.__module__.split(".")[0] == "s3fs" and cls.__name__ == "S3FileSystem"
        for cls in type(fs).__mro__
    )


class S3Ranges(PinnedRanges):
    """Ranged ``GetObject``s of one S3 object, pinned to its version or ETag at open.

    Parameters
    ----------
    fs : s3fs.S3FileSystem
        The filesystem holding the object.
    path : str
        The object's path on ``fs`` (``bucket/key``, maybe with a version).
    identity : ObjectIdentity
        The object's identity at open.
    budget : float
        Seconds one range may take, all its attempts and waits included.
    """

    def __init__(self, fs: Any, path: str, identity: ObjectIdentity, budget: float):
        fields = dict(identity.fields)
        super().__init__(fs, path, identity, budget, fields.get("ETag") or fields.get("etag"))
        #: The presigned URL range reads go to (see :mod:`npystore.fetch.s3direct`), and
        #: whether that path is off for this reader (it failed once).
        self._signed: s3direct.SignedUrl | None = None
        self._direct_off = False

    def use_signed(self, signed: s3direct.SignedUrl) -> None:
        """Read through ``signed``, a presigned URL of this object made when it was opened
        (:mod:`npystore.fetch.many`), instead of signing one on the first read."""
        self._signed = signed

    def _where(self) -> tuple[str, str, str | None]:
        """Bucket, key and the version the reads are pinned to (if any)."""
        bucket, key, path_version = self.fs.split_path(self.path)
        return bucket, key, self._want_version or path_version

    def get_one(self, into: list[memoryview] | None) -> remote.GetOne:
        """Ranged ``GetObject``s pinned to the opened object (presigned and direct when
        possible, else through botocore)."""
        bucket, key, version = self._where()
        etag = self._want_etag
        pin = {"VersionId": version} if version else {"IfMatch": etag} if etag else {}

        async def one(k: int, start: int, stop: int) -> bytes | memoryview:
            view = None if into is None else into[k]
            signed = await self._direct_url(bucket, key, version)
            return await self._get(bucket, key, pin, start, stop, view, signed)

        return one

    async def slots(self) -> remote.Limiter | None:
        """The connections of the direct session (:func:`npystore.fetch.s3direct.slots`)
        while this reader uses it, else those of botocore's pool (``max_pool_connections``).
        A read whose direct GETs are refused midway finishes through botocore under the
        direct session's permits (its ranges may then queue for botocore's connections)."""
        bucket, key, version = self._where()
        signed = await self._direct_url(bucket, key, version)
        if signed is not None:
            return await s3direct.slots(signed)
        fs: Any = self.fs
        await fs.set_session()
        client = await fs.get_s3(bucket)
        most = int(client.meta.config.max_pool_connections or 10)
        return remote.slots(client, most, s3direct.FEWER_REQUESTS)

    async def _direct_url(
        self, bucket: str, key: str, version: str | None
    ) -> s3direct.SignedUrl | None:
        """The presigned URL for direct GETs (signed again when stale), or None: botocore."""
        if self._direct_off:
            return None
        signed = self._signed
        if signed is None or not signed.fresh():
            try:
                signed = await s3direct.direct_url(self.fs, bucket, key, version)
            except Exception as exc:  # any failure to presign: botocore serves this reader
                _log.debug("%s: no presigned URL, reading through botocore: %r", self.url, exc)
                signed = None
            if signed is None:
                self._direct_off = True
            self._signed = signed
        return signed

    async def _get(
        self,
        bucket: str,
        key: str,
        pin: dict[str, str],
        start: int,
        stop: int,
        into: memoryview | None = None,
        signed: s3direct.SignedUrl | None = None,
    ) -> bytes | memoryview:
        def check(etag: str | None, version: str | None, content_range: str) -> None:
            self.check_answer(start, stop, etag, version, content_range)

        if signed is not None and not self._direct_off:
            try:
                _, data = await s3direct.direct_get(
                    signed, start, stop, if_match=pin.get("IfMatch"), into=into, check=check
                )
            except s3direct.PreconditionFailed as exc:
                raise self.changed(pin, start, stop) from exc
            except s3direct.DirectUnusable as exc:  # botocore handles it from now on
                _log.debug("%s: direct GET refused (%s), reading through botocore", self.url, exc)
                self._direct_off = True
            else:
                return data
        try:
            _, data = await opening.get_object(
                self.fs, bucket, key, f"bytes={start}-{stop - 1}", pin, into, check=check
            )
        except OSError as exc:
            if opening.error_code(exc) in ("PreconditionFailed", "412"):
                raise self.changed(pin, start, stop) from exc
            raise
        return data
