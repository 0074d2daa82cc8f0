"""State store sizing: the napkin math that picks the provider.

The headline is the seed rule, rows = watermark x input rate. Each operator then counts its own
rows (operators.py). The payload is rows x state_bytes_per_row (the key and value columns); the
HDFS-backed store holds it in the JVM heap with its own overhead per row and per store instance
(store_costs.py, measured): that heap footprint / partitions x growth factor is compared with the
threshold, at or above 1 GiB per partition: RocksDB. RocksDB's disk and native memory are
estimated beside it. The figures are an Estimate (estimate.py); decision.py turns them into the
provider a project gets, report.py into the lines that explain them.

Standard library only: the template loads it under cookiecutter's Python to size the state at
generation time (hooks/answers.py), so the estimate exists once. Each operator's formula is in
operators.py.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from .. import real_time
from ..durations import named_duration
from ..figures import num, require_positive
from ..operators import batch_seconds, measured_as
from ..operators import operator as find_operator
from . import memory, store_costs
from .estimate import ASSUMED_BYTES_PER_ROW, Estimate
from .limits import ROCKSDB_THRESHOLD_BYTES
from .shape import DEFAULT_TRIGGER, SHAPE_DEFAULTS

PROVIDERS = ("hdfs", "rocksdb")


def estimate(
    input_rows_per_second: float,
    watermark: str,
    state_bytes_per_row: int,
    shuffle_partitions: int,
    growth_factor: float = 1.0,
    operator: str = "windowed_aggregation",
    bytes_per_row_source: str = ASSUMED_BYTES_PER_ROW,
    measured_on: str | None = None,
    measured_bytes_per_row: int | None = None,
    upstream_delay_seconds: float = 0.0,
    upstream_window: str | None = None,
    executors: int = 1,
    **shape: object,
) -> Estimate:
    """Napkin math for the state a watermarked query keeps; see the module docstring.

    `shape` takes the operator's own inputs (SHAPE_DEFAULTS names them); None means the default.
    After another stateful operator (estimate_chain), its rows may come upstream_delay_seconds behind
    the watermark (after a join), or as the windows of a windowed aggregation close (upstream_window).
    """
    op = find_operator(operator)
    unknown = sorted(set(shape) - set(SHAPE_DEFAULTS))
    if unknown:
        raise ValueError(f"unknown sizing input {unknown[0]!r}; use {', '.join(SHAPE_DEFAULTS)}")
    require_positive("input_rows_per_second", input_rows_per_second)
    require_positive("state_bytes_per_row", state_bytes_per_row)
    require_positive("shuffle_partitions", shuffle_partitions)
    if growth_factor < 1:
        raise ValueError(f"growth_factor must be 1 or more (state does not shrink), got {growth_factor}")
    seconds = named_duration("watermark", watermark, zero=True)
    inputs = {name: SHAPE_DEFAULTS[name] if shape.get(name) is None else shape[name] for name in op.sizing_inputs}
    if measured_on not in (None, *PROVIDERS) or (measured_on is None) != (measured_bytes_per_row is None):
        raise ValueError("measured_on (hdfs or rocksdb) and measured_bytes_per_row come together")
    fed = {"upstream_window": upstream_window} if upstream_window and "window" in op.sizing_inputs else {}
    rows, working = op.rows(input_rows_per_second, seconds + upstream_delay_seconds, **inputs, **fed)
    costs = store_costs.COSTS[measured_as(operator)]
    instances = shuffle_partitions * costs.instances_per_partition
    # A calibration's measure replaces payload + overhead on the provider it ran on.
    heap_per_row = state_bytes_per_row + costs.heap_overhead_per_row
    changed = rows_changed_per_batch(rows, input_rows_per_second, inputs, shape.get("trigger"))
    disk = rows * state_bytes_per_row * costs.disk_ratio + unmerged_flush_bytes(costs, changed, state_bytes_per_row)
    if measured_bytes_per_row is not None:
        if measured_on == "hdfs":
            heap_per_row = measured_bytes_per_row
        else:  # the calibration's run had its own flushes in its figure
            disk = rows * measured_bytes_per_row
    total_bytes = rows * heap_per_row + instances * store_costs.HEAP_PER_INSTANCE
    per_partition = total_bytes // shuffle_partitions
    projected = round(per_partition * growth_factor)
    steady = op.evicts(**inputs)
    executor = _executor_share(projected, shuffle_partitions, executors)
    return Estimate(
        operator=operator,
        formula=op.formula,
        input_rows_per_second=input_rows_per_second,
        watermark=watermark,
        watermark_seconds=seconds,
        headline_rows=round(seconds * input_rows_per_second),
        rows_working=working,
        shape=inputs,
        state_bytes_per_row=state_bytes_per_row,
        bytes_per_row_source=bytes_per_row_source,
        measured_on=measured_on,
        measured_bytes_per_row=measured_bytes_per_row,
        shuffle_partitions=shuffle_partitions,
        growth_factor=growth_factor,
        rows=rows,
        payload_bytes=rows * state_bytes_per_row,
        heap_bytes_per_row=heap_per_row,
        store_instances=instances,
        heap_bytes_per_instance=store_costs.HEAP_PER_INSTANCE,
        store_costs_source=store_costs.MEASURED_BY,
        total_bytes=total_bytes,
        bytes_per_partition=per_partition,
        projected_bytes_per_partition=projected,
        threshold_bytes=ROCKSDB_THRESHOLD_BYTES,
        recommended_provider=_recommended(projected, steady, executor["executor_heap_bytes"], in_real_time(shape)),
        rows_changed_per_batch=changed,
        rocksdb_disk_bytes=round(disk) + instances * store_costs.ROCKSDB_DISK_PER_INSTANCE,
        rocksdb_memory_bytes=rows * (state_bytes_per_row + costs.memory_overhead_per_row)
        + instances * store_costs.ROCKSDB_MEMORY_PER_INSTANCE,
        steady_state=steady,
        **executor,
    )


def _executor_share(projected_per_partition: int, partitions: int, executors: int) -> dict[str, Any]:
    held = memory.partitions_per_executor(partitions, executors)
    state = held * projected_per_partition
    return {
        "executors": executors,
        "executor_partitions": held,
        "executor_state_bytes": state,
        "executor_heap_bytes": memory.heap_for_state(state),
    }


def _recommended(projected_per_partition: int, steady: bool, executor_heap: int, real_time_mode: bool) -> str:
    """RocksDB for a partition at the threshold, a state without a steady state, more heap-held state than
    an executor's heap should carry (memory.HDFS_HEAP_CEILING), or real-time mode (which refuses the other)."""
    too_large = projected_per_partition >= ROCKSDB_THRESHOLD_BYTES or executor_heap > memory.HDFS_HEAP_CEILING
    return "rocksdb" if too_large or not steady or real_time_mode else "hdfs"


def in_real_time(*shapes: dict[str, object]) -> bool:
    """Whether any of these operators' inputs has a real-time trigger."""
    return any(real_time.batch_duration(str(shape.get("trigger") or "")) is not None for shape in shapes)


def estimate_chain(
    operators: Sequence[str],
    upstream: Sequence[int | None] | None = None,
    own_inputs: Sequence[dict[str, object]] | None = None,
    **inputs: object,
) -> Estimate:
    """The state of a query of several stateful operators, in the order events reach them: each sized
    with the inputs of `estimate`, its own inputs on top (own_inputs[i]: its watermark, window, rate,
    keys, bytes per row), and without a rate of its own the rows its upstream operator (the index of
    the operator whose output it reads, or None for the source; by default the one before it) passes
    on at most. Summed by combine."""
    if upstream is None:
        upstream = [None, *range(len(operators) - 1)]
    if own_inputs is None:
        own_inputs = [{} for _ in operators]
    parts: list[Estimate] = []
    rate_out: list[float] = []
    for index, (name, before, own) in enumerate(zip(operators, upstream, own_inputs, strict=True)):
        merged: dict[str, Any] = {**inputs, "operator": name, **own}
        source = ""
        if "input_rows_per_second" in own:
            source = f"capacity.operators[{index}].input_rows_per_second"
        elif before is not None:
            merged["input_rows_per_second"] = rate_out[before]
            source = (
                f"what {operators[before]} before it passes on, at most (set"
                f" capacity.operators[{index}].input_rows_per_second when a filter or repeats lower it)"
            )
        if before is not None:
            feeding = find_operator(operators[before])
            merged["upstream_delay_seconds"] = feeding.output_delay(**parts[before].shape)
            if feeding.name == "windowed_aggregation":
                merged["upstream_window"] = parts[before].shape["window"]
            if merged["upstream_delay_seconds"]:
                source += (
                    f"; its rows come up to {num(merged['upstream_delay_seconds'])} s behind the watermark, so"
                    " it keeps them that much longer"
                )
        part = estimate(**merged)
        shape = {key: merged.get(key) for key in ("window", "key_cardinality") if merged.get(key) is not None}
        rate_out.append(find_operator(name).output_rate(part.input_rows_per_second, **shape))
        parts.append(replace(part, rate_source=source) if len(operators) > 1 or source else part)
    return combine(parts)


def combine(parts: Sequence[Estimate]) -> Estimate:
    """The state of a query of several stateful operators: rows, bytes and store instances summed per
    partition, the provider decided on the sum. A single operator's estimate is returned as it is."""
    if len(parts) == 1:
        return parts[0]
    if not parts:
        raise ValueError("a query without a stateful operator keeps no state to size")
    first = parts[0]
    rows = sum(part.rows for part in parts)
    total = sum(part.total_bytes for part in parts)
    per_partition = total // first.shuffle_partitions
    projected = round(per_partition * first.growth_factor)
    steady = all(part.steady_state for part in parts)
    executor = _executor_share(projected, first.shuffle_partitions, first.executors)
    return replace(
        first,
        operator=" -> ".join(part.operator for part in parts),
        formula="each operator's state, summed",
        headline_rows=first.headline_rows,  # the source's rate over the watermark
        rows_working=" + ".join(num(part.rows) for part in parts) + f" = {num(rows)} rows",
        shape={},
        rows=rows,
        payload_bytes=sum(part.payload_bytes for part in parts),
        heap_bytes_per_row=round(sum(part.rows * part.heap_bytes_per_row for part in parts) / rows) if rows else 0,
        store_instances=sum(part.store_instances for part in parts),
        total_bytes=total,
        bytes_per_partition=per_partition,
        projected_bytes_per_partition=projected,
        recommended_provider=_recommended(
            projected, steady, executor["executor_heap_bytes"], in_real_time(*(part.shape for part in parts))
        ),
        steady_state=steady,
        **executor,
        rows_changed_per_batch=sum(part.rows_changed_per_batch for part in parts),
        rocksdb_disk_bytes=sum(part.rocksdb_disk_bytes for part in parts),
        rocksdb_memory_bytes=sum(part.rocksdb_memory_bytes for part in parts),
        parts=tuple(parts),
    )


def rows_changed_per_batch(rows: int, rate: float, inputs: dict[str, object], trigger: object) -> int:
    """The rows one batch writes to the state and deletes from it at steady state: a row per event (at
    most every row), and as many deleted as added. An available_now batch is as large as the backlog,
    unknown here: the default trigger's batch stands in."""
    seconds = steady_batch_seconds(trigger)
    joined = "join_range" in inputs  # a join's batch brings both sides' events
    right_rate = float(inputs["join_input_rows_per_second"] or rate) if joined else 0.0  # type: ignore[arg-type]
    events = (rate + right_rate) * seconds
    return round(2 * min(events, rows))


def steady_batch_seconds(trigger: object) -> float:
    """The event time a batch covers, the default trigger's for available_now (whose batch is the backlog)."""
    return batch_seconds(str(trigger or DEFAULT_TRIGGER)) or batch_seconds(DEFAULT_TRIGGER)


def unmerged_flush_bytes(costs: store_costs.StoreCosts, changed: int, state_bytes_per_row: int) -> float:
    """The SST bytes of the batches' flushes that RocksDB has not merged yet, on average."""
    return store_costs.UNMERGED_FLUSHES * changed * state_bytes_per_row * costs.flush_ratio
