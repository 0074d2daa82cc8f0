"""Pure DataFrame -> DataFrame transforms: the same code runs on a stream and on batch test data."""

from __future__ import annotations

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

# The event schema every source is mapped to, and the transforms read.
EVENT_COLUMNS = ("event_time", "key")


def events_from_rate(rate: DataFrame, keys: int) -> DataFrame:
    """Rate source rows (timestamp, value) -> events spread over `keys` distinct keys."""
    return rate.select(
        F.col("timestamp").alias("event_time"),
        F.format_string("key-%d", F.col("value") % keys).alias("key"),
    )


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
