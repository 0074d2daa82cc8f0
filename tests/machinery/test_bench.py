"""bench end to end at small sizes on every operator (a smoke run: the README's figures come from a
full run), and its refusals."""

from __future__ import annotations

import csv
import json
import os

import pytest
from stream_job.machinery.job.run.runner import UNTRACKED_ROWS

from .conftest import BAKED_OPERATOR, run_cli

pytestmark = pytest.mark.streaming

SMALL = {"spark": {"shuffle_partitions": 2, "master": "local[2]", "platform": "oss"}}
OPERATOR_SETTINGS = {
    "windowed_aggregation": {},
    "deduplication": {},
    "stream_stream_join": {"join_source": {"type": "rate"}},
    "custom_state": {"state_store": {"provider": "rocksdb"}},
}
# Rows per batch for N keys with 1 warm-up and 2 counted batches: every key in every batch for the
# operators that keep a row per key; for the others the state grows to N over the 3 batches, so
# the sizes are multiples of 2 sides x 3 batches, to land on N exactly.
BATCHES_PER_STATE = {"windowed_aggregation": 1, "custom_state": 1, "deduplication": 3, "stream_stream_join": 6}
# Two configurations for the aggregation, two sizes for the deduplication, one run for the others:
# six Spark processes, to keep CI short.
RUNS = {
    "windowed_aggregation": ("hdfs,rocksdb+changelog", (120,)),
    "deduplication": ("rocksdb+changelog", (120, 360)),
    "stream_stream_join": ("hdfs", (120,)),
    "custom_state": ("hdfs,rocksdb", (120,)),
}


def bench(settings_path, *arguments: str):
    """The bench command, in-process: each of its runs is a job process of its own anyway."""
    return run_cli("bench", "--settings", str(settings_path), *arguments)


# bench runs the query it is given on each store: in custom_state's bake, whose query runs on RocksDB
# alone (its own set of configurations), and, secondary, in the default bake, whose hdfs runs go
# through the same runner in test_sustain_searches_rates_and_reports_the_time_per_row there.
@pytest.mark.parametrize(
    "operator",
    [
        pytest.param(
            BAKED_OPERATOR,
            marks=[pytest.mark.operator] if BAKED_OPERATOR == "custom_state" else [pytest.mark.secondary],
        )
    ],
)
def test_bench_runs_each_configuration_and_size_and_writes_its_files(write_settings, tmp_path, operator):
    out = tmp_path / "bench"
    providers, sizes = RUNS[operator]
    settings = write_settings({**SMALL, **OPERATOR_SETTINGS[operator]})
    arguments = ["--batches", "2", "--warmup", "1", "--providers", providers, "--out", str(out)]
    run = bench(settings, "--keys", *map(str, sizes), *arguments)
    assert run.returncode == 0, run.stderr[-3000:]

    configurations = providers.split(",")
    if operator == "custom_state":
        assert "bench: hdfs not run: Spark runs transformWithState only on RocksDB" in run.stderr
        configurations.remove("hdfs")
    results = json.loads((out / "results.json").read_text())["results"]
    assert [(r["configuration"], r["keys"]) for r in results] == [(c, n) for n in sizes for c in configurations]
    for result in results:
        assert result["state_rows"] == result["keys"]
        assert result["input_rows_per_batch"] == result["keys"] // BATCHES_PER_STATE[operator]
        assert result["batches"] == 2
        assert 0 < result["batch_ms_p50"] <= result["batch_ms_p95"] <= result["batch_ms_max"]
        assert result["gc_ms_per_batch"] is not None and result["gc_ms_per_batch"] >= 0
        assert result["checkpoint_bytes_per_batch"] > 0 and result["state_memory_bytes"] > 0
    # Progress shows every batch, the warm-up and the counted ones.
    assert f"  {configurations[0]}, {sizes[0]} keys, batch warm-up: " in run.stderr
    assert f"  {configurations[-1]}, {sizes[-1]} keys, batch 2/2: " in run.stderr
    with open(out / "results.csv") as handle:
        assert [row["configuration"] for row in csv.DictReader(handle)] == [r["configuration"] for r in results]
    summary = (out / "summary.md").read_text()
    assert run.stdout == summary
    assert summary.startswith(f"# bench: {operator}\n")
    for configuration in configurations:
        assert summary.count(f"\n| {configuration} | ") == len(sizes)
    largest = f"{sizes[-1]} keys ({sizes[-1]} state rows)"
    assert f"\nMeasured: at {largest} the fastest configuration by median batch time is " in summary
    assert "\nNapkin math (settings.yaml, `estimate`): " in summary
    assert "\nMachine: platform " in summary and "pyspark 4." in summary
    assert "\nThe state commit and GC times are sums over the tasks of every partition" in summary
    assert (out / "chart.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    # Each run keeps its log, not its checkpoint, output or event log.
    assert sorted(path.name for path in (out / "runs").iterdir()) == sorted(
        f"{r['configuration']}-{r['keys']}" for r in results
    )
    assert sorted(path.name for path in (out / "runs").glob("*/*")) == ["job.log"] * len(results)


@pytest.mark.parametrize(
    ("changes", "arguments", "message"),
    [
        ({}, ["--providers", "hdfs,lsm"], "bench error: --providers lsm: not a configuration; choose from hdfs,"),
        ({}, ["--providers", ","], "bench error: --providers is empty; choose from hdfs, rocksdb, rocksdb+changelog"),
        ({}, ["--keys", "0"], "argument --keys: '0' must be greater than zero"),
        (
            {},
            ["--batches", "3595"],
            "bench error: --warmup 3 + --batches 3595 = 3598 batches: more than 3595, which would carry the run's"
            " event time out of its 1-hour window; use fewer",
        ),
    ],
    ids=["unknown-configuration", "no-configuration", "zero-keys", "too-many-batches"],
)
def test_bench_refuses_a_bad_request_before_running(write_settings, tmp_path, changes, arguments, message):
    run = bench(write_settings({**SMALL, **changes}), "--out", str(tmp_path / "bench"), *arguments)
    assert run.returncode == 2
    assert message in run.stderr
    assert not (tmp_path / "bench").exists()


@pytest.mark.operator
@pytest.mark.skipif(BAKED_OPERATOR != "custom_state", reason="only custom_state runs on RocksDB alone")
def test_bench_refuses_a_store_the_operator_cannot_run_on(write_settings, tmp_path):
    run = bench(write_settings(SMALL), "--out", str(tmp_path / "bench"), "--providers", "hdfs")
    assert run.returncode == 2
    assert (
        "bench error: --providers hdfs: nothing to run for this query (hdfs: Spark runs transformWithState only"
        " on RocksDB)" in run.stderr
    )
    assert not (tmp_path / "bench").exists()


def sustain(settings_path, *arguments: str):
    """The sustain command, in-process: each of its tries is a job process of its own (kept to its CPUs)."""
    return run_cli("sustain", "--settings", str(settings_path), *arguments)


# The search runs in the default bake; custom_state's single try repeats it on RocksDB alone, where
# bench's custom_state case already runs the query (secondary: make test-all runs it).
@pytest.mark.parametrize(
    "operator",
    [
        pytest.param(
            BAKED_OPERATOR,
            marks=[pytest.mark.operator, pytest.mark.secondary] if BAKED_OPERATOR == "custom_state" else [],
        )
    ],
)
def test_sustain_searches_rates_and_reports_the_time_per_row(write_settings, tmp_path, operator):
    """Tries on one core from a rate far below what a core holds: it holds, and the next try goes where
    its batch time points. The figures are the tries' own: the highest that held, its time per row
    split by Spark's state metrics. custom_state's batches cost seconds whatever the rate: one try at
    the settings' 10-second trigger."""
    # The default bake's tries run the tuned profile: Spark counts no rows there, the state files do.
    provider = "rocksdb+changelog" if operator == "custom_state" else "rocksdb+tuned"
    trigger, start, tries = ("10 seconds", 20, 1) if operator == "custom_state" else ("2 seconds", 100, 2)
    path = write_settings({**SMALL, **OPERATOR_SETTINGS[operator]})
    out = tmp_path / "out"
    result = sustain(
        path, "--cores", "1", "--providers", provider, "--trigger", trigger, "--start-rate", str(start),
        "--max-tries", str(tries), "--batches", "2", "--out", str(out),
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    found = json.loads((out / "sustain.json").read_text())
    assert found["operator"] == operator and found["machine"]["cpus"]
    (search,) = found["results"]
    assert len(search["tries"]) == tries
    first = search["tries"][0]
    trigger_ms = 10_000 if operator == "custom_state" else 2_000
    # A small fraction of what one core holds: far within the trigger.
    assert first["rows_per_second"] == start and first["holds"] and first["batch_ms_p50"] <= trigger_ms
    per_side = 2 if operator == "stream_stream_join" else 1
    assert first["input_rows_per_batch"] == start * trigger_ms // 1000
    assert first["input_rows_per_batch"] % per_side == 0
    # The whole job was kept to one CPU where the machine has more (Linux).
    assert first["cpus"] == (1 if len(os.sched_getaffinity(0)) > 1 else None)
    if tries == 2:
        assert search["tries"][1]["rows_per_second"] >= start * 1.25
    held = [t["rows_per_second"] for t in search["tries"] if t["holds"]]
    assert search["rows_per_second"] == max(held)
    assert search["failed_at"] == min((t["rows_per_second"] for t in search["tries"] if not t["holds"]), default=None)
    best = next(t for t in search["tries"] if t["rows_per_second"] == search["rows_per_second"])
    assert search["rows_per_second_per_core"] == search["rows_per_second"]  # one core
    assert search["core_us_per_row"] == pytest.approx(best["core_us_per_row"])
    state_ms = best["state_update_ms"] + best["state_remove_ms"] + best["state_commit_ms"]
    assert search["state_us_per_row"] == pytest.approx(state_ms * 1000 / best["input_rows_per_batch"])
    assert state_ms > 0  # Spark's state metrics reached the figures
    assert search["rest_us_per_row"] == pytest.approx(search["core_us_per_row"] - search["state_us_per_row"])
    assert best["state_rows"] > 0
    if provider == "rocksdb+tuned":
        log = (out / "runs" / f"{provider}-local1-{round(best['rows_per_second'])}" / "job.log").read_text()
        assert UNTRACKED_ROWS in log.splitlines()  # Spark's progress said 0 rows: the count is the files'
    summary = result.stdout
    assert f"| {provider} | 1 | {trigger} | {search['rows_per_second']:,.0f} |" in summary
    assert "StateStoreBasicOperationsBenchmark" in summary and (out / "sustain.md").read_text() == summary


def test_sustain_refuses_a_bad_request_before_running(write_settings, tmp_path):
    path = write_settings(SMALL)
    result = sustain(path, "--providers", "rocksdb+wal", "--out", str(tmp_path / "out"))
    assert result.returncode == 2
    assert result.stderr.strip().endswith(
        "sustain error: --providers rocksdb+wal: not a configuration; choose from hdfs, rocksdb, rocksdb+changelog,"
        " rocksdb+tuned"
    )
    result = sustain(path, "--trigger", "soon", "--out", str(tmp_path / "out"))
    assert result.returncode == 2 and "sustain error: --trigger" in result.stderr
    assert not (tmp_path / "out" / "runs").exists()
