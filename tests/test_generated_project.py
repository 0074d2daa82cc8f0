"""Run the generated project's own gates (pytest and ruff) inside real bakes."""

from __future__ import annotations

import pytest

from .conftest import bake, run_in

pytestmark = pytest.mark.slow

REPRESENTATIVE = [
    pytest.param({}, id="defaults:provider:hdfs-sink:parquet-platform:oss"),
    pytest.param(
        {
            "state_store_provider": "rocksdb",
            "sink": "console",
            "platform": "databricks",
            "project_name": "Clicks Per User",
        },
        id="provider:rocksdb-sink:console-platform:databricks",
    ),
]


@pytest.mark.parametrize("answers", REPRESENTATIVE)
def test_generated_tests_and_lint_pass(out, answers):
    project = bake(out, **answers)
    lint = run_in(project, "-m", "ruff", "check", ".")
    assert lint.returncode == 0, lint.stdout + lint.stderr
    formatted = run_in(project, "-m", "ruff", "format", "--check", ".")
    assert formatted.returncode == 0, formatted.stdout + formatted.stderr
    tests = run_in(project, "-m", "pytest", "-q", "-p", "no:cacheprovider", timeout=1200)
    assert tests.returncode == 0, tests.stdout[-5000:] + tests.stderr[-3000:]
    assert " passed" in tests.stdout and "failed" not in tests.stdout
