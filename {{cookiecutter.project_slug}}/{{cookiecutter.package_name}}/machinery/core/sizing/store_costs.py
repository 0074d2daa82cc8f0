"""What each state store costs on top of the state's own bytes (the payload: the key and value columns),
per row and per store instance, by operator. Measured, not guessed.

The figures are copied from benchmarks/results/store_costs.json in the template repository, written
by `benchmarks/store_costs.py --files 8 --events-per-file 4000` on 2026-11-23 (Linux x86_64, 2 cores,
OpenJDK 17, pyspark 4.2.1). It runs each operator's example query on sample files, on 2
partitions, and reads Spark's own metrics at steady state, where rows leave as fast as they come
(as in a running job: deletes, and SST files not yet merged, included), per row with the cost
per store instance taken off; the payload of those rows (their key and value columns) taken off
that gives the overhead. The cost per store instance comes from a small state on 32 partitions
against 2. Per row at steady state, bytes:

| operator | rows | payload | HDFS heap | RocksDB disk: live rows / flush per changed row | RocksDB native memory (changelog) |
| --- | ---: | ---: | ---: | ---: | ---: |
| windowed_aggregation | 11,818 | 33 | 355 | 7 / 11 | 285 |
| deduplication | 20,000 | 17 | 269 | 13 / 13 | 146 |
| stream_stream_join | 20,961 | 34 | 656 | 28 / 21 | 612 |
| custom_state | 1,200 | 75 | - | 80 / 70 | 2,397 |

While the state only grows (no row evicted yet) the same runs measure less: HDFS heap 284 to 564,
native memory 75 to 440 B per row. RocksDB's native memory also grows with the length of the run
(twice the files measured 115 to 146 for deduplication and 1,849 to 2,397 for custom_state, against
the runs of half the length): it is the least settled of these figures.

- HDFS heap: memoryUsedBytes, the rows as JVM objects in hash maps, with the versions of the last
  batches that the store keeps loaded. Its overhead does not grow with the payload: it is added.
- RocksDB disk: rocksdbSstFileSize without changelog checkpointing, sorted and compressed SST files,
  in two parts: the live rows once merged, the bottom of the saw that the size draws (each commit
  flushes the batch's changes to a new level-0 file, and the 4th such file triggers a merge), and
  each batch's flush per row it changed (Spark's numRowsUpdated + numRowsRemoved), the rise of the
  saw. Compression scales with the payload, so both are applied as ratios to it. With changelog
  checkpointing the changes wait in memory and are flushed at snapshots instead.
- RocksDB native memory: memoryUsedBytes with changelog checkpointing (the template's default for
  RocksDB, and the larger: without it each commit flushes the memtables), overhead added.
- Per store instance, whatever it holds (a small state, 20 rows per partition, on 32 partitions
  against 2): RocksDB with changelog checkpointing about 1 MiB of native memory (measured 0.46 to
  0.98 MB averaged over 32 instances, some of which had written nothing): its memtables are not
  flushed at each commit, which fits RocksDB's memtable taking memory in arena blocks (up to 1 MiB
  each by default), and the ~200 MiB of memoryUsedBytes seen on 200 nearly empty partitions.
  Without changelog, 4.4 to 4.7 KiB. On disk about 1.3 KiB (each instance's SST file carries its
  index, filter and footer; 0.6 KiB per store for the join's four). The HDFS-backed store's heap
  per instance is lost in its size estimator's noise (-1.5 to -0.8 KiB); 470 B measured on empty
  instances is counted. A join has four stores per partition (each side's keys and values), the
  others one.
"""

from __future__ import annotations

from dataclasses import dataclass

MEASURED_BY = "measured by the template's benchmarks/store_costs.py on pyspark 4.2.1"


@dataclass(frozen=True)
class StoreCosts:
    heap_overhead_per_row: int  # HDFS: bytes of heap on top of the payload
    disk_ratio: float  # RocksDB: SST bytes of the live rows, merged, per payload byte
    flush_ratio: float  # RocksDB: SST bytes of a batch's flush per changed row, per payload byte
    memory_overhead_per_row: int  # RocksDB: native memory on top of the payload
    instances_per_partition: int


HEAP_PER_INSTANCE = 470
ROCKSDB_MEMORY_PER_INSTANCE = 1024**2  # with changelog checkpointing: a memtable arena block
ROCKSDB_DISK_PER_INSTANCE = 1_300
# Each commit flushes its batch's changes to a level-0 SST file, and RocksDB merges level 0 into
# the level below when it holds 4 files (level0_file_num_compaction_trigger, which Spark leaves at
# RocksDB's default): 0 to 3 flushes wait unmerged, 1.5 on average.
UNMERGED_FLUSHES = 1.5

COSTS = {
    "windowed_aggregation": StoreCosts(322, 0.22, 0.35, 252, 1),
    "deduplication": StoreCosts(252, 0.79, 0.8, 129, 1),
    "stream_stream_join": StoreCosts(622, 0.81, 0.6, 578, 4),
    # Runs on RocksDB only, so its heap is not measured: the deduplication's stands in (a key and a
    # value per row), and the recommendation is RocksDB whatever it says.
    "custom_state": StoreCosts(252, 1.06, 0.92, 2_322, 1),
}
