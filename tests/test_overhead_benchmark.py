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
    command = [sys.executable, "benchmarks/overhead.py", "--rounds", "1", "--files", "2", "--events-per-file", "40"]
    done = subprocess.run(
        [*command, "--partitions", "2", "--results-dir", str(tmp_path)],
        cwd=TEMPLATE,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    result = json.loads((tmp_path / "overhead.json").read_text())
    generated, handwritten = result["seconds"]["generated"], result["seconds"]["handwritten"]
    assert len(generated) == len(handwritten) == 1
    assert result["ratio_of_medians"] == pytest.approx(generated[0] / handwritten[0])
    assert result["median_of_ratios"] == pytest.approx(generated[0] / handwritten[0])
    # Each run's three parts, told by its checkpoint's files, add up to its wall time.
    for name, seconds in result["seconds"].items():
        (phases,) = result["phases"][name]
        assert min(phases.values()) > 0
        assert sum(phases.values()) == pytest.approx(seconds[0])
    # The script exits non-zero when the two outputs differ; both wrote the same closed windows.
    assert result["rows_written"] > 0
    assert (tmp_path / "overhead.md").read_text().startswith("# Template overhead\n")
    assert "Median of the per-round ratios: **" in done.stdout
    assert "| generated | " in done.stdout and "| start | batches | stop |" in done.stdout
