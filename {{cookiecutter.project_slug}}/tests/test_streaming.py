"""Real streaming runs with real checkpoints: exact output, and a restart loses and repeats nothing.

The input is Spark's rate-micro-batch source, which is replayable and deterministic: batch b holds
values 12b .. 12b+11, all stamped b minutes after the epoch, spread over keys key-0, key-1, key-2
(four rows each). With a one-minute window and a one-minute watermark, batch b runs with the
watermark (b-2) minutes (the previous batch's event time less the delay), so after batch B the
windows starting at minutes 0 .. B-3 are closed, written and evicted, each key with exactly 4 events.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from datetime import datetime, timedelta
from pathlib import Path

import pytest
from pyspark.testing import assertDataFrameEqual

from {{ cookiecutter.package_name }}.job import run_query
from {{ cookiecutter.package_name }}.session import PROVIDER_CLASSES, apply_confs
from {{ cookiecutter.package_name }}.settings import ENV_PREFIX

from .conftest import PROJECT_DIR, run_python

pytestmark = pytest.mark.streaming

ROWS_PER_BATCH, KEYS = 12, 3
PROVIDERS = {
    "hdfs": {"provider": "hdfs", "changelog_checkpointing": False},
    "rocksdb": {"provider": "rocksdb", "changelog_checkpointing": False},
    "rocksdb+changelog": {"provider": "rocksdb", "changelog_checkpointing": True},
}
EPOCH = datetime(1970, 1, 1)


def stream_changes(tmp_path: Path, store: dict) -> dict:
    return {
        "spark": {"shuffle_partitions": 2, "platform": "oss"},
        "state_store": store,
        "source": {
            "rate": {
                "rows_per_batch": ROWS_PER_BATCH,
                "advance_per_batch": "1 minute",
                "start_timestamp_ms": 0,
                "keys": KEYS,
                "num_partitions": 1,
            }
        },
        "sink": {"type": "parquet", "output_mode": "append", "path": str(tmp_path / "output")},
        "query": {
            "name": f"test_{tmp_path.name}",
            "watermark": "1 minute",
            "window": "1 minute",
            "checkpoint_location": str(tmp_path / "checkpoint"),
            "trigger": "1 second",
        },
    }


def clean_env() -> dict[str, str]:
    """This environment without the developer's own settings overrides."""
    return {name: value for name, value in os.environ.items() if not name.upper().startswith(ENV_PREFIX)}


def last_committed_batch(checkpoint: Path) -> int:
    return max(int(path.name) for path in (checkpoint / "commits").iterdir() if path.name.isdigit())


def expected_rows(spark, last_batch: int):
    rows = [
        (EPOCH + timedelta(minutes=start), EPOCH + timedelta(minutes=start + 1), f"key-{key}", ROWS_PER_BATCH // KEYS)
        for start in range(last_batch - 2)
        for key in range(KEYS)
    ]
    return spark.createDataFrame(rows, "window_start timestamp, window_end timestamp, key string, events long")


@pytest.mark.parametrize("store", PROVIDERS.values(), ids=PROVIDERS.keys())
def test_exact_output_and_restart(spark, make_settings, tmp_path, store):
    settings = make_settings(stream_changes(tmp_path, store))
    apply_confs(spark, settings)
    checkpoint, output = Path(settings.query.checkpoint_location), settings.sink.path

    query = run_query(spark, settings, max_batches=5)
    assert query.exception() is None
    first = last_committed_batch(checkpoint)
    assert first >= 4
    assertDataFrameEqual(spark.read.parquet(output), expected_rows(spark, first))
    # The provider really is the one settings asked for: Spark pinned it into the checkpoint.
    offsets = json.loads((checkpoint / "offsets" / "0").read_text().splitlines()[1])
    assert offsets["conf"]["spark.sql.streaming.stateStore.providerClass"] == PROVIDER_CLASSES["oss"][store["provider"]]
    # Batch B evicts the windows it writes; the three newest (minutes B-2 .. B) stay, 3 keys each.
    assert query.lastProgress["stateOperators"][0]["numRowsTotal"] == 3 * KEYS

    # Restart on the same checkpoint: it continues where it stopped, nothing lost, nothing twice.
    query = run_query(spark, settings, max_batches=3)
    assert query.exception() is None
    second = last_committed_batch(checkpoint)
    assert second >= first + 3
    assertDataFrameEqual(spark.read.parquet(output), expected_rows(spark, second))


def test_spark_submit_main_py(spark, write_settings, tmp_path):
    """The real entry point in a real separate process: spark-submit main.py --max-batches N."""
    path = write_settings(stream_changes(tmp_path, PROVIDERS["rocksdb+changelog"]))
    spark_submit = Path(sys.executable).parent / "spark-submit"
    env = clean_env()
    # spark-submit finds Spark and runs main.py with the Python on PATH: make it this one.
    env["PATH"] = f"{spark_submit.parent}{os.pathsep}{env.get('PATH', '')}"
    env["PYSPARK_PYTHON"] = env["PYSPARK_DRIVER_PYTHON"] = sys.executable
    result = subprocess.run(
        [str(spark_submit), "--master", "local[2]", "main.py", "--settings", str(path), "--max-batches", "5"],
        cwd=PROJECT_DIR,
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert "on local[2], state store rocksdb with changelog checkpointing, 2 shuffle partitions" in result.stdout
    progress = [line for line in result.stdout.splitlines() if line.startswith("batch ")]
    assert len(progress) >= 5
    assert progress[0].startswith(f"batch 0: {ROWS_PER_BATCH} input rows")
    assert "state" in progress[0] and "took" in progress[0]
    committed = last_committed_batch(tmp_path / "checkpoint")
    assert committed >= 4
    assertDataFrameEqual(spark.read.parquet(str(tmp_path / "output")), expected_rows(spark, committed))


def test_python_main_py_uses_the_settings_master_and_console_sink(write_settings, tmp_path):
    changes = stream_changes(tmp_path, PROVIDERS["hdfs"])
    changes["spark"]["master"] = "local[1]"
    changes["sink"] = {"type": "console", "output_mode": "update"}
    path = write_settings(changes)
    result = run_python("main.py", "--settings", str(path), "--max-batches", "2", env=clean_env())
    assert result.returncode == 0, result.stderr[-3000:]
    assert "on local[1], state store hdfs, 2 shuffle partitions" in result.stdout
    # update mode prints every changed window: batch 0 holds minute 0 with 4 events per key.
    assert "|1970-01-01 00:00:00|1970-01-01 00:01:00|key-0|4     |" in result.stdout
    assert last_committed_batch(tmp_path / "checkpoint") >= 1
