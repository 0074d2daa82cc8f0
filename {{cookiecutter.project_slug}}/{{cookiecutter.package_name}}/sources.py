"""Streaming sources, mapped to the event schema of transforms.EVENT_COLUMNS."""

from __future__ import annotations

from pyspark.sql import DataFrame, SparkSession

from .capacity import parse_duration
from .settings import RateSourceSettings, SourceSettings
from .transforms import events_from_rate


def read_events(spark: SparkSession, source: SourceSettings) -> DataFrame:
    """The configured source as a stream of events."""
    return read_rate(spark, source.rate)


def read_rate(spark: SparkSession, rate: RateSourceSettings) -> DataFrame:
    if rate.rows_per_batch is not None:
        reader = (
            spark.readStream.format("rate-micro-batch")
            .option("rowsPerBatch", rate.rows_per_batch)
            .option("advanceMillisPerBatch", round(parse_duration(rate.advance_per_batch) * 1000))
            .option("startTimestamp", rate.start_timestamp_ms)
        )
    else:
        reader = spark.readStream.format("rate").option("rowsPerSecond", rate.rows_per_second)
    if rate.num_partitions is not None:
        reader = reader.option("numPartitions", rate.num_partitions)
    return events_from_rate(reader.load(), rate.keys)
