"""`estimate --calibrate`: bytes per state row measured on a short run predict a larger run's state size."""

from __future__ import annotations

import io
import json
import math

import pytest
from stream_job.machinery.core.settings import load_settings
from stream_job.machinery.core.sizing.store_costs import HEAP_PER_INSTANCE, ROCKSDB_DISK_PER_INSTANCE
from stream_job.machinery.operations.calibration import MEASURES, CalibrationError, measure, measured_run

from .conftest import BAKED_OPERATOR, deep_merge, operator_changes, run_cli, write_settings_file

pytestmark = pytest.mark.streaming

# The calibration's default run (6 files of 2,000 events) against a test workload three times larger.
CALIBRATION_EVENTS = 2000
WORKLOAD_EVENTS = 6000
TOLERANCE = 0.25
# State rows when the last file is in: a key per event and none evicted before the end, so every
# event (the join: every order and its payment, 4 in 5 orders paid; custom_state: every session
# of 10 events).
PEAK_ROWS = {"stream_stream_join": 6 * CALIBRATION_EVENTS * 9 // 5, "custom_state": 6 * CALIBRATION_EVENTS // 10}


def settings_for(tmp_path, operator: str, provider: str):
    changes = deep_merge(
        operator_changes(operator, tmp_path / "landing-join"),
        {"state_store": {"provider": provider, "changelog_checkpointing": provider == "rocksdb"}},
    )
    return write_settings_file(tmp_path / "settings.yaml", changes)


def assert_predicts(spark, tmp_path, settings, bytes_per_row: int, calibrated_peak: int) -> None:
    """The calibrated figure times the workload's state rows is within TOLERANCE of its measured bytes
    (both summed over the workload's batches)."""
    workload = measured_run(spark, settings, tmp_path / "workload", WORKLOAD_EVENTS, progress_to=io.StringIO())
    assert workload.peak_rows >= 2 * calibrated_peak  # a larger state, not a rerun of the calibration
    predicted = bytes_per_row * workload.summed_rows
    error = abs(predicted - workload.summed_bytes) / workload.summed_bytes
    assert error <= TOLERANCE, (
        f"{bytes_per_row} B/row x {workload.summed_rows} rows = {predicted} B, measured {workload.summed_bytes} B"
    )


# RocksDB's measure (its SST files per row) is read the same way for every operator: the default and
# custom_state bakes run it in CI; the deduplication and join bakes' runs are secondary (make
# test-all), beside their HDFS-backed runs, which measure each operator's own heap per row.
ROCKSDB_IN_CI = ("windowed_aggregation", "custom_state")


@pytest.mark.operator
@pytest.mark.parametrize(
    "provider",
    ["hdfs", pytest.param("rocksdb", marks=[] if BAKED_OPERATOR in ROCKSDB_IN_CI else [pytest.mark.secondary])],
)
def test_estimate_calibrate_measures_and_predicts_a_larger_run(spark, tmp_path, provider):
    if BAKED_OPERATOR == "custom_state" and provider == "hdfs":
        pytest.skip("custom_state runs only on the RocksDB state store")
    path = settings_for(tmp_path, BAKED_OPERATOR, provider)
    settings = load_settings(path)

    result = run_cli("estimate", "--calibrate", "--settings", str(path), "--json")

    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    calibration = report["calibration"]
    assert (calibration["provider"], calibration["measure"]) == (provider, MEASURES[provider])
    assert calibration["events"] == 6 * CALIBRATION_EVENTS
    assert calibration["bytes_per_row"] == math.ceil(calibration["summed_bytes"] / calibration["summed_rows"])
    assert calibration["peak_rows"] == PEAK_ROWS.get(BAKED_OPERATOR, 6 * CALIBRATION_EVENTS)
    # The estimate is redone with the measured footprint per row on this provider in place of the
    # payload plus the store's overhead; the payload (state_bytes_per_row) stays as answered.
    plain = settings.sizing()
    assert report["state_bytes_per_row"] == plain.state_bytes_per_row
    assert (report["measured_on"], report["measured_bytes_per_row"]) == (provider, calibration["bytes_per_row"])
    assert report["rows"] == plain.rows
    instances = report["store_instances"]
    if provider == "hdfs":
        assert report["heap_bytes_per_row"] == calibration["bytes_per_row"]
        assert report["total_bytes"] == plain.rows * calibration["bytes_per_row"] + instances * HEAP_PER_INSTANCE
    else:
        disk = plain.rows * calibration["bytes_per_row"] + instances * ROCKSDB_DISK_PER_INSTANCE
        assert (report["rocksdb_disk_bytes"], report["total_bytes"]) == (disk, plain.total_bytes)
    assert report["bytes_per_row_source"].startswith(f"measured on {provider} (")
    assert "calibrating:" in result.stderr  # the run's progress goes to stderr, the JSON alone to stdout
    # The checkpoint and output of the project are not touched: the run used a scratch directory.
    assert not (tmp_path / "checkpoint").exists()

    assert_predicts(spark, tmp_path, settings, calibration["bytes_per_row"], calibration["peak_rows"])


def progress(batch_id: int, rows: int, memory: int, sst: int) -> dict:
    operator = {"numRowsTotal": rows, "memoryUsedBytes": memory, "customMetrics": {"rocksdbSstFileSize": sst}}
    return {"batchId": batch_id, "stateOperators": [operator]}


def test_measure_sums_bytes_and_rows_over_the_batches_with_state():
    reports = [progress(0, 100, 5_000, 900), progress(1, 300, 9_000, 2_000), progress(2, 300, 12_000, 2_100)]
    reports.append(progress(3, 0, 3_000, 2_200))  # the closing batch, all state evicted: left out
    hdfs = measure(reports, "hdfs", 600)
    assert (hdfs.batches, hdfs.peak_rows, hdfs.summed_rows, hdfs.summed_bytes) == (3, 300, 700, 26_000)
    assert hdfs.bytes_per_row == 38  # 26,000 / 700 = 37.1, rounded up
    rocksdb = measure(reports, "rocksdb", 600)
    assert (rocksdb.summed_bytes, rocksdb.bytes_per_row) == (5_000, 8)  # the SST sizes: 5,000 / 700 = 7.1
    with pytest.raises(CalibrationError, match="kept no state rows"):
        measure([progress(0, 0, 100, 0)], "hdfs", 10)


def test_calibrate_refuses_an_explicit_bytes_per_row():
    result = run_cli("estimate", "--calibrate", "--bytes-per-row", "64")
    assert result.returncode == 2
    assert "estimate error: give --bytes-per-row or --calibrate (which measures it), not both" in result.stderr
