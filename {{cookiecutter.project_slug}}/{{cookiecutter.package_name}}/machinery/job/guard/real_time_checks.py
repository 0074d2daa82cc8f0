"""The checks of a real-time start that need Spark: its version and the task slots (the query's Python: query_plan.py).

core/real_time.py holds Spark's rules; the settings check the source, the sink and the store before a
JVM starts (Settings.real_time_problems), the plan's operators with the plan (Settings.plan_problems).
What is left needs the running session or the broker, and is checked here before the query starts.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from typing import TextIO

import pyspark
from pyspark.sql import SparkSession

from ...core import real_time
from ...core.plan_operators import PlanOperator
from ...core.settings import Settings, SettingsError
from ...core.sizing.partitions import local_cores
from ..spark.remote import is_connect

UNCOUNTED_PARTITIONS = (
    "the task slots are not checked against the Kafka partitions on Spark Connect: only Kafka's AdminClient,"
    " in this process's JVM, counts them (a batch with too few slots waits without output)"
)


def refuse_before_spark(settings: Settings, spark_version: str = pyspark.__version__) -> None:
    """A real-time trigger on a Spark that has no real-time mode for state: before a JVM starts."""
    problem = real_time.version_problem(spark_version) if settings.query.real_time else None
    if problem:
        raise SettingsError([problem])


def task_slots(spark: SparkSession, settings: Settings) -> int | None:
    """The tasks the job runs at once: a local master's threads, a cluster's executors x cores where the
    settings say both (None where they do not: executors register after the start)."""
    # The master Spark runs on (spark-submit's --master, a Connect server's), else the settings'.
    local = local_cores(str(spark.conf.get("spark.master", None) or settings.spark.master))
    if local is not None:
        return local
    # The session's conf holds Spark's own (SparkConf) too, in both modes: Connect has no sparkContext.
    executors, cores = (spark.conf.get(key, None) for key in ("spark.executor.instances", "spark.executor.cores"))
    if executors and cores and executors.isdigit() and cores.isdigit():
        return int(executors) * int(cores)
    return None


def refuse_too_few_slots(
    spark: SparkSession,
    settings: Settings,
    plan: Sequence[PlanOperator],
    kafka_partitions: int | None,
    remarks_to: TextIO | None = None,
) -> None:
    """A real-time batch holds a task slot for every Kafka partition and every shuffle partition at once:
    with fewer, its tasks wait for each other and no result comes out. First, the Spark that runs the
    query has real-time mode: on Spark Connect the server's release, which the check before the start
    (refuse_before_spark, this process's pyspark) cannot know. `kafka_partitions`: the source topics'
    partitions, counted once before (check_kafka_endpoints at a start); None on Spark Connect, which cannot count them."""
    if not settings.query.real_time:
        return
    refuse_before_spark(settings, spark.version)
    slots = task_slots(spark, settings)
    if slots is None:
        return
    if is_connect(spark):
        print(f"real-time: {UNCOUNTED_PARTITIONS}", file=remarks_to or sys.stdout, flush=True)
        return
    assert kafka_partitions is not None, "a real-time query on Spark Classic has its source's partitions counted"
    problem = real_time.slots_problem(slots, kafka_partitions, settings.spark.shuffle_partitions, len(plan))
    if problem:
        raise SettingsError([problem])
