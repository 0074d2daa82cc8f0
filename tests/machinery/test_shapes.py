"""Every stateful operator a PySpark query can build, written into the project's query as a user
would, run on real local Spark: restarted through the guard, and its state held against the estimate.

Each shape replaces the body of query.py's stateful_query. The rate-micro-batch source makes 400
events per batch and moves event time on by one second per batch, so the event-time rate is exact
(as in test_state_rows.py). The first run goes on until the state has had over twice its longest
lifetime to fill; the medians of its last batches' numRowsTotal (Spark's own count) are held
against `estimate` for the same settings, within 25%. A state that nothing drops has no steady
state: its last batch is held against the estimate at a horizon of the event time the run covered.
The second run restarts on the same checkpoint, through the guard, as an unchanged query must.
"""

from __future__ import annotations

import json
import statistics
from pathlib import Path

import pytest
from pyspark.sql import functions as F
from pyspark.testing import assertDataFrameEqual
from stream_job.machinery.core.contract import user_query
from stream_job.machinery.core.settings import load_settings
from stream_job.machinery.job.endpoints.output import read_output
from stream_job.machinery.job.endpoints.sample_input import UNIQUE_KEYS
from stream_job.machinery.job.plan.query_plan import checked_plan
from stream_job.machinery.operations.inspection import operator_names

from .conftest import (
    BAKED_OPERATOR,
    DEFAULT_OPERATOR,
    committed_batches,
    deep_merge,
    edited_query,
    files_job,
    final_watermark,
    read_events_batch,
    run_cli,
    run_main,
    secondary_among,
    write_settings_file,
)
from .test_exactly_once import edited_query_killed_and_restarted

pytestmark = [
    pytest.mark.streaming,
    pytest.mark.skipif(BAKED_OPERATOR != DEFAULT_OPERATOR, reason="the default bake's query is edited"),
]

EVENTS_PER_BATCH = 400  # per second of event time
WATERMARK = "4 seconds"
BATCHES = 12  # 12 s of event time: over 1.5 times the longest lifetime below (gap 2 + watermark 4 + 1)
SETTLED = 3
ROWS_TOLERANCE = 0.25

START = '''    """Events per key and tumbling window; a window's state is dropped once the watermark passes it."""
'''
EVENTS = 'wanted(events, query).withWatermark("event_time", query.watermark)'


# applyInPandasWithState: a running count per key, emitted at each call; a key is dropped once the
# watermark passes its newest event plus 2 s (an event-time timeout).
RUNNING_COUNTS = """
    import pandas as pd
    from pyspark.sql.streaming.state import GroupStateTimeout

    def count(key, frames, state):
        if state.hasTimedOut:
            state.remove()
            return
        seen, newest = state.get[0] if state.exists else 0, None
        for frame in frames:
            seen += len(frame)
            newest = max(frame["event_time"].max(), newest or frame["event_time"].max())
        state.update((seen,))
        state.setTimeoutTimestamp(int(newest.timestamp() * 1000) + 2000)
        yield pd.DataFrame({"key": [key[0]], "newest": [newest], "events": [seen]})

    return EVENTS.groupBy("key").applyInPandasWithState(
        count, "key string, newest timestamp, events long", "events long", "append", GroupStateTimeout.EventTimeTimeout
    )
"""
TIMEOUT_LINE = "        state.setTimeoutTimestamp(int(newest.timestamp() * 1000) + 2000)\n"
# The same function with no timeout (nothing removes a key: its state only grows), and with a
# processing-time timeout of an hour (every key stays through the run).
RUNNING_COUNTS_KEPT = RUNNING_COUNTS.replace(TIMEOUT_LINE, "").replace("EventTimeTimeout", "NoTimeout")
RUNNING_COUNTS_PROCESSING_TIME = RUNNING_COUNTS.replace(
    TIMEOUT_LINE, "        state.setTimeoutDuration(3_600_000)\n"
).replace("EventTimeTimeout", "ProcessingTimeTimeout")

# transformWithState's Row API: a count per key in a value state, each update emitted (update mode,
# which Spark runs transformWithState in); the key's state stays (the estimate takes the keys of its
# session timeout, here the 200 keys).
ROW_COUNTS = """
    from pyspark.sql import Row
    from pyspark.sql.streaming import StatefulProcessor

    class Count(StatefulProcessor):
        def init(self, handle):
            self.seen = handle.getValueState("seen", "events long")

        def handleInputRows(self, key, rows, timerValues):
            seen = (self.seen.get() or (0,))[0] + sum(1 for _ in rows)
            self.seen.update((seen,))
            yield Row(key=key[0], events=seen)

        def close(self):
            pass

    return EVENTS.groupBy("key").transformWithState(Count(), "key string, events long", "Update", "None")
"""

# name -> (the body's return expression or code, keys, Spark's operator name, sink, capacity changes)
SHAPES = {
    "sliding window": (
        'return EVENTS.groupBy(F.window("event_time", "2 seconds", "1 second").alias("window"), "key")'
        '.agg(F.count(F.lit(1)).alias("events"))'
        '.select(F.col("window.start").alias("window_start"), F.col("window.end").alias("window_end"), "key", "events")',
        200,
        "stateStoreSave",
        "parquet",
        {},
    ),
    "session window, a session per event": (
        'return EVENTS.groupBy(F.session_window("event_time", "2 seconds").alias("session"), "key")'
        '.agg(F.count(F.lit(1)).alias("events"))'
        '.select(F.col("session.start").alias("session_start"), F.col("session.end").alias("session_end"), "key", "events")',
        UNIQUE_KEYS,
        "sessionWindowStateStoreSaveExec",
        "parquet",
        {},
    ),
    "session window, a session per key": (
        'return EVENTS.groupBy(F.session_window("event_time", "2 seconds").alias("session"), "key")'
        '.agg(F.count(F.lit(1)).alias("events"))'
        '.select(F.col("session.start").alias("session_start"), F.col("session.end").alias("session_end"), "key", "events")',
        200,
        "sessionWindowStateStoreSaveExec",
        "parquet",
        {},
    ),
    "aggregation without a window": (
        'return EVENTS.groupBy("key").agg(F.count(F.lit(1)).alias("events"))',
        200,
        "stateStoreSave",
        "console",
        {},
    ),
    "dropDuplicates with the event time": (
        'return EVENTS.dropDuplicates(["event_id", "event_time"])',
        UNIQUE_KEYS,
        "dedupe",
        "parquet",
        {},
    ),
    "dropDuplicates without a watermark": (
        'return EVENTS.dropDuplicates(["event_id"])',
        UNIQUE_KEYS,
        "dedupe",
        "parquet",
        {"state_horizon": f"{BATCHES} seconds"},
    ),
    "applyInPandasWithState, event-time timeout": (
        RUNNING_COUNTS,
        UNIQUE_KEYS,
        "applyInPandasWithState",
        "parquet",
        {"state_timeout": "2 seconds"},
    ),
    "applyInPandasWithState, no timeout": (
        RUNNING_COUNTS_KEPT,
        UNIQUE_KEYS,
        "applyInPandasWithState",
        "parquet",
        {"state_horizon": f"{BATCHES} seconds"},
    ),
    "applyInPandasWithState, processing-time timeout": (
        RUNNING_COUNTS_PROCESSING_TIME,
        200,
        "applyInPandasWithState",
        "parquet",
        {"state_timeout": "1 hour"},
    ),
    "transformWithState, Row API, update mode": (ROW_COUNTS, 200, "transformWithStateInPySparkExec", "console", {}),
    "limit": ("return EVENTS.limit(50)", UNIQUE_KEYS, "globalLimit", "parquet", {}),
}


def shape_edits(code: str) -> dict[str, str]:
    """query.py's edit that makes `code` (a return expression or a block) the body of stateful_query."""
    body = code.replace("EVENTS", EVENTS)
    return {START: START + ("" if body.startswith("\n") else "    ") + body + "\n"}


def shape_settings(tmp_path, keys: int, sink: str, capacity: dict, provider: str = "hdfs") -> str:
    changes = {
        "spark": {"shuffle_partitions": 2, "master": "local[2]"},
        "state_store": {"provider": provider, "changelog_checkpointing": False},
        "source": {
            "type": "rate",
            "rate": {"rows_per_batch": EVENTS_PER_BATCH, "advance_per_batch": "1 second", "keys": keys},
        },
        "sink": {
            "type": sink,
            "output_mode": "update" if sink == "console" else "append",
            "path": str(tmp_path / "output"),
        },
        "query": {
            "name": "shapes",
            "checkpoint_location": str(tmp_path / "checkpoint"),
            "watermark": WATERMARK,
            "trigger": "100 milliseconds",  # batches back to back
        },
        "monitoring": {"progress_format": "json"},
        "capacity": {
            "input_rows_per_second": EVENTS_PER_BATCH,
            "key_cardinality": None if keys == UNIQUE_KEYS else keys,
            **capacity,
        },
    }
    return str(write_settings_file(tmp_path / "settings.yaml", changes))


def batches(stdout: str) -> list[dict]:
    return [
        event
        for line in stdout.splitlines()
        if line.startswith("{") and (event := json.loads(line))["event"] == "batch"
    ]


# Secondary (make test-all runs them): applyInPandasWithState's other timeouts, read from the plan the
# same way as the event-time one; without a timeout its state grows as dropDuplicates' without a
# watermark does (the same rule), and an hour's processing-time timeout keeps every one of 200 keys.
SECONDARY_SHAPES = ("applyInPandasWithState, no timeout", "applyInPandasWithState, processing-time timeout")


@pytest.mark.parametrize("shape", secondary_among(SHAPES, SECONDARY_SHAPES))
def test_each_shape_restarts_and_keeps_the_rows_the_estimate_says(spark, tmp_path, shape):
    code, keys, spark_name, sink, capacity = SHAPES[shape]
    # transformWithState runs on RocksDB only.
    provider = "rocksdb" if spark_name.startswith("transformWithState") else "hdfs"
    settings_path = shape_settings(tmp_path, keys, sink, capacity, provider)
    with edited_query(shape_edits(code)):
        first = run_main("--settings", settings_path, "--max-batches", str(BATCHES))
        assert first.returncode == 0, first.stderr
        again = run_main("--settings", settings_path, "--max-batches", "1")
        assert again.returncode == 0, again.stderr
        # A batch covers one second of event time, however fast it runs: the batch the estimate is given.
        settings = load_settings(settings_path)
        sizing = settings.sizing(checked_plan(settings), trigger="1 second")
    # The operator metadata Spark wrote: `metadata`, or transformWithState's versions under v2/.
    written = (tmp_path / "checkpoint" / "state" / "0" / "_metadata").rglob("*")
    metadata = "".join(path.read_text() for path in written if path.is_file() and not path.name.startswith("."))
    assert f'"operatorName":"{spark_name}"' in metadata
    # The tools (inspect, savepoint, --key) name the checkpoint's operator as the plan does.
    held = spark.read.format("state-metadata").load(str(tmp_path / "checkpoint")).collect()
    assert list(operator_names(str(tmp_path / "checkpoint"), held).values()) == [sizing.operator]
    assert "refused" not in again.stderr and "changed" not in again.stderr, again.stderr
    rows = [event["state_rows"] for event in batches(first.stdout)]
    assert len(rows) >= BATCHES - 1, first.stdout
    if sizing.steady_state:
        spark_rows = statistics.median(rows[-SETTLED:])
    else:
        spark_rows = rows[-1]
        assert sizing.recommended_provider == "rocksdb"
        assert "no steady state" in sizing.rows_working
    print(f"{shape}: Spark {spark_rows:,.0f} rows, estimate {sizing.rows:,} ({sizing.rows / spark_rows:.2f}x)")
    assert abs(sizing.rows - spark_rows) <= ROWS_TOLERANCE * spark_rows, (sizing.rows, spark_rows, sizing.rows_working)


# The oracle of each shape killed mid-batch: what the run's output (or state) must be after the restart,
# from the same query on all the events as a batch job (`expected`). On the files job's input
# (test_exactly_once's, 4 files of 2 minutes, 4 keys in turn, an event every 3 s) a 5-second gap
# makes a session per event.
def rows_the_watermark_passed(end: str):
    """A window or session is emitted once, final, when the watermark passes its `end`."""

    def check(spark, settings, expected, checkpoint):
        expected = expected.where(F.col(end) <= F.lit(final_watermark(spark, settings)))
        assert expected.count() > 0
        assertDataFrameEqual(read_output(spark, settings.sink), expected)

    return check


def every_row_at_once(spark, settings, expected, checkpoint):
    """Deduplication emits each first row in the batch that reads it."""
    assertDataFrameEqual(read_output(spark, settings.sink), expected)


def counts_in_the_state(spark, settings, expected, checkpoint):
    """An update-mode count has no final output to compare (the console's): its state, read with Spark's
    statestore reader, holds the batch job's count per key, neither an event lost nor counted twice."""
    state = spark.read.format("statestore").load(str(checkpoint))
    assertDataFrameEqual(state.select("key.key", "value.*").toDF("key", "events"), expected)


def the_first_rows(spark, settings, expected, checkpoint):
    """A limit emits its rows once: the first file's 40 events (batch 0), then 10 of the second file's."""
    output, events = read_output(spark, settings.sink), read_events_batch(spark, settings.source.files.path)
    assert output.count() == output.select("event_id").distinct().count() == LIMIT
    assert output.join(events, "event_id", "left_anti").count() == 0  # every row an input event
    first_file = events.where(F.input_file_name().endswith("events-0000.json"))
    assert first_file.join(output, "event_id", "left_anti").count() == 0, "batch 0's rows are all emitted"


def counts_never_twice(spark, settings, expected, checkpoint):
    """applyInPandasWithState emits a key's running count at each call: no row twice, and each count is
    the key's events up to its newest, so a batch replayed after the kill counted nothing twice."""
    output = read_output(spark, settings.sink)
    events = read_events_batch(spark, settings.source.files.path)
    counted = output.alias("o").join(
        events.alias("e"), (F.col("o.key") == F.col("e.key")) & (F.col("e.event_time") <= F.col("o.newest"))
    )
    recount = counted.groupBy("o.key", "o.newest", "o.events").agg(F.count(F.lit(1)).alias("input"))
    assert recount.where(F.col("events") != F.col("input")).count() == 0
    assert recount.count() == output.count()
    running_counts_end_at_every_event(spark, settings, expected, checkpoint)


def running_counts_end_at_every_event(spark, settings, expected, checkpoint):
    """A running count per key emitted at each call: no row twice (a replayed batch's rows are the
    ones its first try wrote), and each key's last count is all its events, none lost or counted twice."""
    output = read_output(spark, settings.sink)
    assert output.count() == output.distinct().count() > 0
    assertDataFrameEqual(output.groupBy("key").agg(F.max("events").alias("events")), expected)


LIMIT = 50


def events_per_key(events):
    return events.groupBy("key").agg(F.count(F.lit(1)).alias("events"))


UPDATES_TO_THE_CONSOLE = {"sink": {"type": "console", "output_mode": "update"}}

# name -> (the body's code, the oracle, the batch job the oracle holds it to when not the query
# itself, settings changes)
KILLED = {
    "session window": (
        'return EVENTS.groupBy(F.session_window("event_time", "5 seconds").alias("session"), "key")'
        '.agg(F.count(F.lit(1)).alias("events"))'
        '.select(F.col("session.start").alias("session_start"), F.col("session.end").alias("session_end"), "key", "events")',
        rows_the_watermark_passed("session_end"),
        None,
        {},
    ),
    "sliding window": (
        'return EVENTS.groupBy(F.window("event_time", "1 minute", "20 seconds").alias("window"), "key")'
        '.agg(F.count(F.lit(1)).alias("events"))'
        '.select(F.col("window.start").alias("window_start"), F.col("window.end").alias("window_end"), "key", "events")',
        rows_the_watermark_passed("window_end"),
        None,
        {},
    ),
    "dropDuplicates with the event time": (
        'return EVENTS.dropDuplicates(["event_id", "event_time"])',
        every_row_at_once,
        None,
        {},
    ),
    "aggregation without a window": (
        'return EVENTS.groupBy("key").agg(F.count(F.lit(1)).alias("events"))',
        counts_in_the_state,
        None,
        UPDATES_TO_THE_CONSOLE,
    ),
    "dropDuplicates without a watermark": ('return EVENTS.dropDuplicates(["event_id"])', every_row_at_once, None, {}),
    "limit": (f"return EVENTS.limit({LIMIT})", the_first_rows, None, {}),
    "applyInPandasWithState": (RUNNING_COUNTS, counts_never_twice, events_per_key, {}),
    "applyInPandasWithState, no timeout": (RUNNING_COUNTS_KEPT, counts_never_twice, events_per_key, {}),
    # Into parquet: the processor declares append; transformWithState runs on RocksDB only.
    "transformWithState, Row API": (
        ROW_COUNTS.replace('"Update", "None"', '"Append", "None"'),
        running_counts_end_at_every_event,
        events_per_key,
        {"state_store": {"provider": "rocksdb"}},
    ),
}
# Secondary (make test-all runs them), each recovering through the same operator and state as one in
# CI: dropDuplicates with the event time as it does without (only the keys differ, and the eviction
# no kill can reach), applyInPandasWithState without a timeout as with one (only when a key is dropped
# differs), and the Row API's transformWithState as transformWithStateInPandas, killed in the
# custom_state bake (one exec on the JVM; the Row API differs in how Python reads and writes rows).
# A processing-time timeout is not killed here: these runs end with their input (available_now), which
# it never lets a run do (the test below).
SECONDARY_KILLED = (
    "dropDuplicates with the event time",
    "applyInPandasWithState, no timeout",
    "transformWithState, Row API",
)


@pytest.mark.faults
@pytest.mark.parametrize("shape", secondary_among(KILLED, SECONDARY_KILLED))
def test_a_shape_killed_mid_batch_restarts_to_the_batch_computation(
    spark, make_settings, write_settings, tmp_path, shape
):
    code, check, batch_job, changes = KILLED[shape]
    edits = shape_edits(code)
    # The HDFS-backed store where the operator runs on it (RocksDB's crashes are test_exactly_once's and
    # test_fault_injection's).
    changes = deep_merge(files_job(tmp_path, "parquet", "hdfs", files=4), changes)
    settings = make_settings(changes)
    edited_query_killed_and_restarted(write_settings(changes), settings, edits, tmp_path)
    with edited_query(edits):
        events = read_events_batch(spark, settings.source.files.path)
        expected = user_query().stateful_query(events, settings.query) if batch_job is None else batch_job(events)
    check(spark, settings, expected, Path(settings.query.checkpoint_location))


# Processing-time timers (applyInPandasWithState's ProcessingTimeTimeout, transformWithState's
# timeMode ProcessingTime) make Spark run a batch after every batch, so a run to the end of its input
# never ends (tried on 4 files: batch 1,968 after 16 minutes). The run is refused before a batch;
# calibration, which runs the query over its sample files to their end, stops after them (the same
# stop for both: calibrated once).
# By the machinery's names of the two (applyInPandasWithState, transformWithState).
PROCESSING_TIME_TIMERS = {
    "pandas_state": (RUNNING_COUNTS_PROCESSING_TIME, "hdfs"),
    "custom_state": (ROW_COUNTS.replace('"Update", "None"', '"Append", "ProcessingTime"'), "rocksdb"),
}


@pytest.mark.parametrize("operator", list(PROCESSING_TIME_TIMERS))
def test_processing_time_timers_under_available_now_are_refused_and_calibration_ends(
    write_settings, tmp_path, operator
):
    code, provider = PROCESSING_TIME_TIMERS[operator]
    path = write_settings(files_job(tmp_path, "parquet", provider, files=2))
    with edited_query(shape_edits(code)):
        run = run_main("--settings", str(path))
        calibrated = (
            run_cli("estimate", "--calibrate", "--settings", str(path), "--json")
            if operator == "pandas_state"
            else None
        )
    assert run.returncode == 2, run.stderr[-3000:]
    assert run.stderr.splitlines()[-1] == (
        f"settings error: query.trigger is available_now but the query runs {operator} with processing-time"
        " timers (a ProcessingTimeTimeout, or timeMode ProcessingTime), for which Spark runs a batch after every"
        " batch: the run would never end; set query.trigger to an interval such as '1 minute', stop it with"
        " --max-batches, or time the state out by event time"
    )
    assert committed_batches(tmp_path / "checkpoint") == []
    if calibrated is not None:
        assert calibrated.returncode == 0, calibrated.stderr[-3000:]
        assert json.loads(calibrated.stdout)["calibration"]["peak_rows"] > 0
