"""Fill Spark's Ivy cache with the connector JARs the proofs use (delta-spark, Spark's Kafka
connector, Hadoop's S3 connector), and the local Kafka broker's JARs, once, before the parallel test workers start: each
bake then resolves its connectors into its own connector-jars/ from the warm cache (a second of Ivy
under the lock its resolutions take turns on) instead of a bake waiting for the other's download.
It resolves them the way a generated project does: Ivy with the project's ivysettings.xml, and the
project's own local_kafka.

    .venv/bin/python tests/fetch_connectors.py
"""

from __future__ import annotations

import importlib
import importlib.util
import re
import sys
import time
from pathlib import Path

import pyspark
from pyspark.sql import SparkSession

PROJECT = Path(__file__).resolve().parents[1] / "{{cookiecutter.project_slug}}"
MACHINERY = PROJECT / "{{cookiecutter.package_name}}" / "machinery"


def machinery_module(name: str):
    """A module of the template's machinery, imported from the template itself (its folder's name is Jinja)."""
    if "machinery" not in sys.modules:
        spec = importlib.util.spec_from_file_location(
            "machinery", MACHINERY / "__init__.py", submodule_search_locations=[str(MACHINERY)]
        )
        assert spec is not None and spec.loader is not None
        package = importlib.util.module_from_spec(spec)
        sys.modules["machinery"] = package
        spec.loader.exec_module(package)
    return importlib.import_module(f"machinery.{name}")


def delta_coordinate() -> str:
    """io.delta:delta-spark for the installed Spark and the release settings.yaml names by default."""
    version = re.search(r'^\s+version: "(\d+\.\d+\.\d+)"', (PROJECT / "settings.yaml").read_text(), re.M)
    if version is None:
        sys.exit("fetch_connectors: no sink.delta.version in the template's settings.yaml")
    minor = ".".join(pyspark.__version__.split(".")[:2])
    return f"io.delta:delta-spark_{minor}_2.13:{version[1]}"


def main() -> None:
    started = time.monotonic()
    kafka = f"org.apache.spark:spark-sql-kafka-0-10_2.13:{machinery_module('job.spark.connectors').kafka_connector_version(pyspark.__version__)}"
    # The S3 connector (hadoop-aws of pyspark's Hadoop, with the AWS SDK bundle: about 690 MB, once).
    coordinates = [delta_coordinate(), kafka, machinery_module("job.spark.object_store").hadoop_aws_coordinate()]
    spark = (
        SparkSession.builder.master("local[1]")
        .config("spark.jars.packages", ",".join(coordinates))
        .config("spark.jars.ivySettings", (PROJECT / "ivysettings.xml").as_uri())  # braces in the path: a URI
        .config("spark.ui.enabled", "false")
        .getOrCreate()
    )
    utils = spark._jvm.org.apache.spark.util.Utils  # type: ignore[union-attr]
    probes = [
        "io.delta.sql.DeltaSparkSessionExtension",
        "org.apache.spark.sql.kafka010.KafkaSourceProvider",
        "org.apache.hadoop.fs.s3a.S3AFileSystem",
    ]
    missing = [probe for probe in probes if not utils.classIsLoadable(probe)]
    spark.stop()
    if missing:
        sys.exit(f"fetch_connectors: {', '.join(coordinates)} resolved but {', '.join(missing)} did not load")
    print(f"fetch_connectors: {', '.join(coordinates)} in Ivy's cache ({time.monotonic() - started:.1f} s)")
    started = time.monotonic()
    jars = machinery_module("operations.local_kafka").broker_jars()
    print(f"fetch_connectors: the local Kafka broker's JARs in {jars} ({time.monotonic() - started:.1f} s)")


if __name__ == "__main__":
    main()
