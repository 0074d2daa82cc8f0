"""Run the generated project's own gates (ruff, mypy and its pytest) inside real bakes, one per operator.

What a user's `make test` runs: their query's tests. The machinery's proofs run in
tests/test_machinery.py.
"""

from __future__ import annotations

import json
import site
import subprocess
import sys

import pytest

from .conftest import TEMPLATE, bake, recorded_answers, run_in

pytestmark = pytest.mark.slow

# One mypy cache for every bake's check (under build/, as the JUnit files): the libraries' stubs (pyspark,
# pydantic) and a bake's modules that another bake holds as they are are read, not checked again: about
# 25 s of mypy a bake on 2 cores where the cache is cold, 5 s where it is not. In files, each written whole
# (a rename), not in mypy's SQLite file, whose lock a check of the other xdist worker could hold too long.
MYPY_CACHE = TEMPLATE / "build" / "mypy-cache"

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
    pytest.param(
        {"stateful_operator": "deduplicated_count", "state_store_provider": "rocksdb"},
        id="operator:deduplicated_count-provider:rocksdb-source:rate-sink:parquet",
    ),
]
# The one line a user adds to the default query to deduplicate before counting.
DEDUPLICATE_FIRST = (
    '        .withWatermark("event_time", query.watermark)\n',
    '        .withWatermark("event_time", query.watermark)\n        .dropDuplicatesWithinWatermark(["event_id"])\n',
)


@pytest.mark.parametrize("answers", REPRESENTATIVE)
def test_generated_tests_and_lint_pass(out, answers):
    project = bake(out, **answers)
    lint = run_in(project, "-m", "ruff", "check", ".")
    assert lint.returncode == 0, lint.stdout + lint.stderr
    formatted = run_in(project, "-m", "ruff", "format", "--check", ".")
    assert formatted.returncode == 0, formatted.stdout + formatted.stderr
    package = recorded_answers(project)["package_name"]
    types = run_in(project, "-m", "mypy", "--no-sqlite-cache", "--cache-dir", str(MYPY_CACHE), package)
    assert types.returncode == 0, types.stdout + types.stderr
    tests = run_in(project, "-m", "pytest", "-q", "-p", "no:cacheprovider", timeout=900)
    assert tests.returncode == 0, tests.stdout[-5000:] + tests.stderr[-3000:]
    assert " passed" in tests.stdout and "failed" not in tests.stdout and "skipped" not in tests.stdout


def test_a_default_project_edited_into_a_chain_passes_its_own_tests(out):
    project = bake(out)
    query = project / "stream_job" / "query.py"
    old, new = DEDUPLICATE_FIRST
    assert query.read_text().count(old) == 1
    query.write_text(query.read_text().replace(old, new))
    tests = run_in(project, "-m", "pytest", "-q", "-p", "no:cacheprovider", timeout=900)
    assert tests.returncode == 0, tests.stdout[-5000:] + tests.stderr[-3000:]
    assert " passed" in tests.stdout and "failed" not in tests.stdout and "skipped" not in tests.stdout
    # The plan holds both operators now: the project's own estimate sizes the chain.
    estimate = run_in(project, "-m", "stream_job", "estimate", "--json")
    assert json.loads(estimate.stdout)["operator"] == "deduplication -> windowed_aggregation"


def test_the_installed_console_script_runs_the_command_line(out, tmp_path):
    project = bake(out)
    # A virtual environment of its own that sees this one's packages (pyspark, pydantic) through a .pth
    # file; pip builds the project's wheel and installs it and its console script there.
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    (site_packages,) = venv.glob("lib/python*/site-packages")
    (site_packages / "outer.pth").write_text("\n".join(site.getsitepackages()) + "\n")
    install = [str(venv / "bin" / "pip"), "install", "-q", "--no-deps", str(project)]
    installed = subprocess.run(install, capture_output=True, text=True)
    assert installed.returncode == 0, installed.stderr
    script = venv / "bin" / "stream-job"
    usage = subprocess.run([str(script), "--help"], capture_output=True, text=True, cwd=project)
    assert usage.returncode == 0, usage.stderr
    assert "estimate" in usage.stdout and "repartition" in usage.stdout
    # A command that reads settings.yaml where it runs (without starting Spark).
    config = subprocess.run([str(script), "config"], capture_output=True, text=True, cwd=project)
    assert (config.returncode, config.stderr) == (0, "")
    assert f"checkpoint_location: {project / 'checkpoints'}" in config.stdout, config.stdout
