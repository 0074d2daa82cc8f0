"""The shuffle-partition advice: from the cores and, on RocksDB, the state per partition."""

from __future__ import annotations

import json
import math
import os

import pytest
from stream_job.machinery.core.sizing.capacity import estimate
from stream_job.machinery.core.sizing.partitions import ROCKSDB_COMFORT_BYTES, advise, against, describe, local_cores

from .conftest import run_cli, run_main

GIB = 1024**3
# The default answers' state: 6,600,000 rows, 2.3 GiB of heap on HDFS, 0.2 GiB of RocksDB disk.
DEFAULT = estimate(10_000, "10 minutes", 64, 200)
# 3,660,000,000 rows x 100 B: 76 GiB of RocksDB disk (the live rows, and the batches' flushes not merged yet).
LARGE = estimate(1_000_000, "1 hour", 100, 200)


def test_two_tasks_per_core_or_sparks_default_when_the_cores_are_not_known():
    assert advise(8, "hdfs", DEFAULT).recommended == 16
    assert advise(1, "rocksdb", DEFAULT).recommended == 2
    unknown = advise(None, "hdfs", DEFAULT)
    assert unknown.recommended == 200
    assert "max_cores not known: Spark's default 200" in unknown.reasons[0]


def test_rocksdb_partitions_are_raised_to_keep_each_store_within_its_comfort():
    advice = advise(4, "rocksdb", LARGE)
    needed = math.ceil(LARGE.rocksdb_disk_bytes / ROCKSDB_COMFORT_BYTES)
    assert needed > 8  # more than the cores ask for
    assert advice.recommended % 4 == 0 and advice.recommended - 4 < needed <= advice.recommended
    assert LARGE.rocksdb_disk_bytes / advice.recommended <= ROCKSDB_COMFORT_BYTES
    assert advice.reasons[1].startswith(f"raised to {advice.recommended}: ")
    # Growth is what the count must hold: twice the state, about twice the partitions.
    grown = estimate(1_000_000, "1 hour", 100, 200, growth_factor=2)
    assert advise(4, "rocksdb", grown).recommended >= 2 * advice.recommended - 4


def test_hdfs_partitions_are_not_raised_for_a_large_state():
    # More partitions do not shrink an executor's heap: a large state is the provider's question.
    advice = advise(4, "hdfs", LARGE)
    assert advice.recommended == 8
    assert "a state too large for it needs rocksdb" in advice.reasons[1]


@pytest.mark.parametrize(
    ("partitions", "expected"),
    [
        (16, []),
        (12, []),
        (32, []),  # twice the advice: still fine
        (7, ["7 partitions on up to 8 cores: the stateful stage can never use more than 7 of them"]),
        (33, ["33 partitions on up to 8 cores: every batch runs 5 waves of state-store tasks"]),
    ],
)
def test_an_explicit_count_is_against_the_advice_only_for_a_reason(partitions, expected):
    found = against(advise(8, "rocksdb", DEFAULT), partitions, DEFAULT)
    assert [sentence[: len(prefix)] for sentence, prefix in zip(found, expected, strict=True)] == expected


def test_too_much_rocksdb_state_per_partition_is_against_the_advice_whatever_the_cores():
    advice = advise(None, "rocksdb", LARGE)
    assert against(advice, 200, LARGE) == []
    (found,) = against(advice, 5, LARGE)
    assert (
        found
        == f"each of 5 partitions holds {LARGE.rocksdb_disk_bytes / 5 / GIB:.1f} GiB of local disk with growth, beyond 8.0 GiB"
    )
    lines = describe(advice, 5, LARGE)
    assert lines[0] == "shuffle partitions = 5, advised 200:"
    assert lines[-1].startswith("WARNING: 5 partitions go against the advice: each of 5 partitions holds")


@pytest.mark.parametrize(
    ("master", "cores"),
    [
        ("local", 1),
        ("local[3]", 3),
        ("local[4,2]", 4),
        ("local[*]", os.cpu_count()),
        ("spark://host:7077", None),
        ("yarn", None),
        ("local-cluster[2,1,1024]", None),
    ],  # fmt: skip
)
def test_local_cores(master, cores):
    assert local_cores(master) == cores


def test_estimate_gives_the_advice_for_the_settings_cores(write_settings):
    path = write_settings({"spark": {"shuffle_partitions": 2}, "capacity": {"max_cores": 4}})
    result = run_cli("estimate", "--settings", str(path))
    assert result.returncode == 0, result.stderr
    assert "  shuffle partitions = 2, advised 8:\n    2 tasks per core x 4 cores = 8\n" in result.stdout
    assert "  WARNING: 2 partitions go against the advice: 2 partitions on up to 4 cores" in result.stdout
    # --max-cores replaces the settings' figure; --json carries the advice beside the estimate.
    result = run_cli("estimate", "--settings", str(path), "--max-cores", "1", "--json")
    advice = json.loads(result.stdout)["partitions"]
    assert (advice["max_cores"], advice["recommended"], advice["against"]) == (1, 2, [])


def test_local_partitions_are_refused_for_a_cluster_master(write_settings):
    path = write_settings({"spark": {"master": "spark://host:7077"}})
    result = run_main("--settings", str(path), "--local-partitions")
    assert result.returncode == 2
    assert result.stderr.strip() == (
        "settings error: --local-partitions needs a local spark.master such as local[2], not"
        " 'spark://host:7077'; on a cluster set spark.shuffle_partitions (python -m stream_job estimate advises one)"
    )
