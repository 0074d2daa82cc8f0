"""Spark on S3: the connector a s3a:// location needs and the confs Hadoop's S3A reads it with.

pip's pyspark ships Hadoop's client without its S3 file system: `hadoop-aws` of the same Hadoop release
(with the AWS SDK bundle it depends on, about 690 MB) comes from Maven like the Kafka connector, resolved
once into connector-jars/ because a location asked for it (connectors.required_connectors). S3A is told
the endpoint and region the AWS variables name (core/checkpoint/object_store.py), path-style requests for
an S3-compatible server of its own, and the AWS SDK's default credentials chain, which reads the
credentials variables, AWS_PROFILE and an instance's role itself: no credential passes through a conf.
spark.conf's own spark.hadoop.fs.s3a.* confs win.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

import pyspark

from ...core.checkpoint.object_store import s3_endpoint, s3_region, store_of

S3A_FILE_SYSTEM = "org.apache.hadoop.fs.s3a.S3AFileSystem"
CREDENTIALS_CHAIN = "software.amazon.awssdk.auth.credentials.DefaultCredentialsProvider"
# Hadoop's own client, shipped in pyspark's jars/: hadoop-aws must be of the same release.
HADOOP_CLIENT_JAR = "hadoop-client-api-"


def hadoop_version() -> str:
    """The Hadoop release pip's pyspark ships (3.5.0 in pyspark 4.2.1 and 4.3.0)."""
    jars = Path(pyspark.__file__).parent / "jars"
    found = sorted(jars.glob(f"{HADOOP_CLIENT_JAR}*.jar"))
    if not found:
        raise FileNotFoundError(f"no {HADOOP_CLIENT_JAR}*.jar in {jars}: is pyspark installed from pip?")
    return found[-1].name.removeprefix(HADOOP_CLIENT_JAR).removesuffix(".jar")


def hadoop_aws_coordinate() -> str:
    return f"org.apache.hadoop:hadoop-aws:{hadoop_version()}"


def s3a_locations(locations: Mapping[str, str]) -> dict[str, str]:
    return {setting: location for setting, location in locations.items() if store_of(location) == "s3a"}


def s3a_confs(own: Mapping[str, object], environ: Mapping[str, str] = os.environ) -> dict[str, str]:
    """The spark.hadoop.fs.s3a.* confs the AWS variables call for, beside spark.conf's `own` (which win)."""
    endpoint, region = s3_endpoint(environ), s3_region(environ)
    confs = {"spark.hadoop.fs.s3a.aws.credentials.provider": CREDENTIALS_CHAIN}
    if endpoint:
        confs["spark.hadoop.fs.s3a.endpoint"] = endpoint
        confs["spark.hadoop.fs.s3a.path.style.access"] = "true"  # an S3-compatible server has no bucket host names
        # A file's upload through S3A's transfer manager (a RocksDB snapshot's SST files) failed every time on an
        # S3-compatible server (moto's): the AWS SDK's async client took its 100 Continue for the answer
        # ("Status Code: 100"), and every batch that uploads a snapshot failed. Hadoop's plain copy (read the
        # file, write it through S3A's stream) uploads them; AWS's own S3 keeps the transfer manager.
        confs["spark.hadoop.fs.s3a.optimized.copy.from.local.enabled"] = "false"
    if region:
        confs["spark.hadoop.fs.s3a.endpoint.region"] = region
    return {key: value for key, value in confs.items() if key not in own}
