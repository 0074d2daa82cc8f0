"""The output's own log of the query's batches, and a batch the query never ran recorded in it.

Spark's offline repartitioning (operations/repartition.py) commits a batch of its own that runs no query,
so no sink writes it, and the sinks that log every batch must still hold it:
- parquet: the file sink's log (`_spark_metadata`) gets the entry of a batch without files, or the job
  breaks at the log's next merge (core/checkpoint/sink_log.py);
- delta: the table gets a commit of the query's transaction alone (app id the query id, version the
  batch id), as both writers commit a batch without rows (endpoints/delta.py), or the next start finds
  the table short of a committed batch (job/guard/output_check.py).
A log entry can be taken out again when the repartition is rolled back; a table's commit cannot.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from ...core.checkpoint.files import query_id
from ...core.checkpoint.sink_log import (
    DEFAULT_COMPACT_INTERVAL,
    record_empty_batch,
    remove_entries_after,
)
from ...core.text import first_line


class OutputNotRecorded(Exception):
    """The output could not record the batch; the message says why."""


@dataclass(frozen=True)
class OutputLog:
    """The log of the output at `path` (a local folder) of the query whose checkpoint is `checkpoint`."""

    sink: str  # parquet or delta
    path: Path
    checkpoint: Path
    compact_interval: int = DEFAULT_COMPACT_INTERVAL  # the file sink's merges, as the job's session sets them

    def record_empty_batch(self, batch: int) -> str | None:
        """Record `batch` as one without rows; what was written, None when the output holds it already (or
        has no log or table)."""
        if self.sink == "parquet":
            entry = record_empty_batch(self.path, batch, self.compact_interval)
            return None if entry is None else f"the parquet sink's log has batch {batch} as one without files ({entry})"
        from deltalake.exceptions import DeltaError

        from . import delta  # imports Spark: only when a table is written

        try:
            version = delta.record_empty_batch(str(self.path), query_id(self.checkpoint), batch)
        except (DeltaError, OSError, ValueError) as error:  # pyarrow's ArrowInvalid is a ValueError
            raise OutputNotRecorded(
                f"the Delta table {self.path} did not take batch {batch}: {first_line(str(error))}"
            ) from None
        if version is None:
            return None
        return f"the Delta table {self.path} has batch {batch} as one without rows (its version {version})"

    def holds_for_good(self, batch: int) -> bool:
        """The output holds `batch` and cannot take it out again: a Delta table's commit."""
        if self.sink != "delta":
            return False
        from . import delta

        return delta.committed_version(str(self.path), query_id(self.checkpoint)) >= batch

    def take_out_after(self, batch: int) -> list[str]:
        """Take out of the file sink's log the batches after `batch` (a rolled back repartition's); the
        names of the entries removed."""
        if self.sink != "parquet":
            return []
        return [path.name for path in remove_entries_after(self.path, batch)]
