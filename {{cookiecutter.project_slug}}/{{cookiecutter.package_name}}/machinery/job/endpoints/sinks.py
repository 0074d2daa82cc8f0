"""Start the streaming write for the configured sink (the Delta writers of foreachBatch: delta.py)."""

from __future__ import annotations

from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from pyspark.sql.streaming import DataStreamWriter, StreamingQuery

from ...core import real_time
from ...core.delta_merge import MergeKey
from ...core.durations import AVAILABLE_NOW
from ...core.settings import KafkaSinkSettings, QuerySettings, SettingsError, SinkSettings
from .delta import DeltaLakeBatchWriter, DeltaSparkMergeWriter
from .kafka import kafka_sink_options


def start_query(
    result: DataFrame, sink: SinkSettings, query: QuerySettings, key: MergeKey | None, one_batch: bool = False
) -> StreamingQuery:
    """Start the query; one_batch runs a single batch and ends (the unfinished batch first, if there is one).
    `key`: what update mode into Delta MERGEs each batch by (merge_key.checked_output, before the start)."""
    records = kafka_records(result, sink.kafka) if sink.type == "kafka" else result
    writer = (
        records.writeStream.queryName(query.name)
        .outputMode(sink.output_mode)
        .option("checkpointLocation", query.checkpoint_location)
    )
    writer = writer.trigger(once=True) if one_batch else _with_trigger(writer, query.trigger)
    if sink.type == "parquet":
        # The file sink is exactly-once: a batch's files count only once its _spark_metadata entry is written.
        return writer.format("parquet").option("path", sink.path).start()
    if sink.merges:  # update mode: each batch MERGEd into the table by the result's key, exactly once
        if key is None:
            raise ValueError("update mode into Delta MERGEs by a key: pass checked_output's")
        writes = DeltaSparkMergeWriter if sink.delta_writer == "delta-spark" else DeltaLakeBatchWriter
        return writer.foreachBatch(writes(sink.path, query.checkpoint_location, key)).start()
    if sink.delta_writer == "delta-spark":
        # The JVM Delta sink records (query id, batch id) in each commit and skips a replayed batch.
        return writer.format("delta").option("path", sink.path).start()
    if sink.delta_writer == "deltalake":
        return writer.foreachBatch(DeltaLakeBatchWriter(sink.path, query.checkpoint_location)).start()
    if sink.type == "kafka":
        # At least once: a batch replayed after a crash is produced again, the same keys and values.
        return writer.format("kafka").options(**kafka_sink_options(sink.kafka)).start()
    return writer.format("console").option("numRows", sink.console_rows).option("truncate", "false").start()


# Timestamps to the microsecond, as Spark holds them (to_json's default format cuts them to milliseconds, and
# two results a few microseconds apart would share a key).
JSON_OPTIONS = {"timestampFormat": "yyyy-MM-dd'T'HH:mm:ss.SSSSSSXXX"}


def kafka_records(result: DataFrame, kafka: KafkaSinkSettings) -> DataFrame:
    """Each output row as a Kafka record: its value the row as JSON, its key the key columns' JSON (so
    that a compacted topic, or a consumer keeping the last value per key, reads each result once)."""
    missing = [name for name in kafka.key_columns if name not in result.columns]
    if missing:
        raise SettingsError(
            [
                f"sink.kafka.key_columns {kafka.key_columns}: {', '.join(missing)} not among the query's output"
                f" columns ({', '.join(result.columns)}); name the columns that identify a result row"
            ]
        )
    return result.select(
        F.to_json(F.struct(*kafka.key_columns), JSON_OPTIONS).alias("key"),
        F.to_json(F.struct(*result.columns), JSON_OPTIONS).alias("value"),
    )


def _with_trigger(writer: DataStreamWriter, trigger: str) -> DataStreamWriter:
    if trigger == AVAILABLE_NOW:
        return writer.trigger(availableNow=True)
    batch = real_time.batch_duration(trigger)
    if batch is not None:
        return writer.trigger(realTime=batch)  # type: ignore[call-overload]  # pyspark's stubs lack the overload
    return writer.trigger(processingTime=trigger)
