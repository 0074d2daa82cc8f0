"""The sizing report: every step of the napkin math of an Estimate, the recommendation and its
reasons, and the decision when there is one.

Standard library only: the bake prints it (hooks/answers.py).
"""

from __future__ import annotations

from collections.abc import Sequence

from ..durations import named_duration
from ..figures import human_bytes, num
from ..operators import measured_as
from ..operators import operator as find_operator
from . import memory, store_costs
from .capacity import in_real_time
from .decision import Decision
from .estimate import Estimate
from .shape import SHAPE_DEFAULTS, SHAPE_SETTINGS, UNSET_MEANS

# Below the threshold but within this share of it, the report warns that growth may cross it.
NEAR_THRESHOLD_SHARE = 0.25


def report(sizing: Estimate, decision: Decision | None = None, partition_lines: Sequence[str] = ()) -> str:
    """The sizing report: every step of the napkin math, the recommendation and its reasons, and the
    partition advice (partitions.describe) when given."""
    e = sizing
    share = e.projected_bytes_per_partition / e.threshold_bytes
    lines = ["State store sizing (napkin math)"]
    if e.parts:
        lines.append(
            f"  query          = {len(e.parts)} stateful operators, in the order events reach them: {e.operator};"
            " each keeps its own stores in every partition, so their state is summed"
        )
        for number, part in enumerate(e.parts, 1):
            lines += [f"  operator {number:<6}= {part.operator}: {part.formula}", *_operator_lines(part, "    ")]
        lines += [
            f"  state rows     = {e.rows_working}",
            f"  hdfs heap      = {' + '.join(num(part.total_bytes) for part in e.parts)} = {num(e.total_bytes)} B"
            f" ({human_bytes(e.total_bytes)}): the figure the threshold is applied to",
        ]
    else:
        lines += [f"  operator       = {e.operator}: {e.formula}", *_operator_lines(e, "  ")]
    lines += [
        f"  per partition  = {num(e.total_bytes)} B / {num(e.shuffle_partitions)} partitions"
        f" = {num(e.bytes_per_partition)} B ({human_bytes(e.bytes_per_partition)})",
        f"  with growth    = x{num(e.growth_factor)} = {num(e.projected_bytes_per_partition)} B"
        f" per partition ({share:.1%} of the {human_bytes(e.threshold_bytes)} threshold)",
        f"  per executor   = {_executor_working(e)}",
        f"  on rocksdb     = {human_bytes(e.rocksdb_disk_bytes / e.shuffle_partitions)} of local disk and"
        f" {human_bytes(e.rocksdb_memory_bytes / e.shuffle_partitions)} of native memory per partition"
        f" ({_rocksdb_source(e)})",
        f"  recommendation = {e.recommended_provider}: {_reason(e, share)}",
    ]
    if decision is not None:
        changelog = "on" if decision.changelog_checkpointing else "off"
        lines.append(f"  chosen         = {decision.provider}, changelog checkpointing {changelog}")
        lines.append(
            f"  heap           = {decision.heap} per executor (spark.driver_memory for local runs): {_heap_reason(e, decision)}"
        )
        lines.extend(f"  {note}" for note in decision.notes)
    lines.extend(f"  {line}" for line in partition_lines)
    lines.append(
        "  Note: the provider and the number of shuffle partitions are pinned into the checkpoint"
        " at the first run; Spark ignores later changes to either. A new provider means a new"
        f" checkpoint and reprocessing. {_repartition_note(decision)}"
    )
    return "\n".join(lines)


def _operator_lines(e: Estimate, indent: str) -> list[str]:
    """One operator's napkin math: its rows, its payload and its heap on the HDFS-backed store."""
    rate = [f"{indent}rate in        = {num(e.input_rows_per_second)} rows/s: {e.rate_source}"] if e.rate_source else []
    lines = [
        *rate,
        f"{indent}headline       = watermark {e.watermark} ({num(e.watermark_seconds)} s)"
        f" x {num(e.input_rows_per_second)} rows/s = {num(e.headline_rows)} rows (state kept for the watermark)",
        f"{indent}state rows     = {e.rows_working}",
        *_beyond_headline(e),
        f"{indent}inputs         = {_inputs(e)}",
        f"{indent}bytes per row  = {num(e.state_bytes_per_row)} B: {e.bytes_per_row_source}",
        f"{indent}payload        = {num(e.rows)} rows x {num(e.state_bytes_per_row)} B"
        f" = {num(e.payload_bytes)} B ({human_bytes(e.payload_bytes)})",
        f"{indent}store overhead = {_heap_working(e)}",
        f"{indent}hdfs heap      = {num(e.rows)} x {num(e.heap_bytes_per_row)} B + {num(e.store_instances)} x"
        f" {num(e.heap_bytes_per_instance)} B = {num(e.total_bytes)} B ({human_bytes(e.total_bytes)})"
        + ("" if e.parts or indent != "  " else ": the figure the threshold is applied to"),
    ]
    return [line.replace("  vs headline", indent + "vs headline", 1) for line in lines]


def _repartition_note(decision: Decision | None) -> str:
    """Only RocksDB state can be moved into other partitions later: a reason to prefer it for state that may grow."""
    can = (
        "The partitions of a rocksdb checkpoint can be changed later with the job stopped (the repartition"
        " command, Spark 4.2 and later); those of an hdfs checkpoint cannot"
    )
    if decision is not None and decision.provider == "hdfs":
        return can + ": if the stream may outgrow them, rocksdb keeps that way open."
    return can + "."


def _heap_working(e: Estimate) -> str:
    if e.measured_on == "hdfs":
        return f"none added: {num(e.heap_bytes_per_row)} B of heap per row is the calibration's measure"
    overhead = e.heap_bytes_per_row - e.state_bytes_per_row
    like = measured_as(e.operator)
    measured = e.operator if like == e.operator else f"{like}, standing in for {e.operator} until it is measured"
    return (
        f"+{num(overhead)} B of heap per row and {num(e.heap_bytes_per_instance)} B per store instance"
        f" on the HDFS-backed store for {measured} (objects, hash-map entries, the versions kept"
        f" loaded; {e.store_costs_source})"
    )


def _rocksdb_source(e: Estimate) -> str:
    if e.measured_on == "rocksdb":
        return "disk as the calibration measured it"
    if e.parts:
        return f"each operator's SST files, flushes and native memory (store_costs.py), summed; {e.store_costs_source}"
    costs = store_costs.COSTS[measured_as(e.operator)]
    return (
        f"SST files: the rows at x{costs.disk_ratio:g} the payload, and {num(store_costs.UNMERGED_FLUSHES)}"
        f" unmerged flushes of the {num(e.rows_changed_per_batch)} rows a batch changes at x{costs.flush_ratio:g};"
        f" native memory +{num(costs.memory_overhead_per_row)} B per row with changelog checkpointing;"
        f" and per store instance; {e.store_costs_source}"
    )


def _beyond_headline(e: Estimate) -> list[str]:
    """One line on why Spark keeps more rows than the headline, when it does."""
    why = find_operator(e.operator).beyond_headline
    if e.rows <= e.headline_rows or why is None:
        return []
    times = f"x{e.rows / e.headline_rows:.2f}" if e.headline_rows else "more"
    return [f"  vs headline    = {times}: {why}"]


def _inputs(e: Estimate) -> str:
    """The operator's own inputs, where each is set, and which are still guesses."""
    if not e.shape:
        return "watermark and rate only"
    parts = []
    for name, value in e.shape.items():
        shown = UNSET_MEANS[name] if value is None else num(value) if isinstance(value, (int, float)) else value
        shown = ", ".join(map(str, value)) if isinstance(value, tuple) else shown
        parts.append(f"{name} {shown} ({SHAPE_SETTINGS[name]})")
    return "; ".join(parts)


def _reason(e: Estimate, share: float) -> str:
    if in_real_time(*(part.shape for part in e.operators)):
        return "query.trigger is real_time, and Spark's real-time mode refuses the HDFS-backed store."
    if not e.steady_state:
        return (
            f"the state has no steady state: {_unbounded(e)} grow{'s' if len(e.operators) == 1 else ''} for as long"
            f" as the query runs, {_threshold_time(e)}; RocksDB keeps it on local disk, where it can grow, and its"
            " partitions can be changed later."
        )
    if e.recommended_provider == "rocksdb" and e.projected_bytes_per_partition < e.threshold_bytes:
        return (
            f"each partition is below 1 GiB, but one executor holds {num(e.executor_partitions)} of them:"
            f" {human_bytes(e.executor_heap_bytes)} of heap, above the {human_bytes(memory.HDFS_HEAP_CEILING)} an"
            " executor's heap should carry in state (every full GC walks it, and each batch copies the maps it"
            " touches); RocksDB keeps it in native memory and on local disk, and the heap stays at Spark's default."
        )
    if e.recommended_provider == "rocksdb":
        return (
            "at or above 1 GiB per partition, state held in the JVM heap brings long GC pauses and"
            " out-of-memory failures; RocksDB keeps it in native memory and on local disk."
        )
    reason = "below 1 GiB per partition the HDFS-backed store keeps all state in JVM memory without GC trouble, and it is the fastest per row."
    if share >= NEAR_THRESHOLD_SHARE:
        reason += (
            " It is within 4x of the threshold: if the rate or key space may grow, choose rocksdb"
            " now, since the provider cannot be switched later."
        )
    return reason


def _unbounded(e: Estimate) -> str:
    return " and ".join(part.operator for part in e.operators if not part.steady_state)


def _threshold_time(e: Estimate) -> str:
    """When a growing state passes the threshold per partition on the HDFS-backed store, at the rate it grows."""
    growing = [part for part in e.operators if not part.steady_state]
    horizon_s = named_duration(
        "state_horizon", str(growing[0].shape.get("state_horizon") or SHAPE_DEFAULTS["state_horizon"])
    )
    bytes_per_second = sum(part.total_bytes for part in growing) / horizon_s / e.shuffle_partitions * e.growth_factor
    if e.projected_bytes_per_partition < e.threshold_bytes:
        return (
            f"{human_bytes(e.projected_bytes_per_partition)} per partition after the horizon, below the"
            f" {human_bytes(e.threshold_bytes)} threshold until then"
        )
    hours = e.threshold_bytes / bytes_per_second / 3600 if bytes_per_second else float("inf")
    return f"past the {human_bytes(e.threshold_bytes)} threshold per partition on the HDFS-backed store after {hours:,.1f} hours"


def _executor_working(e: Estimate) -> str:
    who = "a local run's driver holds every partition" if e.executors == 1 else f"{num(e.executors)} executors"
    return (
        f"{num(e.executor_partitions)} partitions ({who}) x {human_bytes(e.projected_bytes_per_partition)}"
        f" = {human_bytes(e.executor_state_bytes)} of state on the HDFS-backed store; with Spark's own memory a heap of"
        f" 300 MiB + that / {1 - memory.UNIFIED_MEMORY_FRACTION:.0%} = {human_bytes(e.executor_heap_bytes)}"
    )


def _heap_reason(e: Estimate, decision: Decision) -> str:
    if decision.provider == "hdfs":
        return f"the {human_bytes(e.executor_heap_bytes)} the HDFS-backed state of one executor needs, rounded up"
    return "Spark's default: the state is in RocksDB's native memory, outside the heap"
