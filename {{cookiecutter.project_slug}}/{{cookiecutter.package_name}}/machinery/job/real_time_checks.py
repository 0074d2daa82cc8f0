"""The checks of a real-time start that need Spark: its version, the query's Python, the task slots.

core/real_time.py holds Spark's rules; the settings check the source, the sink and the store before a
JVM starts (Settings.real_time_problems), the plan's operators with the plan (Settings.plan_problems).
What is left needs the running session or the broker, and is checked here before the query starts.
"""

from __future__ import annotations

from collections.abc import Sequence

import pyspark
from pyspark.sql import DataFrame, SparkSession

from ..core import real_time
from ..core.plan_operators import PlanOperator
from ..core.settings import Settings, SettingsError
from ..core.sizing.partitions import local_cores
from .endpoints.kafka import source_partitions
from .plan_source import analyzed_plan, python_udfs

# What the names of an analyzed plan's nodes that run the user's Python in a worker hold (pandas, Arrow).
PYTHON_PLAN_MARKERS = ("InPandas", "InArrow", "InPySpark", "Python")


def refuse_before_spark(settings: Settings, spark_version: str = pyspark.__version__) -> None:
    """A real-time trigger on a Spark that has no real-time mode for state: before a JVM starts."""
    problem = real_time.version_problem(spark_version) if settings.query.real_time else None
    if problem:
        raise SettingsError([problem])


def python_calls(result: DataFrame) -> list[str]:
    """What of the query runs Python: each Python UDF by name, each pandas or Arrow function by its node."""
    found = []
    for node in analyzed_plan(result).walk():
        if any(marker in node.kind for marker in PYTHON_PLAN_MARKERS):
            found.append(node.kind)
        found += [f"the UDF {name}" for name in python_udfs(node.text)]
    return list(dict.fromkeys(found))


def refuse_python(result: DataFrame, settings: Settings) -> None:
    problem = real_time.python_udf_problem(python_calls(result)) if settings.query.real_time else None
    if problem:
        raise SettingsError([problem])


def task_slots(spark: SparkSession, settings: Settings) -> int | None:
    """The tasks the job runs at once: a local master's threads, a cluster's executors x cores where the
    settings say both (None where they do not: executors register after the start)."""
    local = local_cores(settings.spark.master)
    if local is not None:
        return local
    conf = spark.sparkContext.getConf()
    executors, cores = conf.get("spark.executor.instances"), conf.get("spark.executor.cores")
    if executors and cores and executors.isdigit() and cores.isdigit():
        return int(executors) * int(cores)
    return None


def refuse_too_few_slots(spark: SparkSession, settings: Settings, plan: Sequence[PlanOperator]) -> None:
    """A real-time batch holds a task slot for every Kafka partition and every shuffle partition at once:
    with fewer, its tasks wait for each other and no result comes out."""
    if not settings.query.real_time:
        return
    slots = task_slots(spark, settings)
    if slots is None:
        return
    problem = real_time.slots_problem(
        slots, source_partitions(spark, settings), settings.spark.shuffle_partitions, len(plan)
    )
    if problem:
        raise SettingsError([problem])
