"""Pure DataFrame -> DataFrame transforms: the same code runs on a stream and on batch test data."""

from __future__ import annotations

from datetime import timedelta

from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from pyspark.sql.types import StructType

from .capacity import parse_duration
from .schema import EVENT_COLUMNS


def events_from_rate(rate: DataFrame, keys: int) -> DataFrame:
    """Rate source rows (timestamp, value) -> events spread over `keys` distinct keys."""
    return rate.select(
        F.format_string("rate-%d", F.col("value")).alias("event_id"),
        F.format_string("key-%d", F.col("value") % keys).alias("key"),
        F.col("timestamp").alias("event_time"),
    )


def events_from_json(raw: DataFrame, column: str, schema: StructType, on_bad_record: str) -> DataFrame:
    """A column of JSON text (a Kafka message value) -> events, parsed with the declared schema.

    on_bad_record "fail" stops the query at the first record that is not JSON; "drop" skips it.
    """
    mode = "FAILFAST" if on_bad_record == "fail" else "PERMISSIVE"
    parsed = raw.select(F.from_json(F.col(column).cast("string"), schema, {"mode": mode}).alias("event"))
    if on_bad_record == "drop":
        # PERMISSIVE turns a malformed record into a null struct (or all-null fields).
        parsed = parsed.where(F.col("event").isNotNull() & F.col("event.event_time").isNotNull())
    return parsed.select(*(F.col(f"event.{name}").alias(name) for name in EVENT_COLUMNS))


def windowed_count(events: DataFrame, watermark: str, window: str) -> DataFrame:
    """Events per key and tumbling window; state for a window is dropped once the watermark passes it."""
    return (
        events.withWatermark("event_time", watermark)
        .groupBy(F.window("event_time", window).alias("window"), "key")
        .agg(F.count(F.lit(1)).alias("events"))
        .select(
            F.col("window.start").alias("window_start"),
            F.col("window.end").alias("window_end"),
            "key",
            "events",
        )
    )


def deduplicated(events: DataFrame, watermark: str) -> DataFrame:
    """Each event_id once, as long as its repeats come within the watermark delay of the first.

    State holds one row per event id until the watermark passes the event's time plus the delay,
    so it stays bounded. An event whose time plus the delay is already behind the watermark is
    dropped as too late: its id may have been evicted, so it could not be checked.
    """
    if not events.isStreaming:  # Spark refuses the within-watermark form on batch data
        return events.dropDuplicates(["event_id"]).select(*EVENT_COLUMNS)
    watermarked = events.withWatermark("event_time", watermark)
    return watermarked.dropDuplicatesWithinWatermark(["event_id"]).select(*EVENT_COLUMNS)


def joined(left: DataFrame, right: DataFrame, watermark: str, join_range: str, join_type: str) -> DataFrame:
    """Each left event with the right events of the same key up to `join_range` after it.

    Both sides carry the watermark, and the time range bounds the state: a left row is kept until the
    watermark passes its time plus the range, a right row until the watermark passes its own time.
    left_outer also emits a left row that found no match, with nulls, once the watermark passes it.
    """
    span = timedelta(seconds=parse_duration(join_range))
    left = left.withWatermark("event_time", watermark).select(*EVENT_COLUMNS)
    right = right.withWatermark("event_time", watermark).select(
        F.col("key").alias("join_key"),
        F.col("event_id").alias("join_event_id"),
        F.col("event_time").alias("join_event_time"),
    )
    condition = (
        (left.key == right.join_key)
        & (right.join_event_time >= left.event_time)
        & (right.join_event_time <= left.event_time + F.lit(span))
    )
    # join_type is inner or left_outer (settings allow no other), both Spark join type names as they are.
    return left.join(right, condition, join_type).select(*EVENT_COLUMNS, "join_event_id", "join_event_time")
