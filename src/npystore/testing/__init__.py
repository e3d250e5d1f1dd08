"""Test and demo helpers: local object-store servers and an S3 request counter.

Importing this package is cheap; moto, boto3, s3fs, gcsfs and adlfs are imported only when
a server is started or a filesystem is built. See :mod:`npystore.testing.s3` (moto, in this
process), :mod:`npystore.testing.seaweed`, :mod:`npystore.testing.gcs`,
:mod:`npystore.testing.azurite` and :mod:`npystore.testing.rclone` (real servers as child
processes, :mod:`npystore.testing.servers`), and :mod:`npystore.testing.counting`.
"""

from npystore.testing.azurite import LocalAzurite
from npystore.testing.counting import (
    Measurement,
    RequestCounter,
    RequestRecord,
    parse_range_header,
)
from npystore.testing.gcs import LocalGCS
from npystore.testing.rclone import RcloneS3
from npystore.testing.s3 import LocalS3, S3Endpoint, S3Sandbox, s3_url, split_s3_url
from npystore.testing.seaweed import SeaweedS3
from npystore.testing.servers import Sandbox, ServerUnavailable

__all__ = [
    "LocalAzurite",
    "LocalGCS",
    "LocalS3",
    "RcloneS3",
    "S3Endpoint",
    "Sandbox",
    "SeaweedS3",
    "ServerUnavailable",
    "Measurement",
    "RequestCounter",
    "RequestRecord",
    "S3Sandbox",
    "parse_range_header",
    "s3_url",
    "split_s3_url",
]
