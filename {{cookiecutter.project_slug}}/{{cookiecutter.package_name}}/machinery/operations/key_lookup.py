"""`inspect --key`: where one key is in the state, its times against the watermark, and why it is there.

The question a stuck or missing row raises ("why did ord-574 not join?") is about one key: this
reads each store (or state variable, and the timers) of the checkpoint as of one batch through
Spark's `statestore` source, keeps the rows whose key columns hold the value, and sets the times
they carry against that batch's watermark (from the checkpoint's offsets file). When the key is not
there, it looks back through the batches the checkpoint keeps for the last one that held it. Where
every store keeps a change feed (change_feed.py), that look back is one read per store over all the
kept batches, and it gives the key's history too: its puts (with the value) and deletes, batch by batch.
Otherwise it is one read per kept batch and store. Only reads, like the rest of inspect.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from itertools import groupby
from typing import TYPE_CHECKING, Any

from ..core.checkpoint.files import batch_metadata, local_checkpoint
from ..core.operators import OPERATORS, operator
from .change_feed import CHANGES, TIMERS_WITHOUT_FEED, FeedPlan, feed_plan, read_feed
from .inspection import operator_names, state_partitions
from .state_reader import has_feed, read_store, store_name, stores_of

if TYPE_CHECKING:  # Spark is imported only when a command needs it
    from pyspark.sql import DataFrame, SparkSession

# How far back a key that is gone is looked for without a change feed: each kept batch is one read per store.
LOOKBACK_BATCHES = 20
# Long columns that hold a time, by the unit their name ends with.
TIME_UNITS = {"Micros": 1_000_000, "Ms": 1_000}


@dataclass
class KeyRow:
    operator_id: int  # the operator that keeps the store, and its name
    operator: str
    store: str
    partition: int
    key: dict[str, Any]
    value: dict[str, Any] | None
    times: list[str]  # every time the row carries (event times, window bounds, expiries), ISO 8601


@dataclass
class KeyChange:
    """One put or delete of a row holding the key, from the change feed."""

    batch_id: int
    operator_id: int
    operator: str
    store: str
    partition: int
    change: str  # put or delete
    key: dict[str, Any]
    value: dict[str, Any] | None


@dataclass
class KeyLookup:
    key: str
    batch_id: int
    watermark: str | None
    rows: list[KeyRow] = field(default_factory=list)
    last_held_batch: int | None = None
    why: str = ""
    read: str = ""  # how the kept batches were read: the change feed over a range, or one batch at a time
    history: list[KeyChange] | None = None  # with a change feed: every change of the key, in order

    @property
    def held(self) -> bool:
        return bool(self.rows)

    def to_dict(self) -> dict[str, object]:
        return {**asdict(self), "held": self.held}


def find_key(spark: SparkSession, location: str, metadata: list[Any], batch: int, key: str) -> KeyLookup:
    """The rows holding `key` as of `batch`, in every operator's stores; when there are none, the last
    kept batch that held it."""
    lookup = KeyLookup(key, batch, _iso(_watermark(location, batch)))
    names = operator_names(location, metadata)  # read once: the tools name the operators alike
    lookup.rows = _rows_with_key(spark, location, metadata, names, batch, key)
    partitions = state_partitions(local_checkpoint(location), batch, metadata[0].numPartitions)
    plan = feed_plan(spark, location, metadata, batch, partitions)
    lookup.read = plan.says()
    if plan.readable:
        lookup.history = _history(spark, location, metadata, names, plan, key)
        if not all(has_feed(options) for options in stores_of(metadata)):
            lookup.read += f" (timers at batch {batch} only: {TIMERS_WITHOUT_FEED})"
    if lookup.rows:
        held_until = _rules(names, {row.operator for row in lookup.rows})
        latest = max(time for row in lookup.rows for time in row.times) if any(r.times for r in lookup.rows) else None
        stores = ", ".join(sorted({_where(row, metadata) for row in lookup.rows}))
        carries = f"; the latest time it carries is {latest}" if latest else ""
        lookup.why = (
            f"held at batch {batch} in {stores}: the watermark is {lookup.watermark or 'not set yet'}{carries};"
            f" {held_until}"
        )
        return lookup
    held_until = _rules(names, None)
    if plan.first is not None and lookup.history is not None:
        oldest = plan.first
        lookup.last_held_batch = _last_held(lookup.history)
    else:
        oldest = max(min(row.minBatchId for row in metadata), batch - LOOKBACK_BATCHES)
        lookup.last_held_batch = next(
            (
                earlier
                for earlier in range(batch - 1, oldest - 1, -1)
                if _rows_with_key(spark, location, metadata, names, earlier, key)
            ),
            None,
        )
    earlier = lookup.last_held_batch
    if earlier is not None:
        lookup.why = (
            f"gone: held until batch {earlier} (watermark {_iso(_watermark(location, earlier)) or 'not set'}),"
            f" dropped by batch {earlier + 1} (watermark {_iso(_watermark(location, earlier + 1)) or 'not set'});"
            f" {held_until}"
        )
        return lookup
    lookup.why = (
        f"not in the state at batch {batch}, nor in the kept batches {oldest}..{batch - 1}: it never reached the state"
        " (not read yet, later than the watermark allows, or written differently: it is compared as text with each"
        f" key column), or it left before batch {oldest}; {held_until}"
    )
    return lookup


def _rows_with_key(
    spark: SparkSession, location: str, metadata: list[Any], names: dict[int, str], batch: int, key: str
) -> list[KeyRow]:
    rows = []
    for options in stores_of(metadata):
        state = read_store(spark, location, options, batch)
        store = store_name(options)
        held_by = names[int(options["operatorId"])]
        for found in state.where(_matches(state, key)).collect():
            key_columns = found["key"].asDict(recursive=True)
            value = _value(found.asDict(recursive=True))
            times = _times(key_columns, value)
            rows.append(
                KeyRow(int(options["operatorId"]), held_by, store, found["partition_id"], key_columns, value, times)
            )
    return rows


def _history(
    spark: SparkSession, location: str, metadata: list[Any], names: dict[int, str], plan: FeedPlan, key: str
) -> list[KeyChange]:
    """Every put and delete of a row holding `key` over the plan's batches: one read per store."""
    changes = []
    for options in filter(has_feed, stores_of(metadata)):
        feed = read_feed(spark, location, options, plan)
        store = store_name(options)
        operator_id = int(options["operatorId"])
        # collect() keeps each partition's changes in the order they were made.
        for found in feed.where(_matches(feed, key)).collect():
            row = found.asDict(recursive=True)
            change = CHANGES.get(row["change_type"], row["change_type"])
            changes.append(
                KeyChange(
                    row["batch_id"],
                    operator_id,
                    names[operator_id],
                    store,
                    row["partition_id"],
                    change,
                    row["key"],
                    row["value"] if change == "put" else None,
                )
            )
    return sorted(changes, key=lambda change: change.batch_id)  # stable: a partition's order within a batch


def _last_held(history: list[KeyChange]) -> int | None:
    """The last batch after which a row held the key, its history replayed batch by batch: a row a
    batch deletes was there after the batch before, unless that same batch put it."""
    held_since: dict[str, int] = {}  # row -> the batch that put it; a row never put was there before
    seen: set[str] = set()
    last = None
    for batch, changes in groupby(history, key=lambda change: change.batch_id):
        for change in changes:
            row = _compact([change.operator_id, change.store, change.partition, change.key])
            if change.change == "put":
                held_since.setdefault(row, batch)
            else:
                if held_since.get(row, -1 if row not in seen else batch) < batch:
                    last = batch - 1
                held_since.pop(row, None)
            seen.add(row)
        if held_since:
            last = batch
    return last


def _rules(operators: dict[int, str], holding: set[str] | None) -> str:
    """How long each operator (of those holding the key, or all) keeps a state row, in its own rule."""
    names = dict.fromkeys(operators.values())
    rules = [f"{name}: {operator(name).held_until}" for name in names if name in OPERATORS]
    rules = [rule for rule in rules if holding is None or rule.split(":")[0] in holding]
    return rules[0].split(": ", 1)[1] if len(names) == 1 and rules else "; ".join(rules)


def _where(row: KeyRow, metadata: list[Any]) -> str:
    """The store, with its operator when the query has several."""
    return row.store if len({info.operatorId for info in metadata}) == 1 else _label(row)


def _label(row: KeyRow) -> str:
    return f"operator {row.operator_id} ({row.operator}) {row.store}"


def _value(row: dict[str, Any]) -> dict[str, Any] | None:
    """The row's value: the `value` struct of a store or state variable, the expiry column of a timer."""
    if "value" in row:
        return row["value"]
    rest = {name: found for name, found in row.items() if name not in ("key", "partition_id")}
    return rest or None


def _matches(state: DataFrame, key: str):  # -> Column
    """Any key column, or a column of a struct in the key (a timer's grouping key), equal to `key` as text."""
    from pyspark.sql import functions as F
    from pyspark.sql.types import StructType

    columns = []
    for column in state.schema["key"].dataType.fields:  # type: ignore[attr-defined]
        if isinstance(column.dataType, StructType):
            columns += [F.col("key").getField(column.name).getField(inner.name) for inner in column.dataType.fields]
        else:
            columns.append(F.col("key").getField(column.name))
    condition = F.lit(False)
    for column in columns:
        condition = condition | (column.cast("string") == F.lit(key))
    return condition


def _times(*parts: dict[str, Any] | None) -> list[str]:
    found: list[str] = []
    for part in parts:
        for name, value in (part or {}).items():
            if isinstance(value, dict):
                found += _times(value)
            elif isinstance(value, datetime):
                found.append(_iso(value) or "")
            elif isinstance(value, int) and not isinstance(value, bool):
                unit = next((per for suffix, per in TIME_UNITS.items() if name.endswith(suffix)), None)
                if unit is not None:
                    found.append(_iso(datetime.fromtimestamp(value / unit, UTC)) or "")
    return sorted(found)


def _watermark(location: str, batch: int) -> datetime | None:
    """The watermark batch `batch` ran with (its offsets file's batchWatermarkMs); None off the local disk."""
    checkpoint = local_checkpoint(location)
    metadata = None if checkpoint is None else batch_metadata(checkpoint, batch)
    milliseconds = (metadata or {}).get("batchWatermarkMs", 0)
    return datetime.fromtimestamp(milliseconds / 1000, UTC) if milliseconds else None


def _iso(moment: datetime | None) -> str | None:
    if moment is None:
        return None
    # A naive datetime from collect() is in the Python process's local time, which astimezone assumes.
    return moment.astimezone(UTC).isoformat().replace("+00:00", "Z")


def render(lookup: KeyLookup) -> str:
    lines = [f"key {lookup.key!r} at batch {lookup.batch_id} (watermark {lookup.watermark or 'not set yet'})"]
    several = len({row.operator_id for row in lookup.rows}) > 1
    for row in lookup.rows:
        store = _label(row) if several else row.store
        lines.append(f"  {store}, partition {row.partition}: key {_compact(row.key)} value {_compact(row.value)}")
    if lookup.history:
        lines.append("  history:")
    several = len({change.operator_id for change in lookup.history or ()}) > 1
    for change in lookup.history or ():
        store = f"operator {change.operator_id} ({change.operator}) {change.store}" if several else change.store
        value = f" value {_compact(change.value)}" if change.change == "put" else ""
        lines.append(
            f"    batch {change.batch_id}: {store}, partition {change.partition}: {change.change} key {_compact(change.key)}{value}"
        )
    lines.append(f"  {lookup.why}")
    lines.append(f"  read: {lookup.read}")
    return "\n".join(lines)


def _compact(value: object) -> str:
    return json.dumps(value, default=str, separators=(", ", ": "))
