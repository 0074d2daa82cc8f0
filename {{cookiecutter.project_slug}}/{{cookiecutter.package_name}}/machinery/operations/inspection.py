"""Read the state in a checkpoint back: rows per partition, skew, bytes on disk, retained batches.

Spark's state readers (state_reader.py) give one row per operator and store, with its partitions
and the kept batches, and the rows of each store as of one batch. This module turns them into one
report per operator, next to the files on disk and the capacity estimate of the settings. It only
reads: the checkpoint is byte for byte the same afterwards.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..core.checkpoint.files import (
    LOCAL,
    RESTORE_OR_RESTART,
    CheckpointUnreadable,
    Files,
    WatermarkStand,
    batch_metadata,
    highest_numbered,
    latest_offsets,
    operator_schemas,
    reader_root,
    watermark_stand,
)
from ..core.confs import PARTITIONS_CONF, PROVIDER_CONF, provider_name
from ..core.figures import epoch_ms_text, human_bytes, human_span, num
from ..core.operators import held_operator
from ..core.sizing.estimate import Estimate
from ..job.spark.spark_errors import spark_errors
from .state_reader import (
    TIMERS,
    counts_as_rows,
    list_variables,
    read_state_metadata,
    read_store,
    reader_confs,
    spark_message,
    store_name,
    stores_of,
)

if TYPE_CHECKING:  # Spark is imported only when a command needs it
    from pyspark.sql import SparkSession


class InspectError(Exception):
    """Nothing to inspect at this location, or a batch the checkpoint does not keep."""


@dataclass
class StoreRows:
    """The rows of one state store (or one state variable) at one batch, per partition."""

    store: str
    counted: bool  # part of the operator's state rows
    rows_per_partition: list[int]

    @property
    def rows(self) -> int:
        return sum(self.rows_per_partition)

    @property
    def skew(self) -> float | None:
        """Largest partition over the mean partition: 1.0 is perfectly even."""
        if not self.rows:
            return None
        return max(self.rows_per_partition) / (self.rows / len(self.rows_per_partition))


@dataclass
class OperatorState:
    operator_id: int
    spark_name: str
    operator: str  # ours (operators.held_operator), else Spark's name
    partitions: int
    min_batch_id: int
    max_batch_id: int
    stores: list[StoreRows] = field(default_factory=list)
    # Every file under the operator's partition folders: all retained versions, not one batch.
    disk_bytes_per_partition: list[int] | None = None

    @property
    def rows(self) -> int:
        return sum(store.rows for store in self.stores if store.counted)

    @property
    def disk_bytes(self) -> int | None:
        return None if self.disk_bytes_per_partition is None else sum(self.disk_bytes_per_partition)


@dataclass
class Inspection:
    checkpoint: str
    provider: str
    batch_id: int
    operators: list[OperatorState]
    estimate: Estimate | None = None
    watermark: WatermarkStand | None = None  # where the newest batch's watermark stands, where the files are read
    read_at_ms: int = field(default_factory=lambda: int(time.time() * 1000))

    @property
    def state_rows(self) -> int:
        return sum(operator.rows for operator in self.operators)

    def estimates_by_operator(self) -> list[tuple[OperatorState, Estimate]]:
        """Each operator's state beside its own estimate, when the estimate has one per operator of the
        checkpoint (its parts run the way events flow, Spark's operator ids from the sink back)."""
        if self.estimate is None or len(self.estimate.operators) != len(self.operators):
            return []
        return list(zip(reversed(self.operators), self.estimate.operators, strict=True))

    def to_dict(self) -> dict[str, object]:
        """The --json form: stable keys, every figure per partition."""
        operators = []
        for operator in self.operators:
            stores = [{**asdict(store), "rows": store.rows, "skew": _rounded(store.skew)} for store in operator.stores]
            operators.append(
                {
                    "operator_id": operator.operator_id,
                    "operator": operator.operator,
                    "spark_operator_name": operator.spark_name,
                    "partitions": operator.partitions,
                    "min_batch_id": operator.min_batch_id,
                    "max_batch_id": operator.max_batch_id,
                    "state_rows": operator.rows,
                    "stores": stores,
                    "disk_bytes": operator.disk_bytes,
                    "disk_bytes_per_partition": operator.disk_bytes_per_partition,
                }
            )
        estimate = None
        if self.estimate is not None:
            estimate = {
                "state_rows": self.estimate.rows,
                "state_rows_per_partition": self.estimate.rows // self.estimate.shuffle_partitions,
                "state_bytes": self.estimate.total_bytes,
                "payload_bytes": self.estimate.payload_bytes,
                "rocksdb_disk_bytes": self.estimate.rocksdb_disk_bytes,
                "measured_share": _rounded(self.state_rows / self.estimate.rows if self.estimate.rows else None),
                "operators": [
                    {"operator_id": operator.operator_id, "operator": part.operator, "state_rows": part.rows}
                    for operator, part in self.estimates_by_operator()
                ],
            }
        return {
            "checkpoint": self.checkpoint,
            "provider": self.provider,
            "batch_id": self.batch_id,
            "state_rows": self.state_rows,
            "watermark": None if self.watermark is None else {**asdict(self.watermark), "read_at_ms": self.read_at_ms},
            "operators": operators,
            "estimate": estimate,
        }


def inspect_checkpoint(
    spark: SparkSession,
    location: str,
    facts: tuple[int | None, str],
    batch_id: int | None = None,
    files: Files = LOCAL,
) -> Inspection:
    """Read every operator's state as of `batch_id` (default: the last committed batch); `facts` are
    checkpoint_facts(location, batch_id, files), read before Spark started where the files are this
    machine's. The bytes on disk are counted where the files are this machine's only."""
    _, provider = facts
    local = reader_root(location, files)
    metadata, batch = state_metadata(spark, location, facts, batch_id)
    names = operator_names(location, metadata, files)
    operators: dict[int, OperatorState] = {}
    for row in metadata:
        partitions = state_partitions(local, batch, row.numPartitions, files)
        operator = operators.setdefault(
            row.operatorId,
            OperatorState(
                row.operatorId, row.operatorName, names[row.operatorId], partitions, row.minBatchId, row.maxBatchId
            ),
        )
        try:
            operator.stores += _read_stores(spark, location, batch, row, partitions)
        except spark_errors() as error:
            raise CheckpointUnreadable(
                f"{location}: Spark cannot read the state of operator {row.operatorId}, store"
                f" {row.stateStoreName}, batch {batch}: {spark_message(error)}; the checkpoint may be damaged:"
                f" {RESTORE_OR_RESTART}"
            ) from None
    for operator in operators.values():
        if local is not None and files is LOCAL:
            operator.disk_bytes_per_partition = _disk_bytes(
                local / "state" / str(operator.operator_id), operator.partitions
            )
    stand = None if local is None else watermark_stand(local, files)
    return Inspection(
        location, provider, batch, sorted(operators.values(), key=lambda o: o.operator_id), watermark=stand
    )


def counted_state_rows(location: str) -> int:
    """The state rows of the last committed batch, counted from the checkpoint's state files: for a
    store whose rows Spark does not track (its progress then says 0). On the process's session when it
    runs one, else on a local session started for the count."""
    from ..job.spark.session import tool_session  # Spark is imported only when a command needs it

    facts = checkpoint_facts(location)
    with tool_session("count-state-rows", reader_confs(location)) as spark:
        return inspect_checkpoint(spark, location, facts).state_rows


def operator_names(location: str, metadata: list[Any], files: Files = LOCAL) -> dict[int, str]:
    """Each operator id's name: ours where the machinery knows the operator, else Spark's. The key schema
    tells the two aggregations apart; a checkpoint `files` do not reach leaves that to Spark's name."""
    local = reader_root(location, files)
    names = {}
    for operator_id, spark_name in {row.operatorId: row.operatorName for row in metadata}.items():
        schemas = None if local is None else operator_schemas(local, operator_id, files)
        names[operator_id] = held_operator(spark_name, schemas[0].key if schemas else None)
    return names


def state_metadata(
    spark: SparkSession, location: str, facts: tuple[int | None, str], batch_id: int | None = None
) -> tuple[list[Any], int]:
    """Spark's state-metadata rows of the checkpoint, and the batch to read (default: the last committed),
    checked against the batches whose state is kept."""
    metadata = read_state_metadata(spark, location)
    if not metadata:
        raise InspectError(f"{location} holds no state: the query has no stateful operator, or no batch committed yet")
    last_committed, _ = facts
    batch = last_committed if batch_id is None else batch_id
    if batch is None:
        batch = max(row.maxBatchId for row in metadata)
    for row in metadata:
        if not row.minBatchId <= batch <= row.maxBatchId:
            raise InspectError(
                f"--batch-id {batch}: the checkpoint keeps the state of batches {row.minBatchId}..{row.maxBatchId}"
                f" only (operator {row.operatorId}); pick one of those"
            )
    return metadata, batch


def state_partitions(checkpoint: Path | None, batch: int, in_metadata: int, files: Files = LOCAL) -> int:
    """The state partitions of one batch: the shuffle partitions its offsets file pins. After a
    repartition, the state metadata of aggregation, deduplication and join still gives the old count
    (Spark rewrites only the versioned v2 metadata), so it is only the fallback."""
    metadata = None if checkpoint is None else batch_metadata(checkpoint, batch, files)
    pinned = (metadata or {}).get("conf", {}).get(PARTITIONS_CONF)
    return int(pinned) if pinned is not None else in_metadata


def checkpoint_facts(location: str, batch_id: int | None = None, files: Files = LOCAL) -> tuple[int | None, str]:
    """(last committed batch, provider) from the checkpoint's own files (without Spark where they are this
    machine's); checks batch_id.

    A checkpoint `files` do not reach (off this disk, read with this disk's reader) is left to Spark:
    (None, "unknown").
    """
    checkpoint = reader_root(location, files)
    if checkpoint is None:
        return None, "unknown (not a local checkpoint)"
    if not files.exists(checkpoint / "offsets"):
        raise InspectError(
            f"no checkpoint at {checkpoint} (no offsets folder): run the job first, or give the"
            " directory that query.checkpoint_location names"
        )
    committed = highest_numbered(checkpoint / "commits", files)
    if committed is None:
        raise InspectError(f"{checkpoint} has no committed batch yet: its state is not readable until one commits")
    if batch_id is not None and batch_id > int(committed.name):
        raise InspectError(f"--batch-id {batch_id}: the last committed batch of {checkpoint} is {committed.name}")
    offsets = latest_offsets(checkpoint, files)
    provider_class = offsets[1].get(PROVIDER_CONF, "") if offsets else ""
    return int(committed.name), provider_name(provider_class) if provider_class else "unknown"


def _read_stores(spark: SparkSession, location: str, batch: int, row, partitions: int) -> list[StoreRows]:
    """The stores (or, for transformWithState, the state variables and timers) of one metadata row."""
    stores, lists = [], list_variables(row)
    for options in stores_of([row]):
        counts = [0] * partitions
        state = read_store(spark, location, options, batch)
        if store_name(options) in lists:  # a row per element: Spark counts the key's list as one row
            state = state.select("partition_id", "key").distinct()
        for partition in state.groupBy("partition_id").count().collect():
            counts[partition.partition_id] = partition["count"]
        stores.append(StoreRows(store_name(options), counts_as_rows(options), counts))
    return stores


def _disk_bytes(operator_folder: Path, partitions: int) -> list[int]:
    return [
        sum(path.stat().st_size for path in (operator_folder / str(p)).rglob("*") if path.is_file())
        for p in range(partitions)
    ]


def render(inspection: Inspection) -> str:
    """The human report: one table per operator, then the comparison with the estimate."""
    lines = [
        f"checkpoint {inspection.checkpoint}",
        f"  provider {inspection.provider}, state as of batch {inspection.batch_id}",
        *_watermark_lines(inspection.watermark, inspection.read_at_ms),
    ]
    for operator in inspection.operators:
        retained = operator.max_batch_id - operator.min_batch_id + 1
        lines += [
            "",
            f"operator {operator.operator_id}: {operator.operator} ({operator.spark_name}), {operator.partitions}"
            f" partitions, state of batches {operator.min_batch_id}..{operator.max_batch_id} kept ({retained})",
            f"  {'store':<28}{'rows':>12}{'min/partition':>15}{'mean':>12}{'max':>12}{'skew':>8}",
        ]
        for store in operator.stores:
            per = store.rows_per_partition
            mean = store.rows / len(per)
            skew = "-" if store.skew is None else f"{store.skew:.2f}"
            note = "" if store.counted else "  (not state rows: " + ("timers)" if store.store == TIMERS else "index)")
            lines.append(
                f"  {store.store:<28}{store.rows:>12,}{min(per):>15,}{mean:>12,.1f}{max(per):>12,}{skew:>8}{note}"
            )
        lines.append(f"  state rows: {operator.rows:,}")
        if operator.disk_bytes is not None and operator.disk_bytes_per_partition is not None:
            lines.append(
                f"  on disk: {operator.disk_bytes:,} B ({human_bytes(operator.disk_bytes)}) in all kept"
                f" versions, largest partition {max(operator.disk_bytes_per_partition):,} B"
            )
    lines += ["", *_comparison(inspection)]
    return "\n".join(lines)


def _watermark_lines(stand: WatermarkStand | None, read_at_ms: int) -> list[str]:
    """Where the watermark stands and since when: an input gone quiet holds the results after it."""
    if stand is None:
        return []
    at = epoch_ms_text(stand.watermark_ms)
    ago = human_span(max(read_at_ms - stand.newest_ms, 0) / 1000)
    if stand.since_batch == stand.newest_batch:
        since = f"set by the newest batch, {stand.newest_batch}, which started {ago} ago"
    else:
        stood = human_span((stand.newest_ms - stand.since_ms) / 1000)
        since = (
            f"{'at least ' if stand.since_oldest_kept else ''}since batch {stand.since_batch}: it stood {stood}"
            f" until the newest batch, {stand.newest_batch}, which started {ago} ago"
        )
    return [
        f"  watermark {at}, {since}; results for windows ending after it wait for events on every input"
        " (docs/operations.md, A quiet input)"
    ]


def _comparison(inspection: Inspection) -> list[str]:
    e = inspection.estimate
    if e is None:
        return ["estimate: none (no settings to estimate from; inspect --settings PATH compares with them)"]
    measured = inspection.state_rows
    share = f"{measured / e.rows:.2%} of the estimate" if e.rows else "the estimate is 0 rows"
    most = max((max(s.rows_per_partition) for o in inspection.operators for s in o.stores if s.counted), default=0)
    return [
        f"estimate ({num(e.input_rows_per_second)} rows/s, watermark {e.watermark}): {e.rows:,} state rows,"
        f" {e.rows // e.shuffle_partitions:,} per partition, {human_bytes(e.total_bytes)} of heap on the"
        f" HDFS-backed store ({e.heap_bytes_per_row} B per row), {human_bytes(e.rocksdb_disk_bytes)} of"
        " disk on RocksDB",
        f"measured at batch {inspection.batch_id}: {measured:,} state rows ({share}), at most {most:,} in one partition",
        *(
            f"  operator {operator.operator_id} ({part.operator}): {operator.rows:,} state rows, estimate {part.rows:,}"
            for operator, part in (inspection.estimates_by_operator() if len(inspection.operators) > 1 else [])
        ),
    ]


def _rounded(value: float | None) -> float | None:
    return None if value is None else round(value, 4)
