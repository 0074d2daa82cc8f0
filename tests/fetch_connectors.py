"""Fill Spark's Ivy cache with the connector JARs the proofs use (delta-spark), once, before the
parallel test workers start jobs that each resolve them: two Ivy resolutions racing on one cache
can fail. It resolves them the way a generated project does, with the project's ivysettings.xml.

    .venv/bin/python tests/fetch_connectors.py
"""

from __future__ import annotations

import re
import sys
import time
from pathlib import Path

import pyspark
from pyspark.sql import SparkSession

PROJECT = Path(__file__).resolve().parents[1] / "{{cookiecutter.project_slug}}"


def delta_coordinate() -> str:
    """io.delta:delta-spark for the installed Spark and the release settings.yaml names by default."""
    version = re.search(r'^\s+version: "(\d+\.\d+\.\d+)"', (PROJECT / "settings.yaml").read_text(), re.M)
    if version is None:
        sys.exit("fetch_connectors: no sink.delta.version in the template's settings.yaml")
    minor = ".".join(pyspark.__version__.split(".")[:2])
    return f"io.delta:delta-spark_{minor}_2.13:{version[1]}"


def main() -> None:
    started = time.monotonic()
    coordinate = delta_coordinate()
    spark = (
        SparkSession.builder.master("local[1]")
        .config("spark.jars.packages", coordinate)
        .config("spark.jars.ivySettings", (PROJECT / "ivysettings.xml").as_uri())  # braces in the path: a URI
        .config("spark.ui.enabled", "false")
        .getOrCreate()
    )
    loadable = spark._jvm.org.apache.spark.util.Utils.classIsLoadable("io.delta.sql.DeltaSparkSessionExtension")  # type: ignore[union-attr]
    spark.stop()
    if not loadable:
        sys.exit(f"fetch_connectors: {coordinate} resolved but its classes did not load")
    print(f"fetch_connectors: {coordinate} in Ivy's cache ({time.monotonic() - started:.1f} s)")


if __name__ == "__main__":
    main()
