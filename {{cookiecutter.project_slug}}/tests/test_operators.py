"""Each stateful operator on a real stream of landing files: duplicates, late data, state that empties.

Files arrive one per micro-batch. A batch runs with the watermark the previous batch left behind
(the newest event time seen so far less the delay), which is what makes "late" exact below.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from pyspark.testing import assertDataFrameEqual

from {{ cookiecutter.package_name }}.job import run_query
from {{ cookiecutter.package_name }}.output import read_output
from {{ cookiecutter.package_name }}.schema import EVENT_SCHEMA
from {{ cookiecutter.package_name }}.session import apply_confs

pytestmark = pytest.mark.streaming


def land(directory: Path, files: list[list[tuple[str, str, str]]]) -> None:
    """Write one JSON file per list of (event_id, key, "HH:MM:SS"), arriving in list order."""
    directory.mkdir(parents=True)
    for index, events in enumerate(files):
        path = directory / f"events-{index:05d}.json"
        lines = [
            json.dumps({"event_id": event_id, "key": key, "event_time": f"2026-01-01T{clock}Z"})
            for event_id, key, clock in events
        ]
        path.write_text("\n".join(lines) + "\n")
        os.utime(path, (1_000_000 + index, 1_000_000 + index))


def operator_changes(tmp_path: Path, operator: str, provider: str, watermark: str) -> dict:
    return {
        "spark": {"shuffle_partitions": 2, "platform": "oss"},
        "state_store": {"provider": provider, "changelog_checkpointing": False},
        "source": {"type": "files", "files": {"path": str(tmp_path / "landing"), "max_files_per_trigger": 1}},
        "sink": {"type": "parquet", "output_mode": "append", "path": str(tmp_path / "output")},
        "query": {
            "name": f"test_{tmp_path.name}",
            "operator": operator,
            "watermark": watermark,
            "checkpoint_location": str(tmp_path / "checkpoint"),
            "trigger": "available_now",
        },
    }


def state_rows_by_batch(query) -> list[int]:
    return [progress["stateOperators"][0]["numRowsTotal"] for progress in query.recentProgress]


@pytest.mark.parametrize("provider", ["hdfs", "rocksdb"])
def test_deduplication_drops_repeats_within_the_watermark(spark, make_settings, tmp_path, provider):
    land(
        tmp_path / "landing",
        [
            # batch 0 (no watermark yet): e1 twice in one file -> once.
            [("e1", "a", "00:00:00"), ("e2", "b", "00:01:00"), ("e1", "a", "00:00:00")],
            # batch 1, watermark 23:59 the day before: e2 repeats while remembered -> dropped; e3 new.
            [("e2", "b", "00:01:00"), ("e3", "a", "00:05:00")],
            # batch 2, watermark 00:03: e4 is behind it, but by less than the delay -> new, kept.
            [("e4", "b", "00:02:00"), ("e5", "b", "00:10:00")],
            # batch 3, watermark 00:08: e1 (00:00 + 2 minutes < 00:08) is too late -> dropped.
            [("e1", "a", "00:00:00"), ("e6", "a", "00:11:00")],
        ],
    )
    settings = make_settings(operator_changes(tmp_path, "deduplication", provider, "2 minutes"))
    apply_confs(spark, settings)

    query = run_query(spark, settings)
    assert query.exception() is None
    expected = spark.createDataFrame(
        [
            ("e1", "a", _ts("00:00:00")),
            ("e2", "b", _ts("00:01:00")),
            ("e3", "a", _ts("00:05:00")),
            ("e4", "b", _ts("00:02:00")),
            ("e5", "b", _ts("00:10:00")),
            ("e6", "a", _ts("00:11:00")),
        ],
        EVENT_SCHEMA,
    )
    assertDataFrameEqual(read_output(spark, settings.sink), expected)
    # One state row per event id, until the watermark passes its time plus the delay; the closing
    # batch (watermark 00:09) has evicted everything but e5 and e6.
    assert state_rows_by_batch(query) == [2, 3, 3, 2, 2]
    assert [p["stateOperators"][0]["numRowsDroppedByWatermark"] for p in query.recentProgress] == [0, 0, 0, 1, 0]


def _ts(clock: str):
    from datetime import datetime

    return datetime.fromisoformat(f"2026-01-01T{clock}")
