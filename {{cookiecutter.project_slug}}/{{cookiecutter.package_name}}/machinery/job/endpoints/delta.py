"""The Delta writers that run as foreachBatch functions, exactly once, and what a table's log records of them.

Spark's foreachBatch is at-least-once: after a crash between the table's commit and Spark's own commit of
the batch, Spark runs the same batch id again. Every commit here carries a Delta application transaction (app
id = the query id, read from the checkpoint; version = the batch id), the mechanism Spark's own Delta sink
uses too, so a batch the table recorded is not written twice:
- `deltalake` (delta-rs) appends each batch, or in update mode MERGEs it by the result's key. delta-rs records
  the transaction but does not skip a version it holds (delta-rs issue 2580): the writer asks the table first.
- `delta-spark` in update mode MERGEs each batch through Spark SQL with the transaction in the session confs
  `spark.databricks.delta.write.txnAppId`/`txnVersion` (Delta's writer options serve appends only), which
  Delta checks itself. The confs are set on the batch's session, the query's own clone of the job's
  session, so two queries in one job do not see each other's. (Appends go through Spark's Delta sink.)
A batch without rows is committed too (its transaction alone, no data file), as Spark's sink commits it: the
table then records every batch the checkpoint commits, which is how a start tells a table that lost batches
(job/guard/output_check.py). A MERGE takes one row per key: a batch holding a key twice is refused, unwritten.

Other tools may work on the table while the job runs. A MERGE that lost to a compaction (OPTIMIZE, which
changes no row) runs again on the compacted table, up to COMMIT_ATTEMPTS times; one that lost to another
writer's data is refused. Before a batch writes, its writer refuses a table whose data files are gone (a
VACUUM with its retention check off deletes the files a batch wrote before it commits: the table then lists
files that are not there, and their rows are lost) and, in update mode, one whose columns are no longer the
output's (an ALTER TABLE), each in one line.

On an object store (s3a://) both writers run as on a disk: deltalake commits each version by a conditional
write (S3 refuses a second writer's commit of the same version), delta-spark by Delta's S3 log store, which
assumes one driver: the checkpoint's lease (core/checkpoint/lease.py) is what makes that true.

Limit of deltalake: each batch is collected to the driver as Arrow and written from there, so batches must
fit in driver memory and the write does not scale out. The delta-spark writer has neither limit.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterable
from pathlib import Path
from urllib.parse import unquote

import pyarrow.parquet as pq
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import StructType

from ...core.checkpoint.file_access import LOCAL, Files, LocationPath, read_text
from ...core.checkpoint.object_store import StoreFiles, s3_endpoint, s3_region, store_of
from ...core.checkpoint.path_records import json_line
from ...core.checkpoint.sink_log import DELTA_LOG, files_gone, files_missing
from ...core.delta_merge import (
    COMMIT_ATTEMPTS,
    MAX_ROWS_PER_FILE,
    SOURCE,
    TARGET,
    TARGET_FILE_BYTES,
    UPKEEP_OPERATIONS,
    BatchRange,
    DeltaSinkRefused,
    MergeKey,
    columns_changed_line,
    columns_differ,
    conflict_line,
    files_gone_line,
    merge_condition,
    quoted,
    repeated_key_line,
    table_gone_line,
)
from ...core.text import first_line
from ..spark.spark_errors import spark_errors

# The session confs through which Delta makes a MERGE idempotent (Delta 2.3 and later).
TXN_APP_ID, TXN_VERSION = "spark.databricks.delta.write.txnAppId", "spark.databricks.delta.write.txnVersion"
MAX_RECORDS = "spark.sql.files.maxRecordsPerFile"
# What each engine calls a commit that lost to another writer's.
_CONFLICTS = ("DELTA_CONCURRENT", "ConcurrentAppendException", "ConcurrentModificationException", "CommitFailedError")
# How Delta's conflict names a winning commit that changed no row: "a concurrent OPTIMIZE added data", or the
# conflicting commit's JSON.
_LOST_TO_UPKEEP = re.compile(r'concurrent OPTIMIZE\b|"operation":"OPTIMIZE"')


class _BatchWriter:
    """A foreachBatch function writing to the Delta table at `path` for the query of `checkpoint`.

    It holds only the paths and the key: Spark Connect pickles it at start() and calls it in the server's
    Python, so nothing set on the client after the start would reach it. The query id is read where the
    batch runs, from the checkpoint, once per process."""

    def __init__(self, path: str, checkpoint: str, key: MergeKey | None = None):
        self.path = path
        self.checkpoint = checkpoint
        self.key = key
        self._query_id: str | None = None
        self._table_seen = False
        self.skipped_batches: list[int] = []

    def query_id(self, batch: DataFrame) -> str:
        """The app id is the query id: Spark writes it to the checkpoint's `metadata` before the first
        batch, and it stays the same across restarts on that checkpoint. Read through the batch's session
        (a small job, once per process), so a checkpoint on any file system Spark reaches reads alike."""
        if self._query_id is None:
            line = batch.sparkSession.read.text(f"{self.checkpoint.rstrip('/')}/metadata").first()
            self._query_id = str(json.loads(line[0])["id"])  # type: ignore[index]
        return self._query_id

    def table_there(self, exists: bool, batch_id: int) -> bool:
        """`exists`, checked against what this process saw: a table it wrote to that is gone now would be
        made again, holding only the batches from here on, its earlier results lost without a word."""
        if self._table_seen and not exists:
            raise DeltaSinkRefused(table_gone_line(self.path, batch_id))
        self._table_seen = True  # there, or made by this batch
        return exists

    def refuse_repeated_key(self, batch_id: int, most_rows_of_a_key: int) -> None:
        if self.key is not None and most_rows_of_a_key > 1:
            raise DeltaSinkRefused(repeated_key_line(self.path, self.key, batch_id, most_rows_of_a_key))

    def refuse_changed_table(self, batch_id: int, table: StructType, files: Iterable[str], batch: DataFrame) -> None:
        """What another tool did to the table while the job ran, refused before the batch writes anything:
        data files gone (a VACUUM that took the files of a batch before its commit), and, in update mode,
        columns that are not the output's (the start refuses those: merge_key.table_columns_refusal)."""
        gone = files_gone(gone_files(files))
        if gone:
            raise DeltaSinkRefused(files_gone_line(self.path, batch_id, gone))
        held, written = columns(table), columns(batch.schema)
        if self.key is not None and columns_differ(held, written):
            raise DeltaSinkRefused(columns_changed_line(self.path, batch_id, held, written))


class DeltaLakeBatchWriter(_BatchWriter):
    """delta-rs: appends each batch, or MERGEs it by `key` (update mode)."""

    def __call__(self, batch: DataFrame, batch_id: int) -> None:
        from deltalake.exceptions import CommitFailedError

        app_id = self.query_id(batch)
        table = self.table()  # read once: its log replayed takes milliseconds per thousand files
        recorded = None if table is None else table.transaction_version(app_id)
        if recorded is not None and recorded >= batch_id:
            # Still run the batch, without output: its state store updates must commit again, and
            # Spark fails the query when a stateful batch ends without them.
            batch.write.format("noop").mode("overwrite").save()
            self.skipped_batches.append(batch_id)
            print(
                f"batch {batch_id}: already in the Delta table {self.path} (a replay after a restart); not written again"
            )
            return
        if table is not None:
            self.refuse_changed_table(batch_id, table_schema(table), table.file_uris(), batch)
        rows = batch.toArrow()
        committed = _transaction(app_id, batch_id)
        if self.key is not None:
            self.refuse_repeated_key(batch_id, _most_rows_of_a_key(rows, self.key))
        for attempt in range(1, COMMIT_ATTEMPTS + 1):
            self.table_there(table is not None, batch_id)
            try:
                self._write(table, rows, committed)
                return
            except CommitFailedError as error:
                if attempt == COMMIT_ATTEMPTS or table is None or not _only_upkeep_since(self.path, table.version()):
                    line = conflict_line(self.path, batch_id, f"CommitFailedError: {first_line(str(error))}")
                    raise DeltaSinkRefused(line) from None
            table = self.table()  # the compacted table, read again: the batch merges into it

    def _write(self, table, rows, committed) -> None:
        """Append `rows` (a new table, append mode, an empty batch), or MERGE them into `table`."""
        from deltalake import write_deltalake

        if table is None or self.key is None or rows.num_rows == 0:
            made = table is None and self.key is not None  # update mode makes its table with the cap
            capped = {"delta.targetFileSize": str(TARGET_FILE_BYTES)} if made else None
            options = storage_options(self.path) if table is None else None
            written_to = self.path if table is None else table
            write_deltalake(
                written_to,
                rows,
                mode="append",
                configuration=capped,
                commit_properties=committed,
                storage_options=options,
            )
            return
        condition = merge_condition(self.key, _arrow_range(rows, self.key))
        (
            table.merge(rows, condition, source_alias=SOURCE, target_alias=TARGET, commit_properties=committed)
            .when_matched_update_all()
            .when_not_matched_insert_all()
            .execute()
        )

    def table(self):
        """The table as it stands now, which the MERGE reads and commits on top of; None without one."""
        return open_table(self.path)


class DeltaSparkMergeWriter(_BatchWriter):
    """delta-spark, update mode: MERGEs each batch by `key` through Spark SQL."""

    def __call__(self, batch: DataFrame, batch_id: int) -> None:
        assert self.key is not None
        spark = batch.sparkSession
        app_id = self.query_id(batch)
        # Persisted: the batch is read twice (its figures, then the MERGE), and its stateful steps must
        # run once.
        batch.persist()
        capped = spark.conf.get(MAX_RECORDS, "0") in ("0", None)
        if capped:
            spark.conf.set(MAX_RECORDS, str(MAX_ROWS_PER_FILE))
        try:
            rows, most, batch_range = self._figures(batch)
            self.refuse_repeated_key(batch_id, most)
            table = None if rows == 0 else self._table_read(batch)
            if table is not None:
                self.refuse_changed_table(batch_id, table.schema, table.inputFiles(), batch)
            if rows == 0 or not self.table_there(table is not None, batch_id):
                # A new table, or an empty batch: an append, which takes the transaction as options.
                batch.write.format("delta").mode("append").option("txnAppId", app_id).option(
                    "txnVersion", batch_id
                ).save(self.path)
                return
            view = f"merged_batch_{batch_id}"
            batch.createOrReplaceTempView(view)
            spark.conf.set(TXN_APP_ID, app_id)
            spark.conf.set(TXN_VERSION, str(batch_id))
            try:
                self._merge(spark, view, batch_range)
            finally:
                spark.conf.unset(TXN_APP_ID)
                spark.conf.unset(TXN_VERSION)
                spark.catalog.dropTempView(view)
        except spark_errors() as error:
            conflict = _conflict(str(error))
            if conflict:
                raise DeltaSinkRefused(conflict_line(self.path, batch_id, conflict)) from None
            raise
        finally:
            batch.unpersist()
            if capped:
                spark.conf.unset(MAX_RECORDS)

    def _figures(self, batch: DataFrame) -> tuple[int, int, BatchRange | None]:
        """One job: the batch's rows, the most rows one key holds, and the bounded column's range."""
        assert self.key is not None
        bounded = self.key.bounded
        per_key = batch.groupBy(*(F.col(quoted(name)) for name in self.key.columns)).agg(
            F.count(F.lit(1)).alias("rows"),
            *([F.unix_micros(F.col(quoted(bounded))).alias("at")] if bounded else []),
        )
        figures = per_key.agg(
            F.sum("rows").alias("rows"),
            F.max("rows").alias("most"),
            *([F.min("at"), F.max("at"), F.max(F.col("at").isNull())] if bounded else []),
        ).first()
        assert figures is not None
        rows, most = int(figures[0] or 0), int(figures[1] or 0)
        return rows, most, BatchRange(figures[2], figures[3], bool(figures[4])) if bounded else None

    def _merge(self, spark: SparkSession, view: str, batch_range: BatchRange | None) -> None:
        """The MERGE, run again when it lost to a compaction (Delta names the commit it lost to)."""
        assert self.key is not None
        for attempt in range(1, COMMIT_ATTEMPTS + 1):
            try:
                spark.sql(
                    f"MERGE INTO delta.{quoted(self.path)} AS {TARGET} USING {view} AS {SOURCE}"
                    f" ON {merge_condition(self.key, batch_range, 'TIMESTAMP {}')}"
                    " WHEN MATCHED THEN UPDATE SET * WHEN NOT MATCHED THEN INSERT *"
                )
                return
            except spark_errors() as error:
                lost_to_upkeep = _conflict(str(error)) and _LOST_TO_UPKEEP.search(str(error))
                if attempt == COMMIT_ATTEMPTS or not lost_to_upkeep:
                    raise

    def _table_read(self, batch: DataFrame) -> DataFrame | None:
        """The table as of its newest version (its schema and files), None without a table."""
        try:  # reading the schema reads the table's log: an error without a table
            table = batch.sparkSession.read.format("delta").load(self.path)
            return table if table.columns else None
        except spark_errors():
            return None


def _conflict(error: str) -> str | None:
    """The line of a Delta error that says it lost to another writer's commit, None for any other error."""
    return next((line for line in error.splitlines() if any(name in line for name in _CONFLICTS)), None)


def _only_upkeep_since(path: str, version: int) -> bool:
    """Every commit to the table after `version` changes no row (a compaction, a VACUUM's records)."""
    table = open_table(path)
    if table is None or table.version() <= version:
        return False
    newer = [entry for entry in table.history(table.version() - version) if entry["version"] > version]
    return all(entry.get("operation") in UPKEEP_OPERATIONS for entry in newer)


def gone_files(uris: Iterable[str]) -> list[Path]:
    """The data files of a table on this machine's disk or an object store that are not there (on another
    file system: not looked for). A table's files as deltalake lists them (percent-encoded paths) or Spark
    (file: URIs): 2.5 ms per 1,000 here; on a store, one listing of each folder."""
    listed = list(uris)
    local = (
        unquote(uri.removeprefix("file://").removeprefix("file:"))
        for uri in listed
        if "://" not in uri or uri.startswith("file:")
    )
    gone = [Path(path) for path in local if not os.path.exists(path)]
    stored: list[Path] = [LocationPath(unquote(uri)) for uri in listed if store_of(uri)]
    return gone + (files_missing(stored, StoreFiles(str(stored[0]))) if stored else [])


def _most_rows_of_a_key(rows, key: MergeKey) -> int:
    if rows.num_rows == 0:
        return 0
    counts = rows.group_by(list(key.columns)).aggregate([([], "count_all")])
    return max(counts.column("count_all").to_pylist())


def _arrow_range(rows, key: MergeKey) -> BatchRange | None:
    import pyarrow as pa
    import pyarrow.compute as pc

    if key.bounded is None:
        return None
    values = rows.column(key.bounded).cast(pa.timestamp("us", tz="UTC")).cast(pa.int64())
    extremes = pc.min_max(values).as_py()
    return BatchRange(extremes["min"], extremes["max"], values.null_count > 0)


def _transaction(app_id: str, batch_id: int):
    """A commit's record of the batch: the application transaction Spark's Delta sink writes too."""
    from deltalake import CommitProperties, Transaction

    return CommitProperties(app_transactions=[Transaction(app_id=app_id, version=batch_id)])


def record_empty_batch(path: str, app_id: str, batch_id: int) -> int | None:
    """Commit a batch without rows to the table at `path`, as the writers commit one: an append of no rows
    with the query's transaction, the table's log then records the batch (delta-spark reads the same txn
    action). The table's new version; None without a table, or when it holds the batch already."""
    import pyarrow as pa
    from deltalake import write_deltalake

    table = open_table(path)
    recorded = None if table is None else table.transaction_version(app_id)
    if table is None or (recorded is not None and recorded >= batch_id):
        return None
    no_rows = pa.schema(table.schema().to_arrow()).empty_table()
    write_deltalake(table, no_rows, mode="append", commit_properties=_transaction(app_id, batch_id))
    return table.version()


def open_table(path: str):
    """The Delta table at `path` as it stands now, None without one."""
    from deltalake import DeltaTable
    from deltalake.exceptions import TableNotFoundError

    try:
        return DeltaTable(path, storage_options=storage_options(path))
    except TableNotFoundError:
        return None


def storage_options(path: str) -> dict[str, str] | None:
    """What deltalake needs to reach a table on S3 beyond its own reading of the AWS variables: the endpoint
    as this job takes it (AWS_ENDPOINT_URL_S3 first), the region, and plain HTTP allowed for an endpoint of
    one's own that speaks it. None for a table elsewhere."""
    if store_of(path) != "s3a":
        return None
    endpoint, region = s3_endpoint(), s3_region()
    options = {"AWS_ENDPOINT_URL": endpoint} if endpoint else {}
    options |= {"AWS_REGION": region} if region else {}
    return options | ({"AWS_ALLOW_HTTP": "true"} if endpoint and endpoint.startswith("http://") else {})


def columns(schema: StructType) -> tuple[str, ...]:
    """A schema's columns as "name type", as the lines name them (a Delta table's, the output's)."""
    return tuple(f"{field.name} {field.dataType.simpleString()}" for field in schema.fields)


def table_schema(table) -> StructType:
    """A deltalake table's schema as Spark's."""
    return StructType.fromJson(json.loads(table.schema().to_json()))


def committed_version(path: str, app_id: str) -> int:
    """The last batch id the table recorded for this query, or -1 when there is none (or no table yet)."""
    table = open_table(path)
    version = None if table is None else table.transaction_version(app_id)
    return -1 if version is None else version


def stream_writers(path: Path, files: Files = LOCAL) -> dict[str, int]:
    """The streaming queries a Delta table holds transactions of (Spark's Delta sink and the deltalake
    writer record each batch as one, its app id the query id): query id -> the last batch id. Read from
    the table's log, its newest checkpoint and the commits after it; {} without a table. A log file
    that does not read is passed over here: the Delta writer names it."""
    logged = files.list(path / DELTA_LOG)
    checkpoints = [part for part in logged if ".checkpoint" in part.name and part.name.endswith(".parquet")]
    newest = _version(checkpoints[-1]) if checkpoints else -1
    transactions = [txn for part in checkpoints if _version(part) == newest for txn in _checkpoint_txns(part, files)]
    for commit in _commits(logged):
        if _version(commit) > newest:
            transactions += [action["txn"] for action in _actions(commit, files) if isinstance(action.get("txn"), dict)]
    found: dict[str, int] = {}
    for txn in transactions:
        if isinstance(txn.get("appId"), str) and isinstance(txn.get("version"), int):
            found[txn["appId"]] = max(found.get(txn["appId"], -1), txn["version"])
    return found


def mode_written(path: Path, query: str, files: Files = LOCAL) -> str | None:
    """The output mode query `query` wrote the Delta table at `path` in, as the newest of its commits that
    tells says: update for a MERGE, append for Spark's Delta sink (which names its mode) or for rows appended
    after the table's first commit (in update mode only the batch that makes the table appends rows). Where
    none of its commits wrote a row and the log is whole, append too: update mode writes each result a batch
    changes, so its state would hold none. None where they cannot tell (only the first commit wrote rows,
    or the log's older commits are gone: Delta removes them after its checkpoints)."""
    commits = _commits(files.list(path / DELTA_LOG))
    seen = wrote_rows = False
    for commit in reversed(commits):
        actions = _actions(commit, files)
        if not any(isinstance(action.get("txn"), dict) and action["txn"].get("appId") == query for action in actions):
            continue
        info: dict = next((a["commitInfo"] for a in actions if isinstance(a.get("commitInfo"), dict)), {})
        named = (info.get("operationParameters") or {}).get("outputMode")
        adds = any("add" in action for action in actions)
        if info.get("operation") == "MERGE":
            return "update"
        if isinstance(named, str):
            return named.lower()
        if adds and _version(commit) > 0:
            return "append"
        seen, wrote_rows = True, wrote_rows or adds
    whole = bool(commits) and _version(commits[0]) == 0
    return "append" if seen and whole and not wrote_rows else None


def _version(log_file: Path) -> int:
    """The table version a file of its log is of (a commit, a checkpoint part)."""
    return int(log_file.name.split(".")[0])


def _commits(logged: list[Path]) -> list[Path]:
    """The commit files of a table's log (`<version>.json`), in version order."""
    return [commit for commit in logged if commit.name.endswith(".json") and commit.name[:-5].isdigit()]


def _checkpoint_txns(part: Path, files: Files) -> list[dict]:
    import pyarrow as pa

    data = files.read(part)
    try:
        table = pq.read_table(pa.BufferReader(data or b""), columns=["txn"])
        return [txn for txn in table.column("txn").to_pylist() if txn]
    except (OSError, ValueError, KeyError):  # pyarrow's ArrowInvalid is a ValueError
        return []


def _actions(commit: Path, files: Files) -> list[dict]:
    lines = read_text(files, commit, errors="replace").splitlines()
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
