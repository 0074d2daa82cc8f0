"""The transforms on batch DataFrames, with exact expected rows."""

from __future__ import annotations

from datetime import datetime, timedelta

from pyspark.testing import assertDataFrameEqual

from {{ cookiecutter.package_name }}.schema import EVENT_COLUMNS, EVENT_SCHEMA
from {{ cookiecutter.package_name }}.sessions import Session, advance
from {{ cookiecutter.package_name }}.transforms import deduplicated, events_from_rate, joined, windowed_count


def ts(minute: int, second: int = 0) -> datetime:
    return datetime(2026, 1, 1, 0, minute, second)


def test_events_from_rate(spark):
    rate = spark.createDataFrame(
        [(ts(0), 0), (ts(0, 1), 1), (ts(0, 2), 2), (ts(0, 3), 3)], "timestamp timestamp, value long"
    )
    expected = spark.createDataFrame(
        [
            ("rate-0", "key-0", ts(0)),
            ("rate-1", "key-1", ts(0, 1)),
            ("rate-2", "key-2", ts(0, 2)),
            ("rate-3", "key-0", ts(0, 3)),
        ],
        EVENT_SCHEMA,
    )
    assertDataFrameEqual(events_from_rate(rate, keys=3), expected)
    assert tuple(events_from_rate(rate, keys=3).columns) == EVENT_COLUMNS


def test_windowed_count(spark):
    events = spark.createDataFrame(
        [(ts(0, 5), "a"), (ts(0, 59), "a"), (ts(0, 30), "b"), (ts(1, 0), "a"), (ts(2, 30), "b")],
        "event_time timestamp, key string",
    )
    expected = spark.createDataFrame(
        [(ts(0), ts(1), "a", 2), (ts(0), ts(1), "b", 1), (ts(1), ts(2), "a", 1), (ts(2), ts(3), "b", 1)],
        "window_start timestamp, window_end timestamp, key string, events long",
    )
    result = windowed_count(events, watermark="10 minutes", window="1 minute")
    assertDataFrameEqual(result, expected)
    assert result.columns == ["window_start", "window_end", "key", "events"]


def test_deduplicated_keeps_the_first_of_each_event_id(spark):
    events = spark.createDataFrame(
        [("e1", "a", ts(0)), ("e2", "a", ts(0, 30)), ("e1", "a", ts(0)), ("e3", "b", ts(1))], EVENT_SCHEMA
    )
    expected = spark.createDataFrame([("e1", "a", ts(0)), ("e2", "a", ts(0, 30)), ("e3", "b", ts(1))], EVENT_SCHEMA)
    result = deduplicated(events, watermark="10 minutes")
    assertDataFrameEqual(result, expected)
    assert tuple(result.columns) == EVENT_COLUMNS


JOINED = "event_id string, key string, event_time timestamp, join_event_id string, join_event_time timestamp"


def test_joined_matches_the_same_key_within_the_range(spark):
    orders = spark.createDataFrame(
        [("o1", "k1", ts(0)), ("o2", "k2", ts(0)), ("o3", "k1", ts(10)), ("o4", "k4", ts(20))], EVENT_SCHEMA
    )
    payments = spark.createDataFrame(
        # p1 at the end of o1's range (inclusive), p2 a second past o2's, p3 before o4, p4 within o3's.
        [("p1", "k1", ts(5)), ("p2", "k2", ts(5, 1)), ("p3", "k4", ts(19)), ("p4", "k1", ts(12))],
        EVENT_SCHEMA,
    )
    inner = joined(orders, payments, watermark="10 minutes", join_range="5 minutes", join_type="inner")
    matches = [("o1", "k1", ts(0), "p1", ts(5)), ("o3", "k1", ts(10), "p4", ts(12))]
    assertDataFrameEqual(inner, spark.createDataFrame(matches, JOINED))
    outer = joined(orders, payments, watermark="10 minutes", join_range="5 minutes", join_type="left_outer")
    alone = [("o2", "k2", ts(0), None, None), ("o4", "k4", ts(20), None, None)]
    assertDataFrameEqual(outer, spark.createDataFrame(matches + alone, JOINED))


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
