"""The JVM heap the job runs in, held against what its state needs: at start, after each batch (the
watchdog), and when it runs out.

A local run's executors are the driver JVM, so its heap is the one the state lives in. What is live
is read after the last garbage collection (each heap pool's usage then), not the heap's current use,
which counts garbage not yet collected; an old generation that has not been collected yet counts
as it stands (all of it may be live).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ...core.figures import human_bytes
from ...core.sizing.memory import memory_setting, parse_memory
from .remote import is_connect

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from ...core.settings import Settings
    from ...core.sizing.estimate import Estimate


class HeapProbe:
    """The driver JVM's live heap after its last GC and its maximum, in bytes."""

    def __init__(self, spark: SparkSession) -> None:
        jvm: Any = spark.sparkContext._jvm
        self._runtime = jvm.java.lang.Runtime.getRuntime()
        self._pools = [
            pool
            for pool in jvm.java.lang.management.ManagementFactory.getMemoryPoolMXBeans()
            if str(pool.getType().name()) == "HEAP" and pool.getCollectionUsage() is not None
        ]

    def read(self) -> tuple[int, int]:
        live = 0
        for pool in self._pools:
            after_gc = pool.getCollectionUsage().getUsed()
            old = any(word in str(pool.getName()) for word in ("Old", "Tenured"))
            live += after_gc or (pool.getUsage().getUsed() if old else 0)
        return int(live), int(self._runtime.maxMemory())


def local_probe(spark: SparkSession) -> HeapProbe | None:
    """A probe of the heap the state lives in: the driver's, when the executors run in it (a local master) and
    it is this process's JVM (a Spark Connect server's heap is not visible to its clients)."""
    if is_connect(spark) or not str(spark.conf.get("spark.master", None)).startswith("local"):
        return None
    return HeapProbe(spark)


def start_warning(settings: Settings, sizing: Estimate | None, probe: HeapProbe | None) -> str | None:
    """One line when the heap the state will live in is smaller than the HDFS-backed state needs."""
    if sizing is None or settings.state_store.provider != "hdfs":
        return None
    needed = sizing.executor_heap_bytes
    if probe is not None:
        have, where = probe.read()[1], "the driver's heap (spark.driver_memory; a local run's executors are the driver)"
        fix = f"raise spark.driver_memory to {memory_setting(needed)}"
    elif "spark.executor.memory" in settings.spark.conf:
        have = parse_memory("spark.conf spark.executor.memory", settings.spark.conf["spark.executor.memory"])
        where, fix = "spark.executor.memory", f"raise spark.conf spark.executor.memory to {memory_setting(needed)}"
    else:
        return None
    if have >= needed:
        return None
    return (
        f"WARNING: {where} is {human_bytes(have)}, less than the {human_bytes(needed)} the estimate gives the"
        f" HDFS-backed state of one executor ({human_bytes(sizing.executor_state_bytes)} across"
        f" {sizing.executor_partitions} partitions, beside Spark's own memory): the job may end in an"
        f" OutOfMemoryError as the state fills; {fix}, or give it a new checkpoint on rocksdb"
    )


class OutOfMemory(Exception):
    """The JVM the job runs in ran out of heap and exited; the message names the state, the heap and the fix."""
