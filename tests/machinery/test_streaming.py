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
from stream_job.machinery.core.confs import PROVIDER_CLASSES
from stream_job.machinery.job.endpoints.output import read_output
from stream_job.machinery.job.run.runner import run_query
from stream_job.machinery.job.spark.session import apply_confs
from stream_job.query import EVENT_SCHEMA

from .conftest import (
    ANY_PROVIDER,
    LANDED,
    PROJECT_DIR,
    batch_expectation,
    clean_env,
    committed_batches,
    expected_row_count,
    files_job,
    run_python,
)

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
            "type": "rate",
            "rate": {
                "rows_per_batch": ROWS_PER_BATCH,
                "advance_per_batch": "1 minute",
                "start_timestamp_ms": 0,
                "keys": KEYS,
                "num_partitions": 1,
            },
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


def last_committed_batch(checkpoint: Path) -> int:
    return committed_batches(checkpoint)[-1]


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
    assert "on local[2], rate -> parquet, state store rocksdb with changelog checkpointing, 2 shuffle partitions" in (
        result.stdout
    )
    progress = [line for line in result.stdout.splitlines() if line.startswith("batch ")]
    assert len(progress) >= 5
    assert progress[0].startswith(f"batch 0: {ROWS_PER_BATCH} input rows")
    assert "state" in progress[0] and "took" in progress[0]
    committed = last_committed_batch(tmp_path / "checkpoint")
    assert committed >= 4
    assertDataFrameEqual(spark.read.parquet(str(tmp_path / "output")), expected_rows(spark, committed))


def test_python_main_py_uses_the_settings_master_console_sink_and_local_partitions(write_settings, tmp_path):
    changes = stream_changes(tmp_path, PROVIDERS["hdfs"])
    changes["spark"].update(master="local[1]", shuffle_partitions=7)
    changes["sink"] = {"type": "console", "output_mode": "update"}
    path = write_settings(changes)
    result = run_python("main.py", "--settings", str(path), "--max-batches", "2", "--local-partitions", env=clean_env())
    assert result.returncode == 0, result.stderr[-3000:]
    # --local-partitions (make demo): 2 per core of the local master, said, used and pinned.
    assert "partitions: 2 shuffle partitions (2 per core of local[1]) in place of spark.shuffle_partitions 7" in (
        result.stdout
    )
    assert "on local[1], rate -> console, state store hdfs, 2 shuffle partitions" in result.stdout
    offsets = json.loads((tmp_path / "checkpoint" / "offsets" / "0").read_text().splitlines()[1])
    assert offsets["conf"]["spark.sql.shuffle.partitions"] == "2"
    # update mode prints every changed window: batch 0 holds minute 0 with 4 events per key.
    assert "|1970-01-01 00:00:00|1970-01-01 00:01:00|key-0|4     |" in result.stdout
    assert last_committed_batch(tmp_path / "checkpoint") >= 1


# As for the crash tests: RocksDB in every operator's bake, the HDFS-backed store in the default one.
# Every operator's bake replays on RocksDB into both sinks; the default bake on HDFS into parquet
# (delta on HDFS is secondary: the delta sink's idempotence does not depend on the store).
REPLAY_CASES = [
    pytest.param("parquet", "hdfs", id="parquet-hdfs"),
    pytest.param("parquet", "rocksdb", marks=pytest.mark.operator, id="parquet-rocksdb"),
    pytest.param("delta", "hdfs", marks=pytest.mark.secondary, id="delta-hdfs"),
    pytest.param("delta", "rocksdb", marks=pytest.mark.operator, id="delta-rocksdb"),
]


@pytest.mark.parametrize(("sink", "provider"), REPLAY_CASES)
def test_files_source_replayed_batch_is_written_once(spark, make_settings, tmp_path, sink, provider):
    """A crash after the sink wrote a batch but before Spark committed it: the restart replays the batch.

    Removing the batch's commit file leaves the checkpoint exactly as that crash would. The parquet
    sink finds the batch in its _spark_metadata log, the deltalake writer finds its transaction
    in the table, and neither writes it again.
    """
    settings = make_settings(files_job(tmp_path, sink, provider, files=5))
    apply_confs(spark, settings)
    checkpoint = Path(settings.query.checkpoint_location)

    assert run_query(spark, settings).exception() is None
    expected = batch_expectation(spark, settings)
    assertDataFrameEqual(read_output(spark, settings.sink), expected)
    # Five files in five batches, then the batch that moves the watermark past the last windows.
    assert committed_batches(checkpoint) == [0, 1, 2, 3, 4, 5]
    assert expected.count() == expected_row_count(settings.query.operator, files=5)

    (checkpoint / "commits" / "5").unlink()
    (checkpoint / "commits" / ".5.crc").unlink(missing_ok=True)
    assert run_query(spark, settings).exception() is None
    assert committed_batches(checkpoint) == [0, 1, 2, 3, 4, 5]  # batch 5 ran again and committed
    assertDataFrameEqual(read_output(spark, settings.sink), expected)


def test_files_source_archives_committed_files(spark, make_settings, tmp_path):
    changes = files_job(tmp_path, "parquet", ANY_PROVIDER, files=3)
    archive = tmp_path / "archive"
    changes["source"]["files"] |= {"clean_source": "archive", "archive_dir": str(archive)}
    settings = make_settings(changes)
    apply_confs(spark, settings)
    landing = Path(settings.source.files.path)
    names = sorted(path.name for path in landing.iterdir())
    expected = batch_expectation(spark, settings).collect()  # read now: the run moves the files away

    assert run_query(spark, settings).exception() is None
    assertDataFrameEqual(read_output(spark, settings.sink), expected)
    assert len(expected) == expected_row_count(settings.query.operator, files=3)
    # Spark moves each committed file under the archive directory, keeping its full path.
    assert sorted(path.name for path in landing.iterdir()) == []
    assert sorted(path.name for path in (archive / landing.relative_to("/")).iterdir()) == names


@pytest.mark.parametrize("file_format", ["csv", "parquet"])
def test_files_source_reads_csv_and_parquet(spark, make_settings, tmp_path, file_format):
    changes = files_job(tmp_path, "parquet", ANY_PROVIDER, files=3)
    json_settings = make_settings(changes)
    landing = tmp_path / f"landing-{file_format}"
    landing.mkdir()
    # The same events as the JSON files, one file for each, arriving in the same order.
    for index, json_file in enumerate(sorted(Path(json_settings.source.files.path).iterdir())):
        staging = tmp_path / f"staging-{index}"
        events = spark.read.schema(EVENT_SCHEMA).json(str(json_file)).coalesce(1)
        events.write.format(file_format).option("header", "true").save(str(staging))
        (part,) = [path for path in staging.iterdir() if path.name.startswith("part-")]
        target = part.rename(landing / f"events-{index:05d}.{file_format}")
        os.utime(target, (LANDED + index, LANDED + index))
    changes["source"]["files"] |= {"path": str(landing), "format": file_format}
    settings = make_settings(changes)
    apply_confs(spark, settings)

    assert run_query(spark, settings).exception() is None
    expected = batch_expectation(spark, json_settings)
    assert expected.count() == expected_row_count(settings.query.operator, files=3)
    assertDataFrameEqual(read_output(spark, settings.sink), expected)
