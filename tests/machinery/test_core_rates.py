"""Cores advised from the rate (machinery/core/sizing/core_rates.py): the working, the warning when
max_cores is fewer, the partition advice that follows them, and estimate's report and JSON."""

from __future__ import annotations

import json
import math

import pytest
from stream_job.machinery.core.sizing import core_rates
from stream_job.machinery.core.sizing.capacity import estimate, estimate_chain
from stream_job.machinery.core.sizing.core_rates import TARGET_LOAD, advise, against, per_core
from stream_job.machinery.core.sizing.partitions import advise as advise_partitions

from .conftest import run_cli

GIB = 1024**3
AGGREGATION_HDFS = per_core("windowed_aggregation", "hdfs")


def test_the_cores_are_the_rate_over_what_a_core_holds_at_the_target_load():
    # Half of what one core holds at the target load needs one core; just over it, two.
    within = advise(estimate(0.5 * TARGET_LOAD * AGGREGATION_HDFS, "10 minutes", 64, 8), "hdfs")
    assert within.cores_needed == 1
    assert within.busy_cores == pytest.approx(0.5 * TARGET_LOAD)
    beyond = advise(estimate(1.01 * TARGET_LOAD * AGGREGATION_HDFS, "10 minutes", 64, 8), "hdfs")
    assert beyond.cores_needed == 2
    # 10 cores' worth of rows: ceil(10 / 0.7) = 15.
    ten = advise(estimate(10 * AGGREGATION_HDFS, "10 minutes", 64, 8), "hdfs")
    assert ten.cores_needed == math.ceil(10 / TARGET_LOAD) == 15
    assert ten.lines[-2] == f"cores needed = 10.00 / {TARGET_LOAD:.0%} load = 15"


def test_each_provider_and_operator_has_its_own_figure_and_growth_raises_the_cores():
    rate = 3 * per_core("deduplication", "rocksdb")
    on_rocksdb = advise(estimate(rate, "10 minutes", 64, 8, operator="deduplication"), "rocksdb")
    assert on_rocksdb.busy_cores == pytest.approx(3)
    grown = advise(estimate(rate, "10 minutes", 64, 8, growth_factor=2, operator="deduplication"), "rocksdb")
    assert (grown.cores_needed, grown.cores_with_growth) == (math.ceil(3 / TARGET_LOAD), math.ceil(6 / TARGET_LOAD))
    assert "with growth x2: 9" in grown.lines[-2]
    # custom_state has RocksDB's figure whatever provider is asked about: it runs on nothing else.
    assert per_core("custom_state", "hdfs") == per_core("custom_state", "rocksdb")


def test_a_join_reads_both_inputs_and_a_chain_adds_its_operators_work():
    join = estimate(1_000, "10 minutes", 64, 8, operator="stream_stream_join", join_input_rows_per_second=3_000)
    assert advise(join, "hdfs").busy_cores == pytest.approx(4_000 / per_core("stream_stream_join", "hdfs"))
    chain = estimate_chain(("deduplication", "windowed_aggregation"), input_rows_per_second=5_000, watermark="1 minute",
                           state_bytes_per_row=64, shuffle_partitions=8)  # fmt: skip
    expected = 5_000 / per_core("deduplication", "hdfs") + 5_000 / per_core("windowed_aggregation", "hdfs")
    cores = advise(chain, "hdfs")
    assert cores.busy_cores == pytest.approx(expected)
    assert [line.split(":")[0] for line in cores.lines[:2]] == ["deduplication on hdfs", "windowed_aggregation on hdfs"]


def test_a_trigger_shorter_than_the_measured_one_is_said():
    sizing = estimate(1_000, "10 minutes", 64, 8)
    assert not any("shorter than" in line for line in advise(sizing, "hdfs", "10 seconds").lines)
    (line,) = [line for line in advise(sizing, "hdfs", "500 milliseconds").lines if "shorter than" in line]
    assert line.startswith("query.trigger 500 milliseconds is shorter than the 2 seconds the rates were measured at")


def test_more_cores_than_max_cores_is_warned_about():
    cores = advise(estimate(10 * AGGREGATION_HDFS, "10 minutes", 64, 8), "hdfs")
    assert against(cores, None) is None and against(cores, 15) is None
    assert against(cores, 4) == (
        f"the answered rate needs 15 cores (10.00 busy at {TARGET_LOAD:.0%} load), more than max_cores 4: batches"
        " would outlast the trigger and the job fall further behind with each; give it more cores, or check the rate"
    )


def test_without_max_cores_the_partitions_follow_the_cores_the_rate_needs():
    small = estimate(1_000, "1 minute", 64, 200)
    advice = advise_partitions(None, "hdfs", small, rate_cores=3)
    assert advice.recommended == 6
    assert advice.reasons[0].startswith("2 tasks per core x 3 cores, what the rate needs with growth = 6")
    # max_cores, when known, wins; without either, Spark's default.
    assert advise_partitions(4, "hdfs", small, rate_cores=3).recommended == 8
    assert advise_partitions(None, "hdfs", small).recommended == 200
    # A large state on few cores: raised until the HDFS-backed store's heap per partition is below the
    # threshold at which the sizing chooses RocksDB. 2.4 GiB on 1 core: 3 partitions, not 2; on 2
    # cores the 4 partitions already keep each below it.
    large = estimate(10_000, "10 minutes", 64, 200)
    raised = advise_partitions(None, "hdfs", large, rate_cores=1)
    assert raised.recommended == 3
    assert large.total_bytes / 3 < GIB <= large.total_bytes / 2
    assert advise_partitions(None, "hdfs", large, rate_cores=2).recommended == 4
    assert raised.reasons[1].startswith(f"raised to {raised.recommended}: ")


def test_estimate_gives_the_cores_in_its_report_and_json():
    # 10 keys: a small state, so the HDFS-backed store is the recommended provider the cores are for.
    args = ["--rate", str(10 * AGGREGATION_HDFS), "--watermark", "1 minute", "--bytes-per-row", "8", "--keys", "10"]
    args += ["--partitions", "4", "--operator", "windowed_aggregation"]
    result = run_cli("estimate", *args, "--json")
    assert result.returncode == 0, result.stderr
    found = json.loads(result.stdout)
    assert found["cores_needed"] == found["cores"]["cores_needed"] == 15
    assert found["cores"]["rows_per_second_per_core"] == [AGGREGATION_HDFS]
    assert found["cores"]["target_load"] == TARGET_LOAD and found["cores"]["against"] is None
    # Without max_cores the partition advice follows the cores: 2 per core.
    assert found["partitions"]["recommended"] == 30
    warned = run_cli("estimate", *args, "--max-cores", "4")
    assert warned.returncode == 0, warned.stderr
    assert "Cores from the rate\n" in warned.stdout
    assert "  cores needed = 10.00 / 70% load = 15\n" in warned.stdout
    assert (
        "  WARNING: the answered rate needs 15 cores (10.00 busy at 70% load), more than max_cores 4" in warned.stdout
    )


def test_estimate_check_warns_loudly_when_max_cores_is_too_few(write_settings):
    # 10 keys: a state the HDFS-backed store holds, so that the cores are the one thing to say.
    capacity = {"input_rows_per_second": 10 * AGGREGATION_HDFS, "key_cardinality": 10}
    hdfs = {"provider": "hdfs", "changelog_checkpointing": False}
    path = write_settings({"capacity": {**capacity, "max_cores": 2}, "state_store": hdfs})
    result = run_cli("estimate", "--settings", str(path), "--check")
    assert result.returncode == 0, result.stderr
    assert "!" * 78 in result.stderr
    assert "sizing check WARNING: the answered rate needs 15 cores" in result.stderr
    assert "more than max_cores 2" in result.stderr and "(capacity.max_cores)." in result.stderr
    enough = write_settings({"capacity": {**capacity, "max_cores": 15}, "state_store": hdfs})
    assert "sizing check WARNING" not in run_cli("estimate", "--settings", str(enough), "--check").stderr


def test_the_figures_say_where_they_come_from():
    assert set(core_rates.ROWS_PER_SECOND_PER_CORE) >= {(name, "rocksdb") for name in
                                                        ("windowed_aggregation", "deduplication",
                                                         "stream_stream_join")}  # fmt: skip
    assert set(core_rates.KEY_CALL_COSTS) == {"custom_state"}
    assert "benchmarks/key_call_costs.py" in core_rates.KEY_CALL_MEASURED_BY
    assert "benchmarks/core_rates.py" in core_rates.MEASURED_BY


def test_custom_state_cores_follow_the_keys_a_batch_holds_not_only_its_rows():
    # The same 10,000 rows/s: every event its own key (each called twice, at its event and when its
    # session ends) against 100 keys that come back every batch (called once a batch each).
    costs = core_rates.KEY_CALL_COSTS["custom_state"]
    unique = estimate(10_000, "10 minutes", 64, 8, operator="custom_state")
    repeating = estimate(10_000, "10 minutes", 64, 8, operator="custom_state", key_cardinality=100)
    busy_unique = (costs.batch_seconds + 2 * 100_000 * costs.key_call_seconds + 100_000 * costs.row_seconds) / 10
    busy_repeating = (costs.batch_seconds + 100 * costs.key_call_seconds + 100_000 * costs.row_seconds) / 10
    assert advise(unique, "rocksdb").busy_cores == pytest.approx(busy_unique)
    assert advise(repeating, "rocksdb").busy_cores == pytest.approx(busy_repeating)
    assert advise(repeating, "rocksdb").cores_needed < advise(unique, "rocksdb").cores_needed
    (line,) = [line for line in advise(repeating, "rocksdb").lines if line.startswith("custom_state: ")]
    assert "a 10 s batch of 100,000 rows calls Python for 100 keys (100 with events)" in line
