"""The MERGE of a batch's results into a Delta table by their key, in update mode: the condition both writers
run (delta-spark in Spark SQL, deltalake in delta-rs's DataFusion SQL) and the lines a refused batch ends in.

A row of the batch replaces the table's row of the same key, or is inserted. The keys compare null-safe (a
null key is a key). When a key column holds timestamps (a window's start), the condition also bounds the
table's side to the batch's range of it: a literal range is what both engines skip files by (each file's
min/max statistics), so a MERGE reads the files of the batch's windows, not the whole table.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from .checkpoint.files import START_OVER

TARGET, SOURCE = "t", "s"
# A MERGE rewrites whole every file that holds a row it updates, its inserted rows written into the same
# new files: uncapped, the file of the open windows absorbs every window after them and the rewrite grows
# with the table (300 batches of a windowed count: 1,000 rows copied per batch at first, 299,000 at the end).
# Capped, the rewrite's rows, written in the file's time order, split into files of the older windows, which
# the bound then skips, and one of the newest: a batch copies at most about a file. Spark caps a file's rows
# (spark.sql.files.maxRecordsPerFile, while the batch writes, unless set); delta-rs only its bytes (the
# table's delta.targetFileSize, set when the writer makes the table): 1 MiB is some 50,000 rows of 20 bytes,
# but 1 to 3 million of the benchmark's rows, which compress to 0.35 to 1.1 bytes.
MAX_ROWS_PER_FILE = 100_000
TARGET_FILE_BYTES = 2**20
# A MERGE that lost to commits changing no row (a compaction, a VACUUM's records) runs again, this many times
# in all; another writer's data, or compactions that keep rewriting its files, end the batch in one line.
COMMIT_ATTEMPTS = 4
UPKEEP_OPERATIONS = ("OPTIMIZE", "VACUUM START", "VACUUM END")
# Marks the one line of a refused batch in Spark's report of the failure (foreachBatch's Python error).
DELTA_SINK_REFUSED = "DELTA_SINK_REFUSED"
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


@dataclass(frozen=True)
class MergeKey:
    columns: tuple[str, ...]
    # Where the columns come from, for the lines that name them.
    origin: str
    # A key column of timestamps, which the condition bounds to the batch's range (None: no bound).
    bounded: str | None = None


@dataclass(frozen=True)
class BatchRange:
    """The batch's range of the bounded column, in microseconds since the epoch (None: no value)."""

    low: int | None
    high: int | None
    has_null: bool


class DeltaSinkRefused(Exception):
    """A batch a Delta writer refuses: its message is the one line, after the marker."""

    def __init__(self, line: str):
        super().__init__(f"{DELTA_SINK_REFUSED} {line}")
        self.line = line


def quoted(column: str) -> str:
    return "`" + column.replace("`", "``") + "`"


def timestamp_text(micros: int) -> str:
    return (_EPOCH + timedelta(microseconds=micros)).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def merge_condition(key: MergeKey, batch: BatchRange | None, timestamp_literal: str = "{}") -> str:
    """The ON condition; `timestamp_literal` wraps a quoted timestamp ('TIMESTAMP {}' in Spark SQL, whose
    file skipping needs a literal, not a cast)."""
    terms = [f"{TARGET}.{quoted(name)} IS NOT DISTINCT FROM {SOURCE}.{quoted(name)}" for name in key.columns]
    if key.bounded and batch is not None and batch.low is not None and batch.high is not None:
        column = f"{TARGET}.{quoted(key.bounded)}"
        low, high = (timestamp_literal.format(f"'{timestamp_text(micros)}'") for micros in (batch.low, batch.high))
        bound = f"{column} >= {low} AND {column} <= {high}"
        terms.append(f"{bound} OR {column} IS NULL" if batch.has_null else bound)
    return " AND ".join(f"({term})" for term in terms)


def repeated_key_line(path: str, key: MergeKey, batch_id: int, rows: int) -> str:
    columns = ", ".join(key.columns)
    return (
        f"sink.path {path}: batch {batch_id} holds {rows} rows of one key ({columns}, {key.origin}), and a MERGE"
        " by key takes one row per key; nothing of the batch was written. Set sink.delta.key_columns to the"
        " output columns that identify a result row (or make the query emit one row per key), then start again:"
        " the batch runs again"
    )


def conflict_line(path: str, batch_id: int, error: str) -> str:
    return (
        f"sink.path {path}: another writer committed to the Delta table while batch {batch_id} merged into it"
        f" ({error}); nothing of the batch was written. Stop the other writer (a job on the same table, a DELETE or"
        f" UPDATE of the rows it merges, or a compaction of its files at each of its {COMMIT_ATTEMPTS} tries), then"
        " start again: the batch runs again"
    )


def files_gone_line(path: str, batch_id: int, gone: str) -> str:
    return (
        f"sink.path {path}: the Delta table lost data files while the job ran: {gone}, and their rows with them (a"
        " VACUUM with its retention check off and a retention shorter than a batch deletes the files a batch wrote"
        f" before it commits); nothing of batch {batch_id} was written. Put the files back (a backup), or"
        f" {START_OVER}; while the job runs, VACUUM with Delta's retention check on"
    )


def table_gone_line(path: str, batch_id: int) -> str:
    return (
        f"sink.path {path}: the Delta table this job wrote to is gone (deleted or moved while the job ran);"
        f" nothing of batch {batch_id} was written, and a new table would hold only what follows. Put the table"
        f" back and start again (the batch runs again), or {START_OVER}"
    )


def columns_differ(table: Sequence[str], output: Sequence[str]) -> bool:
    """A MERGE sets and inserts by name: the same columns in any order fit."""
    return sorted(table) != sorted(output)


def columns_changed_line(path: str, batch_id: int, table: Sequence[str], output: Sequence[str]) -> str:
    """A table whose columns another tool changed while the job ran (the start refuses it: plan/merge_key.table_columns_refusal)."""
    gained = [column for column in table if column not in output]
    lost = [column for column in output if column not in table]
    held = f"holds {', '.join(gained)}, which the query's output lacks" if gained else ""
    lacks = f"lacks {', '.join(lost)}, which the query writes" if lost else ""
    return (
        f"sink.path {path}: the Delta table's columns changed while the job ran (another tool's ALTER TABLE or"
        f" write): it {' and '.join(part for part in (held, lacks) if part)}; a MERGE writes each row whole, by name,"
        f" so nothing of batch {batch_id} was written. Restore the table to its version before the change (RESTORE"
        " TABLE ... TO VERSION AS OF, deltalake's DeltaTable.restore) or change the query to the table's columns,"
        f" then start again: the batch runs again; or {START_OVER}"
    )
