"""The Estimate: a query's sizing inputs and the figures they imply, one per stateful operator or
summed over them.

Standard library only: the bake sizes through it.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

ASSUMED_BYTES_PER_ROW = (
    "state_bytes_per_row as given (the key and value columns), an assumption: `estimate --calibrate`"
    " measures the footprint per row for this query and provider"
)


@dataclass(frozen=True)
class Estimate:
    """The sizing inputs and what they imply for one query."""

    operator: str
    formula: str
    input_rows_per_second: float
    watermark: str
    watermark_seconds: float
    # The seed rule, watermark x rate: the headline. Each operator keeps more or fewer rows.
    headline_rows: int
    # The operator's own formula with its figures, and the inputs it used.
    rows_working: str
    shape: dict[str, object]
    # The payload: the key and value columns of a row, as answered.
    state_bytes_per_row: int
    # Where the bytes come from: state_bytes_per_row is a guess until `estimate --calibrate`
    # measures the footprint per row on one provider (measured_on), which then replaces that
    # provider's payload + overhead.
    bytes_per_row_source: str
    measured_on: str | None
    measured_bytes_per_row: int | None
    shuffle_partitions: int
    growth_factor: float
    rows: int
    payload_bytes: int
    # The HDFS-backed store: heap per row (payload + overhead, or measured) and per store instance.
    heap_bytes_per_row: int
    store_instances: int
    heap_bytes_per_instance: int
    store_costs_source: str
    # The heap footprint on the HDFS-backed store: what the threshold is applied to.
    total_bytes: int
    bytes_per_partition: int
    projected_bytes_per_partition: int
    threshold_bytes: int
    recommended_provider: str
    # RocksDB beside it: SST files on local disk (the live rows, and the flushes of the last batches'
    # changes not yet merged), and native memory (with changelog checkpointing).
    rows_changed_per_batch: int
    rocksdb_disk_bytes: int
    rocksdb_memory_bytes: int
    # A query of several stateful operators: each one's estimate, in the order events reach them; the
    # figures above are their sums (every operator keeps its own stores in each partition).
    parts: tuple[Estimate, ...] = ()
    # Where the input rate comes from, when it is not the answered one (an operator after another).
    rate_source: str = ""
    # Whether the state drops rows at all (by the watermark or a timeout): one that does not has no
    # steady state, its rows are those after capacity.state_horizon, and RocksDB is recommended.
    steady_state: bool = True
    # One executor's share (memory.py): the partitions it holds (a local run's driver holds them all),
    # their heap footprint with growth on the HDFS-backed store, and the heap that needs.
    executors: int = 1
    executor_partitions: int = 0
    executor_state_bytes: int = 0
    executor_heap_bytes: int = 0

    @property
    def operators(self) -> tuple[Estimate, ...]:
        """The estimate of each stateful operator: the parts, or this one alone."""
        return self.parts or (self,)

    def to_dict(self) -> dict[str, object]:
        """Today's totals, and the operators as a list beside them."""
        figures = self._figures()
        if not self.parts:
            return {**figures, "operators": [dict(figures)]}
        return {**figures, "operators": [part._figures() for part in self.parts]}

    def _figures(self) -> dict[str, object]:
        return {name: value for name, value in asdict(self).items() if name != "parts"}
