"""Each stateful operator on a real stream of landing files: duplicates, late data, state that empties.

Files arrive one per micro-batch. A batch runs with the watermark the previous batch left behind
(the newest event time seen so far less the delay), which is what makes "late" exact below.
"""

from __future__ import annotations

import json
import os
from datetime import datetime
from pathlib import Path

import pytest
from pyspark.testing import assertDataFrameEqual
from stream_job.machinery.job.endpoints.output import read_output
from stream_job.machinery.job.run.runner import run_query
from stream_job.machinery.job.spark.session import apply_confs
from stream_job.query import EVENT_SCHEMA

from .conftest import BAKED_OPERATOR, LANDED, deep_merge, operator_changes

# Each test runs in the bake of its operator (a bake holds one operator's query).
pytestmark = [pytest.mark.streaming, pytest.mark.operator]


def only(operator: str) -> pytest.MarkDecorator:
    return pytest.mark.skipif(operator != BAKED_OPERATOR, reason=f"the {operator} bake runs it")


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
        os.utime(path, (LANDED + index, LANDED + index))


def run_changes(tmp_path: Path, operator: str, provider: str, watermark: str) -> dict:
    changes = {
        "spark": {"shuffle_partitions": 2, "platform": "oss"},
        "state_store": {"provider": provider, "changelog_checkpointing": False},
        "source": {"type": "files", "files": {"path": str(tmp_path / "landing"), "max_files_per_trigger": 1}},
        "sink": {"type": "parquet", "output_mode": "append", "path": str(tmp_path / "output")},
        "query": {
            "name": f"test_{tmp_path.name}",
            "watermark": watermark,
            "checkpoint_location": str(tmp_path / "checkpoint"),
            "trigger": "available_now",
        },
    }
    return deep_merge(changes, operator_changes(operator, tmp_path / "landing-join"))


def state_rows_by_batch(query) -> list[int]:
    return [progress["stateOperators"][0]["numRowsTotal"] for progress in query.recentProgress]


def dropped_by_watermark(query) -> list[int]:
    return [progress["stateOperators"][0]["numRowsDroppedByWatermark"] for progress in query.recentProgress]


@only("deduplication")
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
    settings = make_settings(run_changes(tmp_path, "deduplication", provider, "2 minutes"))
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
    assert dropped_by_watermark(query) == [0, 0, 0, 1, 0]


@only("stream_stream_join")
@pytest.mark.parametrize("provider", ["hdfs", "rocksdb"])
@pytest.mark.parametrize("join_type", ["inner", "left_outer"])
def test_stream_stream_join_matches_within_the_range(spark, make_settings, tmp_path, provider, join_type):
    # Orders (source) and payments (join_source), one file of each per batch; a payment matches an
    # order of the same key from 0 to 5 minutes after it. Watermark 2 minutes on both inputs, and the
    # join follows the slower of the two.
    land(
        tmp_path / "landing",
        [
            [("o1", "k1", "00:00:00"), ("o2", "k2", "00:01:00")],
            [("o3", "k3", "00:10:00")],
            # batch 2, watermark 00:08: o4 is late -> not kept; o5 will never be paid in range.
            [("o4", "k4", "00:02:00"), ("o5", "k5", "00:15:00")],
            [("o6", "k6", "00:20:00")],
        ],
    )
    land(
        tmp_path / "landing-join",
        [
            [("p1", "k1", "00:03:00")],  # 3 minutes after o1: a match
            [("p2", "k2", "00:09:00"), ("p3", "k3", "00:12:00")],  # p2 8 minutes after o2: no match
            [("p5", "k5", "00:30:00")],  # 15 minutes after o5: no match
            # batch 3, watermark 00:13: p4 is late, and o4 was not kept -> no match.
            [("p4", "k4", "00:04:00"), ("p6", "k6", "00:22:00")],
        ],
    )
    changes = run_changes(tmp_path, "stream_stream_join", provider, "2 minutes")
    changes["query"]["join"] = {"type": join_type, "range": "5 minutes"}
    settings = make_settings(changes)
    apply_confs(spark, settings)

    query = run_query(spark, settings)
    assert query.exception() is None
    matches = [("o1", "k1", "00:00:00", "p1", "00:03:00"), ("o3", "k3", "00:10:00", "p3", "00:12:00")]
    matches.append(("o6", "k6", "00:20:00", "p6", "00:22:00"))
    # left_outer: o2 is emitted alone once the watermark (00:08 in batch 2) passes its time plus the
    # range (00:06); the late o4 cannot be kept to wait for a payment, so it is emitted alone at
    # once. o5 (00:20) still waits when the run ends with the watermark at 00:18.
    unmatched = [("o2", "k2", "00:01:00", None, None), ("o4", "k4", "00:02:00", None, None)]
    if join_type == "inner":
        unmatched = []
    expected = spark.createDataFrame(
        [(o, k, _ts(t), p, _ts(pt) if pt else None) for o, k, t, p, pt in matches + unmatched],
        "event_id string, key string, event_time timestamp, join_event_id string, join_event_time timestamp",
    )
    assertDataFrameEqual(read_output(spark, settings.sink), expected)
    # State rows of both sides: they grow with each batch and fall as the watermark passes them.
    # Rows of both sides: batch 0 keeps o1 o2 p1; batch 1 adds o3 p2 p3. Batch 2 (watermark 00:08)
    # adds o5 p5 and evicts the orders before 00:03 (o1 o2: no payment can still match them) and
    # the payments before 00:08 (p1). Batch 3 (00:13) adds o6 p6, drops the late p4, evicts p2 p3.
    # The closing batch (00:18) evicts o3.
    assert state_rows_by_batch(query) == [3, 6, 5, 5, 4]
    assert dropped_by_watermark(query) == [0, 0, 0, 1, 0]


@only("custom_state")
def test_custom_state_sessions_close_after_inactivity(spark, make_settings, tmp_path):
    from stream_job.sessions import OUTPUT_SCHEMA

    land(
        tmp_path / "landing",
        [
            [("e1", "u1", "00:00:00"), ("e2", "u1", "00:01:00"), ("e3", "u2", "00:02:00")],
            # batch 1, watermark 00:00: u2 returns 8 minutes later, past the 5-minute timeout -> its
            # first session is emitted at once, and a new one opens.
            [("e4", "u1", "00:03:00"), ("e5", "u2", "00:10:00"), ("e6", "u3", "00:11:00")],
            # batch 2, watermark 00:09: e7 is late -> dropped. u1's timer (00:03 + 5 min) fires.
            [("e7", "u1", "00:05:00"), ("e8", "u3", "00:12:00")],
            # batch 3, watermark 00:10; the closing batch moves it to 00:28 and u2's and u3's timers fire.
            [("e9", "u4", "00:30:00")],
        ],
    )
    changes = run_changes(tmp_path, "custom_state", "rocksdb", "2 minutes")
    changes["query"]["custom_state"] = {"session_timeout": "5 minutes", "recent_events": 2}
    settings = make_settings(changes)
    apply_confs(spark, settings)

    query = run_query(spark, settings)
    assert query.exception() is None
    expected = spark.createDataFrame(
        [
            ("u2", _ts("00:02:00"), _ts("00:02:00"), 1, ["e3"]),
            ("u1", _ts("00:00:00"), _ts("00:03:00"), 3, ["e2", "e4"]),
            ("u2", _ts("00:10:00"), _ts("00:10:00"), 1, ["e5"]),
            ("u3", _ts("00:11:00"), _ts("00:12:00"), 2, ["e6", "e8"]),
        ],
        OUTPUT_SCHEMA,
    )
    assertDataFrameEqual(read_output(spark, settings.sink), expected)
    # One state row per open session: u1 u2; u1 u2' u3; u1 evicted by its timer (u2' u3); + u4;
    # the closing batch's timers evict u2' and u3. The processor drops the late e7 itself, so
    # Spark's own late-row count stays 0.
    assert state_rows_by_batch(query) == [2, 3, 2, 3, 1]
    assert dropped_by_watermark(query) == [0, 0, 0, 0, 0]


def _ts(clock: str):
    return datetime.fromisoformat(f"2026-01-01T{clock}")
