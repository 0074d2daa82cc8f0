"""Read the state in a checkpoint back: rows per partition, skew, bytes on disk, retained batches.

Spark 4 reads state with two batch data sources: `state-metadata` (one row per operator and
store, with its partitions and the range of batches whose state is kept) and `statestore` (the
rows of one store as of one batch, each with its partition). This module turns them into one
report per operator, next to the files on disk and the capacity estimate of the settings. It only
reads: the checkpoint is byte for byte the same afterwards.
"""

from __future__ import annotations

import atexit
import json
import os
import re
import shutil
import tempfile
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..core.checkpoint.files import (
    RESTORE_OR_RESTART,
    CheckpointUnreadable,
    batch_metadata,
    held_format_version,
    highest_numbered,
    latest_offsets,
    local_checkpoint,
)
from ..core.confs import INTEGRITY_CONFS, PARTITIONS_CONF, PROVIDER_CONF, provider_name
from ..core.operators import BY_SPARK_NAME
from ..core.sizing import capacity
from ..core.text import first_line

# Reading a RocksDB checkpoint from a session that runs no query fails in Spark 4.2 with "Cannot
# find endpoint: StateStoreCoordinator" unless the snapshot-lag reports to the coordinator are off; the
# forced snapshot upload that relies on those reports goes off with them, or a query run in the same
# session (repartition --finish-last-batch) is refused.
READER_CONFS = {
    "spark.sql.streaming.stateStore.coordinatorReportSnapshotUploadLag": "false",
    "spark.sql.streaming.stateStore.forceSnapshotUploadOnLag": "false",
}


def reader_confs(location: str) -> dict[str, str]:
    """READER_CONFS, and the format version the checkpoint's state was written in: Spark's state
    reader takes it from the session, and finds no file of format version 2 under version 1."""
    checkpoint = local_checkpoint(location)
    held = None if checkpoint is None else held_format_version(checkpoint)
    return {**READER_CONFS, **({} if held is None else {INTEGRITY_CONFS["checkpoint_format_version"]: str(held)})}


# A join keeps two stores per side: keyWithIndexToValue holds the rows (what Spark's progress
# counts as state rows, and what the sizing formula estimates); keyToNumValues is an index.
JOIN_INDEX_STORES = ("left-keyToNumValues", "right-keyToNumValues")
# transformWithState keeps its timers beside the state variables; they are not counted as rows.
TIMERS = "timers"
# Spark's state readers and its repartition runner turn the checkpoint's path into a URI and parse it
# again: a space, '#' or '%' comes back as %20, %23 or %25, and "no committed batch" is found. They
# are handed a symbolic link to the checkpoint whose path has none of them.
SPARK_SAFE_PATH = re.compile(r"[A-Za-z0-9/._+=,@:~-]*")
_LINKS: dict[str, str] = {}  # link -> checkpoint
if TYPE_CHECKING:  # Spark is imported only when a command needs it
    from pyspark.sql import SparkSession

OPERATOR_NAMES = BY_SPARK_NAME


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
    partitions: int
    min_batch_id: int
    max_batch_id: int
    stores: list[StoreRows] = field(default_factory=list)
    # Every file under the operator's partition folders: all retained versions, not one batch.
    disk_bytes_per_partition: list[int] | None = None

    @property
    def operator(self) -> str:
        return OPERATOR_NAMES.get(self.spark_name, self.spark_name)

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
    estimate: capacity.Estimate | None = None

    @property
    def state_rows(self) -> int:
        return sum(operator.rows for operator in self.operators)

    def estimates_by_operator(self) -> list[tuple[OperatorState, capacity.Estimate]]:
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
            "operators": operators,
            "estimate": estimate,
        }


def inspect_checkpoint(
    spark: SparkSession, location: str, facts: tuple[int | None, str], batch_id: int | None = None
) -> Inspection:
    """Read every operator's state as of `batch_id` (default: the last committed batch); `facts` are
    checkpoint_facts(location, batch_id), read before Spark started."""
    _, provider = facts
    local = local_checkpoint(location)
    metadata, batch = state_metadata(spark, location, facts, batch_id)
    operators: dict[int, OperatorState] = {}
    for row in metadata:
        partitions = state_partitions(local, batch, row.numPartitions)
        operator = operators.setdefault(
            row.operatorId,
            OperatorState(row.operatorId, row.operatorName, partitions, row.minBatchId, row.maxBatchId),
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
        if local is not None:
            operator.disk_bytes_per_partition = _disk_bytes(
                local / "state" / str(operator.operator_id), operator.partitions
            )
    return Inspection(location, provider, batch, sorted(operators.values(), key=lambda o: o.operator_id))


def state_metadata(
    spark: SparkSession, location: str, facts: tuple[int | None, str], batch_id: int | None = None
) -> tuple[list[Any], int]:
    """Spark's state-metadata rows of the checkpoint, and the batch to read (default: the last committed),
    checked against the batches whose state is kept."""
    try:
        metadata = spark.read.format("state-metadata").load(spark_path(location)).collect()
    except spark_errors() as error:
        raise CheckpointUnreadable(
            f"{location}: Spark cannot read its state metadata: {spark_message(error)}"
        ) from None
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


def state_partitions(checkpoint: Path | None, batch: int, in_metadata: int) -> int:
    """The state partitions of one batch: the shuffle partitions its offsets file pins. After a
    repartition, the state metadata of aggregation, deduplication and join still gives the old count
    (Spark rewrites only the versioned v2 metadata), so it is only the fallback."""
    metadata = None if checkpoint is None else batch_metadata(checkpoint, batch)
    pinned = (metadata or {}).get("conf", {}).get(PARTITIONS_CONF)
    return int(pinned) if pinned is not None else in_metadata


def spark_path(location: str) -> str:
    """The checkpoint as Spark's state readers can take it: the location itself, or, for a local path
    they would mangle, a symbolic link to it in a temporary folder (removed when this process ends)."""
    local = local_checkpoint(location)
    if local is None or SPARK_SAFE_PATH.fullmatch(str(local)):
        return location
    for link, checkpoint in _LINKS.items():
        if checkpoint == str(local):
            return link
    folder = tempfile.mkdtemp(prefix="checkpoint-link-")
    atexit.register(shutil.rmtree, folder, True)
    link = os.path.join(folder, "checkpoint")
    os.symlink(local, link)
    _LINKS[link] = str(local)
    return link


def spark_errors() -> tuple[type[Exception], ...]:
    from py4j.protocol import Py4JJavaError
    from pyspark.errors import PySparkException

    return (PySparkException, Py4JJavaError)


def checkpoint_facts(location: str, batch_id: int | None = None) -> tuple[int | None, str]:
    """(last committed batch, provider) from the checkpoint's own files, without Spark; checks batch_id.

    A checkpoint outside the local file system is left to Spark: (None, "unknown").
    """
    checkpoint = local_checkpoint(location)
    if checkpoint is None:
        return None, "unknown (not a local checkpoint)"
    if not (checkpoint / "offsets").is_dir():
        raise InspectError(
            f"no checkpoint at {checkpoint} (no offsets folder): run the job first, or give the"
            " directory that query.checkpoint_location names"
        )
    committed = highest_numbered(checkpoint / "commits")
    if committed is None:
        raise InspectError(f"{checkpoint} has no committed batch yet: its state is not readable until one commits")
    if batch_id is not None and batch_id > int(committed.name):
        raise InspectError(f"--batch-id {batch_id}: the last committed batch of {checkpoint} is {committed.name}")
    offsets = latest_offsets(checkpoint)
    provider_class = offsets[1].get(PROVIDER_CONF, "") if offsets else ""
    return int(committed.name), provider_name(provider_class) if provider_class else "unknown"


def _read_stores(spark: SparkSession, location: str, batch: int, row, partitions: int) -> list[StoreRows]:
    """The stores (or, for transformWithState, the state variables) that one metadata row stands for."""
    base = {"operatorId": str(row.operatorId), "batchId": str(batch)}
    if row.operatorName.startswith("transformWithState"):
        properties = json.loads(row.operatorProperties or "{}")
        names = [v["stateName"] for v in properties.get("stateVariables", []) if not v["stateName"].startswith("$")]
        stores = [
            StoreRows(name, True, _rows(spark, location, partitions, {**base, "stateVarName": name})) for name in names
        ]
        stores.append(
            StoreRows(TIMERS, False, _rows(spark, location, partitions, {**base, "readRegisteredTimers": "true"}))
        )
        return stores
    options = {**base, "storeName": row.stateStoreName}
    return [
        StoreRows(
            row.stateStoreName, row.stateStoreName not in JOIN_INDEX_STORES, _rows(spark, location, partitions, options)
        )
    ]


def _rows(spark: SparkSession, location: str, partitions: int, options: dict[str, str]) -> list[int]:
    counts = [0] * partitions
    state = spark.read.format("statestore").options(**options).load(spark_path(location))
    for partition in state.groupBy("partition_id").count().collect():
        counts[partition.partition_id] = partition["count"]
    return counts


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
                f"  on disk: {operator.disk_bytes:,} B ({capacity.human_bytes(operator.disk_bytes)}) in all kept"
                f" versions, largest partition {max(operator.disk_bytes_per_partition):,} B"
            )
    lines += ["", *_comparison(inspection)]
    return "\n".join(lines)


def _comparison(inspection: Inspection) -> list[str]:
    e = inspection.estimate
    if e is None:
        return ["estimate: none (no settings to estimate from; inspect --settings PATH compares with them)"]
    measured = inspection.state_rows
    share = f"{measured / e.rows:.2%} of the estimate" if e.rows else "the estimate is 0 rows"
    most = max((max(s.rows_per_partition) for o in inspection.operators for s in o.stores if s.counted), default=0)
    return [
        f"estimate ({capacity.num(e.input_rows_per_second)} rows/s, watermark {e.watermark}): {e.rows:,} state rows,"
        f" {e.rows // e.shuffle_partitions:,} per partition, {capacity.human_bytes(e.total_bytes)} of heap on the"
        f" HDFS-backed store ({e.heap_bytes_per_row} B per row), {capacity.human_bytes(e.rocksdb_disk_bytes)} of"
        " disk on RocksDB",
        f"measured at batch {inspection.batch_id}: {measured:,} state rows ({share}), at most {most:,} in one partition",
        *(
            f"  operator {operator.operator_id} ({part.operator}): {operator.rows:,} state rows, estimate {part.rows:,}"
            for operator, part in (inspection.estimates_by_operator() if len(inspection.operators) > 1 else [])
        ),
    ]


def _rounded(value: float | None) -> float | None:
    return None if value is None else round(value, 4)


def spark_message(error: Exception) -> str:
    """The first line of Spark's error and of its root cause, without the Java stack."""
    java = getattr(error, "java_exception", None)
    if java is None:
        return _unlinked(first_line(str(error)))
    root = java
    while root.getCause() is not None and root.getCause() != root:
        root = root.getCause()
    message = first_line(str(java.toString()))
    return _unlinked(message if root == java else f"{message} (caused by {first_line(str(root.toString()))})")


def _unlinked(message: str) -> str:
    """Spark's message with the checkpoint's own path where it names a link of spark_path."""
    for link, checkpoint in _LINKS.items():
        message = message.replace(link, checkpoint)
    return message
