"""The JVM heap a state needs on one executor: the one fact the provider decision, the heap the job
starts with, the cluster advice and the watchdog share.

Each shuffle partition's store lives on one executor, and an executor holds every partition it has
run, each with the versions it keeps loaded (the estimate's heap footprint counts them). A local run
has one executor, the driver, holding every partition. The HDFS-backed store keeps that state in the
heap outside Spark's unified memory (spark.memory.fraction, 0.6 of the heap after 300 MiB reserved):
a heap of 300 MiB + state / 0.4 holds it beside what Spark's own execution takes. Beyond
HDFS_HEAP_CEILING of heap per executor the state goes to RocksDB: a multi-GiB map of live objects
makes every full GC long, and each batch copies the map of every partition it touches.

Standard library only: the bake sizes through it.
"""

from __future__ import annotations

import math
import re

MIB = 1024**2
GIB = 1024**3
RESERVED_HEAP = 300 * MIB  # Spark's reserved system memory
UNIFIED_MEMORY_FRACTION = 0.6  # spark.memory.fraction's default
# The most heap per executor the sizing gives HDFS-backed state; beyond it, rocksdb.
HDFS_HEAP_CEILING = 4 * GIB
SPARK_DEFAULT_HEAP = GIB  # spark.driver.memory's and spark.executor.memory's default, 1g


def heap_for_state(state_bytes: float) -> int:
    """The heap an executor needs to hold `state_bytes` of HDFS-backed state beside Spark's own memory."""
    return RESERVED_HEAP + math.ceil(state_bytes / (1 - UNIFIED_MEMORY_FRACTION))


def memory_setting(heap_bytes: float) -> str:
    """A Spark memory size of whole GiB at least `heap_bytes`, and at least Spark's default: '3g'."""
    return f"{max(1, math.ceil(heap_bytes / GIB))}g"


def partitions_per_executor(partitions: int, executors: int) -> int:
    return math.ceil(partitions / max(1, executors))


_MEMORY = re.compile(r"^\s*(\d+)\s*([kmgt]?)b?\s*$", re.IGNORECASE)
_UNIT_BYTES = {"k": 1024, "m": MIB, "g": GIB, "t": 1024 * GIB, "": MIB}  # Spark reads a bare number as MiB


def parse_memory(field: str, text: object) -> int:
    """Bytes of a Spark memory size ('512m', '8g', '2048'); a ValueError naming the field otherwise."""
    match = _MEMORY.match(str(text))
    if not match or int(match.group(1)) == 0:
        raise ValueError(
            f"{field} must be a Spark memory size such as 512m, 8g or 2048 (MiB), greater than zero; got {text!r}"
        )
    return int(match.group(1)) * _UNIT_BYTES[match.group(2).lower()]
