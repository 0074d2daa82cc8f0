"""The state-size watchdog: each batch's measured state against the sizing of settings.yaml, and the
rows its stateful operators dropped as late.

Two warnings, each given once per run: the state rows passed the estimate by the configured factor
(the sizing was too low: recheck it, and whether state still fits the provider), and HDFS-backed
state per partition nears the 1 GiB where the JVM heap starts to hurt. The second is loud, because
the provider is pinned into the checkpoint: moving to RocksDB needs a new checkpoint.

A third, loud, whenever late rows jump: a batch drops rows behind the watermark after one that
dropped none, or drops more than LATE_SHARE of its input rows after one that did not. Those rows are
lost for the output; Spark's progress counts them, and nothing else says so.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..core.figures import human_bytes
from ..core.sizing.capacity import ROCKSDB_THRESHOLD_BYTES, Estimate

# The share of a batch's input rows dropped as late that warns even when the batch before dropped some.
LATE_SHARE = 0.1


@dataclass(frozen=True)
class StateWarning:
    kind: str  # "rows_over_estimate", "hdfs_memory" or "late_rows"
    loud: bool
    message: str


class StateWatchdog:
    def __init__(self, estimate: Estimate | None, provider: str, factor: float, hdfs_share: float) -> None:
        # estimate: None for a query whose operators the estimate cannot size (no rows warning then).
        self._estimate = estimate
        self._provider = provider
        self._factor = factor
        self._hdfs_share = hdfs_share
        self._given: set[str] = set()
        self._late_before = (0, False)  # the batch before: rows dropped as late, and past LATE_SHARE

    def check(self, progress: dict[str, Any]) -> list[StateWarning]:
        """The warnings this batch's progress newly crosses (each kind at most once per run)."""
        operators = progress.get("stateOperators") or []
        if not operators:
            return []
        rows = sum(operator.get("numRowsTotal", 0) for operator in operators)
        memory = sum(operator.get("memoryUsedBytes", 0) for operator in operators)
        partitions = max(operator.get("numShufflePartitions") or 0 for operator in operators) or 1
        found = []
        estimate = self._estimate
        if estimate is not None and rows > estimate.rows * self._factor and "rows_over_estimate" not in self._given:
            found.append(
                StateWarning(
                    "rows_over_estimate",
                    False,
                    f"state watchdog: batch {progress['batchId']} holds {rows:,} state rows,"
                    f" {rows / max(estimate.rows, 1):.1f}x the estimate of {estimate.rows:,}"
                    f" (warning at {self._factor:g}x, monitoring.state_warning_factor). Recheck the capacity"
                    " section of settings.yaml (`estimate` redoes the sizing; `inspect` shows the state per"
                    " partition), and whether the state still fits the provider.",
                )
            )
        per_partition = memory / partitions
        alarm = ROCKSDB_THRESHOLD_BYTES * self._hdfs_share
        if self._provider == "hdfs" and per_partition > alarm and "hdfs_memory" not in self._given:
            found.append(
                StateWarning(
                    "hdfs_memory",
                    True,
                    f"STATE WATCHDOG: batch {progress['batchId']}: the HDFS-backed state holds"
                    f" {human_bytes(int(per_partition))} of JVM heap per partition on average"
                    f" ({human_bytes(memory)} over {partitions} partitions; skewed partitions hold more),"
                    f" past {self._hdfs_share * 100:g}% of the {human_bytes(ROCKSDB_THRESHOLD_BYTES)} per"
                    " partition where heap-held state brings long GC pauses and out-of-memory failures."
                    " The provider cannot be switched on this checkpoint: Spark pinned it at the first run"
                    " and ignores a new one. To move to RocksDB, set state_store.provider to rocksdb with a"
                    " new query.checkpoint_location and reprocess the input; until then, give the executors"
                    " more memory.",
                )
            )
        self._given.update(warning.kind for warning in found)
        return found + self._late_rows(progress, operators)

    def _late_rows(self, progress: dict[str, Any], operators: list[dict[str, Any]]) -> list[StateWarning]:
        """A loud warning when this batch's late rows jump (see the module's docstring)."""
        late = sum(operator.get("numRowsDroppedByWatermark") or 0 for operator in operators)
        inputs = progress.get("numInputRows") or 0
        heavy = late > LATE_SHARE * inputs
        before, heavy_before = self._late_before
        self._late_before = (late, heavy)
        if not late or (before and (heavy_before or not heavy)):
            return []
        watermark = (progress.get("eventTime") or {}).get("watermark", "unknown")
        return [
            StateWarning(
                "late_rows",
                True,
                f"LATE ROWS: batch {progress['batchId']} dropped {late:,} row{'' if late == 1 else 's'} as late"
                f" (of {inputs:,} input rows):"
                f" their event time is behind the watermark, {watermark}, so they are not in the output."
                " If they are not that old, an event far ahead moved the watermark (query.max_event_time_ahead"
                " bounds it); if they are, an input arrives later than query.watermark allows: raise it.",
            )
        ]
