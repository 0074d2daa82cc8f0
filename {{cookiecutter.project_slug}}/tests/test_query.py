{%- set op = cookiecutter.stateful_operator -%}
{%- set counts = op in ("windowed_aggregation", "deduplicated_count") -%}
"""Your query: on batch DataFrames with exact rows, and as a real stream restarted on its checkpoint.

These tests use {{ cookiecutter.package_name }}/query.py and the machinery's public testing surface,
{{ cookiecutter.package_name }}.machinery.testing, only: a template update keeps that surface, so
they keep working. The machinery's own guarantees (crashes, damaged checkpoints, the guard, bench,
...) are proven in the template's test suite.
"""

from __future__ import annotations

from datetime import datetime{{ ', timedelta' if op == 'custom_state' else '' }}
from typing import Any

{% if op == "custom_state" -%}
import pandas as pd
{% endif -%}
import pytest
from pyspark.sql import DataFrame, SparkSession
{% if counts -%}
from pyspark.sql import functions as F
{% endif -%}
from pyspark.testing import assertDataFrameEqual

from {{ cookiecutter.package_name }}.machinery.testing import StreamTest{{ '' if op == 'custom_state' else ', run_batch' }}
{%- if op == "custom_state" %}
from {{ cookiecutter.package_name }}.query import EVENT_COLUMNS, EVENT_SCHEMA, events_from_rate
from {{ cookiecutter.package_name }}.sessions import OUTPUT_SCHEMA, Session, SessionProcessor, advance
{%- elif op != "deduplicated_count" %}
from {{ cookiecutter.package_name }}.query import EVENT_COLUMNS, EVENT_SCHEMA, events_from_rate
{%- endif %}


def ts(minute: int, second: int = 0) -> datetime:
    return datetime(2026, 1, 1, 0, minute, second)
{%- if op != "deduplicated_count" %}


def test_events_from_rate(spark):
    rate = spark.createDataFrame(
        [(ts(0), 0), (ts(0, 1), 1), (ts(0, 2), 2), (ts(0, 3), 3)], "timestamp timestamp, value long"
    )
    expected = [("rate-0", "key-0", ts(0)), ("rate-1", "key-1", ts(0, 1)), ("rate-2", "key-2", ts(0, 2))]
    expected.append(("rate-3", "key-0", ts(0, 3)))
    assertDataFrameEqual(events_from_rate(rate, keys=3), spark.createDataFrame(expected, EVENT_SCHEMA))
    assert tuple(events_from_rate(rate, keys=3).columns) == EVENT_COLUMNS
{%- endif %}
{%- if counts %}


COUNTS = "window_start timestamp, window_end timestamp, key string, events long"


def test_counts_per_key_and_window(spark):
    events = [("e1", "a", ts(0, 5)), ("e2", "a", ts(0, 59)), ("e3", "b", ts(0, 30)), ("e4", "a", ts(1))]
{%- if op == "deduplicated_count" %}
    # e1 and e4 again, as a source that delivers at least once repeats them: each is counted once.
    events += [("e1", "a", ts(0, 5)), ("e4", "a", ts(1))]
{%- endif %}
    events += [("e5", "b", ts(2, 30))]
    expected = [(ts(0), ts(1), "a", 2), (ts(0), ts(1), "b", 1), (ts(1), ts(2), "a", 1), (ts(2), ts(3), "b", 1)]
    result = run_batch(spark, events, window="1 minute")
    assertDataFrameEqual(result, spark.createDataFrame(expected, COUNTS))
    assert result.columns == ["window_start", "window_end", "key", "events"]
{%- elif op == "deduplication" %}


def test_keeps_the_first_of_each_event_id(spark):
    events = [("e1", "a", ts(0)), ("e2", "a", ts(0, 30)), ("e1", "a", ts(0)), ("e3", "b", ts(1))]
    expected = spark.createDataFrame([("e1", "a", ts(0)), ("e2", "a", ts(0, 30)), ("e3", "b", ts(1))], EVENT_SCHEMA)
    result = run_batch(spark, events)
    assertDataFrameEqual(result, expected)
    assert tuple(result.columns) == EVENT_COLUMNS
{%- elif op == "stream_stream_join" %}


JOINED = "event_id string, key string, event_time timestamp, join_event_id string, join_event_time timestamp"


@pytest.mark.parametrize("join_type", ["inner", "left_outer"])
def test_matches_the_same_key_within_the_range(spark, join_type):
    orders = [("o1", "k1", ts(0)), ("o2", "k2", ts(0)), ("o3", "k1", ts(10)), ("o4", "k4", ts(20))]
    # p1 at the end of o1's range (inclusive), p2 a second past o2's, p3 before o4, p4 within o3's.
    payments = [("p1", "k1", ts(5)), ("p2", "k2", ts(5, 1)), ("p3", "k4", ts(19)), ("p4", "k1", ts(12))]
    rows: list[tuple[Any, ...]] = [("o1", "k1", ts(0), "p1", ts(5)), ("o3", "k1", ts(10), "p4", ts(12))]
    if join_type == "left_outer":
        rows += [("o2", "k2", ts(0), None, None), ("o4", "k4", ts(20), None, None)]
    result = run_batch(spark, orders, payments, join={"type": join_type, "range": "5 minutes"})
    assertDataFrameEqual(result, spark.createDataFrame(rows, JOINED))
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


def epoch_ms(moment: datetime) -> int:
    return int(pd.Timestamp(moment).tz_localize("UTC").timestamp() * 1000)


def session_tester(timeout: timedelta) -> Any:
    """The processor alone, driven by Spark's TwsTester (pyspark 4.2+): its state and timers read back
    directly, no query. TwsTester runs no TTLs; it drops the events at or behind the watermark, as Spark does."""
    tws_tester = pytest.importorskip("pyspark.sql.streaming.tws_tester", reason="TwsTester needs pyspark 4.2 or newer")
    return tws_tester.TwsTester(
        SessionProcessor(timeout, recent=2),
        timeMode="EventTime",
        eventTimeExtractor=lambda row: epoch_ms(row["event_time"]),
    )


def visits(*events: tuple[str, datetime]) -> pd.DataFrame:
    return pd.DataFrame({"event_id": [e for e, _ in events], "event_time": [t for _, t in events]})


def test_the_processor_keeps_a_session_in_state_and_its_timer_emits_and_evicts_it():
    tester = session_tester(timedelta(minutes=5))
    assert tester.testInPandas("a", visits(("e1", ts(0)), ("e2", ts(1)))).empty  # open: nothing out yet
    assert tester.peekValueState("session", "a") == (ts(0), ts(1), 2, ["e1", "e2"])
    assert list(tester.handle.listTimers()) == [epoch_ms(ts(6))]  # last event plus the timeout

    # An event within the timeout moves the timer; the watermark short of it fires nothing.
    tester.testInPandas("a", visits(("e3", ts(4))))
    assert list(tester.handle.listTimers()) == [epoch_ms(ts(9))]
    assert tester.setWatermark(epoch_ms(ts(8, 59))).empty

    emitted = tester.setWatermark(epoch_ms(ts(9)))
    assert emitted.to_dict("records") == [
        {"key": "a", "session_start": ts(0), "session_end": ts(4), "visits": 3, "recent_event_ids": ["e2", "e3"]}
    ]
    assert tester.peekValueState("session", "a") is None  # evicted: state holds open sessions only


def test_the_processor_closes_a_session_on_a_later_event_and_ignores_late_ones():
    tester = session_tester(timedelta(minutes=5))
    tester.testInPandas("a", visits(("e1", ts(0))))
    tester.setWatermark(epoch_ms(ts(2)))
    # e0 is behind the watermark: dropped, the session untouched. e2 comes more than the timeout after
    # e1: the first session is emitted at once and e2 opens the next.
    closed = tester.testInPandas("a", visits(("e0", ts(1)), ("e2", ts(7))))
    assert closed[["key", "visits", "recent_event_ids"]].to_dict("records") == [
        {"key": "a", "visits": 1, "recent_event_ids": ["e1"]}
    ]
    assert tester.peekValueState("session", "a") == (ts(7), ts(7), 1, ["e2"])
    assert list(tester.handle.listTimers()) == [epoch_ms(ts(12))]
{%- endif %}

{%- if op != "custom_state" %}


def test_ignored_keys_are_left_out(spark):
    # query.params in settings.yaml, checked by Params in query.py; here changed for the test.
    events = [("e1", "a", ts(0)), ("e2", "b", ts(0, 30))]
{%- if op == "stream_stream_join" %}
    payments = [("p1", "a", ts(1)), ("p2", "b", ts(1))]
    result = run_batch(spark, events, payments, params={"ignored_keys": ["b"]})
{%- else %}
    result = run_batch(spark, events, params={"ignored_keys": ["b"]})
{%- endif %}
    assert [row.key for row in result.collect()] == ["a"]
{%- endif %}


# The stream's settings: short spans, so that sample files close windows, ranges and sessions.
STREAM: dict[str, Any] = {
    "watermark": "1 minute",
{%- if counts %}
    "window": "1 minute",
{%- elif op == "stream_stream_join" %}
    "join": {"range": "1 minute"},
{%- elif op == "custom_state" %}
    "custom_state": {"session_timeout": "1 minute"},
{%- endif %}
}


def expected_output(spark: SparkSession, stream: StreamTest) -> DataFrame:
    """The query as a batch job over every file, as far as the stream's watermark lets it emit."""
{%- if counts %}
    # A window is written once the watermark passes its end.
    result = run_batch(spark, stream.events(), **STREAM)
    return result.where(F.col("window_end") <= F.lit(stream.watermark()))
{%- elif op == "deduplication" %}
    return run_batch(spark, stream.events(), **STREAM)
{%- elif op == "stream_stream_join" %}
    # Inner matches are emitted at once (left_outer would add unmatched orders once the watermark passes).
    assert stream.settings.query.join.type == "inner", "this expectation is for the inner join"
    return run_batch(spark, stream.events(), stream.join_events(), **STREAM)
{%- elif op == "custom_state" %}
    # Every session that a later event closed, and those whose timeout ran out before the watermark.
    custom = stream.settings.query.custom_state
    timeout = timedelta(minutes=1)
    by_key: dict[str, list] = {}
    for row in stream.events().collect():
        by_key.setdefault(row.key, []).append((row.event_time, row.event_id))
    rows = []
    for key, key_events in by_key.items():
        closed, still_open = advance(None, sorted(key_events), timeout, custom.recent_events)
        if still_open is not None and still_open.session_end + timeout <= stream.watermark():  # its timer fired
            closed.append(still_open)
        rows += [session.row(key) for session in closed]
    return spark.createDataFrame(rows, OUTPUT_SCHEMA)
{%- endif %}


@pytest.mark.streaming
def test_stream_restarted_on_its_checkpoint_loses_and_repeats_nothing(spark, tmp_path):
    stream = StreamTest(spark, tmp_path, **STREAM)
    stream.add_sample_files(files=3, events_per_file=40)
    stream.run()
    assert stream.output().count() > 0
    assertDataFrameEqual(stream.output(), expected_output(spark, stream))

    # More input, and a restart on the same checkpoint with the same state store: it goes on where it stopped.
    stream.add_sample_files(files=3, events_per_file=40)
    stream.run()
    assertDataFrameEqual(stream.output(), expected_output(spark, stream))
