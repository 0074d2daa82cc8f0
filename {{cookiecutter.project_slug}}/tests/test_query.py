{%- set op = cookiecutter.stateful_operator -%}
{%- set by_watermark = op in ("windowed_aggregation", "custom_state") -%}
"""Your query: on batch DataFrames with exact rows, and as a real stream restarted on its checkpoint.

The machinery's own guarantees (crashes, damaged checkpoints, the guard, bench, ...) are proven in
the template's test suite; these tests are about the code in {{ cookiecutter.package_name }}/query.py.
"""

from __future__ import annotations

from datetime import datetime{{ ', timedelta' if by_watermark else '' }}
from pathlib import Path

import pytest
from pyspark.sql import DataFrame, SparkSession
{% if by_watermark -%}
from pyspark.sql import functions as F
{% endif -%}
from pyspark.testing import assertDataFrameEqual

{% if by_watermark -%}
from {{ cookiecutter.package_name }}.machinery.durations import parse_duration
{% endif -%}
from {{ cookiecutter.package_name }}.machinery.endpoints.output import read_output
from {{ cookiecutter.package_name }}.machinery.endpoints.sample_input import write_for_settings
from {{ cookiecutter.package_name }}.machinery.runtime.job import run_query
from {{ cookiecutter.package_name }}.machinery.runtime.session import apply_confs
from {{ cookiecutter.package_name }}.machinery.settings import QuerySettings, Settings, load_settings
from {{ cookiecutter.package_name }}.query import EVENT_COLUMNS, EVENT_SCHEMA, events_from_rate{{ '' if op == 'custom_state' else ', stateful_query' }}
{%- if op == "custom_state" %}
from {{ cookiecutter.package_name }}.sessions import OUTPUT_SCHEMA, Session, advance
{%- endif %}

PROJECT_SETTINGS = Path(__file__).resolve().parents[1] / "settings.yaml"


def ts(minute: int, second: int = 0) -> datetime:
    return datetime(2026, 1, 1, 0, minute, second)


def query_settings(**changes: object) -> QuerySettings:
    """The query section of settings.yaml, with changes."""
    return load_settings(PROJECT_SETTINGS).query.model_copy(update=changes)


def test_events_from_rate(spark):
    rate = spark.createDataFrame(
        [(ts(0), 0), (ts(0, 1), 1), (ts(0, 2), 2), (ts(0, 3), 3)], "timestamp timestamp, value long"
    )
    expected = [("rate-0", "key-0", ts(0)), ("rate-1", "key-1", ts(0, 1)), ("rate-2", "key-2", ts(0, 2))]
    expected.append(("rate-3", "key-0", ts(0, 3)))
    assertDataFrameEqual(events_from_rate(rate, keys=3), spark.createDataFrame(expected, EVENT_SCHEMA))
    assert tuple(events_from_rate(rate, keys=3).columns) == EVENT_COLUMNS
{%- if op == "windowed_aggregation" %}


def test_counts_per_key_and_window(spark):
    events = [("e1", "a", ts(0, 5)), ("e2", "a", ts(0, 59)), ("e3", "b", ts(0, 30)), ("e4", "a", ts(1))]
    events = spark.createDataFrame([*events, ("e5", "b", ts(2, 30))], EVENT_SCHEMA)
    expected = spark.createDataFrame(
        [(ts(0), ts(1), "a", 2), (ts(0), ts(1), "b", 1), (ts(1), ts(2), "a", 1), (ts(2), ts(3), "b", 1)],
        "window_start timestamp, window_end timestamp, key string, events long",
    )
    result = stateful_query(events, query_settings(window="1 minute"))
    assertDataFrameEqual(result, expected)
    assert result.columns == ["window_start", "window_end", "key", "events"]
{%- elif op == "deduplication" %}


def test_keeps_the_first_of_each_event_id(spark):
    events = spark.createDataFrame(
        [("e1", "a", ts(0)), ("e2", "a", ts(0, 30)), ("e1", "a", ts(0)), ("e3", "b", ts(1))], EVENT_SCHEMA
    )
    expected = spark.createDataFrame([("e1", "a", ts(0)), ("e2", "a", ts(0, 30)), ("e3", "b", ts(1))], EVENT_SCHEMA)
    result = stateful_query(events, query_settings())
    assertDataFrameEqual(result, expected)
    assert tuple(result.columns) == EVENT_COLUMNS
{%- elif op == "stream_stream_join" %}


JOINED = "event_id string, key string, event_time timestamp, join_event_id string, join_event_time timestamp"


@pytest.mark.parametrize("join_type", ["inner", "left_outer"])
def test_matches_the_same_key_within_the_range(spark, join_type):
    orders = spark.createDataFrame(
        [("o1", "k1", ts(0)), ("o2", "k2", ts(0)), ("o3", "k1", ts(10)), ("o4", "k4", ts(20))], EVENT_SCHEMA
    )
    payments = spark.createDataFrame(
        # p1 at the end of o1's range (inclusive), p2 a second past o2's, p3 before o4, p4 within o3's.
        [("p1", "k1", ts(5)), ("p2", "k2", ts(5, 1)), ("p3", "k4", ts(19)), ("p4", "k1", ts(12))],
        EVENT_SCHEMA,
    )
    query = query_settings()
    query = query.model_copy(update={"join": query.join.model_copy(update={"type": join_type, "range": "5 minutes"})})
    rows = [("o1", "k1", ts(0), "p1", ts(5)), ("o3", "k1", ts(10), "p4", ts(12))]
    if join_type == "left_outer":
        rows += [("o2", "k2", ts(0), None, None), ("o4", "k4", ts(20), None, None)]
    assertDataFrameEqual(stateful_query(orders, query, payments), spark.createDataFrame(rows, JOINED))
{%- elif op == "custom_state" %}


def test_advance_opens_updates_and_closes_sessions():
    minute = timedelta(minutes=1)
    events = [(ts(0), "e1"), (ts(1), "e2"), (ts(3), "e3"), (ts(9), "e4")]
    closed, still_open = advance(None, events, timeout=5 * minute, recent=2)
    # e4 comes 6 minutes after e3, more than the timeout: the first session closes with 3 visits.
    assert closed == [Session(ts(0), ts(3), 3, ("e2", "e3"))]
    assert still_open == Session(ts(9), ts(9), 1, ("e4",))
    # A later batch continues the open session; an earlier event still within it joins it.
    closed, still_open = advance(still_open, [(ts(8), "e5"), (ts(12), "e6")], timeout=5 * minute, recent=2)
    assert closed == []
    assert still_open == Session(ts(8), ts(12), 3, ("e5", "e6"))
{%- endif %}


def stream_settings(tmp_path: Path) -> Settings:
    """settings.yaml with its state store, on sample files (one per batch) into parquet, until all are done."""
    files = {"type": "files", "files": {"path": str(tmp_path / "landing"), "max_files_per_trigger": 1}}
    changes: dict = {
        "spark": {"shuffle_partitions": 2, "master": "local[2]", "platform": "oss"},
        "source": files,
        "sink": {"type": "parquet", "output_mode": "append", "path": str(tmp_path / "output")},
        "query": {
            "name": "test_query",
            "watermark": "1 minute",
            "window": "1 minute",
            "join": {"range": "1 minute"},
            "custom_state": {"session_timeout": "1 minute"},
            "checkpoint_location": str(tmp_path / "checkpoint"),
            "trigger": "available_now",
        },
    }
{%- if op == "stream_stream_join" %}
    changes["join_source"] = {
        "type": "files",
        "files": {"path": str(tmp_path / "landing-join"), "max_files_per_trigger": 1},
    }
{%- endif %}
    return load_settings(PROJECT_SETTINGS, **changes)


def read_events(spark: SparkSession, path: str) -> DataFrame:
    return spark.read.schema(EVENT_SCHEMA).json(path)


def expected_output(spark: SparkSession, settings: Settings) -> DataFrame:
    """The query as a batch job over every file, as far as the stream's final watermark lets it emit."""
    events = read_events(spark, settings.source.files.path)
{%- if op in ("windowed_aggregation", "custom_state") %}
    newest = events.agg(F.max("event_time")).first()[0]
    watermark = newest - timedelta(seconds=parse_duration(settings.query.watermark))
{%- elif op == "stream_stream_join" %}
    payments = read_events(spark, settings.join_source.files.path)
{%- endif %}
{%- if op == "windowed_aggregation" %}
    # A window is written once the watermark passes its end.
    return stateful_query(events, settings.query).where(F.col("window_end") <= F.lit(watermark))
{%- elif op == "deduplication" %}
    return stateful_query(events, settings.query)
{%- elif op == "stream_stream_join" %}
    # Inner matches are emitted at once (left_outer would add unmatched orders once the watermark passes).
    assert settings.query.join.type == "inner", "this expectation is for the inner join"
    return stateful_query(events, settings.query, payments)
{%- elif op == "custom_state" %}
    # Every session that a later event closed, and those whose timeout ran out before the watermark.
    timeout = timedelta(seconds=parse_duration(settings.query.custom_state.session_timeout))
    by_key: dict[str, list] = {}
    for row in events.collect():
        by_key.setdefault(row.key, []).append((row.event_time, row.event_id))
    rows = []
    for key, key_events in by_key.items():
        closed, still_open = advance(None, sorted(key_events), timeout, settings.query.custom_state.recent_events)
        if still_open is not None and still_open.session_end + timeout <= watermark:  # its timer has fired
            closed.append(still_open)
        rows += [session.row(key) for session in closed]
    return spark.createDataFrame(rows, OUTPUT_SCHEMA)
{%- endif %}


@pytest.mark.streaming
def test_stream_restarted_on_its_checkpoint_loses_and_repeats_nothing(spark, tmp_path):
    settings = stream_settings(tmp_path)
    apply_confs(spark, settings)
    write_for_settings(settings, files=3, events_per_file=40)
    first = run_query(spark, settings)
    assert first.exception() is None
    written = read_output(spark, settings.sink)
    assert written.count() > 0
    assertDataFrameEqual(written, expected_output(spark, settings))

    # More input, and a restart on the same checkpoint with the same state store: it goes on where it stopped.
    write_for_settings(settings, files=3, events_per_file=40)
    second = run_query(spark, settings)
    assert second.exception() is None
    assert second.recentProgress[0]["batchId"] > first.lastProgress["batchId"]
    assertDataFrameEqual(read_output(spark, settings.sink), expected_output(spark, settings))
