"""The napkin math, checked against figures computed by hand."""

from __future__ import annotations

import json
import subprocess

import pytest

from {{ cookiecutter.package_name }}.capacity import GIB, DurationError, decide, estimate, parse_duration, report

from .conftest import run_python


def test_worked_example():
    # 10 minutes x 10,000 rows/s = 6,000,000 rows; x 64 B = 384,000,000 B; / 200 = 1,920,000 B.
    sizing = estimate(10_000, "10 minutes", 64, 200)
    assert sizing.rows == 6_000_000
    assert sizing.total_bytes == 384_000_000
    assert sizing.bytes_per_partition == 1_920_000
    assert sizing.projected_bytes_per_partition == 1_920_000
    assert sizing.recommended_provider == "hdfs"


def test_rocksdb_sized_case():
    # 1 hour x 100,000 rows/s = 360,000,000 rows; x 200 B = 72,000,000,000 B; / 50 = 1,440,000,000 B >= 1 GiB.
    sizing = estimate(100_000, "1 hour", 200, 50)
    assert sizing.rows == 360_000_000
    assert sizing.total_bytes == 72_000_000_000
    assert sizing.bytes_per_partition == 1_440_000_000
    assert sizing.recommended_provider == "rocksdb"


def test_growth_factor_can_cross_the_threshold():
    # 1,920,000 B x 600 = 1,152,000,000 B per partition, above 1,073,741,824 B.
    sizing = estimate(10_000, "10 minutes", 64, 200, growth_factor=600)
    assert sizing.bytes_per_partition == 1_920_000
    assert sizing.projected_bytes_per_partition == 1_152_000_000
    assert sizing.recommended_provider == "rocksdb"


@pytest.mark.parametrize(("bytes_per_row", "provider"), [(GIB, "rocksdb"), (GIB - 1, "hdfs")])
def test_threshold_is_inclusive(bytes_per_row, provider):
    # One row per second for one second on one partition: per partition = bytes per row.
    assert estimate(1, "1 second", bytes_per_row, 1).recommended_provider == provider


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
        ("10 fortnights", "unknown unit 'fortnight'"),
        ("-5 minutes", "not an interval"),
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


def test_decide_turns_changelog_off_for_hdfs_with_a_note():
    decision = decide("auto", True, estimate(10_000, "10 minutes", 64, 200))
    assert (decision.provider, decision.changelog_checkpointing) == ("hdfs", False)
    assert "changelog checkpointing is written as off" in decision.notes[0]


def test_report_spells_out_every_step():
    text = report(estimate(10_000, "10 minutes", 64, 200))
    assert "6,000,000 rows" in text
    assert "384,000,000 B" in text
    assert "1,920,000 B" in text
    assert "recommendation = hdfs" in text
    assert "cannot be switched later" not in text  # far below the threshold: no growth warning
    assert "pinned into the checkpoint" in text


@pytest.mark.parametrize(
    ("operator", "formula"),
    [
        ("windowed_aggregation", "one row per (key, window) seen within the watermark"),
        ("deduplication", "one row per event id, kept until the watermark passes the event's time"),
    ],
)
def test_each_operator_names_its_formula(operator, formula):
    # Both keep at most watermark x rate rows: 30 minutes x 2,000 rows/s = 3,600,000 rows; x 50 B / 10.
    sizing = estimate(2_000, "30 minutes", 50, 10, operator=operator)
    assert (sizing.rows, sizing.bytes_per_partition) == (3_600_000, 18_000_000)
    assert sizing.formula.startswith(formula)
    assert f"operator       = {operator}: {formula}" in report(sizing)


def test_unknown_operator_is_refused():
    with pytest.raises(ValueError, match="operator must be one of windowed_aggregation, deduplication, got 'join'"):
        estimate(1, "1 minute", 1, 1, operator="join")


def test_report_warns_near_the_threshold():
    # 300,000,000 B per partition is 28% of 1 GiB: hdfs, but growth would cross it.
    text = report(estimate(1_000_000, "5 minutes", 100, 100))
    assert "recommendation = hdfs" in text
    assert "within 4x of the threshold" in text


def run_cli(*args: str) -> subprocess.CompletedProcess[str]:
    return run_python("-m", "{{ cookiecutter.package_name }}", *args)


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
        "--json",
    )
    assert result.returncode == 0, result.stderr
    data = json.loads(result.stdout)
    assert (data["rows"], data["total_bytes"], data["bytes_per_partition"], data["recommended_provider"]) == (
        6_000_000,
        384_000_000,
        1_920_000,
        "hdfs",
    )


def test_estimate_command_takes_the_operator():
    args = ["--rate", "10", "--watermark", "1 minute", "--bytes-per-row", "8", "--partitions", "1"]
    result = run_cli("estimate", *args, "--operator", "deduplication", "--json")
    assert result.returncode == 0, result.stderr
    assert (json.loads(result.stdout)["operator"], json.loads(result.stdout)["rows"]) == ("deduplication", 600)


def test_estimate_command_reads_missing_inputs_from_settings():
    result = run_cli("estimate", "--rate", "100000", "--watermark", "1 hour", "--bytes-per-row", "200")
    assert result.returncode == 0, result.stderr
    assert "360,000,000 rows" in result.stdout


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
    assert "estimate error: 'soon' is not an interval Spark can parse" in result.stderr


@pytest.mark.parametrize(
    "text", ["10 minutes", "2 hours", "1 hour 30 minutes", "500 milliseconds", "1 week", "1.5 seconds"]
)
def test_spark_reads_durations_the_same_way(spark, text):
    interval = spark.sql(f"SELECT INTERVAL '{text}' AS delay").first().delay
    assert interval.total_seconds() == pytest.approx(parse_duration(text))
