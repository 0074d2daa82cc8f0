"""Run the generated project's own gates (pytest and ruff) inside real bakes."""

from __future__ import annotations

import pytest

from .conftest import bake, run_in

pytestmark = pytest.mark.slow

# Each generated suite includes the crash tests (SIGKILL mid-batch, restart, compare with a batch job)
# into parquet and delta for both providers, on the project's own operator.
REPRESENTATIVE = [
    pytest.param({}, [], id="defaults:provider:hdfs-source:rate-sink:parquet-platform:oss"),
    pytest.param(
        {
            "state_store_provider": "rocksdb",
            "source": "files",
            "sink": "delta",
            "platform": "databricks",
            "project_name": "Clicks Per User",
        },
        [],
        id="provider:rocksdb-source:files-sink:delta-platform:databricks",
    ),
    pytest.param(
        {"source": "kafka", "sink": "console", "stateful_operator": "deduplication"},
        [],
        id="operator:deduplication-provider:hdfs-source:kafka-sink:console-platform:oss",
    ),
]


@pytest.mark.parametrize(("answers", "selection"), REPRESENTATIVE)
def test_generated_tests_and_lint_pass(out, answers, selection):
    project = bake(out, **answers)
    lint = run_in(project, "-m", "ruff", "check", ".")
    assert lint.returncode == 0, lint.stdout + lint.stderr
    formatted = run_in(project, "-m", "ruff", "format", "--check", ".")
    assert formatted.returncode == 0, formatted.stdout + formatted.stderr
    tests = run_in(project, "-m", "pytest", "-q", "-p", "no:cacheprovider", *selection, timeout=1200)
    assert tests.returncode == 0, tests.stdout[-5000:] + tests.stderr[-3000:]
    assert " passed" in tests.stdout and "failed" not in tests.stdout
