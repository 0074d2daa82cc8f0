"""The deltalake writer on a real Delta table: a replayed batch id is not written twice."""

from __future__ import annotations

import json
import pickle
from datetime import datetime

import pytest
from deltalake import DeltaTable
from pyspark.testing import assertDataFrameEqual
from stream_job.machinery.job.endpoints.delta import DeltaLakeBatchWriter, committed_version

from .conftest import clean_env, run_python

SCHEMA = "window_start timestamp, key string, events long"


def rows(spark, *values):
    return spark.createDataFrame([(datetime(2026, 1, 1, 0, minute), key, n) for minute, key, n in values], SCHEMA)


def writer_of(tmp_path, path, query_id):
    """The writer of a query whose checkpoint holds `query_id`, as Spark writes it before the first batch."""
    checkpoint = tmp_path / f"checkpoint-{query_id}"
    checkpoint.mkdir()
    (checkpoint / "metadata").write_text(json.dumps({"id": query_id}) + "\n")
    return DeltaLakeBatchWriter(path, str(checkpoint))


def table_rows(spark, path):
    return spark.createDataFrame(DeltaTable(path).to_pyarrow_table())


def test_replayed_batch_is_skipped(spark, tmp_path):
    path = str(tmp_path / "table")
    writer = writer_of(tmp_path, path, "query-1")
    assert committed_version(path, "query-1") == -1  # no table yet

    writer(rows(spark, (0, "a", 3), (0, "b", 1)), 0)
    writer(rows(spark, (0, "a", 3), (0, "b", 1)), 0)  # the same batch again, as after a crash
    writer(rows(spark, (1, "a", 2)), 1)

    assertDataFrameEqual(table_rows(spark, path), rows(spark, (0, "a", 3), (0, "b", 1), (1, "a", 2)))
    assert writer.skipped_batches == [0]
    assert committed_version(path, "query-1") == 1
    assert DeltaTable(path).version() == 1  # two commits: 0 and 1


def test_another_query_writes_its_own_batch_ids(spark, tmp_path):
    path = str(tmp_path / "table")
    first, second = writer_of(tmp_path, path, "query-1"), writer_of(tmp_path, path, "query-2")
    first(rows(spark, (0, "a", 1)), 0)
    second(rows(spark, (0, "b", 1)), 0)  # batch 0 of another query is new data, not a replay
    assertDataFrameEqual(table_rows(spark, path), rows(spark, (0, "a", 1), (0, "b", 1)))
    assert second.skipped_batches == []


def test_an_empty_batch_is_recorded_without_a_data_file(spark, tmp_path):
    """As Spark's own Delta sink does: the table records every batch, so a start can tell one it lost."""
    path = str(tmp_path / "table")
    # Spark Connect pickles the writer at start() and calls the copy in its server's Python.
    writer = pickle.loads(pickle.dumps(writer_of(tmp_path, path, "query-1")))
    writer(rows(spark), 0)  # the first batch, empty: the table is made, with the batch's columns
    writer(rows(spark, (0, "a", 1)), 1)
    writer(rows(spark), 2)
    table = DeltaTable(path)
    assert (table.version(), committed_version(path, "query-1"), len(table.file_uris())) == (2, 2, 1)
    assertDataFrameEqual(table_rows(spark, path), rows(spark, (0, "a", 1)))


def test_missing_deltalake_package_exits_3_before_spark_starts(write_settings, tmp_path):
    hidden = tmp_path / "hide-deltalake"
    hidden.mkdir()
    (hidden / "deltalake.py").write_text("raise ImportError('hidden for this test')\n")
    checkpoint = tmp_path / "checkpoint"
    path = write_settings(
        {
            "source": {"type": "rate"},
            "sink": {"type": "delta", "delta": {"writer": "deltalake"}},
            "query": {"checkpoint_location": str(checkpoint)},
        }
    )
    result = run_python("main.py", "--settings", str(path), env=clean_env() | {"PYTHONPATH": str(hidden)})
    assert result.returncode == 3
    assert result.stderr.splitlines() == [
        "package error: sink.delta.writer is deltalake but the deltalake package is not installed; pip install deltalake"
    ]
    assert not checkpoint.exists()


def test_show_output_reads_the_delta_table(spark, write_settings, tmp_path):
    table = str(tmp_path / "output")
    writer = writer_of(tmp_path, table, "query-1")
    writer(rows(spark, (0, "a", 3), (1, "b", 1)), 0)
    path = write_settings({"sink": {"type": "delta", "path": table, "delta": {"writer": "deltalake"}}})
    result = run_python("-m", "stream_job", "show-output", "--settings", str(path), env=clean_env())
    assert result.returncode == 0, result.stderr[-2000:]
    assert f"2 rows in {table}" in result.stdout
    assert "|2026-01-01 00:00:00|a  |3     |" in result.stdout


def test_a_table_deleted_while_the_job_runs_is_not_made_again_with_only_the_later_batches(spark, tmp_path):
    import shutil

    from stream_job.machinery.core.delta_merge import DeltaSinkRefused

    path = str(tmp_path / "table")
    writer = writer_of(tmp_path, path, "query-1")
    writer(rows(spark, (0, "a", 3)), 0)
    shutil.rmtree(path)
    with pytest.raises(DeltaSinkRefused) as refused:
        writer(rows(spark, (1, "a", 2)), 1)
    assert refused.value.line.startswith(
        f"sink.path {path}: the Delta table this job wrote to is gone (deleted or moved while the job ran); nothing"
        " of batch 1 was written, and a new table would hold only what follows. Put the table back and start again"
    )
    assert not (tmp_path / "table").exists()
