"""Cores advised from the input rate, as capacity.py advises the memory from it.

For each operator and provider, the rows per second one core holds: the highest rate at which the
batches of the operator's example query stayed within a 2-second trigger (custom_state: 10 seconds)
on one local core, the job kept to one CPU (`python -m <package> sustain`, operations/sustained_rate.py,
run for each operator by the template's benchmarks/core_rates.py; every event its own key, the
sizing's upper bound). That figure carries the
fixed costs of a batch at that trigger (planning, scheduling, loading and committing the stores): at a
longer trigger they weigh less and the advice is on the safe side; at a shorter one they weigh more.
The advice: the rate's share of a core per operator, summed over the query's stateful operators,
over TARGET_LOAD, rounded up.

Standard library only: the bake runs it under cookiecutter's Python (hooks/answers.py).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from .. import real_time
from ..durations import named_duration
from ..figures import cores_text, num
from ..operators import batch_seconds, measured_as
from .capacity import steady_batch_seconds
from .estimate import Estimate

# Headroom: at the answered rate the cores are busy at most this share of the time, so that a slower
# batch (a GC pause, a compaction, a burst of input) is caught up with instead of piling up.
TARGET_LOAD = 0.7
MEASURED_TRIGGER = "2 seconds"
# custom_state's batches cost over 2 seconds on one core whatever the rate (Python workers and their
# state server per partition), so it was measured at the settings' default trigger.
MEASURED_TRIGGERS = {"custom_state": "10 seconds"}
MEASURED_BY = "sustain's searches on pyspark 4.2.1 (the template's benchmarks/core_rates.py)"

# Rows per second one core holds: the highest rate that held on local[1] with the whole job kept to one
# CPU, its driver's work counted against that core (benchmarks/results/core_rates.md). On a cluster
# the driver has cores of its own, so these lean to the safe side. RocksDB: with changelog
# checkpointing, the template's default for it.
ROWS_PER_SECOND_PER_CORE = {
    ("windowed_aggregation", "hdfs"): 48_500.0,
    ("windowed_aggregation", "rocksdb"): 11_700.0,
    ("deduplication", "hdfs"): 83_900.0,
    ("deduplication", "rocksdb"): 24_700.0,
    ("stream_stream_join", "hdfs"): 11_800.0,
    ("stream_stream_join", "rocksdb"): 5_170.0,
}


@dataclass(frozen=True)
class KeyCallCosts:
    """What a batch of an operator that calls Python once per key costs one core: a fixed part, a
    part per key called (a key with events, and again a key whose session ends) and a part per row."""

    batch_seconds: float
    key_call_seconds: float
    row_seconds: float


# custom_state (transformWithStateInPandas), fitted over runs of 500 and 2,000 rows a batch and 100
# to 4,000 keys called, at steady state (as many sessions ending as starting), on one pinned core,
# local[1], 2 partitions (benchmarks/key_call_costs.py, results in benchmarks/results/key_call_costs.md,
# pyspark 4.2.1): 1.04 s a batch + 1.54 ms per key called. A part per row did not show beside the
# calls (it fitted below zero). So its rows per core follow the keys a batch holds: 100 keys that
# come back every batch cost a core 0.12 s of every 10, every event its own key 3.1 s per 1,000 events.
KEY_CALL_COSTS = {"custom_state": KeyCallCosts(1.039, 0.001544, 0.0)}
KEY_CALL_MEASURED_BY = "benchmarks/key_call_costs.py on pyspark 4.2.1, one pinned core"

# Spark's own microbenchmark of a put (StateStoreBasicOperationsBenchmark, results for JDK 17 in
# Spark's repository): the store alone, no query around it.
STORE_PUT_US = {"hdfs": 0.85, "rocksdb": 3.6}
STORE_PUT_SOURCE = (
    "a put in Spark's StateStoreBasicOperationsBenchmark (sql/core/benchmarks, JDK 17 results, Xeon Platinum"
    " 8272CL): in-memory (the HDFS-backed store's map) 0.82 to 0.88 µs, RocksDB 3.6 to 5.9 µs with"
    " trackTotalNumberOfRows on (Spark's default; 2.0 µs off)"
)


@dataclass(frozen=True)
class CoreAdvice:
    """The cores the rate needs, and the working."""

    cores_needed: int
    cores_with_growth: int
    busy_cores: float  # cores of work at the rate: the rate over what a core holds, summed
    target_load: float
    lines: tuple[str, ...]


def per_core(operator: str, provider: str) -> float:
    """Rows per second one core holds (an operator not measured: the one standing in for it), every
    event its own key; custom_state runs on RocksDB only."""
    measured = measured_as(operator)
    costs = KEY_CALL_COSTS.get(measured)
    if costs is not None:  # at the default 10 s batch, each key called twice: its event, its session's end
        batch_s = steady_batch_seconds(None)
        return (batch_s - costs.batch_seconds) / (2 * costs.key_call_seconds + costs.row_seconds) / batch_s
    return ROWS_PER_SECOND_PER_CORE.get((measured, provider)) or ROWS_PER_SECOND_PER_CORE[(measured, "rocksdb")]


def key_call_share(part: Estimate, costs: KeyCallCosts) -> tuple[float, str]:
    """The cores an operator that calls Python per key keeps busy: its batch's cost on one core over the
    batch's length, with the keys a batch holds taken from the answers."""
    batch_s = steady_batch_seconds(part.shape.get("trigger"))
    rate = part.input_rows_per_second
    rows = rate * batch_s
    cardinality = part.shape.get("key_cardinality")
    keys = rows if cardinality is None else min(float(cardinality), rows)  # type: ignore[arg-type]
    # A key seen again only after its session timed out is called again when it ends: every key, when
    # each event is its own; none, when a key comes back within the timeout.
    timeout = part.shape.get("session_timeout") or part.shape.get("state_timeout")
    revisit_s = None if cardinality is None else float(cardinality) / rate  # type: ignore[arg-type]
    ending = (
        keys
        if revisit_s is None or (timeout is not None and revisit_s > named_duration("timeout", str(timeout)))
        else 0.0
    )
    calls = keys + ending
    seconds = costs.batch_seconds + costs.key_call_seconds * calls + costs.row_seconds * rows
    share = seconds / batch_s
    line = (
        f"{part.operator}: a {num(batch_s)} s batch of {num(rows)} rows calls Python for {num(calls)} keys"
        f" ({num(keys)} with events{f', {num(ending)} sessions ending' if ending else ''}): {costs.batch_seconds:.2f} s"
        f" + {num(calls)} x {costs.key_call_seconds * 1e3:.3f} ms"
        + (f" + {num(rows)} x {costs.row_seconds * 1e3:.3f} ms" if costs.row_seconds else "")
        + f" = {seconds:,.2f} s of one core every {num(batch_s)} s = {share:.2f} cores busy ({KEY_CALL_MEASURED_BY})"
    )
    return share, line


def measured_trigger(operator: str) -> str:
    return MEASURED_TRIGGERS.get(measured_as(operator), MEASURED_TRIGGER)


def operator_rate(part: Estimate) -> float:
    """The rows per second an operator reads: both inputs of a join."""
    rate = part.input_rows_per_second
    if "join_range" in part.shape:
        rate += float(part.shape.get("join_input_rows_per_second") or part.input_rows_per_second)  # type: ignore[arg-type]
    return rate


def cores_for(busy: float) -> int:
    return max(1, math.ceil(busy / TARGET_LOAD - 1e-9))


def advise(sizing: Estimate, provider: str, trigger: str | None = None) -> CoreAdvice:
    """The cores for the sizing's operators and rates on this provider."""
    busy = 0.0
    lines = []
    for part in sizing.operators:
        costs = KEY_CALL_COSTS.get(measured_as(part.operator))
        if costs is not None:
            share, line = key_call_share(part, costs)
            busy += share
            lines.append(line)
            continue
        rate, holds = operator_rate(part), per_core(part.operator, provider)
        busy += rate / holds
        lines.append(
            f"{part.operator} on {provider}: {num(rate)} rows/s / {num(holds)} rows/s per core = {rate / holds:.2f}"
            " cores busy"
        )
    needed, with_growth = cores_for(busy), cores_for(busy * sizing.growth_factor)
    lines.append(
        f"cores needed = {busy:.2f} / {TARGET_LOAD:.0%} load = {num(needed)}"
        + (f"; with growth x{num(sizing.growth_factor)}: {num(with_growth)}" if with_growth != needed else "")
    )
    if trigger is not None and real_time.batch_duration(trigger) is not None:
        slots = real_time.slots_needed(1, sizing.shuffle_partitions, len(sizing.operators))
        # Beside the rate's cores, not added to them: the tasks share their cores; the start checks the slots.
        lines.append(
            f"real-time mode runs all its tasks at once, each holding a task slot: {num(slots)} for a one-partition"
            f" topic and {num(sizing.shuffle_partitions)} shuffle partitions, one more per further partition of the"
            " source topic (the start checks them)"
        )
    measured = max((measured_trigger(part.operator) for part in sizing.operators), key=batch_seconds)
    if trigger is not None and 0 < batch_seconds(trigger) < batch_seconds(measured):
        lines.append(
            f"query.trigger {trigger} is shorter than the {measured} the rates were measured at: each batch's"
            " fixed costs weigh more, so more cores may be needed (`sustain --trigger` measures it)"
        )
    lines.append(
        f"(rows per core {MEASURED_BY}, on each operator's example query with every event its own key; a heavier"
        " query holds less: `sustain` measures yours)"
    )
    return CoreAdvice(needed, with_growth, busy, TARGET_LOAD, tuple(lines))


def advised_start(operators: Sequence[str], provider: str, cores: int) -> float:
    """A first rate for sustain's search: what the measured figures say `cores` hold, a little below."""
    per_row = sum(1 / per_core(name, provider) for name in operators)
    return max(10.0, 0.8 * cores / per_row)


def against(advice: CoreAdvice, max_cores: int | None) -> str | None:
    """A warning when the rate needs more cores than the job will have; None otherwise."""
    if max_cores is None or advice.cores_needed <= max_cores:
        return None
    return (
        f"the answered rate needs {cores_text(advice.cores_needed)} ({advice.busy_cores:.2f} busy at"
        f" {advice.target_load:.0%} load), more than max_cores {num(max_cores)}: batches would outlast the trigger"
        " and the job fall further behind with each; give it more cores, or check the rate"
    )
