"""The state's change feed: each store's puts and deletes, batch by batch, in one read over the kept batches.

Spark 4 reads it through the `statestore` source with `readChangeFeed` (rows of batch_id, change_type,
key, value, partition_id), from the change file a store writes at every commit: the HDFS-backed store's
`N.delta`, RocksDB's `N.changelog` with changelog checkpointing (`N_<id>.changelog` in checkpoint
format version 2; version N is batch N - 1). RocksDB without changelog checkpointing writes snapshots
only (`N.zip`): no change feed, and Spark's reader fails on the first missing file mid-read, so the
files are looked for before Spark reads. The change feed of transformWithState's timers fails in
Spark 4.2.1 with a ClassCastException in a session that has run the query (a fresh session reads it,
on 4.2.1 and 4.3.0): it is left out, and inspect --key reads the timers at the inspected batch only.
Only reads, like the rest of inspect.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..core.checkpoint.files import Files
from ..job.spark.session_files import checkpoint_reader
from .state_reader import read_changes

if TYPE_CHECKING:  # Spark is imported only when a command needs it
    from pyspark.sql import DataFrame, SparkSession

# A change file: the version, with checkpoint format version 2 a unique id after it, and the kind.
CHANGE_FILE = re.compile(r"(\d+)(?:_[^.]+)?\.(?:delta|changelog)")
DEFAULT_STORE = "default"
# Spark's change_type -> the word inspect prints.
CHANGES = {"update": "put", "delete": "delete"}
NO_CHANGE_FILES = (
    "this store keeps no change feed (RocksDB writes change files only with state_store.changelog_checkpointing:"
    " true, from the first batch run with it)"
)
TIMERS_WITHOUT_FEED = "their change feed fails in Spark 4.2.1 in a session that has run the query"


@dataclass(frozen=True)
class FeedPlan:
    """The batches the change feed covers for every store that has one, or why there is none."""

    first: int | None
    last: int
    why_not: str = ""

    @property
    def readable(self) -> bool:
        return self.first is not None

    def says(self) -> str:
        if self.first is None:
            return f"one read per kept batch: {self.why_not}"
        return f"from the change feed, batches {self.first}..{self.last}"


def feed_plan(spark: SparkSession, location: str, metadata: list[Any], batch: int, partitions: int) -> FeedPlan:
    """The batches up to `batch` that every store (state variable) of the checkpoint keeps change files
    for, in its first and last partition: a repartition starts the change files of new partitions."""
    first = max(row.minBatchId for row in metadata)
    stores = {(str(row.operatorId), row.stateStoreName) for row in metadata}
    reader = checkpoint_reader(spark, location)
    files, checkpoint = reader.files(), reader.root
    for operator_id, store in sorted(stores):
        for partition in sorted({0, partitions - 1}):
            folder = checkpoint / "state" / operator_id / str(partition)
            versions = _change_versions(files, folder if store == DEFAULT_STORE else folder / store)
            oldest = _oldest_unbroken(versions, batch + 1)
            if oldest is None:
                return FeedPlan(None, batch, NO_CHANGE_FILES)
            first = max(first, oldest - 1)
    return FeedPlan(first, batch)


def _change_versions(files: Files, folder: Path) -> set[int]:
    """The versions a store folder has a change file of, read where the checkpoint is (session_files.py)."""
    names = [path.name for path in files.list(folder)]
    return {int(found.group(1)) for name in names if (found := CHANGE_FILE.fullmatch(name))}


def _oldest_unbroken(versions: set[int], newest: int) -> int | None:
    """The oldest version from which every version up to `newest` is there; None when `newest` is not."""
    if newest not in versions:
        return None
    oldest = newest
    while oldest - 1 in versions:
        oldest -= 1
    return oldest


def read_feed(spark: SparkSession, location: str, options: dict[str, str], plan: FeedPlan) -> DataFrame:
    """One store's (or state variable's) changes over the plan's batches."""
    if plan.first is None:
        raise ValueError(f"no change feed to read: {plan.why_not}")
    return read_changes(spark, location, options, plan.first, plan.last)
