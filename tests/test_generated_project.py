"""Run the generated project's own gates (ruff, mypy and its pytest) inside real bakes, one per operator.

What a user's `make test` runs: their query's tests. The machinery's proofs run in
tests/test_machinery.py.
"""

from __future__ import annotations

import pytest

from .conftest import bake, recorded_answers, run_in

pytestmark = pytest.mark.slow

REPRESENTATIVE = [
    pytest.param({}, id="defaults:operator:windowed_aggregation-provider:hdfs-source:rate-sink:parquet"),
    pytest.param(
        {
            "stateful_operator": "stream_stream_join",
            "state_store_provider": "rocksdb",
            "source": "files",
            "sink": "delta",
            "platform": "databricks",
            "project_name": "Clicks Per User",
        },
        id="operator:stream_stream_join-provider:rocksdb-source:files-sink:delta-platform:databricks",
    ),
    pytest.param(
        {"source": "kafka", "sink": "console", "stateful_operator": "deduplication"},
        id="operator:deduplication-provider:hdfs-source:kafka-sink:console",
    ),
    pytest.param(
        {"stateful_operator": "custom_state", "source": "files", "sink": "parquet", "changelog_checkpointing": False},
        id="operator:custom_state-provider:rocksdb-source:files-sink:parquet-changelog:off",
    ),
]


@pytest.mark.parametrize("answers", REPRESENTATIVE)
def test_generated_tests_and_lint_pass(out, answers):
    project = bake(out, **answers)
    lint = run_in(project, "-m", "ruff", "check", ".")
    assert lint.returncode == 0, lint.stdout + lint.stderr
    formatted = run_in(project, "-m", "ruff", "format", "--check", ".")
    assert formatted.returncode == 0, formatted.stdout + formatted.stderr
    package = recorded_answers(project)["package_name"]
    types = run_in(project, "-m", "mypy", package)
    assert types.returncode == 0, types.stdout + types.stderr
    tests = run_in(project, "-m", "pytest", "-q", "-p", "no:cacheprovider", timeout=900)
    assert tests.returncode == 0, tests.stdout[-5000:] + tests.stderr[-3000:]
    assert " passed" in tests.stdout and "failed" not in tests.stdout and "skipped" not in tests.stdout
