"""The napkin math, checked against figures computed by hand."""

from __future__ import annotations

import json
import math

import pytest
from stream_job.machinery.core.durations import DurationError, parse_duration
from stream_job.machinery.core.sizing.capacity import estimate
from stream_job.machinery.core.sizing.decision import decide
from stream_job.machinery.core.sizing.memory import GIB
from stream_job.machinery.core.sizing.report import report
from stream_job.machinery.core.sizing.store_costs import (
    COSTS,
    HEAP_PER_INSTANCE,
    ROCKSDB_DISK_PER_INSTANCE,
    ROCKSDB_MEMORY_PER_INSTANCE,
)

from .conftest import run_cli


def heap(rows: int, payload: int, operator: str, partitions: int) -> int:
    """The HDFS-backed store's heap, by hand: each row its payload plus the store's measured overhead,
    each store instance (one per partition, a join's four) its own."""
    costs = COSTS[operator]
    return (
        rows * (payload + costs.heap_overhead_per_row) + partitions * costs.instances_per_partition * HEAP_PER_INSTANCE
    )


def test_worked_example():
    # The seed rule, the headline: 10 minutes x 10,000 rows/s = 6,000,000 rows. Deduplication keeps
    # (2 x 600 s + one 10 s batch) x 10,000 rows/s = 12,100,000 rows; x 64 B = 774,400,000 B of
    # payload; the HDFS heap adds the store's overhead per row and per instance; / 200 partitions, on
    # 50 executors of 4 partitions each (on one, its heap would call for rocksdb: see below).
    sizing = estimate(10_000, "10 minutes", 64, 200, operator="deduplication", executors=50)
    assert (sizing.headline_rows, sizing.rows) == (6_000_000, 12_100_000)
    assert sizing.payload_bytes == 774_400_000
    assert sizing.total_bytes == heap(12_100_000, 64, "deduplication", 200)
    assert sizing.bytes_per_partition == sizing.projected_bytes_per_partition == sizing.total_bytes // 200
    assert sizing.recommended_provider == "hdfs"
    # RocksDB beside it: on disk the live rows' payload at the measured SST ratio, and 1.5 flushes not
    # merged yet of a 10 s batch's changes, 100,000 events written and as many deleted; native
    # memory with its overhead.
    costs = COSTS["deduplication"]
    assert sizing.rows_changed_per_batch == 200_000
    flushes = 1.5 * 200_000 * 64 * costs.flush_ratio
    assert (
        sizing.rocksdb_disk_bytes == round(774_400_000 * costs.disk_ratio + flushes) + 200 * ROCKSDB_DISK_PER_INSTANCE
    )
    assert sizing.rocksdb_memory_bytes == (
        12_100_000 * (64 + costs.memory_overhead_per_row) + 200 * ROCKSDB_MEMORY_PER_INSTANCE
    )
    # available_now has no steady batch: 2 x 600 s x 10,000.
    assert estimate(10_000, "10 minutes", 64, 200, operator="deduplication", trigger="available_now").rows == 12_000_000


def test_rocksdb_disk_counts_the_batch_flushes_not_merged_yet():
    # A join's batch brings both sides: (1,000 + 1,000 rows/s) x 10 s = 20,000 events written and as
    # many deleted.
    join = estimate(1_000, "1 minute", 64, 8, operator="stream_stream_join", trigger="10 seconds")
    assert join.rows_changed_per_batch == 40_000
    # A batch changes at most every row: 100 known keys in (60 + 10 + 60) / 60 open windows are 217
    # rows, though a 10 s batch brings 100,000 events.
    known = estimate(10_000, "1 minute", 64, 8, key_cardinality=100, trigger="10 seconds")
    assert (known.rows, known.rows_changed_per_batch) == (217, 434)
    # available_now's batch is the backlog, unknown: the default trigger's 10 s batch stands in.
    backlog = estimate(1_000, "1 minute", 64, 8, operator="deduplication", trigger="available_now")
    assert backlog.rows_changed_per_batch == 2 * 10 * 1_000
    flushes = 1.5 * 20_000 * 64 * COSTS["deduplication"].flush_ratio
    assert (
        backlog.rocksdb_disk_bytes
        == round(backlog.payload_bytes * COSTS["deduplication"].disk_ratio + flushes) + 8 * ROCKSDB_DISK_PER_INSTANCE
    )
    assert "1.5 unmerged flushes of the 20,000 rows a batch changes" in report(backlog)


def test_windowed_aggregation_counts_open_windows_times_keys():
    # 10-minute watermark, a 10 s batch, 1-minute windows: window ends fall every minute over
    # 600 + 10 + 60 s, 11.17 open windows on average. Keys unknown: every event of a window may be
    # a new key, 10,000 x 60 = 600,000 per window -> 6,700,000 rows; x 64 / 200.
    sizing = estimate(10_000, "10 minutes", 64, 200, operator="windowed_aggregation")
    assert (sizing.headline_rows, sizing.rows) == (6_000_000, 6_700_000)
    assert sizing.bytes_per_partition == heap(6_700_000, 64, "windowed_aggregation", 200) // 200
    # 1,000 known keys and 5-minute windows: (600 + 10 + 300) / 300 = 3.03 open windows x 1,000 keys.
    known = estimate(10_000, "10 minutes", 64, 200, key_cardinality=1_000, window="5 minutes")
    assert (known.rows, known.payload_bytes) == (3_033, 194_112)
    # (90 + 10 + 60) / 60 = 2.67 open windows; keys are capped by the events of one window:
    # min(100, 2 x 60 = 120) = 100.
    assert estimate(2, "90 seconds", 10, 1, key_cardinality=100, window="1 minute").rows == 267
    assert estimate(1, "90 seconds", 10, 1, key_cardinality=100, window="1 minute").rows == 160  # x 60
    # A sliding window: an event falls in window / slide windows, and window ends fall every slide.
    sliding = estimate(10, "1 minute", 10, 1, key_cardinality=300, window="1 minute", slide="20 seconds")
    assert sliding.rows == round((60 + 10 + 60) / 20 * 300)


def test_join_counts_both_sides():
    # Left 1,000 rows/s x (600 s watermark + 300 s range + 2 batches of 10 s) = 920,000; right
    # 200 rows/s x (600 s + 20 s) = 124,000.
    sizing = estimate(
        1_000,
        "10 minutes",
        100,
        10,
        operator="stream_stream_join",
        join_input_rows_per_second=200,
        join_range="5 minutes",
    )
    assert (sizing.rows, sizing.payload_bytes) == (1_044_000, 104_400_000)
    # Four stores per partition: each side's keys and its values.
    assert (sizing.store_instances, sizing.total_bytes) == (40, heap(1_044_000, 100, "stream_stream_join", 10))
    assert sizing.headline_rows == 600_000
    # Without a right-side rate, the right side runs at the input rate: 920,000 + 620,000.
    assert (
        estimate(1_000, "10 minutes", 100, 10, operator="stream_stream_join", join_range="5 minutes").rows == 1_540_000
    )


def test_custom_state_counts_active_keys():
    # Keys active within 9 minutes of timeout + 1 minute of watermark + one 10 s batch at 100 rows/s:
    # up to 61,000 events.
    sizing = estimate(100, "1 minute", 500, 4, operator="custom_state", session_timeout="9 minutes")
    assert (sizing.rows, sizing.payload_bytes) == (61_000, 30_500_000)
    # 50,000 known keys cap it; 100,000 keys do not (there are only 61,000 events in the span).
    capped = estimate(
        100, "1 minute", 500, 4, operator="custom_state", session_timeout="9 minutes", key_cardinality=50_000
    )
    assert capped.rows == 50_000
    assert (
        estimate(
            100, "1 minute", 500, 4, operator="custom_state", session_timeout="9 minutes", key_cardinality=100_000
        ).rows
        == 61_000
    )


def test_rocksdb_sized_case():
    # (2 x 1 hour + 10 s) x 100,000 rows/s = 721,000,000 rows; x 200 B = 144,200,000,000 B of
    # payload alone, / 50 = 2,884,000,000 B: over 1 GiB per partition before the heap's overhead.
    sizing = estimate(100_000, "1 hour", 200, 50, operator="deduplication")
    assert (sizing.rows, sizing.payload_bytes) == (721_000_000, 144_200_000_000)
    assert sizing.bytes_per_partition == heap(721_000_000, 200, "deduplication", 50) // 50
    assert sizing.recommended_provider == "rocksdb"


def test_growth_factor_can_cross_the_threshold():
    # The heap per partition x the growth factor crosses 1 GiB at the factor of the threshold over it
    # (on an executor per partition, so that the executor's heap does not decide first).
    per_partition = heap(12_100_000, 64, "deduplication", 200) // 200
    crossing = math.ceil(GIB / per_partition)
    sizing = estimate(10_000, "10 minutes", 64, 200, growth_factor=crossing, operator="deduplication", executors=200)
    assert sizing.bytes_per_partition == per_partition
    assert sizing.projected_bytes_per_partition == round(per_partition * crossing) >= GIB
    assert sizing.recommended_provider == "rocksdb"
    below = estimate(10_000, "10 minutes", 64, 200, growth_factor=crossing - 1, operator="deduplication", executors=200)
    assert below.recommended_provider == "hdfs"


# One key, one row, on one partition: its heap is payload + overhead + one instance's.
EXACTLY_GIB = GIB - COSTS["custom_state"].heap_overhead_per_row - HEAP_PER_INSTANCE


@pytest.mark.parametrize(("bytes_per_row", "provider"), [(EXACTLY_GIB, "rocksdb"), (EXACTLY_GIB - 1, "hdfs")])
def test_threshold_is_inclusive(bytes_per_row, provider):
    sizing = estimate(1, "1 second", bytes_per_row, 1, operator="custom_state", key_cardinality=1)
    assert (sizing.rows, sizing.projected_bytes_per_partition >= GIB) == (1, provider == "rocksdb")
    assert sizing.recommended_provider == provider


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("10 minutes", 600),
        ("30 seconds", 30),
        ("2 hours", 7200),
        ("1 minute", 60),
        ("1 day", 86400),
        ("1 week", 604800),
        ("1 hour 30 minutes", 5400),
        ("500 milliseconds", 0.5),
        ("1.5 seconds", 1.5),
        ("interval 5 minutes", 300),
        ("  10 MINUTES ", 600),
    ],
)
def test_parse_duration(text, seconds):
    assert parse_duration(text) == pytest.approx(seconds)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", "is empty"),
        ("ten minutes", "not an interval"),
        ("10", "not an interval"),
        ("10 fortnights", "unknown unit 'fortnights'"),
        ("-5 minutes", "is negative"),
        ("10 mins", "the unit 'mins', which Spark does not read; write minutes"),
        ("2h", "the unit 'h', which Spark does not read; write hours"),
        ("10minutes", "needs a space between the number and the unit"),
        ("0 seconds", "longer than zero"),
        ("1 month", "days or weeks"),
        ("5 minutes later", "not an interval"),
    ],
)
def test_parse_duration_rejects(text, message):
    with pytest.raises(DurationError, match=message):
        parse_duration(text)


@pytest.mark.parametrize(
    ("bad", "message"),
    [
        ({"input_rows_per_second": 0}, "input_rows_per_second"),
        ({"state_bytes_per_row": -1}, "state_bytes_per_row"),
        ({"shuffle_partitions": 0}, "shuffle_partitions"),
        ({"growth_factor": 0.5}, "growth_factor"),
    ],
)
def test_estimate_rejects_bad_inputs(bad, message):
    inputs = {
        "input_rows_per_second": 10,
        "watermark": "1 minute",
        "state_bytes_per_row": 64,
        "shuffle_partitions": 2,
        "growth_factor": 1.0,
    } | bad
    with pytest.raises(ValueError, match=message):
        estimate(**inputs)


def test_decide_auto_takes_the_recommendation():
    sizing = estimate(100_000, "1 hour", 200, 50)
    decision = decide("auto", True, sizing)
    assert (decision.provider, decision.changelog_checkpointing, decision.against_recommendation) == (
        "rocksdb",
        True,
        False,
    )
    assert decision.notes == ()


def test_decide_honours_an_explicit_choice_with_a_warning():
    decision = decide("hdfs", False, estimate(100_000, "1 hour", 200, 50))
    assert decision.provider == "hdfs"
    assert decision.against_recommendation
    assert "WARNING: you chose hdfs but the sizing recommends rocksdb" in decision.notes[0]


def test_one_executor_holding_every_partition_gets_rocksdb_for_a_heap_past_the_ceiling():
    # The same state on 200 partitions: below 1 GiB each, but a local run's driver (one executor) holds
    # them all: 2.4 GiB of state needs 300 MiB + 2.4 GiB / 40% = 6.3 GiB of heap, past the 4 GiB ceiling.
    local = estimate(10_000, "10 minutes", 64, 200)
    assert local.projected_bytes_per_partition < GIB
    assert (local.executor_partitions, local.recommended_provider) == (200, "rocksdb")
    assert local.executor_heap_bytes == 300 * 2**20 + math.ceil(local.executor_state_bytes / 0.4)
    assert "but one executor holds 200 of them: 6.3 GiB of heap, above the 4.0 GiB" in report(local)
    assert decide("auto", True, local).heap == "1g"
    # On 50 executors each holds 4 partitions, 49 MiB of state: hdfs, and a heap of 1g is enough.
    cluster = estimate(10_000, "10 minutes", 64, 200, executors=50)
    assert (cluster.executor_partitions, cluster.recommended_provider) == (4, "hdfs")
    assert decide("auto", False, cluster).heap == "1g"
    # A state that needs more than Spark's default heap, within the ceiling: hdfs with that heap.
    middle = estimate(10_000, "2 minutes", 64, 4, key_cardinality=500_000)
    assert middle.recommended_provider == "hdfs" and middle.executor_heap_bytes > GIB
    assert decide("auto", False, middle).heap == f"{math.ceil(middle.executor_heap_bytes / GIB)}g"


def test_decide_turns_changelog_off_for_hdfs_with_a_note():
    decision = decide("auto", True, estimate(10_000, "10 minutes", 64, 200, executors=50))
    assert (decision.provider, decision.changelog_checkpointing) == ("hdfs", False)
    assert "changelog checkpointing is written as off" in decision.notes[0]


def test_custom_state_always_gets_rocksdb():
    small = estimate(1, "1 minute", 1, 1, operator="custom_state")
    decision = decide("auto", True, small)
    assert (decision.provider, decision.changelog_checkpointing, decision.against_recommendation) == (
        "rocksdb",
        True,
        False,
    )
    assert decision.notes == ("rocksdb although the sizing says hdfs: Spark runs transformWithState only on RocksDB.",)
    with pytest.raises(ValueError, match="custom_state needs the rocksdb state store"):
        decide("hdfs", False, small)


def test_report_spells_out_every_step():
    text = report(estimate(10_000, "10 minutes", 64, 200, executors=50))
    assert "headline       = watermark 10 minutes (600 s) x 10,000 rows/s = 6,000,000 rows" in text
    assert "state rows     = 11.17 open windows" in text
    assert "= 6,700,000 rows" in text
    assert "payload        = 6,700,000 rows x 64 B = 428,800,000 B" in text
    total = heap(6_700_000, 64, "windowed_aggregation", 200)
    assert f" = {total:,} B (" in text and f" = {total // 200:,} B (" in text
    assert "recommendation = hdfs" in text
    assert "cannot be switched later" not in text  # far below the threshold: no growth warning
    assert "pinned into the checkpoint" in text


@pytest.mark.parametrize(
    ("operator", "formula", "inputs"),
    [
        (
            "windowed_aggregation",
            "rows = open windows ((watermark + one batch + window) / slide) x keys per window",
            "window 1 minute (query.window); key_cardinality unknown",
        ),
        ("deduplication", "rows = (2 x watermark + one batch) x rate", "trigger 10 seconds (query.trigger)"),
        (
            "stream_stream_join",
            "rows = left rate x (watermark + range + 2 batches) + right rate x (watermark + 2 batches)",
            "join_input_rows_per_second not set, so the input rate is used (capacity.join_input_rows_per_second); join_range 15 minutes (query.join.range); trigger 10 seconds (query.trigger)",
        ),
        (
            "custom_state",
            "rows = active keys x rows per key",
            "session_timeout 30 minutes (query.custom_state.session_timeout); key_cardinality unknown",
        ),
    ],
)
def test_each_operator_names_its_formula_and_asks_for_its_inputs(operator, formula, inputs):
    text = report(estimate(2_000, "30 minutes", 50, 10, operator=operator))
    (line,) = [line for line in text.splitlines() if line.startswith("  operator       = ")]
    assert line.startswith(f"  operator       = {operator}: ") and line.endswith(formula)
    assert f"  inputs         = {inputs}" in text


def test_unknown_operator_and_inputs_are_refused():
    with pytest.raises(
        ValueError,
        match="operator must be one of windowed_aggregation, deduplication, stream_stream_join, custom_state, session_window,"
        " aggregation, drop_duplicates, pandas_state, limit, got 'join'",
    ):
        estimate(1, "1 minute", 1, 1, operator="join")
    with pytest.raises(ValueError, match="window 'soon' is not an interval Spark can parse"):
        estimate(1, "1 minute", 1, 1, window="soon")
    with pytest.raises(ValueError, match="key_cardinality must be a number greater than zero, got 0"):
        estimate(1, "1 minute", 1, 1, key_cardinality=0)
    with pytest.raises(ValueError, match="unknown sizing input 'keys'"):
        estimate(1, "1 minute", 1, 1, keys=5)


def test_report_warns_near_the_threshold():
    # 6 open windows x 30,000,000 keys = 180,000,000 rows of 100 B and the heap's overhead, over 100
    # partitions: within 4x of 1 GiB, so hdfs, but growth would cross it.
    sizing = estimate(500_000, "5 minutes", 100, 100, executors=100)
    assert GIB / 4 <= sizing.projected_bytes_per_partition < GIB
    text = report(sizing)
    assert "recommendation = hdfs" in text
    assert "within 4x of the threshold" in text


def test_estimate_command_json():
    result = run_cli(
        "estimate",
        "--rate",
        "10000",
        "--watermark",
        "10 minutes",
        "--bytes-per-row",
        "64",
        "--partitions",
        "200",
        "--operator",
        "windowed_aggregation",
        "--executors",
        "50",
        "--json",
    )
    assert result.returncode == 0, result.stderr
    data = json.loads(result.stdout)
    total = heap(6_700_000, 64, "windowed_aggregation", 200)
    assert (data["rows"], data["payload_bytes"], data["total_bytes"], data["bytes_per_partition"]) == (
        6_700_000,
        428_800_000,
        total,
        total // 200,
    )
    assert data["recommended_provider"] == "hdfs"
    assert (data["headline_rows"], data["shape"]) == (
        6_000_000,
        {"window": "1 minute", "key_cardinality": None, "slide": None, "trigger": "10 seconds"},
    )


def test_estimate_command_takes_the_operator():
    args = ["--rate", "10", "--watermark", "1 minute", "--bytes-per-row", "8", "--partitions", "1"]
    result = run_cli("estimate", *args, "--operator", "deduplication", "--json")
    assert result.returncode == 0, result.stderr
    # (2 x 60 s + one 10 s batch) x 10 rows/s = 1,300 rows.
    assert (json.loads(result.stdout)["operator"], json.loads(result.stdout)["rows"]) == ("deduplication", 1_300)
    # The join's own inputs: 10 x (60 + 120 + 20) + 4 x (60 + 20) = 2,320 rows.
    join = ["--operator", "stream_stream_join", "--join-rate", "4", "--join-range", "2 minutes", "--json"]
    result = run_cli("estimate", *args, *join)
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["rows"] == 2_320
    # custom_state with 5 keys: min(5, 10 x (60 + 300)) = 5 rows.
    custom = ["--operator", "custom_state", "--keys", "5", "--session-timeout", "5 minutes", "--json"]
    assert json.loads(run_cli("estimate", *args, *custom).stdout)["rows"] == 5


def test_estimate_command_reads_missing_inputs_from_settings(write_settings):
    path = write_settings({"query": {"watermark": "1 hour"}})
    result = run_cli(
        "estimate", "--settings", str(path), "--rate", "100000", "--operator", "deduplication", "--bytes-per-row", "200"
    )
    assert result.returncode == 0, result.stderr
    assert "operator       = deduplication: " in result.stdout
    assert (
        "state rows     = (2 x watermark 3,600 s + one batch 10 s) x 100,000 rows/s = 721,000,000 rows" in result.stdout
    )
    assert "  vs headline    = x2.00: an id is kept until the watermark" in result.stdout


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--rate", "-5"], "argument --rate: '-5' must be a finite number greater than zero"),
        (["--partitions", "two"], "argument --partitions: 'two' is not a whole number"),
    ],
)
def test_estimate_command_rejects_bad_flags(args, message):
    result = run_cli("estimate", *args)
    assert result.returncode == 2
    assert message in result.stderr


def test_estimate_command_rejects_a_bad_watermark():
    result = run_cli("estimate", "--rate", "1", "--watermark", "soon", "--bytes-per-row", "1", "--partitions", "1")
    assert result.returncode == 2
    assert "estimate error: watermark 'soon' is not an interval Spark can parse" in result.stderr


def test_estimate_refuses_figures_beyond_any_job_in_one_line():
    """A rate of 1e308 ended in an OverflowError inside the arithmetic; now one line, exit 2."""
    result = run_cli(
        "estimate", "--rate", "1e308", "--watermark", "1 minute", "--bytes-per-row", "1", "--partitions", "1"
    )
    assert result.returncode == 2
    assert (
        result.stderr.strip()
        == "estimate error: --rate 1e+308 is more than 1,000,000,000,000,000, which no job reaches"
    )
    result = run_cli(
        "estimate", "--rate", "1", "--watermark", "99999999999 days", "--bytes-per-row", "1", "--partitions", "1"
    )
    assert result.returncode == 2
    assert "estimate error: watermark '99999999999 days' is longer than 36,500 days" in result.stderr


@pytest.mark.parametrize(
    "text", ["10 minutes", "2 hours", "1 hour 30 minutes", "500 milliseconds", "1 week", "1.5 seconds"]
)
def test_spark_reads_durations_the_same_way(spark, text):
    interval = spark.sql(f"SELECT INTERVAL '{text}' AS delay").first().delay
    assert interval.total_seconds() == pytest.approx(parse_duration(text))


def test_a_real_time_trigger_sizes_its_batch_and_recommends_rocksdb_whatever_the_state():
    small = {"input_rows_per_second": 10, "watermark": "1 minute", "state_bytes_per_row": 64, "shuffle_partitions": 2}
    micro = estimate(**small, operator="drop_duplicates", evicts=True, trigger="30 seconds")
    real = estimate(**small, operator="drop_duplicates", evicts=True, trigger="real_time 30 seconds")
    # A real-time batch's duration is its batch: the same rows as a trigger of that interval.
    assert real.rows == micro.rows == 10 * (60 + 30)
    assert micro.recommended_provider == "hdfs"
    assert real.recommended_provider == "rocksdb"
    assert "recommendation = rocksdb: query.trigger is real_time, and Spark's real-time mode refuses the HDFS" in (
        report(real, decide("auto", True, real))
    )
