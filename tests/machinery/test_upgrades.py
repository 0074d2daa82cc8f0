"""A checkpoint moved to another Spark release (job/guard/spark_moves.py): proven, said or refused.

The bake's starter writes its checkpoint on this pyspark (4.2.1) and restarts on the next one, each way, with
exact output. The next one is the Python that NEXT_SPARK_PYTHON names (the template's CI gives its pyspark
4.3.0 environment, tests/real_time_spark.py); without it the runs skip, saying so.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pyspark
import pytest
from pyspark.sql import SparkSession
from pyspark.testing import assertDataFrameEqual
from stream_job.machinery.core.settings import load_settings
from stream_job.machinery.job.guard.checkpoint import check_checkpoint
from stream_job.machinery.job.guard.spark_moves import spark_move
from stream_job.query import OPERATOR

from .conftest import (
    PROJECT_DIR,
    batch_expectation,
    clean_env,
    committed_batches,
    files_job,
    run_main,
    state_key_records,
    write_settings_file,
)

NEXT = os.environ.get("NEXT_SPARK_PYTHON")
needs_next = pytest.mark.skipif(not NEXT, reason="NEXT_SPARK_PYTHON names no Python of another pyspark")
# The bake's own store (its settings.yaml): the join and custom_state bakes RocksDB, the others HDFS-backed. The
# default bake moves both stores; each other bake its own (about 30 s a run with the next Spark's JVM start).
BAKED_PROVIDER = "rocksdb" if OPERATOR in ("stream_stream_join", "custom_state") else "hdfs"
UPGRADED_PROVIDERS = ["hdfs", "rocksdb"] if OPERATOR == "windowed_aggregation" else [BAKED_PROVIDER]
COUNT, JOIN, LIMIT = "stateStoreSave", "symmetricHashJoin", "globalLimit"


@pytest.mark.parametrize(
    ("written", "running", "operators", "notes", "refusals"),
    [
        ("4.2.1", "4.2.3", [COUNT], [], []),  # the same release
        (None, "4.3.0", [COUNT], [], []),  # a record of an earlier template: nothing known
        (
            "4.2.1",
            "4.3.0",
            [COUNT, JOIN],
            [
                "the checkpoint's state was last written by Spark 4.2.1, and this is Spark 4.3.0: a move proven for its"
                " operators, both ways (docs/state.md, Moving to another Spark)"
            ],
            [],
        ),
        (
            "4.3.0",
            "4.2.1",
            [JOIN],
            [
                "the checkpoint's state was last written by Spark 4.3.0, and this is Spark 4.2.1: a move proven for its"
                " operators, both ways (docs/state.md, Moving to another Spark)"
            ],
            [],
        ),
        (
            "4.3.0",
            "4.4.0",
            [COUNT],
            [
                "the checkpoint's state was last written by Spark 4.3.0, and this is Spark 4.4.0 (a move not proven"
                " between 4.3.0 and 4.4.0; Spark means an upgrade to read the state): the way back is a savepoint taken"
                " on Spark 4.3.0 before this start (python -m stream_job savepoint create PATH; `check` says this before"
                " one)"
            ],
            [],
        ),
        (
            "4.3.0",
            "4.2.1",
            [LIMIT],
            [],
            [
                "the checkpoint's state was last written by Spark 4.3.0, and this is Spark 4.2.1, an older release (not"
                " proven for globalLimit): Spark does not promise that an older release reads a newer one's state. Start"
                " it on pyspark 4.3.0 or later (pin it in pyproject.toml), or restore the savepoint taken before the"
                " upgrade"
            ],
        ),
    ],
    ids=["same-release", "not-recorded", "up-proven", "down-proven", "up-not-proven", "down-not-proven"],
)
def test_a_move_between_releases_is_said_or_refused_as_proven(written, running, operators, notes, refusals):
    assert spark_move(written, running, operators) == (notes, refusals)


def next_spark(*args: str) -> subprocess.CompletedProcess[str]:
    assert NEXT is not None
    return subprocess.run([NEXT, *args], cwd=PROJECT_DIR, capture_output=True, text=True, env=clean_env(), timeout=600)


@needs_next
@pytest.mark.operator
@pytest.mark.parametrize("provider", UPGRADED_PROVIDERS)
def test_a_checkpoint_written_here_restarts_on_the_next_spark_with_exact_output(
    spark: SparkSession, tmp_path: Path, provider: str
):
    changes = files_job(tmp_path, "parquet", provider, changelog=provider == "rocksdb", files=3)
    path = write_settings_file(tmp_path / "settings.yaml", changes)
    first = run_main("--settings", str(path))
    assert first.returncode == 0, first.stderr[-3000:]
    written = committed_batches(tmp_path / "checkpoint")
    files_job(tmp_path, "parquet", provider, files=3)  # three files more, after the first three

    second = next_spark("main.py", "--settings", str(path))

    assert second.returncode == 0, second.stderr[-3000:]
    version = next_spark("-c", "import pyspark; print(pyspark.__version__)").stdout.strip()
    said = f"the checkpoint's state was last written by Spark {pyspark.__version__}, and this is Spark {version}"
    assert said in second.stdout + second.stderr
    settings = load_settings(path)
    assertDataFrameEqual(spark.read.parquet(settings.sink.path), batch_expectation(spark, settings))
    # The record names the Spark of each start, and the first batch it ran.
    held = [(record["spark_version"], record["from_batch"]) for record in state_key_records(tmp_path / "checkpoint")]
    assert held == [(pyspark.__version__, 0), (version, written[-1] + 1)]
    # Through Spark Connect the server's release is held against the record, not this pyspark's.
    changes["spark"]["remote"] = "sc://localhost:15002"
    remote = load_settings(write_settings_file(tmp_path / "remote.yaml", changes))
    older = check_checkpoint(remote, output_seen=False, server_version="4.1.0")
    assert [line for line in older.refusals if f"by Spark {version}" in line and "Spark 4.1.0" in line], older
    assert not any("Spark 4.1.0" in line for line in check_checkpoint(remote, output_seen=False).refusals)


@needs_next
@pytest.mark.operator
def test_a_checkpoint_of_the_next_spark_restarts_here_or_is_refused_in_one_line(spark: SparkSession, tmp_path: Path):
    """Back to the older release: exact, except a join's state in format 4 (the next Spark's choice for a new
    checkpoint on RocksDB), which this Spark does not read."""
    provider = BAKED_PROVIDER
    changes = files_job(tmp_path, "parquet", provider, changelog=provider == "rocksdb", files=3)
    path = write_settings_file(tmp_path / "settings.yaml", changes)
    first = next_spark("main.py", "--settings", str(path))
    assert first.returncode == 0, first.stderr[-3000:]
    files_job(tmp_path, "parquet", provider, files=3)
    before = committed_batches(tmp_path / "checkpoint")

    second = run_main("--settings", str(path))

    if OPERATOR == "stream_stream_join" and provider == "rocksdb":
        assert second.returncode == 4
        assert "the checkpoint's join state is in format 4" in second.stderr, second.stderr
        assert committed_batches(tmp_path / "checkpoint") == before  # nothing ran
        return
    assert second.returncode == 0, second.stderr[-3000:]
    assert f"and this is Spark {pyspark.__version__}: a move proven for its operators" in second.stdout + second.stderr
    settings = load_settings(path)
    assertDataFrameEqual(spark.read.parquet(settings.sink.path), batch_expectation(spark, settings))
