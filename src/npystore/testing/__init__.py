"""Test and demo helpers: an embedded S3 server and an S3 request counter.

Importing this package is cheap; moto, boto3 and s3fs are imported only when a
:class:`LocalS3` is started or a filesystem is built. See :mod:`npystore.testing.s3`
and :mod:`npystore.testing.counting`.
"""

from npystore.testing.counting import (
    Measurement,
    RequestCounter,
    RequestRecord,
    parse_range_header,
)
from npystore.testing.s3 import LocalS3, S3Sandbox, s3_url, split_s3_url

__all__ = [
    "LocalS3",
    "Measurement",
    "RequestCounter",
    "RequestRecord",
    "S3Sandbox",
    "parse_range_header",
    "s3_url",
    "split_s3_url",
]
