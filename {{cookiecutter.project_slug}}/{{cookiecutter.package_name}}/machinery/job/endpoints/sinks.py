"""Start the streaming write for the configured sink."""

from __future__ import annotations

from pyspark.sql import DataFrame
from pyspark.sql.streaming import DataStreamWriter, StreamingQuery

from ...core.durations import AVAILABLE_NOW
from ...core.settings import QuerySettings, SinkSettings
from .delta_writer import DeltaLakeBatchWriter


def start_query(result: DataFrame, sink: SinkSettings, query: QuerySettings, one_batch: bool = False) -> StreamingQuery:
    """Start the query; one_batch runs a single batch and ends (the unfinished batch first, if there is one)."""
    writer = (
        result.writeStream.queryName(query.name)
        .outputMode(sink.output_mode)
        .option("checkpointLocation", query.checkpoint_location)
    )
    writer = writer.trigger(once=True) if one_batch else _with_trigger(writer, query.trigger)
    if sink.type == "parquet":
        # The file sink is exactly-once: a batch's files count only once its _spark_metadata entry is written.
        return writer.format("parquet").option("path", sink.path).start()
    if sink.delta_writer == "delta-spark":
        # The JVM Delta sink records (query id, batch id) in each commit and skips a replayed batch.
        return writer.format("delta").option("path", sink.path).start()
    if sink.delta_writer == "deltalake":
        batch_writer = DeltaLakeBatchWriter(sink.path)
        started = writer.foreachBatch(batch_writer).start()
        batch_writer.bind(started.id)
        return started
    return writer.format("console").option("numRows", sink.console_rows).option("truncate", "false").start()


def _with_trigger(writer: DataStreamWriter, trigger: str) -> DataStreamWriter:
    if trigger == AVAILABLE_NOW:
        return writer.trigger(availableNow=True)
    return writer.trigger(processingTime=trigger)
