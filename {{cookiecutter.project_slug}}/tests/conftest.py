"""One local Spark session for the whole run (local[2], 2 shuffle partitions, UTC)."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator

import pytest
from pyspark.sql import SparkSession

# The tests' JVMs are many and short-lived (every job, CLI command and repartition in a fresh process):
# C1 alone compiles them warm enough and costs about a third less CPU. SPARK_SUBMIT_OPTS reaches every
# Spark driver these tests start, their subprocesses included; a job run outside the tests keeps the
# JVM's defaults.
FAST_START_JVM = "-XX:TieredStopAtLevel=1"


def pytest_configure(config: pytest.Config) -> None:
    options = os.environ.get("SPARK_SUBMIT_OPTS", "")
    if FAST_START_JVM not in options:
        os.environ["SPARK_SUBMIT_OPTS"] = f"{options} {FAST_START_JVM}".strip()


@pytest.fixture(scope="session")
def spark() -> Iterator[SparkSession]:
    # Python workers (custom state) run this interpreter, with the packages of this environment.
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    session = (
        SparkSession.builder.master("local[2]")
        .appName("{{ cookiecutter.package_name }}-tests")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.session.timeZone", "UTC")
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    yield session
    session.stop()


@pytest.fixture(autouse=True)
def _stop_leftover_streams(request: pytest.FixtureRequest) -> Iterator[None]:
    yield
    if "spark" in request.fixturenames:
        for query in request.getfixturevalue("spark").streams.active:
            query.stop()
