"""Soak: 50 batches of the windowed aggregation, to see whether state levels off or grows.

The rate-micro-batch source moves event time on by a fixed step per batch, so 50 batches cover
500 s of event time in well under a minute of wall time. With a watermark the state must
level off near the sizing estimate; without one (the counter-test, which the settings do not
allow for this reason) it grows with every window.
"""

from __future__ import annotations

import pytest
from pyspark.sql import functions as F
from stream_job.machinery.core.settings import load_settings
from stream_job.machinery.job.endpoints.sources import read_events
from stream_job.machinery.job.run.runner import run_query
from stream_job.machinery.job.spark.session import apply_confs

from .conftest import write_settings_file

pytestmark = [pytest.mark.streaming, pytest.mark.soak]

BATCHES = 50
# The counter-test needs fewer batches to show growth.
GROWTH_BATCHES = 30
KEYS = 50
SOAK = {
    "spark": {"shuffle_partitions": 2, "platform": "oss", "master": "local[2]"},
    "state_store": {"provider": "hdfs", "changelog_checkpointing": False},
    # 1,000 events per batch, 10 s of event time apart: 100 events/s over 50 keys.
    "source": {"type": "rate", "rate": {"rows_per_batch": 1000, "advance_per_batch": "10 seconds", "keys": KEYS}},
    "sink": {"type": "parquet", "output_mode": "append"},
    "query": {"watermark": "2 minutes", "window": "1 minute", "trigger": "100 milliseconds"},
    "capacity": {"input_rows_per_second": 100, "key_cardinality": KEYS},
}


def soak_settings(tmp_path):
    changes = {**SOAK, "sink": {**SOAK["sink"], "path": str(tmp_path / "output")}}
    changes["query"] = {**SOAK["query"], "name": "soak", "checkpoint_location": str(tmp_path / "checkpoint")}
    return load_settings(write_settings_file(tmp_path / "settings.yaml", changes))


def state_rows(query) -> list[int]:
    return [p["stateOperators"][0]["numRowsTotal"] for p in query.recentProgress if p["stateOperators"]]


def test_state_levels_off_near_the_estimate_with_a_watermark(spark, tmp_path):
    settings = soak_settings(tmp_path)
    estimate = settings.sizing()
    # 3 open windows (2-minute watermark / 1-minute window + 1) x 50 keys.
    assert estimate.rows == 150
    apply_confs(spark, settings)

    query = run_query(spark, settings, max_batches=BATCHES)

    rows = state_rows(query)
    assert len(rows) >= BATCHES
    settled = rows[-36:]  # after the first watermark has passed
    # Level: no growth from the first half of the settled stretch to the second.
    assert max(settled[18:]) <= max(settled[:18])
    # Near the estimate: between the open windows and one more, just opened.
    assert all(estimate.rows <= row <= estimate.rows + KEYS for row in settled), settled


def test_without_a_watermark_state_grows_with_every_window(spark, tmp_path):
    """The same count with no watermark (what settings refuse): Spark can never drop a window."""
    settings = soak_settings(tmp_path)
    apply_confs(spark, settings)
    counts = read_events(spark, settings).groupBy(F.window("event_time", "1 minute"), "key").count()
    query = (
        counts.writeStream.format("noop")
        .outputMode("update")
        .option("checkpointLocation", str(tmp_path / "no-watermark"))
        .trigger(processingTime="100 milliseconds")
        .start()
    )
    try:
        while len(state_rows(query)) < GROWTH_BATCHES:
            query.awaitTermination(0.5)
    finally:
        query.stop()

    rows = state_rows(query)[:GROWTH_BATCHES]
    # One new window of 50 keys every 6 batches (60 s of event time), none ever removed: 300 s, 5 windows.
    assert rows == sorted(rows)
    assert rows[-1] == KEYS * 5 > settings.sizing().rows + KEYS  # past anything the watermarked run reached
