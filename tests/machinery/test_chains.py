"""Queries of several stateful operators, written the way a user writes them in query.py, run for real.

Each chain replaces stateful_query in a copy of the project (and drops the starter's OPERATOR label,
as a user who makes the query theirs would): deduplication then a windowed count, a stream-stream
join then a windowed count of the matches, two chained windowed counts, deduplication then custom
state (the custom_state bake, which has the state processor), and a stateless stream-static join
before a windowed count. Each runs on landing files, is restarted with more input, killed with
SIGKILL mid-batch and restarted again; its whole output equals the same computation as a batch job.
Then each operator's estimated state rows are held against Spark's numRowsTotal for that operator
at steady state.
"""

from __future__ import annotations

import json
import os
import statistics
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path

import pytest
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.testing import assertDataFrameEqual
from stream_job.machinery.core.plan_operators import flow_order
from stream_job.machinery.core.settings import load_settings
from stream_job.machinery.job.endpoints.sample_input import UNIQUE_KEYS, write_sample_files
from stream_job.machinery.job.plan.query_plan import read_plan
from stream_job.machinery.job.run.runner import build_result, run_query
from stream_job.machinery.job.spark.session import apply_confs
from stream_job.machinery.testing import run_batch

from .conftest import (
    BAKED_OPERATOR,
    DEFAULT_OPERATOR,
    committed_batches,
    deep_merge,
    digest,
    edited_query,
    project_copy,
    read_events_batch,
    run_cli,
    run_main,
    session_expectation,
    start_job,
    write_settings_file,
)
from .test_exactly_once import kill_mid_batch

pytestmark = [pytest.mark.streaming, pytest.mark.faults, pytest.mark.chains]

DEDUPLICATED_COUNT = '''
def stateful_query(events, query, join_events=None):
    """Each event_id once, then counted per key and window."""
    unique = events.withWatermark("event_time", query.watermark).dropDuplicatesWithinWatermark(["event_id"])
    return (
        unique.groupBy(F.window("event_time", query.window).alias("window"), "key")
        .agg(F.count(F.lit(1)).alias("events"))
        .select(F.col("window.start").alias("window_start"), F.col("window.end").alias("window_end"), "key", "events")
    )
'''
JOINED_COUNT = '''
def stateful_query(events, query, join_events=None):
    """Orders matched with their payments within the range, then the matches counted per window."""
    from datetime import timedelta

    from .machinery.core.durations import parse_duration

    span = timedelta(seconds=parse_duration(query.join.range))
    left = events.withWatermark("event_time", query.watermark)
    right = join_events.withWatermark("event_time", query.watermark).select(
        F.col("key").alias("join_key"), F.col("event_time").alias("join_event_time")
    )
    condition = (
        (left.key == right.join_key)
        & (right.join_event_time >= left.event_time)
        & (right.join_event_time <= left.event_time + F.lit(span))
    )
    return (
        left.join(right, condition, "inner")
        .groupBy(F.window("event_time", query.window).alias("window"))
        .agg(F.count(F.lit(1)).alias("matches"))
        .select(F.col("window.start").alias("window_start"), F.col("window.end").alias("window_end"), "matches")
    )
'''
COUNTED_COUNT = '''
def stateful_query(events, query, join_events=None):
    """Events per key and window, then per key and a window twice as long: two aggregations."""
    from .machinery.core.durations import parse_duration

    first = (
        events.withWatermark("event_time", query.watermark)
        .groupBy(F.window("event_time", query.window).alias("window"), "key")
        .agg(F.count(F.lit(1)).alias("events"))
    )
    longer = f"{2 * parse_duration(query.window)} seconds"
    return (
        first.groupBy(F.window(F.window_time("window"), longer).alias("window"), "key")
        .agg(F.sum("events").alias("events"), F.count(F.lit(1)).alias("windows"))
        .select(
            F.col("window.start").alias("window_start"), F.col("window.end").alias("window_end"),
            "key", "events", "windows",
        )
    )
'''
DEDUPLICATED_SESSIONS = '''
def stateful_query(events, query, join_events=None):
    """Each event_id once, then the visit sessions of the unique events: sessions.py's processor on
    the deduplicated stream, whose watermark is set once (Spark refuses a second withWatermark after
    a stateful operator)."""
    from datetime import timedelta

    from .machinery.core.durations import parse_duration
    from .sessions import OUTPUT_SCHEMA, SessionProcessor

    custom = query.custom_state
    processor = SessionProcessor(timedelta(seconds=parse_duration(custom.session_timeout)), custom.recent_events)
    unique = events.withWatermark("event_time", query.watermark).dropDuplicatesWithinWatermark(["event_id"])
    return unique.groupBy("key").transformWithStateInPandas(processor, OUTPUT_SCHEMA, "Append", "EventTime")
'''
REGIONS = [(f"key-{n}", "north" if n % 2 else "south") for n in range(4)]
REGIONAL_COUNT = f'''
REGIONS = {REGIONS!r}


def stateful_query(events, query, join_events=None):
    """Each event with its key's region from a small static table (a stateless join), then counted
    per region and window."""
    regions = events.sparkSession.createDataFrame(REGIONS, "key string, region string")
    return (
        events.join(regions, "key", "left")
        .withWatermark("event_time", query.watermark)
        .groupBy(F.window("event_time", query.window).alias("window"), "region")
        .agg(F.count(F.lit(1)).alias("events"))
        .select(F.col("window.start").alias("window_start"), F.col("window.end").alias("window_end"), "region", "events")
    )
'''


@dataclass(frozen=True)
class Chain:
    code: str
    # The plan's stateful operators, in the order events reach them.
    operators: tuple[str, ...]
    two_inputs: bool = False
    # Landing files repeat events (within a file and across files), for a deduplication to drop.
    repeats: bool = False
    run_length: int = 1
    # Distinct keys per operator for the estimate, where they are not the source's.
    key_cardinality: tuple[int | None, ...] | None = None


CHAINS = {
    "deduplication-then-count": Chain(DEDUPLICATED_COUNT, ("deduplication", "windowed_aggregation"), repeats=True),
    "join-then-count": Chain(JOINED_COUNT, ("stream_stream_join", "windowed_aggregation"), two_inputs=True),
    "count-then-count": Chain(COUNTED_COUNT, ("windowed_aggregation", "windowed_aggregation")),
    "deduplication-then-sessions": Chain(
        DEDUPLICATED_SESSIONS, ("deduplication", "custom_state"), repeats=True, run_length=10
    ),
    # Regions: north, south, and null for the keys the small table lacks.
    "static-join-then-count": Chain(REGIONAL_COUNT, ("windowed_aggregation",), key_cardinality=(3,)),
}
# Where each chain runs: the custom_state chain needs that bake's state processor; the rest, the default bake.
HOME = {name: "custom_state" if "sessions" in name else DEFAULT_OPERATOR for name in CHAINS}
PARAMS = [
    pytest.param(name, marks=[pytest.mark.operator] if HOME[name] != DEFAULT_OPERATOR else [], id=name)
    for name in CHAINS
]


# The crash of a chain: deduplication-then-count (a starter) proves that a SIGKILL loses and repeats
# nothing across two operators, as each operator's own crash in its bake (custom_state's included)
# does for one; the other chains' crashes repeat that proof (secondary: make test-all runs them),
# their estimates below stay in CI.
CRASH_PARAMS = [
    pytest.param(*param.values, marks=[*param.marks, pytest.mark.secondary], id=param.id)
    if param.id != "deduplication-then-count"
    else param
    for param in PARAMS
]


def at_home(name: str) -> None:
    if HOME[name] != BAKED_OPERATOR:
        pytest.skip(f"the {HOME[name]} bake runs it")


def chained(chain: Chain) -> dict[str, str]:
    """The edits of query.py that put the chain's stateful_query in place of the starter's, without the
    starter's OPERATOR label."""
    return {f'OPERATOR = "{BAKED_OPERATOR}"\n': "", "\n\ndef _iso(": f"\n\n{chain.code}\n\ndef _iso("}


def replaced(code: str) -> dict[str, str]:
    """The edit of query.py that adds code (a stateful_query of its own, which wins) before _iso."""
    return {"\n\ndef _iso(": f"\n\n{code}\n\ndef _iso("}


def add_files(landing: Path, chain: Chain, files: int, join_landing: Path | None) -> None:
    """files more landing files (see conftest.files_job: 40 events 3 s apart, 2 minutes each), with repeats."""
    keys = UNIQUE_KEYS if chain.two_inputs else 4
    shape = {"files": files, "events_per_file": 40, "keys": keys, "advance_per_file": timedelta(minutes=2)}
    written = write_sample_files(landing, **shape, run_length=chain.run_length)
    if join_landing is not None:
        delays = tuple(timedelta(minutes=1) * share for share in (0.25, 0.75, 1.5))
        write_sample_files(join_landing, **shape, run_length=chain.run_length, payment_delays=delays)
    if chain.repeats:
        for path in written:
            repeat_events(path)


def repeat_events(path: Path) -> None:
    """Each file gets the last 3 events of the file before it in front, and its own first 3 again at
    its end, byte for byte (a source that delivers at least once); its modification time is kept, so
    the files stay in their order."""
    before = path.with_name(f"events-{int(path.stem.split('-')[1]) - 1:05d}.json")
    lines = path.read_text().splitlines()
    earlier = before.read_text().splitlines()[-3:] if before.is_file() else []
    times = path.stat()
    path.write_text("\n".join([*earlier, *lines, *lines[:3]]) + "\n")
    os.utime(path, ns=(times.st_atime_ns, times.st_mtime_ns))


def chain_settings(tmp_path: Path, chain: Chain) -> dict:
    changes = {
        "spark": {"shuffle_partitions": 2, "platform": "oss", "master": "local[2]"},
        # unsaferow: Spark encodes only transformWithState's state in Avro, and refuses a chain holding
        # another operator with it (the loader says so), as a custom_state project's user would set it.
        "state_store": {"provider": "rocksdb", "changelog_checkpointing": True, "encoding_format": "unsaferow"},
        "source": {"type": "files", "files": {"path": str(tmp_path / "landing"), "max_files_per_trigger": 1}},
        "join_source": None,
        "sink": {"type": "parquet", "output_mode": "append", "path": str(tmp_path / "output")},
        "query": {
            "name": "chain",
            "watermark": "1 minute",
            "window": "1 minute",
            "join": {"type": "inner", "range": "1 minute"},
            "custom_state": {"session_timeout": "1 minute"},
            "checkpoint_location": str(tmp_path / "checkpoint"),
            "trigger": "available_now",
        },
    }
    if chain.two_inputs:
        join_files = {"path": str(tmp_path / "landing-join"), "max_files_per_trigger": 1}
        changes["join_source"] = {"type": "files", "files": join_files}
    return changes


def batch_oracle(spark: SparkSession, name: str, folder: Path) -> DataFrame:
    """The chain as a batch job over every landing file, as far as the final watermark lets it emit
    (chain_settings: a one-minute watermark, window, range and session timeout). Read without the
    bake's settings loader, which checks the settings against the bake's own query, not the chain."""
    events = read_events_batch(spark, str(folder / "landing")).dropDuplicates()
    inputs = [events] + ([read_events_batch(spark, str(folder / "landing-join"))] if CHAINS[name].two_inputs else [])
    newest = min(frame.agg(F.max("event_time")).first()[0] for frame in inputs)
    watermark = F.lit(newest - timedelta(minutes=1))
    window = F.window("event_time", "1 minute").alias("window")
    columns = [F.col("window.start").alias("window_start"), F.col("window.end").alias("window_end")]
    if name == "deduplication-then-sessions":  # the custom_state bake: its loader takes these settings
        settings = load_settings(folder / "settings.yaml")
        return session_expectation(spark, events.dropDuplicates(["event_id"]), settings)
    if name == "deduplication-then-count":
        counts = events.dropDuplicates(["event_id"]).groupBy(window, "key").agg(F.count(F.lit(1)).alias("events"))
        return counts.select(*columns, "key", "events").where(F.col("window_end") <= watermark)
    if name == "static-join-then-count":
        regions = spark.createDataFrame(REGIONS, "key string, region string")
        counts = events.join(regions, "key", "left").groupBy(window, "region").agg(F.count(F.lit(1)).alias("events"))
        return counts.select(*columns, "region", "events").where(F.col("window_end") <= watermark)
    if name == "count-then-count":
        first = events.groupBy(window, "key").agg(F.count(F.lit(1)).alias("events"))
        first = first.where(F.col("window.end") <= watermark)
        second = first.groupBy(F.window(F.window_time("window"), "2 minutes").alias("window"), "key")
        second = second.agg(F.sum("events").alias("events"), F.count(F.lit(1)).alias("windows"))
        return second.select(*columns, "key", "events", "windows").where(F.col("window_end") <= watermark)
    payments = inputs[1]
    span = timedelta(minutes=1)
    matches = events.alias("o").join(
        payments.alias("p"),
        (F.col("o.key") == F.col("p.key"))
        & (F.col("p.event_time") >= F.col("o.event_time"))
        & (F.col("p.event_time") <= F.col("o.event_time") + F.lit(span)),
    )
    counts = matches.groupBy(F.window("o.event_time", "1 minute").alias("window"))
    counts = counts.agg(F.count(F.lit(1)).alias("matches")).select(*columns, "matches")
    # Spark runs the count on the join's output watermark: the input's less the range, since a match
    # may still come that long after its order.
    return counts.where(F.col("window_end") <= F.lit(newest - timedelta(minutes=1) - span))


@pytest.mark.parametrize("name", CRASH_PARAMS)
def test_a_chain_restarts_survives_sigkill_and_equals_the_batch_job(spark, tmp_path, name):
    at_home(name)
    chain = CHAINS[name]
    changes = chain_settings(tmp_path, chain)
    path = write_settings_file(tmp_path / "settings.yaml", changes)
    landing, join_landing = tmp_path / "landing", (tmp_path / "landing-join" if chain.two_inputs else None)
    checkpoint = tmp_path / "checkpoint"

    add_files(landing, chain, 3, join_landing)
    # The runs in-process, with the chain as the query (edited_query); the one killed, a process of the
    # project copied with the same query.
    with edited_query(chained(chain)):
        first = run_main("--settings", str(path))
    assert first.returncode == 0, first.stderr[-3000:]
    # No label, so no remark: the plan's operators are simply the ones that run.
    assert "query: the plan runs" not in first.stdout

    add_files(landing, chain, 3, join_landing)
    with open(tmp_path / "killed-run.log", "w") as log:
        process = start_job(path, log, cwd=project_copy(tmp_path, chained(chain)))
        in_flight = kill_mid_batch(process, checkpoint)
    assert in_flight not in committed_batches(checkpoint)
    with edited_query(chained(chain)):
        restart = run_main("--settings", str(path))
    assert restart.returncode == 0, restart.stderr[-3000:]
    assert f"batch {in_flight}:" in restart.stdout

    expected = batch_oracle(spark, name, tmp_path)
    assert expected.count() > 0
    # The parquet sink's output, read through its own log as read_output does.
    assertDataFrameEqual(spark.read.parquet(str(tmp_path / "output")), expected)
    held = [info["operatorName"] for info in _state_metadata(checkpoint)]
    assert len(held) == len(chain.operators)

    if name == "deduplication-then-count":
        with edited_query(chained(chain)):
            # inspect reads both operators' state, each beside its own estimate.
            inspect = run_cli("inspect", "--settings", str(path), "--json")
            assert inspect.returncode == 0, inspect.stderr[-3000:]
            report = json.loads(inspect.stdout)
            assert [operator["operator"] for operator in report["operators"]] == [
                "windowed_aggregation",
                "deduplication",
            ]
            by_id = {entry["operator_id"]: entry["operator"] for entry in report["estimate"]["operators"]}
            assert by_id == {0: "windowed_aggregation", 1: "deduplication"}
            rows_before = {operator["operator"]: operator["state_rows"] for operator in report["operators"]}
            # inspect --key finds a key in both operators' stores, each named, with both operators' rules.
            found = run_cli("inspect", "--settings", str(path), "--key", "key-1", "--json")
            assert found.returncode == 0, found.stderr[-3000:]
            lookup = json.loads(found.stdout)
            assert {row["operator"] for row in lookup["rows"]} == {"windowed_aggregation"}  # ids are events' own
            assert "windowed_aggregation: a (key, window) row stays" in lookup["why"]
            # repartition moves both operators' state into 4 partitions, row for row.
            four = write_settings_file(
                tmp_path / "four.yaml", deep_merge(changes, {"spark": {"shuffle_partitions": 4}})
            )
            moved = run_cli("repartition", "--settings", str(four))
            assert moved.returncode == 0, moved.stderr[-3000:]
            after = run_cli("inspect", "--settings", str(four), "--json")
            report = json.loads(after.stdout)
            assert {operator["operator"]: operator["state_rows"] for operator in report["operators"]} == rows_before
            assert {operator["partitions"] for operator in report["operators"]} == {4}
            # Calibration measures the whole query and sizes both operators with its figure.
            calibrated = run_cli(
                "estimate", "--calibrate", "--calibrate-events", "200", "--settings", str(four), "--json"
            )
            assert calibrated.returncode == 0, calibrated.stderr[-3000:]
            sizing = json.loads(calibrated.stdout)
            assert [part["operator"] for part in sizing["operators"]] == ["deduplication", "windowed_aggregation"]
            measured = sizing["calibration"]["bytes_per_row"]
            assert {part["measured_bytes_per_row"] for part in sizing["operators"]} == {measured}
        # The bake's own query is the count alone: the deduplication removed, refused with both lists.
        before = digest(checkpoint), digest(tmp_path / "output")
        refused = run_main("--settings", str(four))
        assert refused.returncode == 4, refused.stderr
        assert refused.stderr.splitlines()[-1] == (
            f"checkpoint error: the query's stateful operators changed: the checkpoint {checkpoint} holds the"
            " state of deduplication -> windowed_aggregation, and the query now runs windowed_aggregation"
            " (deduplication removed). Spark keeps each operator's state by its place in the query, so the state"
            " cannot serve the new query. Either change the query back to deduplication -> windowed_aggregation,"
            " or set query.checkpoint_location to a new directory and sink.path to an empty one, and reprocess the"
            " input from the start."
        )
        assert (digest(checkpoint), digest(tmp_path / "output")) == before


def _state_metadata(checkpoint: Path) -> list[dict]:
    from stream_job.machinery.core.checkpoint.files import stateful_operators

    return stateful_operators(checkpoint)


# The estimate against Spark at steady state, per operator of the chain: the rate-micro-batch
# source, 400 events per second of event time (200 keys; a key per event for the join), a 6 s
# watermark, 3 s windows, ranges and timeouts, 30 batches (the last 10 measured, from the 21st).
STEADY_BATCHES = 30
ROWS_TOLERANCE = 0.25


@pytest.mark.parametrize("name", PARAMS)
def test_each_operator_of_a_chain_is_estimated_as_spark_keeps_it(spark, tmp_path, name):
    at_home(name)
    chain = CHAINS[name]
    keys = UNIQUE_KEYS if chain.two_inputs else 200
    rate = {"type": "rate", "rate": {"rows_per_batch": 400, "advance_per_batch": "1 second", "keys": keys}}
    changes = deep_merge(
        chain_settings(tmp_path, chain),
        {
            "state_store": {"changelog_checkpointing": False},
            "source": rate,
            "join_source": rate if chain.two_inputs else None,
            "query": {
                "watermark": "6 seconds",
                "window": "3 seconds",
                "join": {"range": "3 seconds"},
                "custom_state": {"session_timeout": "3 seconds"},
                "trigger": "100 milliseconds",
            },
            "capacity": {
                "input_rows_per_second": 400,
                "key_cardinality": None if chain.two_inputs else keys,
                "join_input_rows_per_second": None,
                "operators": [{"key_cardinality": count} for count in chain.key_cardinality or ()],
            },
        },
    )
    path = write_settings_file(tmp_path / "settings.yaml", changes)
    with edited_query(chained(chain)):
        settings = load_settings(path)
        apply_confs(spark, settings)
        plan = read_plan(build_result(spark, settings))
        query = run_query(spark, settings, max_batches=STEADY_BATCHES)
    # The ten batches before the 30th: the state of a count of closed windows swings with the phase of its
    # window, so the span measured stays where the estimate was checked (a stop may run a batch or two more).
    progress = [p for p in query.recentProgress if p["stateOperators"] and int(p["batchId"]) < STEADY_BATCHES]
    settled = [p["stateOperators"] for p in progress][-10:]
    by_id = [statistics.median(p[number]["numRowsTotal"] for p in settled) for number in range(len(plan))]
    estimate = settings.sizing(plan, trigger="1 second")
    figures = {
        "operators": [operator.kind for operator in flow_order(plan)],
        "spark": list(reversed(by_id)),
        "estimate": [part.rows for part in estimate.operators],
    }
    print(name, figures)
    assert figures["operators"] == list(chain.operators)
    for operator, measured, estimated in zip(chain.operators, figures["spark"], figures["estimate"], strict=True):
        assert abs(estimated - measured) <= ROWS_TOLERANCE * measured, (operator, estimated, measured)


UNBOUNDED_COUNTS = '''
def stateful_query(events, query, join_events=None):
    """Counts per key, then how many keys have each count: aggregations without a watermark."""
    return events.groupBy("key").count().groupBy("count").count()
'''


def test_a_query_spark_refuses_is_one_line_naming_sparks_rule(tmp_path):
    landing = tmp_path / "landing"
    add_files(landing, CHAINS["count-then-count"], 1, None)
    path = write_settings_file(tmp_path / "settings.yaml", chain_settings(tmp_path, CHAINS["count-then-count"]))
    with edited_query(replaced(UNBOUNDED_COUNTS)):
        run = run_main("--settings", str(path))
    assert run.returncode == 2, run.stderr[-3000:]
    line = run.stderr.splitlines()[-1]
    assert "Traceback" not in run.stderr
    assert line.startswith("query error: Spark refuses the query of stream_job.query: [")
    assert line.endswith("; change the query (no batch ran)") and ";;" not in line
    assert committed_batches(tmp_path / "checkpoint") == []


WATERMARK_TWICE = '''
_counted = stateful_query


def stateful_query(events, query, join_events=None):
    """The starter's count after a deduplication that set its own watermark: the count sets another."""
    unique = events.withWatermark("event_time", query.watermark).dropDuplicatesWithinWatermark(["event_id"])
    return _counted(unique, query, join_events)
'''
WATERMARK_IN_A_ROW = '''
_counted = stateful_query


def stateful_query(events, query, join_events=None):
    """The starter's count on a stream whose watermark is set right before the count sets its own."""
    return _counted(events.withWatermark("event_time", "2 minutes"), query, join_events)
'''
SECOND_WATERMARKS = {
    "after-a-stateful-operator": (
        WATERMARK_TWICE,
        "it sets a watermark (withWatermark) after a stateful operator (deduplication); Spark refuses to redefine"
        " the watermark in a query of several stateful operators (spark.sql.streaming.statefulOperator.allowMultiple):"
        " set it once, on the input, before the first stateful operator",
    ),
    # Spark runs batch 0 and writes its output, then fails ("Redefining watermark is disallowed").
    "twice-in-a-row": (
        WATERMARK_IN_A_ROW,
        'it sets the watermark twice on one stream (withWatermark("event_time", "2 minutes"), then'
        ' withWatermark("event_time", "1 minutes")); Spark refuses to redefine a watermark, at the first batch that'
        " moves it: set it once",
    ),
}


@pytest.mark.parametrize("case", list(SECOND_WATERMARKS))
def test_a_second_watermark_is_refused_before_the_first_batch(tmp_path, case):
    # Spark itself runs these queries and fails a first batch ("Redefining watermark is disallowed").
    code, why = SECOND_WATERMARKS[case]
    add_files(tmp_path / "landing", CHAINS["count-then-count"], 1, None)
    path = write_settings_file(tmp_path / "settings.yaml", chain_settings(tmp_path, CHAINS["count-then-count"]))
    for command in ("run", "check", "estimate"):
        with edited_query(replaced(code)):
            run = run_cli(command, "--settings", str(path))
        assert run.returncode == 2, run.stderr[-3000:]
        assert run.stderr.splitlines() == [
            f"query error: Spark refuses the query of stream_job.query: {why}; change the query (no batch ran)"
        ]
    assert not (tmp_path / "checkpoint").exists() and not (tmp_path / "output").exists()


# The join bake's example query (query.py of a stream_stream_join project), written into another bake.
STARTERS_JOIN = '''
def stateful_query(events, query, join_events=None):
    """Each left event (source) with the right events (join_source) of its key up to join.range after it."""
    from datetime import timedelta

    from .machinery.core.durations import parse_duration

    if join_events is None:
        raise ValueError("stream_stream_join needs the events of join_source")
    span = timedelta(seconds=parse_duration(query.join.range))
    left = wanted(events, query).withWatermark("event_time", query.watermark).select(*EVENT_COLUMNS)
    right = join_events.withWatermark("event_time", query.watermark).select(
        F.col("key").alias("join_key"),
        F.col("event_id").alias("join_event_id"),
        F.col("event_time").alias("join_event_time"),
    )
    condition = (
        (left.key == right.join_key)
        & (right.join_event_time >= left.event_time)
        & (right.join_event_time <= left.event_time + F.lit(span))
    )
    return left.join(right, condition, query.join.type).select(*EVENT_COLUMNS, "join_event_id", "join_event_time")
'''


@pytest.mark.skipif(BAKED_OPERATOR != DEFAULT_OPERATOR, reason="a join under the default bake's label")
def test_join_source_follows_what_the_query_reads_not_its_label(spark, tmp_path):
    """OPERATOR still says windowed_aggregation. join_source was held against it: a join with join_source
    set was refused ("which reads one input; set join_source to null"), and that advice left the join
    without its second input. The query decides: a join reads join_source and runs; join_source is refused
    in one line, by the start and by `check`, where the query does otherwise, and nothing is written."""
    chain = CHAINS["join-then-count"]
    add_files(tmp_path / "landing", chain, 1, tmp_path / "landing-join")
    changes = chain_settings(tmp_path, chain)
    two = write_settings_file(tmp_path / "settings.yaml", changes)
    one = write_settings_file(tmp_path / "one.yaml", deep_merge(changes, {"join_source": None}))
    before = digest(tmp_path)
    mismatches = [  # the query's edits, the settings, the line
        (
            replaced(STARTERS_JOIN),
            one,
            "join_source is null but the query reads a second input (stateful_query's join_events);"
            " add a join_source section for it, with the same keys as source (type, and its files, kafka or rate"
            " settings)",
        ),
        (
            {},  # the bake's own query: the windowed count
            two,
            "join_source is set (type files) but the query reads one input: stateful_query leaves join_events"
            " unread; set join_source to null",
        ),
    ]
    for edits, path, line in mismatches:
        for command in ("check", "run"):
            with edited_query(edits):
                refused = run_cli(command, "--settings", str(path))
            assert refused.returncode == 2, refused.stderr[-3000:]
            assert refused.stderr.splitlines() == [f"settings error: {line}"]
    assert digest(tmp_path) == before

    with edited_query(replaced(STARTERS_JOIN)):
        run = run_main("--settings", str(two))
        assert run.returncode == 0, run.stderr[-3000:]
        settings = load_settings(two)
        orders, payments = (read_events_batch(spark, str(tmp_path / name)) for name in ("landing", "landing-join"))
        expected = run_batch(spark, orders, payments, query=settings.query)
    assert "query: the plan runs stream_stream_join; stream_job.query.OPERATOR (windowed_aggregation)" in run.stdout
    # An inner join emits each match at once: all of them, each order with its payment.
    assert expected.count() > 0 and expected.where(F.col("join_event_id").isNull()).count() == 0
    assertDataFrameEqual(spark.read.parquet(str(tmp_path / "output")), expected)


UNSIZED = '''
def stateful_query(events, query, join_events=None):
    """Sessions whose gap each event computes: a state the estimate has no length to size by."""
    gap = F.when(F.col("key") == "key-0", "1 minute").otherwise("2 minutes")
    return (
        events.withWatermark("event_time", query.watermark)
        .groupBy(F.session_window("event_time", gap).alias("session"), "key")
        .agg(F.count(F.lit(1)).alias("events"))
        .select(F.col("session.start").alias("session_start"), "key", "events")
    )
'''
STATELESS = '''
def stateful_query(events, query, join_events=None):
    """The events as they come: no state."""
    return events.select(*EVENT_COLUMNS)
'''


@pytest.mark.parametrize(
    ("code", "said"), [(UNSIZED, "unsized"), (STATELESS, "stateless")], ids=["unsized", "stateless"]
)
def test_a_query_the_estimate_cannot_size_runs_and_says_so(tmp_path, code, said):
    add_files(tmp_path / "landing", CHAINS["count-then-count"], 2, None)
    path = write_settings_file(tmp_path / "settings.yaml", chain_settings(tmp_path, CHAINS["count-then-count"]))
    with edited_query(replaced(code)):
        run = run_main("--settings", str(path))
        assert run.returncode == 0, run.stderr[-3000:]
        # Two files, a batch each; sessions add a batch that moves the watermark past them.
        assert committed_batches(tmp_path / "checkpoint")[:2] == [0, 1]
        estimate = run_cli("estimate", "--settings", str(path))
        check = run_cli("estimate", "--check", "--settings", str(path))
    assert estimate.returncode == 0, estimate.stderr[-3000:]
    if said == "unsized":
        line = (
            "operator 0, session window of a computed gap (Spark's sessionWindowStateStoreSaveExec), has no sizing"
            " rule here: the guard and inspect cover it, the estimate and the watchdog leave its state out"
        )
        assert f"query: {line}" in run.stdout
        assert f"estimate: {line}" in estimate.stderr
        assert estimate.stdout == (
            "estimate: the query's plan holds no stateful operator to size (session window of a computed gap)\n"
        )
        assert check.returncode == 2, check.stderr
        assert (
            "sizing check failed: the estimate leaves out the state of session window of a computed gap" in check.stderr
        )
    else:
        assert (
            estimate.stdout == "estimate: the query's plan holds no stateful operator to size (no stateful operator)\n"
        )
