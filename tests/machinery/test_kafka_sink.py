"""The Kafka sink against a real broker: what it guarantees across a SIGKILL, and its bad input.

Spark's Kafka sink is at least once: a batch the checkpoint had not committed when the job died is
produced again at the restart, the same rows. Each record's key is its key columns as JSON and its
value the whole row as JSON, so a repeat is a whole record with a key seen before and the same
value, which a compacted topic or a consumer keeping the last value per key reads once.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from pyspark.sql import functions as F
from pyspark.testing import assertDataFrameEqual
from stream_job.machinery.job.endpoints.output import read_output
from stream_job.machinery.operations import local_kafka

from .conftest import (
    BAKED_OPERATOR,
    DEFAULT_OPERATOR,
    batch_expectation,
    committed_batches,
    create_topic,
    deep_merge,
    kafka_job,
    run_main,
)
from .test_exactly_once import crash_mid_batch

pytestmark = [
    pytest.mark.streaming,
    pytest.mark.kafka,
    pytest.mark.skipif(BAKED_OPERATOR != DEFAULT_OPERATOR, reason="a sink does not depend on the operator"),
]

KEY_COLUMNS = ["window_start", "key"]


def kafka_sink(broker: local_kafka.Broker, topic: str, create: bool = True, **kafka: object) -> dict:
    if create:
        create_topic(broker.bootstrap, topic)
    sink = {"bootstrap_servers": broker.bootstrap, "topic": topic, "key_columns": KEY_COLUMNS, **kafka}
    return {"sink": {"type": "kafka", "kafka": sink}}


def records(spark, bootstrap: str, topic: str):
    raw = spark.read.format("kafka").option("kafka.bootstrap.servers", bootstrap).option("subscribe", topic)
    return raw.load().select(F.col("key").cast("string"), F.col("value").cast("string"))


@pytest.mark.faults
def test_a_sigkill_mid_batch_loses_nothing_and_repeats_only_whole_records(
    spark, kafka_broker, make_settings, write_settings, tmp_path
):
    topic = f"{tmp_path.name}-results"
    changes = deep_merge(kafka_job(tmp_path, kafka_broker, "parquet", "rocksdb"), kafka_sink(kafka_broker, topic))
    path = write_settings(changes)
    settings = make_settings(changes)
    checkpoint = Path(settings.query.checkpoint_location)
    in_flight = crash_mid_batch(path, checkpoint, tmp_path / "first-run.log")

    restart = run_main("--settings", str(path))
    assert restart.returncode == 0, restart.stderr[-3000:]
    assert f"batch {in_flight}:" in restart.stdout
    assert committed_batches(checkpoint) == list(range(7))

    expected = batch_expectation(spark, settings)
    written = read_output(spark, settings.sink, expected.schema)
    # Every expected row, and no other: a replayed batch only repeats rows.
    assertDataFrameEqual(written.distinct(), expected)
    # A key is always the same value: the key columns' JSON of it, and a repeat the whole record again.
    produced = records(spark, kafka_broker.bootstrap, topic).collect()
    assert len(produced) >= expected.count()
    values_per_key: dict[str, set[str]] = {}
    for record in produced:
        values_per_key.setdefault(record.key, set()).add(record.value)
        value = json.loads(record.value)
        assert json.loads(record.key) == {column: value[column] for column in KEY_COLUMNS}
    assert all(len(values) == 1 for values in values_per_key.values()), values_per_key
    assert len(values_per_key) == expected.count()


def test_a_sink_topic_or_key_column_that_is_not_there_is_one_line_and_starts_nothing(
    kafka_broker, write_settings, tmp_path
):
    base = kafka_job(tmp_path, kafka_broker, "parquet", "hdfs", files=1)
    missing = f"{tmp_path.name}-no-such-topic"
    run = run_main("--settings", str(write_settings(deep_merge(base, kafka_sink(kafka_broker, missing, create=False)))))
    assert run.returncode == 2, run.stderr
    (line,) = run.stderr.strip().splitlines()
    assert line.startswith(f"kafka error: sink.kafka.topic {missing}: no topic {missing} on {kafka_broker.bootstrap}")
    assert line.endswith("; create it, or fix the name")
    assert not committed_batches(tmp_path / "checkpoint")

    wrong_key = kafka_sink(kafka_broker, f"{tmp_path.name}-results", key_columns=["window_start", "user"])
    run = run_main("--settings", str(write_settings(deep_merge(base, wrong_key))))
    assert run.returncode == 2, run.stderr
    assert run.stderr.strip() == (
        "settings error: sink.kafka.key_columns ['window_start', 'user']: user not among the query's output columns"
        " (window_start, window_end, key, events); name the columns that identify a result row"
    )
    assert not committed_batches(tmp_path / "checkpoint")
