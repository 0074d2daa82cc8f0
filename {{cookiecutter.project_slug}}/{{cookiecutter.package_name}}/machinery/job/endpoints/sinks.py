"""Start the streaming write for the configured sink, and the `deltalake` writer.

The `deltalake` writer commits each micro-batch to a Delta table by delta-rs, exactly once. Spark's
foreachBatch is at-least-once: after a crash between the table commit and Spark's own commit of the
batch, Spark runs the same batch id again. Every commit here carries a Delta application transaction
(app id = the query id, version = the batch id), the mechanism the JVM Delta sink uses too, and a
batch whose id the table has already recorded is skipped. A batch without rows is committed too (its
transaction alone, no data file), as the JVM sink commits it: the table then records every batch the
checkpoint commits, which is how a start tells a table that lost batches (job/output_check.py).

Limit: each batch is collected to the driver as Arrow and written from there, so batches must fit
in driver memory and the write does not scale out. The delta-spark writer has neither limit.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from pathlib import Path

import pyarrow.parquet as pq
from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from pyspark.sql.streaming import DataStreamWriter, StreamingQuery

from ...core import real_time
from ...core.checkpoint.path_records import json_line
from ...core.checkpoint.sink_log import DELTA_LOG
from ...core.durations import AVAILABLE_NOW
from ...core.settings import KafkaSinkSettings, QuerySettings, SettingsError, SinkSettings
from .kafka import connection_options


def start_query(result: DataFrame, sink: SinkSettings, query: QuerySettings, one_batch: bool = False) -> StreamingQuery:
    """Start the query; one_batch runs a single batch and ends (the unfinished batch first, if there is one)."""
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
    if sink.delta_writer == "delta-spark":
        # The JVM Delta sink records (query id, batch id) in each commit and skips a replayed batch.
        return writer.format("delta").option("path", sink.path).start()
    if sink.delta_writer == "deltalake":
        return writer.foreachBatch(DeltaLakeBatchWriter(sink.path, query.checkpoint_location)).start()
    if sink.type == "kafka":
        # At least once: a batch replayed after a crash is produced again, the same keys and values.
        return writer.format("kafka").options(**kafka_sink_options(sink.kafka)).start()
    return writer.format("console").option("numRows", sink.console_rows).option("truncate", "false").start()


def kafka_sink_options(kafka: KafkaSinkSettings, environ: Mapping[str, str] = os.environ) -> dict[str, str]:
    """The Kafka sink options the settings build; secrets come from the environment variables named."""
    return {**connection_options(kafka, environ), "topic": kafka.topic}


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
        F.to_json(F.struct(*kafka.key_columns)).alias("key"), F.to_json(F.struct(*result.columns)).alias("value")
    )


def _with_trigger(writer: DataStreamWriter, trigger: str) -> DataStreamWriter:
    if trigger == AVAILABLE_NOW:
        return writer.trigger(availableNow=True)
    batch = real_time.batch_duration(trigger)
    if batch is not None:
        return writer.trigger(realTime=batch)  # type: ignore[call-overload]  # pyspark's stubs lack the overload
    return writer.trigger(processingTime=trigger)


class DeltaLakeBatchWriter:
    """A foreachBatch function writing to the Delta table at `path` for the query of `checkpoint`.

    It holds only the two paths: Spark Connect pickles it at start() and calls it in the server's Python,
    so nothing set on the client after the start would reach it. The query id is read where the batch
    runs, from the checkpoint, once per process."""

    def __init__(self, path: str, checkpoint: str):
        self.path = path
        self.checkpoint = checkpoint
        self._query_id: str | None = None
        self.skipped_batches: list[int] = []

    def query_id(self, batch: DataFrame) -> str:
        """The app id is the query id: Spark writes it to the checkpoint's `metadata` before the first
        batch, and it stays the same across restarts on that checkpoint. Read through the batch's session
        (a small job, once per process), so a checkpoint on any file system Spark reaches reads alike."""
        if self._query_id is None:
            line = batch.sparkSession.read.text(f"{self.checkpoint.rstrip('/')}/metadata").first()
            self._query_id = str(json.loads(line[0])["id"])  # type: ignore[index]
        return self._query_id

    def __call__(self, batch: DataFrame, batch_id: int) -> None:
        from deltalake import CommitProperties, Transaction, write_deltalake

        app_id = self.query_id(batch)
        if committed_version(self.path, app_id) >= batch_id:
            # Still run the batch, without output: its state store updates must commit again, and
            # Spark fails the query when a stateful batch ends without them.
            batch.write.format("noop").mode("overwrite").save()
            self.skipped_batches.append(batch_id)
            print(
                f"batch {batch_id}: already in the Delta table {self.path} (a replay after a restart); not written again"
            )
            return
        write_deltalake(
            self.path,
            batch.toArrow(),
            mode="append",
            commit_properties=CommitProperties(app_transactions=[Transaction(app_id=app_id, version=batch_id)]),
        )


def committed_version(path: str, app_id: str) -> int:
    """The last batch id the table recorded for this query, or -1 when there is none (or no table yet)."""
    from deltalake import DeltaTable
    from deltalake.exceptions import TableNotFoundError

    try:
        table = DeltaTable(path)
    except TableNotFoundError:
        return -1
    version = table.transaction_version(app_id)
    return -1 if version is None else version


def stream_writers(path: Path) -> dict[str, int]:
    """The streaming queries a Delta table holds transactions of (Spark's Delta sink and the deltalake
    writer record each batch as one, its app id the query id): query id -> the last batch id. Read from
    the table's log, its newest checkpoint and the commits after it; {} without a table. A log file
    that does not read is passed over here: the Delta writer names it."""
    log = path / DELTA_LOG
    checkpoints = sorted(log.glob("*.checkpoint*.parquet")) if log.is_dir() else []
    newest = int(checkpoints[-1].name.split(".")[0]) if checkpoints else -1
    transactions = [
        txn for part in checkpoints if int(part.name.split(".")[0]) == newest for txn in _checkpoint_txns(part)
    ]
    for commit in sorted(log.glob("[0-9]*.json")) if log.is_dir() else []:
        if int(commit.name.split(".")[0]) > newest:
            transactions += [action["txn"] for action in _actions(commit) if isinstance(action.get("txn"), dict)]
    found: dict[str, int] = {}
    for txn in transactions:
        if isinstance(txn.get("appId"), str) and isinstance(txn.get("version"), int):
            found[txn["appId"]] = max(found.get(txn["appId"], -1), txn["version"])
    return found


def _checkpoint_txns(part: Path) -> list[dict]:
    try:
        return [txn for txn in pq.read_table(part, columns=["txn"]).column("txn").to_pylist() if txn]
    except (OSError, ValueError, KeyError):  # pyarrow's ArrowInvalid is a ValueError
        return []


def _actions(commit: Path) -> list[dict]:
    lines = commit.read_text(encoding="utf-8", errors="replace").splitlines()
    return [action for action in map(json_line, lines) if isinstance(action, dict)]


class MissingPackageError(Exception):
    """A Python package the settings need is not installed."""


def require_deltalake() -> None:
    """Fail before Spark starts when the writer's package is missing."""
    try:
        import deltalake  # noqa: F401
    except ImportError:
        raise MissingPackageError(
            "sink.delta.writer is deltalake but the deltalake package is not installed; pip install deltalake"
        ) from None
