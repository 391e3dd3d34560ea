"""Hadoop's S3A settings for a warehouse on S3: how Spark's own Delta reader (``topiclake sql``, the
catalog, the jobs' scans) reaches the bucket the brokers write through delta-rs.

The settings come from the warehouse's storage options (delta-rs's names, ``AWS_*`` falling back to the
environment, as delta-rs does) and are per bucket (``fs.s3a.bucket.<bucket>.*``), so one session can read
warehouses in several buckets or stores. The jars are :func:`topiclake.sparkenv.jars.s3a_jar_paths`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING
from urllib.parse import urlparse

from topiclake.errors import InvalidRequest
from topiclake.platform.storage.s3_client import s3_location

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__all__ = ["configure", "s3a_settings", "spark_path"]


def spark_path(uri: str) -> str:
    """A table URI as Spark's Hadoop file systems name it (``s3://`` is ``s3a://`` there)."""
    if uri.startswith("s3://"):
        return "s3a://" + uri[len("s3://") :]
    return uri


def s3a_settings(warehouse: str, options: Mapping[str, str] | None = None) -> dict[str, str]:
    """The Hadoop settings (without ``spark.hadoop.``) that let S3A read ``warehouse``; {} when it is not
    on S3 or has no static keys (then S3A's own provider chain, e.g. an instance profile, applies)."""
    root = warehouse.replace("s3a://", "s3://", 1) if warehouse.startswith("s3a://") else warehouse
    if urlparse(root).scheme not in ("s3",):
        return {}
    location = s3_location(root, dict(options or {}))
    if location is None:
        return {}
    prefix = f"fs.s3a.bucket.{location.bucket}."
    settings = {
        "endpoint": location.endpoint,
        "endpoint.region": location.region,
        "path.style.access": "false" if location.virtual_hosted else "true",
        "connection.ssl.enabled": "true" if location.endpoint.startswith("https://") else "false",
        "access.key": location.access_key,
        "secret.key": location.secret_key,
        "aws.credentials.provider": "org.apache.hadoop.fs.s3a.SimpleAWSCredentialsProvider",
        # the analytics accelerator's stream asks for ranges the local S3 server and some stores refuse
        "input.stream.type": "classic",
    }
    if location.session_token:
        settings["session.token"] = location.session_token
        settings["aws.credentials.provider"] = "org.apache.hadoop.fs.s3a.TemporaryAWSCredentialsProvider"
    out = {prefix + key: value for key, value in settings.items()}
    out["fs.s3.impl"] = "org.apache.hadoop.fs.s3a.S3AFileSystem"  # s3:// URIs (delta-rs's) in Spark too
    return out


def configure(spark: SparkSession, warehouse: str, options: Mapping[str, str] | None = None) -> None:
    """Give a running session's Hadoop configuration the S3A settings of ``warehouse`` (file systems
    opened afterwards use them; S3A caches one per bucket).

    Raises:
        InvalidRequest: The warehouse is on S3 but the session has no S3A jars (never resolved).
    """
    settings = s3a_settings(warehouse, options)
    if not settings:
        return
    if "hadoop-aws-" not in spark.sparkContext.getConf().get("spark.jars", ""):
        raise InvalidRequest(
            "Spark cannot read s3a:// without the S3A jars: run `python -m topiclake.sparkenv.jars resolve`"
            " (make install) once, then start a new Spark session"
        )
    hadoop = spark.sparkContext._jsc.hadoopConfiguration()
    for key, value in settings.items():
        hadoop.set(key, value)
