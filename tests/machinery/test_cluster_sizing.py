"""Cluster sizing: state per executor and the memory it needs, checked against figures by hand."""

from __future__ import annotations

import json
import math

import pytest
from stream_job.machinery.core.figures import human_bytes
from stream_job.machinery.core.sizing.capacity import estimate
from stream_job.machinery.core.sizing.cluster_sizing import MIB, parse_memory, size_cluster
from stream_job.machinery.core.sizing.store_costs import COSTS, HEAP_PER_INSTANCE

from .conftest import jvm_free, run_cli

# 1 row/s kept for 2 x 500 s (deduplication; available_now: no batch), 1 MiB each (on the HDFS
# store's heap as a calibration would measure it): 1,000 MiB of state in 10 partitions, and each
# store instance's own.
SIZING = estimate(
    1,
    "500 seconds",
    MIB,
    10,
    operator="deduplication",
    trigger="available_now",
    measured_on="hdfs",
    measured_bytes_per_row=MIB,
)
PER_PARTITION = 100 * MIB + HEAP_PER_INSTANCE


def test_state_per_executor_is_its_share_of_the_partitions_and_per_partition_never_shrinks():
    # 1,000 rows x 1 MiB / 10 partitions = 100 MiB per partition, and one store instance.
    assert SIZING.projected_bytes_per_partition == PER_PARTITION
    # 10 partitions on 3 executors: up to 4 on one executor, 400 MiB.
    three = size_cluster(SIZING, "hdfs", 3, "8g", False, 500, None)
    assert (three.partitions_per_executor, three.state_per_executor_bytes) == (4, 4 * PER_PARTITION)
    # Twice the executors halve the state per executor (rounded up to whole partitions), not per partition.
    assert "with 6 executors: 200.0 MiB per executor, but still 100.0 MiB per partition" in three.lines[2]
    assert "shuffle partitions are pinned in the checkpoint" in three.lines[2]
    twenty = size_cluster(SIZING, "hdfs", 20, "8g", False, 500, None)
    assert (twenty.partitions_per_executor, twenty.state_per_partition_bytes) == (1, PER_PARTITION)


def test_hdfs_needs_heap_for_the_state_outside_unified_memory():
    # The heap footprint counts the versions kept loaded: 400 MiB / 0.4 + 300 MiB = 1,300 MiB:
    # suggest 2g; 1g is too little and says so.
    cluster = size_cluster(SIZING, "hdfs", 3, "1g", False, 500, None)
    assert cluster.suggested == {"spark.conf.spark.executor.memory": "2g"}
    assert "at least 1.3 GiB: suggest 2g" in cluster.lines[3]
    (warning,) = cluster.warnings
    assert warning.startswith("WARNING: 1.0 GiB of executor heap is less than the 1.3 GiB this state needs")
    assert not size_cluster(SIZING, "hdfs", 3, "2g", False, 500, None).warnings


def test_rocksdb_budget_and_overhead_agree_and_a_short_overhead_is_flagged():
    # 400 MiB per executor: the budget is Spark's 500 MiB floor; the overhead adds max(384, 10% of 8 GiB = 820).
    cluster = size_cluster(SIZING, "rocksdb", 3, "8g", True, 500, "1500m")
    assert cluster.suggested == {
        "spark.conf.spark.executor.memoryOverhead": "1320m",
        "state_store.rocksdb.bounded_memory_usage": "true",
        "state_store.rocksdb.max_memory_usage_mb": "500",
    }
    assert not cluster.warnings
    # Unbounded, 4 instances x 136 MiB = 544 MiB of native memory; a 600m overhead cannot hold it + 384 MiB.
    unbounded = size_cluster(SIZING, "rocksdb", 3, "8g", False, 500, "600m")
    assert "each of the 4 instances on an executor takes up to 136 MiB" in unbounded.lines[-1]
    (warning,) = unbounded.warnings
    assert "spark.executor.memoryOverhead 600m (600 MiB) is less than RocksDB's 544 MiB + 384 MiB" in warning
    # A join keeps four stores per partition (each side's keys and values): 16 instances on an executor.
    join = estimate(1, "500 seconds", 64, 10, operator="stream_stream_join")
    assert (
        "each of the 16 instances on an executor takes up to 136 MiB"
        in (size_cluster(join, "rocksdb", 3, "8g", False, 500, None).lines[-1])
    )
    # A large state per executor caps the budget at 4 GiB, a cache of part of it.
    big = size_cluster(SIZING, "rocksdb", 1, "1g", True, 500, None)
    native_mb = math.ceil(SIZING.rocksdb_memory_bytes / MIB)  # all 10 partitions on one executor
    assert big.suggested["state_store.rocksdb.max_memory_usage_mb"] == str(native_mb)
    assert (
        size_cluster(estimate(1, "10000 seconds", MIB, 10), "rocksdb", 1, "1g", True, 500, None).suggested[
            "state_store.rocksdb.max_memory_usage_mb"
        ]
        == "4096"
    )


@pytest.mark.parametrize(
    ("text", "expected"), [("512m", 512 * MIB), ("8g", 8192 * MIB), ("8G", 8192 * MIB), ("2048", 2048 * MIB)]
)
def test_memory_sizes_read_as_spark_reads_them(text, expected):
    assert parse_memory("executor memory", text) == expected


@pytest.mark.parametrize("text", ["eight", "8 gigs", "0g", "-1g", ""])
def test_a_bad_memory_size_names_the_field_and_the_form(text):
    with pytest.raises(ValueError, match=r"^executor memory must be a Spark memory size such as 512m, 8g"):
        parse_memory("executor memory", text)


def test_estimate_command_adds_the_cluster_sizing(write_settings):
    # 200 partitions set here: the bake's own count follows the rate's cores (3 for the default answers).
    conf = {"spark.executor.instances": 4, "spark.executor.memory": "8g"}
    hdfs = {"provider": "hdfs", "changelog_checkpointing": False}
    settings = write_settings({"spark": {"shuffle_partitions": 200, "conf": conf}, "state_store": hdfs})
    result = run_cli("estimate", "--settings", str(settings))
    assert result.returncode == 0, result.stderr
    # The default query's heap per partition, 200 partitions / 4 executors = 50 on each.
    costs = COSTS["windowed_aggregation"]
    per_partition = (6_700_000 * (64 + costs.heap_overhead_per_row) + 200 * HEAP_PER_INSTANCE) // 200
    assert "\nCluster sizing\n  executors      = 4, 8.0 GiB of heap each" in result.stdout
    assert (
        f"  per executor   = 200 partitions / 4 executors = up to 50 partitions x {human_bytes(per_partition)}"
        f" = {human_bytes(50 * per_partition)}" in result.stdout
    )
    flags = run_cli("estimate", "--settings", str(settings), "--executors", "8", "--json")
    assert json.loads(flags.stdout)["cluster"]["state_per_executor_bytes"] == 25 * per_partition
    bad = run_cli("estimate", "--settings", str(settings), "--executors", "2", "--executor-memory", "lots")
    assert bad.returncode == 2
    assert jvm_free(bad.stderr).startswith("estimate error: --executor-memory must be a Spark memory size such as 512m")
    assert "got 'lots'" in bad.stderr
    # A bad figure in spark.conf is named as such.
    conf = {"spark.executor.instances": 2, "spark.executor.memory": "a lot"}
    from_conf = run_cli("estimate", "--settings", str(write_settings({"spark": {"conf": conf}}, name="conf.yaml")))
    assert from_conf.returncode == 2
    message = "estimate error: spark.conf spark.executor.memory must be a Spark memory size"
    assert jvm_free(from_conf.stderr).startswith(message)
    count = write_settings({"spark": {"conf": {"spark.executor.instances": "two"}}}, name="count.yaml")
    bad_count = run_cli("estimate", "--settings", str(count))
    assert (bad_count.returncode, jvm_free(bad_count.stderr)) == (
        2,
        "estimate error: spark.conf spark.executor.instances must be a whole number of 1 or more, got 'two'\n",
    )
    no_count = run_cli("estimate", "--settings", str(write_settings({}, name="plain.yaml")))
    assert no_count.stdout.rstrip().endswith(
        "Cluster sizing: give --executors N (or set spark.executor.instances"
        " in spark.conf) for the state and memory per executor"
    )
