"""A quiet input, seen (job/run/quiet.py): the watermark stands still while the job runs on.

The watch is fed Spark's own progress JSON and idle timestamps, so its unit tests need no query; the
end-to-end test runs a files job whose landing folder stops receiving files, and reads the notice from
the job's JSON progress and the watermark's stand from `inspect`.
"""

from __future__ import annotations

import io
import json
import re

import pytest
from stream_job.machinery.core.checkpoint.files import watermark_stand
from stream_job.machinery.core.settings import load_settings
from stream_job.machinery.job.run.quiet import QuietWatch
from stream_job.machinery.job.run.runner import run_query
from stream_job.machinery.job.spark.session import apply_confs
from stream_job.machinery.operations.inspection import checkpoint_facts, inspect_checkpoint, render

from .conftest import files_job, write_settings_file

ORDERS = "KafkaV2[Subscribe[orders]]"
PAYMENTS = "KafkaV2[Subscribe[payments]]"


def progress(at: str, watermark: str, **rows: int) -> dict:
    """A batch's progress as Spark writes it, with the input rows of each source named in rows."""
    sources = [{"description": name, "numInputRows": count} for name, count in rows.items()]
    return {"timestamp": at, "eventTime": {"watermark": watermark}, "sources": sources}


def test_a_quiet_input_is_named_once_and_its_end_is_said():
    watch = QuietWatch(60, "1 minute")
    assert watch.progress(progress("2026-11-29T10:00:00.000Z", "2026-11-29T09:58:00.000Z", orders=40)) is None
    # A minute of batches that bring nothing: the watermark stands, not yet past the setting.
    assert watch.progress(progress("2026-11-29T10:00:30.000Z", "2026-11-29T09:58:00.000Z", orders=0)) is None
    assert watch.idle("2026-11-29T10:01:00.000Z") is None

    notice = watch.idle("2026-11-29T10:01:01.000Z")

    assert notice is not None and notice.kind == "quiet" and notice.quiet_inputs == ("orders",)
    assert notice.message == (
        "QUIET INPUT: the watermark has stood at 2026-11-29T09:58:00.000Z for 61 s (monitoring.quiet_after:"
        " 1 minute) while the job ran: results for windows ending after 2026-11-29T09:58:00.000Z are held until"
        " events arrive on orders."
    )
    assert watch.idle("2026-11-29T10:30:00.000Z") is None  # once per quiet spell
    moving = watch.progress(progress("2026-11-29T10:31:00.000Z", "2026-11-29T10:29:00.000Z", orders=5))
    assert moving is not None and moving.kind == "moving"
    assert moving.message == (
        "QUIET INPUT: the watermark moves again, to 2026-11-29T10:29:00.000Z (it stood 31.0 minutes)."
    )
    # The spell is over: the next one is said again.
    assert watch.idle("2026-11-29T10:32:01.000Z").kind == "quiet"  # type: ignore[union-attr]


def test_the_quiet_input_of_two_is_the_one_named():
    """A join's shared watermark (multipleWatermarkPolicy min) is held by the input that brings nothing."""
    watch = QuietWatch(10, "10 seconds")
    watermark = "2026-11-29T09:00:00.000Z"
    watch.progress(progress("2026-11-29T10:00:00.000Z", watermark, **{ORDERS: 10, PAYMENTS: 10}))
    watch.progress(progress("2026-11-29T10:00:05.000Z", watermark, **{ORDERS: 30, PAYMENTS: 0}))

    notice = watch.progress(progress("2026-11-29T10:00:11.000Z", watermark, **{ORDERS: 30, PAYMENTS: 0}))

    assert notice is not None and notice.quiet_inputs == (PAYMENTS,)
    assert f"held until events arrive on {PAYMENTS}." in notice.message


def test_rows_that_do_not_move_the_watermark_are_said_apart_from_a_quiet_input():
    watch = QuietWatch(10, "10 seconds")
    watermark = "2026-11-29T09:00:00.000Z"
    watch.progress(progress("2026-11-29T10:00:00.000Z", watermark, orders=10))

    notice = watch.progress(progress("2026-11-29T10:00:11.000Z", watermark, orders=10))

    assert notice is not None and notice.quiet_inputs == ()
    assert "held although rows arrive: none of them is ahead of it" in notice.message


def test_no_watermark_yet_is_not_a_quiet_input():
    watch = QuietWatch(10, "10 seconds")
    epoch = "1970-01-01T00:00:00.000Z"
    assert watch.progress(progress("2026-11-29T10:00:00.000Z", epoch, orders=0)) is None
    assert watch.progress(progress("2026-11-29T11:00:00.000Z", epoch, orders=0)) is None
    assert watch.idle("2026-11-29T12:00:00.000Z") is None
    assert watch.progress({"timestamp": "2026-11-29T12:00:00.000Z", "sources": []}) is None  # no watermark at all


@pytest.mark.streaming
def test_a_files_job_whose_input_stops_says_so_and_inspect_shows_where_the_watermark_stands(spark, tmp_path):
    changes = files_job(tmp_path, "parquet", "hdfs", files=3)
    changes["query"]["trigger"] = "1 second"
    changes["monitoring"] = {"progress_format": "json", "quiet_after": "3 seconds"}
    settings = load_settings(write_settings_file(tmp_path / "settings.yaml", changes))
    apply_confs(spark, settings)
    spark.conf.set("spark.sql.streaming.noDataProgressEventInterval", "1s")  # Spark's idle events, each second
    out = io.StringIO()
    try:
        run_query(spark, settings, timeout_seconds=15, progress_to=out)
    finally:
        spark.conf.unset("spark.sql.streaming.noDataProgressEventInterval")

    events = [json.loads(line) for line in out.getvalue().splitlines()]
    quiet = [event for event in events if event["event"] == "quiet_input"]
    # Three files of 40 events 3 s apart, two minutes each from 2026-01-01, and a one-minute watermark: the
    # last event is at 00:05:57, the watermark a minute behind it, set by the batch after the last file.
    watermark = "2026-01-01T00:04:57.000Z"
    assert [event["watermark"] for event in events if event["event"] == "batch"][-1] == watermark
    assert len(quiet) == 1, events  # said once, though the job stayed idle for some 10 s
    assert quiet[0]["kind"] == "quiet" and quiet[0]["watermark"] == watermark
    [source] = quiet[0]["quiet_inputs"]
    assert source.startswith("FileStreamSource[") and source.endswith("/landing]"), source
    assert quiet[0]["message"].startswith(f"QUIET INPUT: the watermark has stood at {watermark} for ")
    assert quiet[0]["message"].endswith(
        f"(monitoring.quiet_after: 3 seconds) while the job ran: results for windows ending after {watermark}"
        f" are held until events arrive on {source}."
    )

    location = settings.query.checkpoint_location
    stand = watermark_stand(tmp_path / "checkpoint")
    assert stand is not None and stand.since_batch == stand.newest_batch == 3
    report = render(inspect_checkpoint(spark, location, checkpoint_facts(location)))
    line = next(line for line in report.splitlines() if line.startswith("  watermark "))
    assert re.fullmatch(
        rf"  watermark {watermark}, set by the newest batch, 3, which started \d+ s ago; results for windows"
        r" ending after it wait for events on every input \(docs/operations.md, A quiet input\)",
        line,
    ), line
