"""State store sizing: the napkin math that picks the provider.

The headline is the seed rule, rows = watermark x input rate. Each operator then counts its own
rows (operators.py). The payload is rows x state_bytes_per_row (the key and value columns); the
HDFS-backed store holds it in the JVM heap with its own overhead per row and per store instance
(store_costs.py, measured): that heap footprint / partitions x growth factor is compared with the
threshold, at or above 1 GiB per partition: RocksDB. RocksDB's disk and native memory are
estimated beside it.

Standard library only: the template loads it under cookiecutter's Python to size the state at
generation time (hooks/answers.py), so the estimate exists once. Each operator's formula is in
operators.py.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass, replace
from typing import Any

from .. import real_time
from ..durations import named_duration
from ..figures import human_bytes, num, require_positive
from ..operators import batch_seconds, measured_as
from ..operators import operator as find_operator
from . import memory, store_costs

GIB = 1024**3
ROCKSDB_THRESHOLD_BYTES = GIB
# Below the threshold but within this share of it, the report warns that growth may cross it.
NEAR_THRESHOLD_SHARE = 0.25
ASSUMED_BYTES_PER_ROW = (
    "state_bytes_per_row as given (the key and value columns), an assumption: `estimate --calibrate`"
    " measures the footprint per row for this query and provider"
)
PROVIDERS = ("hdfs", "rocksdb")
JAVA_INT = 2**31 - 1
# The largest value of each sizing input: far above any real job (a larger one is a typo), so that the
# arithmetic stays finite, and within the Java int Spark reads a count as. The settings and the bake's
# answers refuse more.
MAXIMA = {
    "input_rows_per_second": 10**15,
    "join_input_rows_per_second": 10**15,
    "key_cardinality": 10**15,
    "state_bytes_per_row": JAVA_INT,
    "shuffle_partitions": JAVA_INT,
    "max_cores": JAVA_INT,
    "state_growth_factor": 1000,
}

DEFAULT_TRIGGER = "10 seconds"  # settings.yaml's default
# The operator-specific inputs, their defaults, and the setting each comes from.
SHAPE_DEFAULTS = {
    "window": "1 minute",
    "key_cardinality": None,  # unknown: every event may be a new key (the upper bound)
    "join_input_rows_per_second": None,  # unknown: the same as the input rate
    "join_range": "15 minutes",
    "join_type": "Inner",
    "session_timeout": "30 minutes",
    "trigger": DEFAULT_TRIGGER,
    "slide": None,  # a tumbling window: it slides by its length
    "gap": "5 minutes",
    "timeout": "none",
    "state_timeout": None,  # not known: a key is taken as kept until the function removes it
    "state_horizon": "1 day",
    "state_variables": None,  # not read from a processor: the template's, one value state per key
    "map_entries_per_key": None,  # not known: one entry per key in each map state
    "evicts": False,  # dropDuplicates and an aggregation without a window keep every key, unless the plan says
}
UNSET_MEANS = {
    "key_cardinality": "unknown, so every event is taken as a new key (the upper bound; set it for a tighter figure)",
    "join_input_rows_per_second": "not set, so the input rate is used",
    "slide": "none, a tumbling window",
    "state_timeout": "not set, so no key is taken as removed",
    "state_variables": "not read from the processor, so one value state per key (the template's processor)",
    "map_entries_per_key": "not set, so each map state is taken to hold 1 entry per key (set it to what a key's map holds)",
}
SHAPE_SETTINGS = {
    "window": "query.window",
    "key_cardinality": "capacity.key_cardinality",
    "join_input_rows_per_second": "capacity.join_input_rows_per_second",
    "join_range": "query.join.range",
    "join_type": "the query's plan",
    "session_timeout": "query.custom_state.session_timeout",
    "trigger": "query.trigger",
    "slide": "the query's plan",
    "gap": "the query's plan",
    "timeout": "the query's plan",
    "state_timeout": "capacity.state_timeout",
    "state_horizon": "capacity.state_horizon",
    "state_variables": "the processor's init, read from the query's plan",
    "map_entries_per_key": "capacity.map_entries_per_key",
    "evicts": "the query's plan: whether the watermarked event time is one of its keys",
}


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
        recommended_provider=_recommended(projected, steady, executor["executor_heap_bytes"], _in_real_time(shape)),
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


def _in_real_time(*shapes: dict[str, object]) -> bool:
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
            projected, steady, executor["executor_heap_bytes"], _in_real_time(*(part.shape for part in parts))
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


@dataclass(frozen=True)
class Decision:
    """The provider and changelog setting a project gets, and why."""

    provider: str
    changelog_checkpointing: bool
    against_recommendation: bool
    notes: tuple[str, ...]
    # The heap each executor (a local run's driver) starts with: what the HDFS-backed state needs
    # beside Spark's own memory, or Spark's default beside RocksDB, whose state is native memory.
    heap: str = "1g"


def decide(requested_provider: str, changelog_checkpointing: bool, sizing: Estimate) -> Decision:
    """Resolve `auto`, honour an explicit choice, and drop changelog where it cannot apply."""
    if requested_provider not in ("auto", "hdfs", "rocksdb"):
        raise ValueError(f"provider must be auto, hdfs or rocksdb, got {requested_provider!r}")
    recommended = sizing.recommended_provider
    notes = []
    needs_rocksdb = [part.operator for part in sizing.operators if find_operator(part.operator).rocksdb_only]
    only_rocksdb = find_operator(needs_rocksdb[0]).rocksdb_only if needs_rocksdb else None
    if only_rocksdb:
        if requested_provider == "hdfs":
            raise ValueError(
                f"{needs_rocksdb[0]} needs the rocksdb state store ({only_rocksdb});"
                " answer rocksdb or auto for state_store_provider"
            )
        if recommended == "hdfs":
            notes.append(f"rocksdb although the sizing says hdfs: {only_rocksdb}.")
        recommended = "rocksdb"
    provider = recommended if requested_provider == "auto" else requested_provider
    against = provider != recommended
    if against:
        notes.append(
            f"WARNING: you chose {provider} but the sizing recommends {recommended} "
            f"({human_bytes(sizing.projected_bytes_per_partition)} per partition against a "
            f"{human_bytes(sizing.threshold_bytes)} threshold). Your choice is kept; check it "
            "before the first run, because the provider cannot be changed once the checkpoint exists."
        )
    changelog = changelog_checkpointing
    if changelog and provider == "hdfs":
        changelog = False
        notes.append(
            "changelog checkpointing is written as off: it is a RocksDB feature and the "
            "HDFS-backed store always writes its own delta files."
        )
    heap = memory.memory_setting(sizing.executor_heap_bytes if provider == "hdfs" else memory.SPARK_DEFAULT_HEAP)
    return Decision(provider, changelog, against, tuple(notes), heap)


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
    if _in_real_time(*(part.shape for part in e.operators)):
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
