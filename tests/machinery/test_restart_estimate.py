"""`estimate`'s restart time: the start, the snapshot's load and the changes replayed after it, worked by hand
from the measured costs (core/sizing/restart.py), and bounded by the snapshot interval in spark.conf."""

from __future__ import annotations

import json

import pytest
from stream_job.machinery.core.sizing.restart import (
    INSTANCE_SECONDS,
    START_SECONDS,
    STORES,
    replayed_versions,
    spark_time_seconds,
)

from .conftest import run_cli

# 10,000 rows/s into a windowed count of 1-minute windows, a 10-minute watermark: 6,700,000 rows, and a
# 10-second batch changes 2 x 100,000 of them.
SIZED = ["--rate", "10000", "--watermark", "10 minutes", "--bytes-per-row", "64", "--operator", "windowed_aggregation"]


def restart_of(*args: str) -> dict:
    result = run_cli("estimate", *SIZED, *args, "--json")
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)["restart"]


def by_hand(store: str, instances: int, loaded: int, replayed: int, parallel: int) -> float:
    costs = STORES[store]
    per_core = (
        instances * INSTANCE_SECONDS + (loaded * costs.load_us_per_row + replayed * costs.replay_us_per_row) / 1e6
    )
    return START_SECONDS + per_core / parallel


def test_a_restart_loads_the_snapshot_and_replays_the_batches_since_at_most_ten_and_a_minute_of_batches():
    restart = restart_of("--partitions", "4", "--max-cores", "8")
    # minDeltasForSnapshot 10 + maintenanceInterval 60 s / a 10-second trigger = 16 batches of 200,000 changes.
    assert (restart["state_rows"], restart["versions_replayed"], restart["rows_replayed"]) == (6_700_000, 16, 3_200_000)
    # 4 partitions on 8 cores: 4 store instances load at once.
    assert restart["parallel"] == 4
    store = "rocksdb with changelog checkpointing"
    assert restart["seconds"] == pytest.approx(by_hand(store, 4, 6_700_000, 3_200_000, 4))
    text = run_cli("estimate", *SIZED, "--partitions", "4", "--max-cores", "8").stdout
    assert "replay         = at most 16 batches of changes since the last snapshot" in text
    assert (
        f"restart        = about {restart['seconds']:,.0f} s from a start to its first committed batch on {store}"
        in text
    )


def test_the_snapshot_interval_in_spark_conf_bounds_the_replay_and_rocksdb_without_changelog_replays_none(
    write_settings,
):
    conf = {
        "spark.sql.streaming.stateStore.minDeltasForSnapshot": 2,
        "spark.sql.streaming.stateStore.maintenanceInterval": "10s",
    }
    bounded = write_settings({"spark": {"conf": conf}, "state_store": {"provider": "rocksdb"}})
    # --partitions from the settings (4 in the bake), so the settings are read; --operator: no plan, no JVM.
    restart = restart_of("--settings", str(bounded), "--max-cores", "2")
    assert (restart["versions_replayed"], restart["rows_replayed"], restart["parallel"]) == (3, 600_000, 2)
    whole = write_settings({"state_store": {"provider": "rocksdb", "changelog_checkpointing": False}}, "whole.yaml")
    restart = restart_of("--settings", str(whole), "--max-cores", "2")
    assert (restart["versions_replayed"], restart["rows_replayed"], restart["replay_seconds"]) == (0, 0, 0.0)
    assert restart["seconds"] == pytest.approx(by_hand("rocksdb", 4, 6_700_000, 0, 2))
    text = run_cli("estimate", *SIZED, "--settings", str(whole), "--max-cores", "2").stdout
    assert "replay         = none: each commit uploads the state whole" in text


def test_an_available_now_job_is_told_that_runs_shorter_than_the_maintenance_interval_write_no_snapshot(
    write_settings,
):
    store = {"provider": "hdfs", "changelog_checkpointing": False}
    rate = {"rows_per_batch": 1000}  # available_now needs a source with an end
    path = write_settings({"query": {"trigger": "available_now"}, "state_store": store, "source": {"rate": rate}})
    result = run_cli("estimate", *SIZED, "--settings", str(path), "--max-cores", "2")
    assert result.returncode == 0, result.stderr
    assert "batches of changes since the last snapshot (spark.sql.streaming.stateStore.minDeltasForSnapshot 10)" in (
        result.stdout
    )
    assert "available_now  = a run shorter than spark.sql.streaming.stateStore.maintenanceInterval (60s)" in (
        result.stdout
    )


def test_a_maintenance_interval_spark_cannot_read_is_one_line(write_settings):
    path = write_settings({"spark": {"conf": {"spark.sql.streaming.stateStore.maintenanceInterval": "soon"}}})
    result = run_cli("estimate", *SIZED, "--settings", str(path))
    assert result.returncode == 2
    assert result.stderr.strip() == (
        "estimate error: spark.conf spark.sql.streaming.stateStore.maintenanceInterval is 'soon': give a number and"
        " a unit, such as 60s or 500ms"
    )


@pytest.mark.parametrize(("text", "seconds"), [("60s", 60.0), ("500ms", 0.5), ("2m", 120.0), ("1500", 1.5)])
def test_spark_time_confs_are_read_as_spark_reads_them(spark, text, seconds):
    assert spark_time_seconds("a conf", text) == seconds
    # Spark's own reading of the same text, through its JavaUtils (milliseconds without a unit).
    millis = spark._jvm.org.apache.spark.network.util.JavaUtils.timeStringAsMs(text)
    assert millis / 1000 == seconds


def test_the_replay_bound_of_each_store():
    assert replayed_versions("rocksdb", False, 10.0, 10, 60.0) == 0
    assert replayed_versions("rocksdb", True, 10.0, 10, 60.0) == 16
    assert replayed_versions("hdfs", False, 1.0, 10, 60.0) == 70
    assert replayed_versions("hdfs", False, 0.0, 10, 60.0) == 10  # available_now
