"""A quiet input, handled (query.quiet_input_after): heartbeats move its watermark with the clock.

The driver's clock (job/run/beats.py) is fed Spark's own progress JSON and idle timestamps, so its unit
tests need no query. The end-to-end tests run the bake's own query on events of the wall clock: a windowed
count whose landing folder stops getting files brings out its last windows, exact; a join whose second input
stops keeps its state bounded; a checkpoint started with heartbeats is refused without them, in one line.
"""

from __future__ import annotations

import io
import json
import math
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from pyspark.sql.types import StringType, StructField, StructType, TimestampType
from stream_job.machinery.core.checkpoint.files import read_checkpoint
from stream_job.machinery.core.settings import SettingsError, load_settings
from stream_job.machinery.job.endpoints.heartbeats import HEARTBEAT_MARK, heartbeat_row
from stream_job.machinery.job.guard.state_fit import check_fit
from stream_job.machinery.job.guard.streams_fit import StreamsChanged
from stream_job.machinery.job.plan.merge_key import checked_output
from stream_job.machinery.job.plan.query_plan import read_plan, stand_in_result
from stream_job.machinery.job.run.beats import BeatClock
from stream_job.machinery.job.run.runner import run_query
from stream_job.machinery.job.spark.session import apply_confs
from stream_job.machinery.job.spark.session_files import checkpoint_reader

from .conftest import BAKED_OPERATOR, edited_query, write_settings_file


def batch(at: str, **rows: int) -> dict:
    """A batch's progress as Spark writes it, with the rows each input brought (its observed metrics)."""
    return {"timestamp": at, "observedMetrics": {f"{section}.arrived": {"rows": n} for section, n in rows.items()}}


def ms(at: datetime) -> int:
    return round(at.timestamp() * 1000)


def beats_written(path: Path) -> dict:
    return json.loads(path.read_text())


def test_an_input_quiet_for_the_setting_gets_beats_behind_the_clock_and_one_with_rows_gets_none(tmp_path):
    beats = tmp_path / "beats.json"
    clock = BeatClock(["source", "join_source"], 60, beats)
    clock.started("2026-11-29T10:00:00.000Z")
    assert clock.progress(batch("2026-11-29T10:00:30.000Z", source=5, join_source=0)) == {}
    assert not beats.exists()

    # A minute since the start without a row on join_source; source brought rows 30 s ago.
    due = clock.idle("2026-11-29T10:01:00.000Z")

    at = datetime(2026, 11, 29, 10, 0, tzinfo=UTC)  # the clock less the setting
    assert due == {"join_source": ms(at)}
    assert beats_written(beats) == due
    # Each later event moves the quiet input's beat on; the other input's rows keep it beat-free.
    later = clock.progress(batch("2026-11-29T10:01:20.000Z", source=3, join_source=1))
    assert later == {}  # join_source brought a row: its spell is over
    assert clock.progress(batch("2026-11-29T10:01:50.000Z", source=2, join_source=0)) == {}
    assert clock.idle("2026-11-29T10:02:19.000Z") == {}
    assert clock.idle("2026-11-29T10:02:20.000Z") == {"join_source": ms(at + timedelta(seconds=80))}
    both = {"source": ms(at + timedelta(seconds=110)), "join_source": ms(at + timedelta(seconds=110))}
    assert clock.idle("2026-11-29T10:02:50.000Z") == both
    assert beats_written(beats) == both


def test_a_restart_on_a_quiet_input_counts_its_spell_from_the_start(tmp_path):
    """A restart on an input that stays quiet runs no batch at all: the start is what the spell counts from."""
    clock = BeatClock(["source"], 10, tmp_path / "beats.json")
    assert clock.idle("2026-11-29T10:00:05.000Z") == {}  # not started: nothing to count from
    clock.started("2026-11-29T10:00:00.000Z")
    assert clock.idle("2026-11-29T10:00:09.000Z") == {}
    assert clock.idle("2026-11-29T10:00:10.000Z") == {"source": ms(datetime(2026, 11, 29, 10, 0, tzinfo=UTC))}


def test_a_heartbeat_is_an_event_of_the_schema_marked_by_its_key():
    schema = StructType(
        [
            StructField("order_id", StringType()),
            StructField("amount", StringType()),
            StructField("customer_key", StringType()),
            StructField("placed_at", TimestampType()),
            StructField("cents", StructType([])),
        ]
    )
    row = heartbeat_row(schema, "join_source", 1_795_000_000_000)
    assert row == (
        HEARTBEAT_MARK,
        HEARTBEAT_MARK,
        f"{HEARTBEAT_MARK}:join_source",
        datetime.fromtimestamp(1_795_000_000, UTC),
        None,
    )


def _wall_clock_events(landing: Path, count: int, keys: int) -> list[tuple[datetime, str]]:
    """`count` events from a second ago on, 0.1 s apart, written to one landing file as it lands."""
    start = datetime.now(UTC) - timedelta(seconds=1)
    events = [(start + timedelta(seconds=0.1 * number), f"key-{number % keys}") for number in range(count)]
    landing.mkdir(parents=True, exist_ok=True)
    lines = (
        json.dumps({"event_id": f"evt-{n}", "key": key, "event_time": at.strftime("%Y-%m-%dT%H:%M:%S.%fZ")})
        for n, (at, key) in enumerate(events)
    )
    aside = landing / ".events.json"
    aside.write_text("\n".join(lines) + "\n")
    aside.rename(landing / "events.json")
    return events


def _instant(text: str) -> datetime:
    return datetime.fromisoformat(text)


# Spark's idle events each second; the parquet sink's log never compacted, so that a batch's entry can be taken out.
RUN_CONFS = {
    "spark.sql.streaming.noDataProgressEventInterval": "1s",
    "spark.sql.streaming.fileSink.log.compactInterval": "1000",
}


def _run_with_idle_events_each_second(spark, settings, seconds: float, max_batches: int | None = None) -> list[dict]:
    apply_confs(spark, settings)
    for key, value in RUN_CONFS.items():
        spark.conf.set(key, value)
    out = io.StringIO()
    try:
        run_query(spark, settings, max_batches=max_batches, timeout_seconds=seconds, progress_to=out)
    finally:
        for key in RUN_CONFS:
            spark.conf.unset(key)
    return [event for line in out.getvalue().splitlines() if (event := json.loads(line))["event"] == "batch"]


def _killed_in(batch: int, checkpoint: Path, output: Path) -> None:
    """The checkpoint and output as a kill in `batch` leaves them: the batch logged, neither committed nor
    written, no batch after it."""
    for log, first in (("offsets", batch + 1), ("commits", batch)):
        for path in (checkpoint / log).iterdir():
            if int(path.name.removeprefix(".").removesuffix(".crc")) >= first:
                path.unlink()
    for entry in (output / "_spark_metadata").iterdir():
        if int(entry.name.removeprefix(".").removesuffix(".crc")) >= batch:
            if not entry.name.startswith("."):
                for line in entry.read_text().splitlines()[1:]:
                    Path(json.loads(line)["path"].removeprefix("file://")).unlink()
            entry.unlink()


@pytest.mark.streaming
@pytest.mark.skipif(BAKED_OPERATOR != "windowed_aggregation", reason="the windowed count's last windows")
def test_heartbeats_bring_out_the_last_windows_of_a_quiet_input_exact(spark, tmp_path):
    window, delay, after = 5, 1, 2  # seconds
    events = _wall_clock_events(tmp_path / "landing", count=30, keys=3)
    changes = {
        "spark": {"shuffle_partitions": 2, "master": "local[2]"},
        "source": {"type": "files", "files": {"path": str(tmp_path / "landing")}},
        "sink": {"type": "parquet", "output_mode": "append", "path": str(tmp_path / "output")},
        "query": {
            "name": f"test_{tmp_path.name}",
            "watermark": f"{delay} second",
            "window": f"{window} seconds",
            "checkpoint_location": str(tmp_path / "checkpoint"),
            "trigger": "1 second",
            "quiet_input_after": f"{after} seconds",
        },
        "monitoring": {"progress_format": "json", "quiet_after": None},
    }
    settings = load_settings(write_settings_file(tmp_path / "settings.yaml", changes))
    last_end = math.ceil(max(at for at, _ in events).timestamp() / window) * window
    # The run lasts until the last window's end, plus the delay and the idle time, plus 20 s for the batches (the
    # first, which starts Spark's work, takes a while on a busy machine).
    batches = _run_with_idle_events_each_second(spark, settings, last_end - time.time() + delay + after + 20)

    expected: dict[tuple[float, str], int] = {}
    for at, key in events:
        start = math.floor(at.timestamp() / window) * window
        expected[(start, key)] = expected.get((start, key), 0) + 1
    rows = pq.read_table(tmp_path / "output").to_pylist()
    written = {(row["window_start"].replace(tzinfo=UTC).timestamp(), row["key"]): row["events"] for row in rows}
    assert written == expected  # every window, exact, and no heartbeat's row
    assert len(rows) == len(expected)

    # Out within the idle time, plus a batch, of the later of when events flowing on would have brought it out
    # (its end plus the delay) and when the input went quiet (the batch that read the events), counted in
    # batches, not seconds: the first batch to start past that writes a beat at its clock less the idle time,
    # the next passes it on and moves the watermark, and the one after writes the window.
    def started(event: dict) -> float:
        return _instant(event["timestamp"]).timestamp()

    quiet_from = started(next(event for event in batches if event["input_rows"] == len(events)))
    assert sorted({event["input_rows"] for event in batches}) == [0, len(events)]  # heartbeats are not input rows
    due = max(last_end + delay, quiet_from) + after
    first_due = next(n for n, event in enumerate(batches) if started(event) >= due)
    out = next(n for n, event in enumerate(batches) if _instant(event["watermark"]).timestamp() >= last_end)
    assert out <= first_due + 2, batches

    # The checkpoint holds a heartbeat stream: a start without query.quiet_input_after is refused, untouched.
    offsets = sorted((tmp_path / "checkpoint" / "offsets").iterdir())
    changes["query"]["quiet_input_after"] = None
    without = load_settings(write_settings_file(tmp_path / "settings.yaml", changes))
    with pytest.raises(StreamsChanged) as refused:
        run_query(spark, without, timeout_seconds=5, held=read_checkpoint(tmp_path / "checkpoint"))
    assert str(refused.value) == (
        f"the query reads 1 stream but the checkpoint {tmp_path / 'checkpoint'} holds the offsets of 2 streams, and"
        " Spark keeps them by position and refuses another number; the checkpoint was started with"
        " query.quiet_input_after set (a heartbeat stream to each input), and it is null now: set it again, or set"
        " query.checkpoint_location to a new directory and sink.path to an empty one, and reprocess the input from"
        " the start"
    )
    assert sorted((tmp_path / "checkpoint" / "offsets").iterdir()) == offsets
    # `check` reads the plan over stand-in inputs: they count as the start's streams, heartbeats and all.
    held, reader = read_checkpoint(tmp_path / "checkpoint"), checkpoint_reader(spark, str(tmp_path / "checkpoint"))
    with_beats, without_beats = stand_in_result(spark, settings), stand_in_result(spark, without)
    check_fit(with_beats, read_plan(with_beats), settings, held, reader, record_key=False)
    with pytest.raises(StreamsChanged):
        check_fit(without_beats, read_plan(without_beats), without, held, reader, record_key=False)

    # Killed in the batch that passed the last beat on, then started with an idle time no run reaches (its length
    # may change): no new beat, so the last window comes out again only if the batch run again reads its beat back
    # from its offsets. It does, once.
    passed_on = batches[out]["batch_id"] - 1
    _killed_in(passed_on, tmp_path / "checkpoint", tmp_path / "output")
    changes["query"]["quiet_input_after"] = "1 hour"
    later = load_settings(write_settings_file(tmp_path / "settings.yaml", changes))
    again = _run_with_idle_events_each_second(spark, later, 60, max_batches=2)
    assert again[0]["batch_id"] == passed_on, again
    rows = spark.read.parquet(str(tmp_path / "output")).collect()  # through the sink's log: what it committed
    assert {
        (row["window_start"].replace(tzinfo=UTC).timestamp(), row["key"]): row["events"] for row in rows
    } == expected
    assert len(rows) == len(expected)


@pytest.mark.skipif(BAKED_OPERATOR != "windowed_aggregation", reason="edits the windowed count's output")
def test_an_output_without_the_key_or_events_without_a_time_are_refused_before_a_start(spark, tmp_path):
    changes = {"query": {"checkpoint_location": str(tmp_path / "checkpoint"), "quiet_input_after": "10 minutes"}}
    settings = load_settings(write_settings_file(tmp_path / "settings.yaml", changes))
    keyless = {'            "key",\n            "events",\n': '            "events",\n'}
    with edited_query(keyless), pytest.raises(SettingsError) as refused:
        checked_output(stand_in_result(spark, settings), settings)
    assert str(refused.value) == (
        "query.quiet_input_after is '10 minutes' but the query's output (window_start, window_end, events) does not"
        " carry the events' key column key: the job takes its heartbeats out of the output by it; keep that column"
        " in the output, or set query.quiet_input_after to null"
    )
    # The events' time as text, which the query turns into a timestamp itself: nothing a heartbeat could carry.
    timeless = {
        'StructField("event_time", TimestampType())': 'StructField("event_time", StringType())',
        "        wanted(events, query)\n": '        wanted(events, query).withColumn("event_time", F.to_timestamp("event_time"))\n',
    }
    with edited_query(timeless), pytest.raises(SettingsError) as refused:
        checked_output(stand_in_result(spark, settings), settings)
    assert "EVENT_SCHEMA has no timestamp column to give a heartbeat its event time" in str(refused.value)


@pytest.mark.operator
@pytest.mark.streaming
@pytest.mark.skipif(BAKED_OPERATOR != "stream_stream_join", reason="a join of two inputs")
def test_a_join_whose_second_input_goes_quiet_keeps_its_state_bounded(spark, tmp_path):
    rate, join_range, delay, after = 20, 2, 1, 2  # rows/s, seconds
    _wall_clock_events(tmp_path / "landing-join", count=3, keys=3)  # the payments: three, then none
    changes = {
        "spark": {"shuffle_partitions": 2, "master": "local[2]"},
        "state_store": {"provider": "rocksdb"},
        "source": {"type": "rate", "rate": {"rows_per_second": rate, "keys": 4}},
        "join_source": {"type": "files", "files": {"path": str(tmp_path / "landing-join")}},
        "sink": {"type": "parquet", "output_mode": "append", "path": str(tmp_path / "output")},
        "query": {
            "name": f"test_{tmp_path.name}",
            "watermark": f"{delay} second",
            "join": {"range": f"{join_range} seconds"},
            "checkpoint_location": str(tmp_path / "checkpoint"),
            "trigger": "1 second",
            "quiet_input_after": f"{after} seconds",
        },
        "monitoring": {"progress_format": "json", "quiet_after": None},
    }
    settings = load_settings(write_settings_file(tmp_path / "settings.yaml", changes))
    batches = _run_with_idle_events_each_second(spark, settings, 25)

    read = sum(event["input_rows"] for event in batches)
    held = batches[-1]["state_rows"]
    # Without beats the payments' watermark stands at their last event, and the join keeps every order: its state
    # holds about all `read` rows (measured: 483 of 490). With them it holds the orders of the last range, delay and
    # idle time and of a few batches (about rate * 8 s on an idle machine; a busy one's longer batches hold more).
    assert read > 300, batches
    assert held < read / 2, (held, read, batches)
    keys = (
        {row["key"] for row in pq.read_table(tmp_path / "output").to_pylist()}
        if (tmp_path / "output").exists()
        else set()
    )
    assert not any(str(key).startswith(HEARTBEAT_MARK) for key in keys)
