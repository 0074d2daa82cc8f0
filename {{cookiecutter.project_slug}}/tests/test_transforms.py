"""The transforms on batch DataFrames, with exact expected rows."""

from __future__ import annotations

from datetime import datetime

from pyspark.testing import assertDataFrameEqual

from {{ cookiecutter.package_name }}.schema import EVENT_COLUMNS, EVENT_SCHEMA
from {{ cookiecutter.package_name }}.transforms import deduplicated, events_from_rate, windowed_count


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
