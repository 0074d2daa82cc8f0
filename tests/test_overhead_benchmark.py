"""The template-overhead benchmark runs end to end (a smoke run: its figure comes from a real run)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from .conftest import TEMPLATE

# A smoke run of a benchmark, not a proof of the template: make test-all (TEST_ALL=1) runs it, CI
# leaves it out for its 25 minutes.
pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not os.environ.get("TEST_ALL"), reason="a benchmark's smoke run: make test-all runs it"),
]


def test_overhead_benchmark_runs_both_jobs_and_writes_its_results(tmp_path):
    command = [sys.executable, "benchmarks/overhead.py", "--rounds", "1", "--small", "3x40", "--large", "1x400"]
    done = subprocess.run(
        [*command, "--partitions", "2", "--results-dir", str(tmp_path)],
        cwd=TEMPLATE,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    result = json.loads((tmp_path / "overhead.json").read_text())
    assert list(result["workloads"]) == ["small batches", "large batches"]
    for label, files in (("small batches", 3), ("large batches", 1)):
        entry = result["workloads"][label]
        template, handwritten = (entry[name]["runs"] for name in ("template", "hand-written"))
        assert len(template) == len(handwritten) == 1
        # One file a batch, and the closing batch that moves the watermark past the last windows.
        assert template[0]["batches"] == handwritten[0]["batches"] == files + 1
        ratio = template[0]["seconds_a_batch"] / handwritten[0]["seconds_a_batch"]
        assert entry["ratio_seconds_a_batch"]["median"] == pytest.approx(ratio)
        # Spark's own metrics were read: every batch compiles code and runs a job in each.
        for run in (*template, *handwritten):
            assert run["compilations_a_batch"] > 0 and run["jobs_a_batch"] >= 1
            assert 0 < run["cpu_busy"] <= 1
    # The script exits non-zero when the two outputs differ; both wrote the same closed windows.
    assert result["workloads"]["small batches"]["rows_written"] > 0
    assert (tmp_path / "overhead.md").read_text().startswith("# Template overhead\n")
    assert "- small batches, seconds a batch: median **" in done.stdout
    assert "| small batches (3 files x 40 events) | template | 4 |" in done.stdout
