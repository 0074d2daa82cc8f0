"""Cluster sizing: how the napkin-math state spreads over executors, and the memory each one needs.

Each shuffle partition has one state store instance, and each instance lives on one executor. So the
state an executor holds is its share of the partitions times the state per partition. More executors
lower the state per executor; the state per partition never falls, because the number of shuffle
partitions is pinned in the checkpoint (the job's guard refuses a changed spark.shuffle_partitions).

Memory, per provider:
- hdfs keeps the state in the executor's JVM heap, outside Spark's unified memory region
  (spark.memory.fraction, 0.6 of the heap after 300 MiB reserved): the estimate's heap footprint,
  which counts the versions the store keeps loaded.
- rocksdb keeps it in native memory and on local disk. Native memory is not heap: it must fit in
  spark.executor.memoryOverhead, so RocksDB's bounded memory (one budget per executor shared by all
  its instances) and the overhead must agree. Unbounded, every instance has its own block cache and
  write buffers.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from ..figures import human_bytes, num
from .estimate import Estimate
from .memory import MIB, UNIFIED_MEMORY_FRACTION, heap_for_state, memory_setting, parse_memory

ROCKSDB_MIN_BUDGET_MB = 500  # Spark's default maxMemoryUsageMB
# Above this the budget is a cache of the hot part of the state; the rest is read from local disk.
ROCKSDB_MAX_BUDGET_MB = 4096
# RocksDB's per-instance defaults when memory is not bounded: an 8 MiB block cache (Spark's
# blockCacheSizeMB) and two 64 MiB write buffers (RocksDB's own).
ROCKSDB_UNBOUNDED_INSTANCE_MB = 8 + 2 * 64
OVERHEAD_MIN_MB = 384  # Spark's default memoryOverhead: max(384 MiB, 10% of executor memory)
OVERHEAD_FACTOR = 0.10
DEFAULT_EXECUTOR_MEMORY = "1g"  # Spark's default spark.executor.memory


@dataclass(frozen=True)
class ClusterSizing:
    """The state and memory of one executor, for a number of executors."""

    executors: int
    executor_memory_bytes: int
    partitions_per_executor: int
    state_per_partition_bytes: int
    state_per_executor_bytes: int
    provider: str
    # settings.yaml field -> the value this sizing suggests.
    suggested: dict[str, str]
    lines: tuple[str, ...]
    warnings: tuple[str, ...]


def size_cluster(
    sizing: Estimate,
    provider: str,
    executors: int,
    executor_memory: str,
    bounded_memory: bool,
    max_memory_usage_mb: int,
    memory_overhead: str | None,
    memory_field: str = "executor memory",
) -> ClusterSizing:
    """The state per executor for `executors` executors, and the memory settings it calls for.

    bounded_memory, max_memory_usage_mb: the settings' state_store.rocksdb values;
    memory_overhead: spark.executor.memoryOverhead as set in spark.conf, or None;
    memory_field: where executor_memory comes from, for the error message.
    """
    if executors < 1:
        raise ValueError(f"executors must be a whole number of 1 or more, got {executors}")
    memory = parse_memory(memory_field, executor_memory)
    # The state per partition in the memory the provider keeps it in (the growth factor applied).
    if provider == "hdfs":
        per_partition = sizing.projected_bytes_per_partition
    else:
        per_partition = round(sizing.rocksdb_memory_bytes / sizing.shuffle_partitions * sizing.growth_factor)
    disk_per_partition = round(sizing.rocksdb_disk_bytes / sizing.shuffle_partitions * sizing.growth_factor)
    partitions_per_executor = math.ceil(sizing.shuffle_partitions / executors)
    per_executor = partitions_per_executor * per_partition
    lines = [
        f"executors      = {num(executors)}, {human_bytes(memory)} of heap each (spark.executor.memory)",
        f"per executor   = {num(sizing.shuffle_partitions)} partitions / {num(executors)} executors"
        f" = up to {num(partitions_per_executor)} partitions x {human_bytes(per_partition)}"
        f" = {human_bytes(per_executor)} of state",
        f"cluster growth = with {num(2 * executors)} executors: {human_bytes(math.ceil(sizing.shuffle_partitions / (2 * executors)) * per_partition)}"
        f" per executor, but still {human_bytes(per_partition)} per partition: the {num(sizing.shuffle_partitions)}"
        " shuffle partitions are pinned in the checkpoint (`check` refuses a changed"
        " spark.shuffle_partitions), so a partition that outgrows its memory stays too big on any cluster",
    ]
    if provider == "hdfs":
        confs, more, warnings = _hdfs_memory(per_executor, memory)
    else:
        confs, more, warnings = _rocksdb_memory(
            per_executor,
            partitions_per_executor * disk_per_partition,
            # Store instances, not partitions: a join has four stores per partition.
            partitions_per_executor * (sizing.store_instances // sizing.shuffle_partitions),
            memory,
            bounded_memory,
            max_memory_usage_mb,
            memory_overhead,
        )
    return ClusterSizing(
        executors=executors,
        executor_memory_bytes=memory,
        partitions_per_executor=partitions_per_executor,
        state_per_partition_bytes=per_partition,
        state_per_executor_bytes=per_executor,
        provider=provider,
        suggested=confs,
        lines=tuple(lines + more),
        warnings=tuple(warnings),
    )


def _hdfs_memory(per_executor: int, memory: int) -> tuple[dict[str, str], list[str], list[str]]:
    needed = heap_for_state(per_executor)
    suggested = memory_setting(needed)
    lines = [
        f"hdfs heap      = {human_bytes(per_executor)} (the heap footprint, retained versions included)"
        f" in the {1 - UNIFIED_MEMORY_FRACTION:.0%} of the heap outside Spark's unified memory, + 300 MiB"
        f" reserved = spark.executor.memory of at least {human_bytes(needed)}: suggest {suggested}",
    ]
    warnings = []
    if memory < needed:
        warnings.append(
            f"WARNING: {human_bytes(memory)} of executor heap is less than the {human_bytes(needed)} this state needs"
            " in the HDFS-backed store: raise spark.executor.memory, add executors, or (before the first run)"
            " choose rocksdb"
        )
    return {"spark.conf.spark.executor.memory": suggested}, lines, warnings


def _rocksdb_memory(
    per_executor: int,
    disk_per_executor: int,
    instances: int,
    memory: int,
    bounded: bool,
    budget_mb: int,
    overhead_setting: str | None,
) -> tuple[dict[str, str], list[str], list[str]]:
    state_mb = math.ceil(per_executor / MIB)
    suggested_budget = min(max(ROCKSDB_MIN_BUDGET_MB, state_mb), ROCKSDB_MAX_BUDGET_MB)
    base_overhead = max(OVERHEAD_MIN_MB, math.ceil(OVERHEAD_FACTOR * memory / MIB))
    suggested_overhead = suggested_budget + base_overhead
    cached = "all of it" if state_mb <= suggested_budget else f"{suggested_budget / max(state_mb, 1):.0%} of it"
    lines = [
        f"rocksdb memory = bounded budget {num(suggested_budget)} MiB per executor (caches {cached};"
        f" the rest is read from local disk), suggest state_store.rocksdb.bounded_memory_usage: true"
        f" and max_memory_usage_mb: {suggested_budget}",
        f"overhead       = budget {num(suggested_budget)} MiB + Spark's own {num(base_overhead)} MiB"
        f" (max(384 MiB, 10% of the heap)) = spark.executor.memoryOverhead {suggested_overhead}m",
        f"local disk     = about {human_bytes(2 * disk_per_executor)} per executor in spark.local.dir"
        " (the SST files and the copy being uploaded)",
    ]
    warnings = []
    if not bounded:
        lines.append(
            f"settings now   = memory not bounded: each of the {num(instances)} instances on an executor takes up to"
            f" {ROCKSDB_UNBOUNDED_INSTANCE_MB} MiB (block cache and write buffers),"
            f" {human_bytes(instances * ROCKSDB_UNBOUNDED_INSTANCE_MB * MIB)} of native memory in all"
        )
    effective_budget = budget_mb if bounded else instances * ROCKSDB_UNBOUNDED_INSTANCE_MB
    if overhead_setting is not None:
        overhead_mb = parse_memory("spark.conf spark.executor.memoryOverhead", overhead_setting) // MIB
        if overhead_mb < effective_budget + OVERHEAD_MIN_MB:
            warnings.append(
                f"WARNING: spark.executor.memoryOverhead {overhead_setting} ({num(overhead_mb)} MiB) is less than"
                f" RocksDB's {num(effective_budget)} MiB + {OVERHEAD_MIN_MB} MiB: executors will be killed for"
                f" exceeding their memory; set it to {suggested_overhead}m with the bounded budget above"
            )
    confs = {
        "spark.conf.spark.executor.memoryOverhead": f"{suggested_overhead}m",
        "state_store.rocksdb.bounded_memory_usage": "true",
        "state_store.rocksdb.max_memory_usage_mb": str(suggested_budget),
    }
    return confs, lines, warnings


def cluster_report(cluster: ClusterSizing) -> str:
    lines = [f"  {line}" for line in cluster.lines]
    lines.append("  suggested      = " + ", ".join(f"{field}: {value}" for field, value in cluster.suggested.items()))
    lines += [f"  {warning}" for warning in cluster.warnings]
    return "\n".join(["Cluster sizing", *lines])
