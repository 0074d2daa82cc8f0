"""`inspect --changes`: each store's puts and deletes per batch, from the change feed, to set beside the
job's progress (its rows_updated and rows_removed per operator: docs/state.md gives the rule per operator)."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

from ..core.checkpoint.files import local_checkpoint
from .change_feed import CHANGES, FeedPlan, feed_plan, read_feed
from .inspection import InspectError, operator_names, state_partitions
from .state_reader import has_feed, store_name, stores_of

if TYPE_CHECKING:  # Spark is imported only when a command needs it
    from pyspark.sql import SparkSession


@dataclass
class StoreChanges:
    operator_id: int
    operator: str
    store: str
    puts: int
    deletes: int


@dataclass
class BatchChanges:
    batch_id: int
    stores: list[StoreChanges] = field(default_factory=list)


@dataclass
class ChangeCounts:
    checkpoint: str
    read: str
    batches: list[BatchChanges]

    def to_dict(self) -> dict[str, object]:
        return asdict(self)


def count_changes(spark: SparkSession, location: str, metadata: list[Any], batch: int) -> ChangeCounts:
    """Puts and deletes per batch of every store with a change feed, over the batches it covers up to
    `batch`; an InspectError when the checkpoint keeps none."""
    partitions = state_partitions(local_checkpoint(location), batch, metadata[0].numPartitions)
    plan = feed_plan(spark, location, metadata, batch, partitions)
    if plan.first is None:
        raise InspectError(f"--changes: {location}: {plan.why_not}; inspect --key reads one batch at a time instead")
    names = operator_names(location, metadata)
    batches = [BatchChanges(batch_id) for batch_id in range(plan.first, batch + 1)]
    for options in filter(has_feed, stores_of(metadata)):
        counts = _counts(spark, location, options, plan)
        operator_id = int(options["operatorId"])
        store = store_name(options)
        for changes in batches:
            puts, deletes = (counts.get((changes.batch_id, change), 0) for change in ("put", "delete"))
            changes.stores.append(StoreChanges(operator_id, names[operator_id], store, puts, deletes))
    return ChangeCounts(location, plan.says(), batches)


def _counts(spark: SparkSession, location: str, options: dict[str, str], plan: FeedPlan) -> dict[tuple[int, str], int]:
    feed = read_feed(spark, location, options, plan)
    return {
        (row.batch_id, CHANGES.get(row.change_type, row.change_type)): row["count"]
        for row in feed.groupBy("batch_id", "change_type").count().collect()
    }


def render(counts: ChangeCounts) -> str:
    several = len({store.operator_id for changes in counts.batches for store in changes.stores}) > 1
    lines = [f"{counts.checkpoint}: changes per batch {counts.read}"]
    for changes in counts.batches:
        for store in changes.stores:
            label = f"operator {store.operator_id} ({store.operator}) {store.store}" if several else store.store
            lines.append(f"  batch {changes.batch_id}: {label}: {store.puts:,} puts, {store.deletes:,} deletes")
    return "\n".join(lines)
