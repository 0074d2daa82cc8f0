"""A stream-stream join's state format: the evicting format 4 on a new checkpoint where Spark releases it (4.3
with RocksDB), pinned by the checkpoint, and a checkpoint in it refused in one line by a Spark that does not
read it. Runs in the real-time bake, on pyspark 4.3.0 (marker `real_time`)."""

from __future__ import annotations

import json
from pathlib import Path

import pyspark
import pytest
from pyspark.sql import functions as F
from stream_job.machinery.core.checkpoint.files import read_checkpoint
from stream_job.machinery.core.confs import EVICTING_JOIN_FORMAT_FROM, JOIN_FORMAT_CONF, spark_release
from stream_job.machinery.core.settings import load_settings
from stream_job.machinery.job.guard.checkpoint import conf_drifts, join_format_refusals
from stream_job.machinery.job.spark.session import apply_confs, spark_confs

from .conftest import write_settings_file

pytestmark = [
    pytest.mark.streaming,
    pytest.mark.real_time,
    pytest.mark.skipif(
        spark_release(pyspark.__version__) < EVICTING_JOIN_FORMAT_FROM, reason="join state format 4 is Spark 4.3's"
    ),
]
ROCKSDB = {"state_store": {"provider": "rocksdb", "changelog_checkpointing": True}}


def write_sides(folder: Path) -> None:
    """Orders and payments, five each in two files a side; payment k comes 10 s after order k, order 4 unpaid."""
    for side in ("orders", "payments"):
        (folder / side).mkdir(parents=True)
    for file in range(2):
        orders = [{"id": file * 10 + k, "t": f"2026-01-01 00:0{file}:0{k}"} for k in range(5)]
        payments = [{"pid": file * 10 + k, "pt": f"2026-01-01 00:0{file}:1{k}"} for k in range(4)]
        (folder / "orders" / f"{file}.json").write_text("".join(json.dumps(row) + "\n" for row in orders))
        (folder / "payments" / f"{file}.json").write_text("".join(json.dumps(row) + "\n" for row in payments))


def run_join(spark, folder: Path) -> list[tuple[int, int]]:
    """The join of both sides, two batches, its checkpoint under folder; the pairs it wrote."""

    def side(name: str, schema: str, time: str):
        stream = spark.readStream.schema(schema).option("maxFilesPerTrigger", 1).json(str(folder / name))
        return stream.withWatermark(time, "1 minute")

    orders, payments = side("orders", "id LONG, t TIMESTAMP", "t"), side("payments", "pid LONG, pt TIMESTAMP", "pt")
    joined = orders.join(payments, F.expr("id = pid AND pt BETWEEN t AND t + interval 1 minute"))
    query = (
        joined.writeStream.format("parquet")
        .option("path", str(folder / "output"))
        .option("checkpointLocation", str(folder / "checkpoint"))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination()
    return sorted((row.id, row.pid) for row in spark.read.parquet(str(folder / "output")).collect())


def test_a_join_on_rocksdb_takes_format_4_pinned_by_its_checkpoint_and_a_spark_4_2_start_is_refused(spark, tmp_path):
    settings = load_settings(write_settings_file(tmp_path / "settings.yaml", ROCKSDB))
    confs = spark_confs(settings)
    assert confs[JOIN_FORMAT_CONF] == "4"
    write_sides(tmp_path)
    before = {key: spark.conf.get(key, None) for key in confs if key.startswith("spark.sql.")}
    try:
        apply_confs(spark, settings)  # the job's runtime confs, as the shared session takes them
        pairs = run_join(spark, tmp_path)
    finally:
        for key, value in before.items():
            spark.conf.unset(key) if value is None else spark.conf.set(key, value)
    assert pairs == [(file * 10 + k, file * 10 + k) for file in range(2) for k in range(4)]
    held = read_checkpoint(tmp_path / "checkpoint")
    assert held.pinned[JOIN_FORMAT_CONF] == "4"
    assert join_format_refusals(held) == []
    (refusal,) = join_format_refusals(held, "4.2.1")
    assert "join state is in format 4" in refusal and "this Spark 4.2.1 does not read" in refusal
    assert "pyspark 4.3 or later" in refusal
    # A checkpoint that holds another format keeps it: no drift, whatever the job asks of a new one.
    assert conf_drifts(settings, {**held.pinned, JOIN_FORMAT_CONF: "2"}) == []
    chosen = load_settings(
        write_settings_file(tmp_path / "chosen.yaml", {**ROCKSDB, "spark": {"conf": {JOIN_FORMAT_CONF: 3}}})
    )
    (drift,) = conf_drifts(chosen, held.pinned)
    assert drift.setting == f"spark.conf.{JOIN_FORMAT_CONF}" and (drift.in_settings, drift.in_checkpoint) == ("3", "4")
