"""A restart's time: from a start of the job to its first committed batch, for the state the estimate sizes.

A start pays a fixed part (the JVM, the job's checks, planning, the first batch's code) and the state's
load: each store instance reads its last snapshot and then replays every change written after it. Spark
writes a snapshot once `minDeltasForSnapshot` batches have changed the state since the last one, and
only its maintenance thread uploads it (RocksDB with changelog checkpointing) or writes it (the
HDFS-backed store), every `maintenanceInterval`; a stop uploads nothing. So a start replays up to
minDeltasForSnapshot + maintenanceInterval / trigger batches of changes, and a job whose runs are all
shorter than the maintenance interval (an available_now job run often) never writes a snapshot and
replays every change since its first batch. RocksDB without changelog checkpointing uploads every
batch's state at its commit: a start loads the last batch's, and replays nothing.

Measured, not guessed: benchmarks/restart_time.py in the template repository grows one checkpoint of the
default bake's windowed count (33 B of payload a row) through 10^5 to 10^7 rows on each store and starts
the job again after each size for one batch of 1,000 rows, timed from the process's start to that batch's
commit file (benchmarks/results/restart_time.md and restart_time_fit.md; pyspark 4.2.1, OpenJDK 17, 2
cores, 2 and 4 partitions). Its short runs upload few snapshots, so RocksDB with changelog checkpointing and the HDFS-backed store
replay most changes (the checkpoint's files say which), which measures a replayed row; RocksDB without
changelog checkpointing loads a snapshot of every row, which measures a loaded row (RocksDB's snapshot
is the same checkpoint of SST files either way). The costs are per core: the partitions load in
parallel, as many at once as there are cores. A wider row than the windowed count's loads more bytes,
and so more slowly.

Standard library only: the bake sizes through it.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

from ..figures import human_span, num

# The two confs that bound the changes a start replays (spark.conf may set either), and Spark's defaults.
MIN_DELTAS_CONF = "spark.sql.streaming.stateStore.minDeltasForSnapshot"
MIN_DELTAS_DEFAULT = 10
MAINTENANCE_CONF = "spark.sql.streaming.stateStore.maintenanceInterval"
MAINTENANCE_DEFAULT = "60s"
MEASURED_BY = "measured by the template's benchmarks/restart_time.py on pyspark 4.2.1, 2 cores"

# Fitted (least squares on the relative error) on 35 starts: benchmarks/results/restart_time_fit.md (4 partitions)
# and restart_time.md (2 partitions), 4,000 to 12.4 million rows on each store, and 11 starts of a small state
# on 2 and 8 partitions alternating (restart_time_partitions.log), on 2 cores: the start (the Python process,
# the job's checks, the JVM, planning, the first batch's code) and one core's seconds per store instance
# opened; one core's microseconds per row of a snapshot loaded and per change replayed after it. Each start
# measured 0.79x to 1.30x the fit (34 of 35 within 25%): the fixed part alone varied from 11.5 to 18.8 s
# between runs on this machine.
START_SECONDS = 12.8
INSTANCE_SECONDS = 0.84


@dataclass(frozen=True)
class StoreRestart:
    load_us_per_row: float
    replay_us_per_row: float


STORES = {
    "rocksdb with changelog checkpointing": StoreRestart(0.67, 6.09),
    "rocksdb": StoreRestart(0.67, 0.0),
    "hdfs": StoreRestart(3.65, 4.99),
}


def store_name(provider: str, changelog: bool) -> str:
    return f"{provider} with changelog checkpointing" if provider == "rocksdb" and changelog else provider


# Spark's time confs: a number and a unit, milliseconds without one.
SPARK_TIME = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(us|ms|s|m|min|h|d)?\s*$")
SPARK_TIME_UNITS = {"us": 1e-6, "ms": 1e-3, None: 1e-3, "s": 1.0, "m": 60.0, "min": 60.0, "h": 3600.0, "d": 86400.0}


@dataclass(frozen=True)
class Restart:
    """A start's time and its parts, for one state."""

    provider: str
    changelog: bool
    state_rows: int
    versions_replayed: int
    rows_replayed: int
    store_instances: int
    parallel: int  # store instances loading at once: the partitions or the cores, the fewer
    load_seconds: float
    replay_seconds: float

    @property
    def store(self) -> str:
        return store_name(self.provider, self.changelog)

    @property
    def start_seconds(self) -> float:
        return START_SECONDS + INSTANCE_SECONDS * self.store_instances / self.parallel

    @property
    def seconds(self) -> float:
        return self.start_seconds + self.load_seconds + self.replay_seconds


def spark_time_seconds(name: str, text: object) -> float:
    """A Spark time conf's value in seconds ('60s', '500ms', '2m'); a ValueError names the conf."""
    found = SPARK_TIME.match(str(text))
    if not found:
        raise ValueError(f"spark.conf {name} is {text!r}: give a number and a unit, such as 60s or 500ms")
    return float(found[1]) * SPARK_TIME_UNITS[found[2]]


def replayed_versions(
    provider: str, changelog: bool, batch_seconds: float, min_deltas: int, maintenance_s: float
) -> int:
    """The most batches of changes a start replays: those since the last snapshot written, which the maintenance
    thread writes at most one interval after minDeltasForSnapshot batches (an available_now run, batch_seconds 0:
    minDeltasForSnapshot, if it runs longer than the interval)."""
    if provider == "rocksdb" and not changelog:
        return 0
    return min_deltas + (math.ceil(maintenance_s / batch_seconds) if batch_seconds > 0 else 0)


def restart(
    provider: str,
    changelog: bool,
    state_rows: int,
    rows_changed_per_batch: int,
    versions_replayed: int,
    partitions: int,
    cores: int,
    store_instances: int,
) -> Restart:
    """A start that opens `store_instances`, loads a snapshot of `state_rows` and replays `versions_replayed`
    batches of changes."""
    parallel = max(1, min(partitions, cores))
    replayed = rows_changed_per_batch * versions_replayed
    costs = STORES[store_name(provider, changelog)]
    return Restart(
        provider,
        changelog,
        state_rows,
        versions_replayed,
        replayed,
        store_instances,
        parallel,
        state_rows * costs.load_us_per_row / 1e6 / parallel,
        replayed * costs.replay_us_per_row / 1e6 / parallel,
    )


def restart_lines(r: Restart, trigger: str, min_deltas: int, maintenance: str, available_now: bool) -> list[str]:
    """The restart's working, and the snapshot interval that bounds its replay."""
    costs = STORES[r.store]
    lines = [
        f"start          = {START_SECONDS:g} s (the JVM, the job's checks, planning, the first batch's code) +"
        f" {num(r.store_instances)} store instances x {INSTANCE_SECONDS:g} s / {r.parallel} at once"
        f" = {r.start_seconds:,.1f} s, before any state",
        f"snapshot load  = {num(r.state_rows)} rows x {costs.load_us_per_row:.2f} us / {r.parallel}"
        f" store instances loading at once = {r.load_seconds:,.1f} s",
    ]
    if r.versions_replayed:
        per_batch = r.rows_replayed // r.versions_replayed
        interval = "" if available_now else f" + {MAINTENANCE_CONF} {maintenance} / trigger {trigger}"
        lines.append(
            f"replay         = at most {num(r.versions_replayed)} batches of changes since the last snapshot"
            f" ({MIN_DELTAS_CONF} {min_deltas}{interval}) x {num(per_batch)} rows x"
            f" {costs.replay_us_per_row:.2f} us / {r.parallel} = {r.replay_seconds:,.1f} s"
        )
    else:
        lines.append("replay         = none: each commit uploads the state whole, and a start loads the last one")
    lines.append(
        f"restart        = about {human_span(r.seconds)} from a start to its first committed batch on {r.store}"
    )
    if r.versions_replayed and available_now:
        lines.append(
            f"available_now  = a run shorter than {MAINTENANCE_CONF} ({maintenance}) writes no snapshot, and the next"
            " start replays every batch since the last one: set it below a run's length in spark.conf"
        )
    if r.versions_replayed and r.replay_seconds > max(r.load_seconds, 30.0):
        lines.append(
            f"advice         = the replay outweighs the snapshot's load: a lower {MIN_DELTAS_CONF} and"
            f" {MAINTENANCE_CONF} (spark.conf) write snapshots more often and bound it, each costing a snapshot's"
            " upload"
        )
    lines.append(f"({MEASURED_BY}; a wider row than the windowed count's 33 B loads more slowly)")
    return lines
