"""Shuffle-partition advice: how many state partitions to pin into the checkpoint.

Every micro-batch runs one state-store task per partition of each stateful operator, and the first
run pins the count into the checkpoint. Too few partitions leave cores idle in the stateful stage for
the job's whole life; too many make every batch pay a task's fixed cost (scheduling, loading and
committing a store) per partition: on 2 cores `make demo` runs several times slower with Spark's
default 200 than with 4 (benchmarks/results/demo_partitions.md). The advice:
TASKS_PER_CORE x the most cores the job will run on; on RocksDB raised until each partition's store
stays within ROCKSDB_COMFORT_BYTES of disk, and kept a multiple of the cores so that every wave of
tasks fills them.

Standard library only: the bake runs it under cookiecutter's Python (hooks/answers.py).
"""

from __future__ import annotations

import math
import os
import re
from dataclasses import dataclass

from ..figures import cores_text, human_bytes, num
from .estimate import Estimate
from .limits import ROCKSDB_THRESHOLD_BYTES

# Databricks advises 1 to 2 x the cores for stateful queries; 2 gives a skewed partition's task
# another core to wait on instead of stretching the whole batch.
TASKS_PER_CORE = 2
# Cores not known: Spark's own default, enough for clusters of up to 200 cores.
UNKNOWN_CORES_PARTITIONS = 200
# RocksDB's local disk per partition, at most. A judgement: a partition's store is downloaded whole
# by one task when the partition moves to another executor, and 8 GiB takes about a minute at
# 150 MB/s. The HDFS-backed store has no such bound here: more partitions do not shrink an
# executor's heap, so a large state is answered by the provider (capacity.py), not by partitions.
ROCKSDB_COMFORT_BYTES = 8 * 1024**3
# spark.sql.shuffle.partitions is a Java int: no advice goes past it.
SPARK_MAX_PARTITIONS = 2**31 - 1
# An explicit count above this multiple of the advice is warned about: every batch pays for it.
TOO_MANY_FACTOR = 2
# A count no first batch gets through, refused before a run pins it: more waves of state-store tasks
# per batch than this on the cores the job runs on. At tens of milliseconds of fixed cost per task
# (scheduling, loading and committing a store), 1,000 waves are many minutes per stateful operator
# before any row counts; 100,000 partitions on local[2] are 50,000 waves, and batch 0 never ends.
MAX_WAVES = 1000
# The same bound when the cores are not known (a cluster master, no capacity.max_cores): the
# partitions of TASKS_PER_CORE tasks on 10,000 cores.
MAX_UNKNOWN_CORES_PARTITIONS = 20_000
LOCAL_MASTER = re.compile(r"^local(?:\[(\d+|\*)(?:,\d+)?\])?$")


@dataclass(frozen=True)
class PartitionAdvice:
    """The count to pin, and why."""

    max_cores: int | None
    provider: str
    recommended: int
    reasons: tuple[str, ...]


def for_cores(cores: int) -> int:
    """The partitions that keep `cores` busy: TASKS_PER_CORE tasks each."""
    return TASKS_PER_CORE * cores


def base_count(max_cores: int | None) -> int:
    """The advice before the state is looked at: for the cores, or Spark's default when not known."""
    return UNKNOWN_CORES_PARTITIONS if max_cores is None else for_cores(max_cores)


def advise(max_cores: int | None, provider: str, sizing: Estimate, rate_cores: int | None = None) -> PartitionAdvice:
    """The partitions for the most cores the job will run on (None: not known; then the cores the rate
    needs with growth, core_rates.py, when given) and the state the provider will hold, with growth."""
    if max_cores is not None and max_cores < 1:
        raise ValueError(f"max_cores must be a whole number of 1 or more, got {max_cores!r}")
    base = base_count(max_cores if max_cores is not None else rate_cores)
    if max_cores is None and rate_cores is not None:
        reasons = [
            f"{TASKS_PER_CORE} tasks per core x {cores_text(rate_cores)}, what the rate needs with growth"
            f" = {num(base)} (max_cores not known: answer it, capacity.max_cores, to fit the count to your cluster;"
            " a job that later runs on more cores uses no more than this many in its stateful stages)"
        ]
    elif max_cores is None:
        reasons = [
            f"max_cores not known: Spark's default {base}, enough for up to {base} cores"
            " (answer max_cores, capacity.max_cores, for a count fitted to your cluster)"
        ]
    else:
        reasons = [f"{TASKS_PER_CORE} tasks per core x {num(max_cores)} cores = {num(base)}"]
    recommended = base
    heap = sizing.total_bytes * sizing.growth_factor
    # Each partition below the threshold, but no further than Spark's default count, at which the sizing
    # decides: more partitions spread the heap, they do not shrink it.
    hdfs_floor = min(math.floor(heap / ROCKSDB_THRESHOLD_BYTES) + 1, UNKNOWN_CORES_PARTITIONS)
    if provider == "hdfs" and max_cores is None and rate_cores is not None and hdfs_floor > base:
        step = rate_cores
        recommended = min(math.ceil(hdfs_floor / step) * step, SPARK_MAX_PARTITIONS)
        below = heap / recommended < ROCKSDB_THRESHOLD_BYTES
        reasons.append(
            f"raised to {num(recommended)}: {human_bytes(heap)} of heap with growth"
            + (
                f" needs {num(hdfs_floor)} partitions to keep each below the {human_bytes(ROCKSDB_THRESHOLD_BYTES)} at"
                " which the sizing chooses rocksdb (few cores must not turn the state into a rocksdb one)"
                if below
                else f", as at Spark's default {UNKNOWN_CORES_PARTITIONS}: more partitions spread the heap, they do"
                " not shrink an executor's, and a state this large needs rocksdb"
            )
            + (f", rounded up to a multiple of {cores_text(step)}" if step > 1 else "")
        )
    elif provider == "hdfs":
        reasons.append(
            f"each holds {human_bytes(sizing.total_bytes * sizing.growth_factor / base)} of heap with growth;"
            " more partitions do not shrink an executor's heap: a state too large for it needs rocksdb"
        )
    else:
        disk = _disk_with_growth(sizing)
        needed = math.ceil(disk / ROCKSDB_COMFORT_BYTES)
        if needed <= base:
            reasons.append(
                f"each holds {human_bytes(disk / base)} of local disk with growth, within"
                f" {human_bytes(ROCKSDB_COMFORT_BYTES)} per partition"
            )
        else:
            step = max_cores or rate_cores or 1
            recommended = min(math.ceil(needed / step) * step, SPARK_MAX_PARTITIONS)
            reasons.append(
                f"raised to {num(recommended)}: {human_bytes(disk)} of local disk with growth needs {num(needed)}"
                f" partitions to keep each within {human_bytes(ROCKSDB_COMFORT_BYTES)}"
                + (f", rounded up to a multiple of {cores_text(step)}" if step > 1 else "")
                + (
                    " (capped at Spark's most, a Java int: the state is beyond any cluster)"
                    if recommended == SPARK_MAX_PARTITIONS
                    else ""
                )
            )
    return PartitionAdvice(max_cores, provider, recommended, tuple(reasons))


def against(advice: PartitionAdvice, partitions: int, sizing: Estimate) -> list[str]:
    """Why an explicit count goes against the advice, one sentence each; empty when it does not."""
    found = []
    cores = advice.max_cores
    if cores is not None and partitions < cores:
        found.append(
            f"{num(partitions)} partitions on up to {num(cores)} cores: the stateful stage can never use more"
            f" than {num(partitions)} of them"
        )
    if cores is not None and partitions > TOO_MANY_FACTOR * advice.recommended:
        found.append(too_many_waves(partitions, cores))
    beyond = None if cores is not None else beyond_any_batch(partitions, None)
    if beyond:
        found.append(beyond)
    disk = _disk_with_growth(sizing)
    if advice.provider == "rocksdb" and disk / partitions > ROCKSDB_COMFORT_BYTES:
        found.append(
            f"each of {num(partitions)} partitions holds {human_bytes(disk / partitions)} of local disk with"
            f" growth, beyond {human_bytes(ROCKSDB_COMFORT_BYTES)}"
        )
    return found


def too_many_waves(partitions: int, cores: int) -> str:
    return (
        f"{num(partitions)} partitions on up to {num(cores)} cores: every batch runs"
        f" {num(math.ceil(partitions / cores))} waves of state-store tasks per stateful operator,"
        " each with its fixed cost"
    )


def beyond_any_batch(partitions: int, cores: int | None) -> str | None:
    """Why no batch would get through with this count (MAX_WAVES), in a sentence; None when one would."""
    if cores is None:
        if partitions <= MAX_UNKNOWN_CORES_PARTITIONS:
            return None
        return (
            f"{num(partitions)} partitions are more than {num(MAX_UNKNOWN_CORES_PARTITIONS)} ({TASKS_PER_CORE} per"
            f" core on {num(MAX_UNKNOWN_CORES_PARTITIONS // TASKS_PER_CORE)} cores), each a state-store task in every"
            " batch"
        )
    if math.ceil(partitions / cores) <= MAX_WAVES:
        return None
    return (
        f"{num(partitions)} partitions on up to {num(cores)} cores: every batch would run"
        f" {num(math.ceil(partitions / cores))} waves of state-store tasks per stateful operator, more than"
        f" {num(MAX_WAVES)}: batch 0 would not finish"
    )


def describe(advice: PartitionAdvice, partitions: int, sizing: Estimate) -> list[str]:
    """The advice as report lines: the count, each reason, and a warning when the count goes against it."""
    lines = [f"shuffle partitions = {num(partitions)}, advised {num(advice.recommended)}:"]
    lines += [f"  {reason}" for reason in advice.reasons]
    problems = against(advice, partitions, sizing)
    if problems:
        lines.append(
            f"WARNING: {num(partitions)} partitions go against the advice: "
            + "; ".join(problems)
            + ". Kept as chosen; check it before the first run, because the checkpoint pins it."
        )
    return lines


def local_cores(master: str) -> int | None:
    """The cores a local master runs on (local[N], local[*], local), None for a cluster."""
    match = LOCAL_MASTER.match(master.strip())
    if match is None:
        return None
    threads = match.group(1)
    if threads is None:
        return 1
    return (os.cpu_count() or 1) if threads == "*" else int(threads)


def _disk_with_growth(sizing: Estimate) -> float:
    return sizing.rocksdb_disk_bytes * sizing.growth_factor
