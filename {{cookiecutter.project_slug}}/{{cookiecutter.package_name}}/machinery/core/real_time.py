"""Spark's real-time mode (`query.trigger: real_time`): what it runs, as Spark 4.3.0 allows it.

In real-time mode a batch is long-running: its tasks start once and stay, reading each Kafka record as
it arrives and writing its result at once (milliseconds, not a trigger interval); the batch commits
its offsets and state when its duration is up, and the next one starts. Spark checks the query against
an allowlist when the first batch is planned (`RealTimeModeAllowlist` in its spark-sql jar, read from
the 4.3.0 release for this table); the job checks the same rules before anything starts, so each one
is a line naming the setting, not a stack trace after the checkpoint was created. Standard library
only: the bake's hooks read these facts too.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from .confs import spark_release
from .durations import DurationError, named_duration

# `query.trigger: real_time` or `real_time <duration>`: the duration of each long-running batch.
REAL_TIME = "real_time"
# A result waits only when its record arrives between two batches (one ends, commits, the next is planned):
# longer batches make that rarer. Deduplication p99 on 2 cores: 366 ms at Spark's own minimum, 5 s
# (spark.sql.streaming.realTimeMode.minBatchDuration), 52 ms at 1 minute (benchmarks/kafka_latency.py).
# The price: a crash replays up to a batch, a stop waits up to one. The job sets Spark's minimum to the setting's.
DEFAULT_BATCH = "1 minute"
SHORTEST_BATCH_SECONDS = 1.0
SINCE_SPARK = (4, 3)
# What Spark 4.3.0's allowlist and checks take (error class STREAMING_REAL_TIME_MODE.*).
SOURCES = ("kafka",)
SINKS = ("kafka", "console")
OUTPUT_MODE = "update"
PROVIDER = "rocksdb"
FORMAT_VERSION = 2
# Spark's node (under org.apache.spark.sql.execution) for each of the template's stateful operators in a
# real-time plan, and those of them its allowlist holds: a deduplication by dropDuplicates and an
# aggregation without a session window. Not dropDuplicatesWithinWatermark, a stream-stream join, Python's
# transformWithState (the JVM's is allowed), applyInPandasWithState, a session window or a limit; nor a
# Python UDF anywhere in the query. test_real_time reads the installed release's allowlist against this.
NODES = {
    "drop_duplicates": "streaming.operators.stateful.StreamingDeduplicateExec",
    "windowed_aggregation": "streaming.StatefulStreamlineAggregateExec",
    "aggregation": "streaming.StatefulStreamlineAggregateExec",
    "deduplication": "streaming.operators.stateful.StreamingDeduplicateWithinWatermarkExec",
    "stream_stream_join": "streaming.operators.stateful.join.StreamingSymmetricHashJoinExec",
    "custom_state": "python.streaming.TransformWithStateInPySparkExec",
    "pandas_state": "python.streaming.FlatMapGroupsInPandasWithStateExec",
    "session_window": "streaming.operators.stateful.SessionWindowStateStoreSaveExec",
    "limit": "streaming.operators.stateful.StreamingGlobalLimitExec",
}
ALLOWED = ("drop_duplicates", "windowed_aggregation", "aggregation")
PYTHON_NODES = ("python.BatchEvalPythonExec", "python.ArrowEvalPythonExec")
# The operator names a real-time batch writes into the checkpoint's state metadata -> micro-batch's for the
# same state (an aggregation's, seen on 4.3.0; a deduplication's is `dedupe` in both).
STATE_NAMES = {"StatefulStreamlineAggregate": "stateStoreSave"}
WITHIN_WATERMARK = "deduplication"
# A real-time bake's starters: the deduplication starter written with dropDuplicates (by id and event
# time, so that its state is dropped as the watermark passes), the windowed count as it is.
STARTERS = {"deduplication": "drop_duplicates", "windowed_aggregation": "windowed_aggregation"}
STARTER_INPUTS: dict[str, dict[str, object]] = {"drop_duplicates": {"evicts": True}}
ANOTHER_TRIGGER = "set query.trigger to an interval such as '1 second'"


def batch_duration(trigger: str) -> str | None:
    """The batch duration of a real-time trigger ('real_time', 'real_time 30 seconds'); None for another trigger."""
    words = trigger.strip().split(None, 1)
    if not words or words[0] != REAL_TIME:
        return None
    return words[1].strip() if len(words) > 1 else DEFAULT_BATCH


def checked_trigger(trigger: str) -> str:
    """A real-time trigger's duration read as Spark reads it, at least SHORTEST_BATCH_SECONDS; the trigger."""
    duration = batch_duration(trigger)
    if duration is None:
        return trigger
    try:
        seconds = named_duration(REAL_TIME, duration)
    except DurationError as error:
        raise ValueError(f"{error} (write real_time, or real_time and a batch duration such as '30 seconds')") from None
    if seconds < SHORTEST_BATCH_SECONDS:
        raise ValueError(
            f"real_time batches of {duration} would commit more often than every {SHORTEST_BATCH_SECONDS:g} s, which"
            f" costs more than it gives (results do not wait for the commit); write real_time, or real_time 5 seconds"
        )
    return trigger


def batch_ms(trigger: str) -> int:
    duration = batch_duration(trigger)
    return 0 if duration is None else round(named_duration(REAL_TIME, duration) * 1000)


def settings_problems(
    sources: dict[str, str], sink: str, output_mode: str, provider: str, format_version: int
) -> list[str]:
    """What a real-time run needs of the settings (sources by section -> type), one line each."""
    why = "Spark's real-time mode"
    problems = [
        f"query.trigger is real_time but {section}.type is {kind}: {why} reads only from Kafka; set {section}.type to"
        f" kafka, or {ANOTHER_TRIGGER}"
        for section, kind in sources.items()
        if kind not in SOURCES
    ]
    if sink not in SINKS:
        problems.append(
            f"query.trigger is real_time but sink.type is {sink}: {why} writes only to Kafka or the console (its"
            f" allowlist of sinks); set sink.type to kafka, or {ANOTHER_TRIGGER}"
        )
    if output_mode != OUTPUT_MODE:
        problems.append(
            f"query.trigger is real_time but sink.output_mode is {output_mode}: {why} runs in update mode only (each"
            " changed result written as it changes); set sink.output_mode to update"
        )
    if provider != PROVIDER:
        problems.append(
            f"query.trigger is real_time but state_store.provider is {provider}: {why} refuses the HDFS-backed store;"
            " set state_store.provider to rocksdb (on a new checkpoint if one exists)"
        )
    elif format_version != FORMAT_VERSION:
        problems.append(
            f"query.trigger is real_time but state_store.integrity.checkpoint_format_version is {format_version}:"
            f" {why} refuses format version 1 (a batch run again could reuse the failed one's state file names and"
            " lose data); set it to 2, on a new checkpoint if one exists"
        )
    return problems


def operator_problems(kinds: Sequence[str], ran: str) -> list[str]:
    """The stateful operators (our kinds, in flow order) Spark's real-time allowlist leaves out, one line each."""
    problems = []
    for kind in dict.fromkeys(kinds):
        if kind in ALLOWED:
            continue
        instead = (
            " (dropDuplicates with the event time among its columns is: it drops each id once the watermark passes)"
            if kind == WITHIN_WATERMARK
            else ""
        )
        problems.append(
            f"query.trigger is real_time but {ran}: Spark's real-time mode runs no {kind}, only a deduplication by"
            f" dropDuplicates and an aggregation without a session window (its allowlist){instead}; change the"
            f" query, or {ANOTHER_TRIGGER}"
        )
    return problems


def python_udf_problem(ran_python: Sequence[str]) -> str | None:
    if not ran_python:
        return None
    return (
        f"query.trigger is real_time but the query calls Python ({', '.join(ran_python)}): Spark's real-time mode"
        f" runs no Python UDF (its allowlist); write it with Spark's functions, or {ANOTHER_TRIGGER}"
    )


def version_problem(spark_version: str) -> str | None:
    if spark_release(spark_version) >= SINCE_SPARK:
        return None
    return (
        f"query.trigger is real_time but this is Spark {spark_version}: a stateful query runs in real time from"
        f" Spark {'.'.join(map(str, SINCE_SPARK))} on; pip install 'pyspark>=4.3,<4.4' (and pin it in"
        f" pyproject.toml), or {ANOTHER_TRIGGER}"
    )


def slots_needed(kafka_partitions: int, shuffle_partitions: int, stateful_operators: int) -> int:
    """Task slots a real-time batch holds at once: a long-running task per Kafka partition read, and one
    per shuffle partition of each stateful operator's stage."""
    return kafka_partitions + shuffle_partitions * max(1, stateful_operators)


def slots_problem(slots: int, kafka_partitions: int, shuffle_partitions: int, stateful_operators: int) -> str | None:
    needed = slots_needed(kafka_partitions, shuffle_partitions, stateful_operators)
    if slots >= needed:
        return None
    stages = "" if stateful_operators <= 1 else f" in each of its {stateful_operators} stateful stages"
    return (
        f"query.trigger is real_time but the job has {slots} task slot{'s' if slots != 1 else ''} (cores) and a"
        f" real-time batch runs all its tasks at once: {kafka_partitions} for the source topic's partitions +"
        f" {shuffle_partitions} (spark.shuffle_partitions){stages} = {needed}; give the job {needed} cores"
        f" (spark.master local[{needed}], or more executor cores), or lower spark.shuffle_partitions on a new"
        " checkpoint"
    )


# Spark's error when a batch's tasks are more than the free task slots: at the start the job's own check
# comes first (slots_problem), so while it runs the source topic gained partitions.
INSUFFICIENT_SLOTS = "CONCURRENT_SCHEDULER_INSUFFICIENT_SLOT"


def slots_gone_line(message: str) -> str | None:
    """The one line for Spark's INSUFFICIENT_SLOTS in a query's error; None when it holds none."""
    if INSUFFICIENT_SLOTS not in message:
        return None
    counts = re.search(r"needs (\d+) concurrent task slots.*? only (\d+) ", message)
    needs = f" needs {counts[1]} task slots at once and {counts[2]} are free" if counts else " needs more task slots"
    return (
        f"a batch{needs}: the source topic gained partitions while the job ran, more than the task slots it has"
        " (a real-time batch runs a task per partition and one per shuffle partition, all at once); the batch did"
        " not start, nothing of it was written: start the job again, and its start counts the partitions against"
        " the cores and says how many it needs"
    )
