"""Bad records and event time a job can trust: rows that do not parse, rows without an event time or with
one far ahead are bad records; late rows are counted.

A record that does not parse with EVENT_SCHEMA (malformed), or whose event time is null or missing, or
lies more than query.max_event_time_ahead past its arrival (its file's modification time, its Kafka
timestamp), follows the source's on_bad_record:
fail stops the batch uncommitted with one line naming the file (or Kafka partition and offset) and the
row; drop drops it and counts it on the progress line. Rows the stateful operators drop as late (behind
the watermark) are counted there too, and the watchdog says so loudly when they jump. The streaming case
runs the job as `python main.py` on real files and compares the output with the same query run as a
batch job on the good files.
"""

from __future__ import annotations

import json
import os
import shutil
import time
from datetime import datetime
from pathlib import Path

import pytest
from py4j.protocol import Py4JJavaError
from pyspark.errors import PySparkException
from pyspark.sql import functions as F
from pyspark.testing import assertDataFrameEqual
from stream_job.machinery.core.settings import SettingsError, load_settings
from stream_job.machinery.job.endpoints.output import read_output
from stream_job.machinery.job.endpoints.sources import Arrival, events_from_json, without_bad_records
from stream_job.machinery.job.run.advice import bad_record_advice
from stream_job.machinery.job.run.progress import StateWatchdog, format_progress
from stream_job.query import EVENT_SCHEMA

from .conftest import (
    ANY_PROVIDER,
    BAKED_OPERATOR,
    PROJECT_DIR,
    batch_expectation,
    clean_env,
    committed_batches,
    deep_merge,
    digest,
    files_job,
    jvm_free,
    kafka_job,
    produce,
    run_main,
    run_python,
)

# A null and a missing event time, a year-2100 one, epoch milliseconds read as seconds (year ~57970),
# and one from 1900 (a usable time, but behind any watermark: the stateful operator drops it as late).
NULL_TIME = {"event_id": "evt-null", "key": "key-0", "event_time": None}
BAD_LINES = [
    json.dumps(NULL_TIME),
    json.dumps({"event_id": "evt-missing", "key": "key-1"}),
    json.dumps({"event_id": "evt-2100", "key": "key-2", "event_time": "2100-01-01T00:00:00Z"}),
    json.dumps({"event_id": "evt-ms", "key": "key-3", "event_time": 1767225600000}),
    json.dumps({"event_id": "evt-1900", "key": "key-0", "event_time": "1900-01-01T00:00:00Z"}),
]
# Malformed: a line without its closing brace (longer than the 100 characters a failure shows), a last
# line cut off mid-record (a file written in place), and an event time Spark cannot read as a timestamp.
BROKEN_LINE = (
    '{"event_id": "evt-broken", "key": "key-0", "event_time": "2026-01-01T00:03:00Z",'
    ' "note": "the closing brace of this record is missing"'
)
CUT_LINE = '{"event_id": "evt-cut", "key": "key-2", "event_time": "2026-01-01T00:0'
UNREADABLE_TIME = json.dumps({"event_id": "evt-yesterday", "key": "key-1", "event_time": "yesterday"})
ADVICE_END = (
    "; source.files.on_bad_record is fail, so the batch stopped uncommitted (nothing of it was written). Fix or"
    " remove the row at its source, or set on_bad_record to drop to skip and count such rows; the next start"
    " runs the batch again."
)


def progress(batch: int, inputs: int, late: int, observed: dict | None = None) -> dict:
    """A progress event as Spark writes it, with the figures the line and the watchdog read."""
    operator = {
        "numRowsTotal": 4,
        "memoryUsedBytes": 2048,
        "numShufflePartitions": 2,
        "numRowsDroppedByWatermark": late,
    }
    return {
        "batchId": batch,
        "numInputRows": inputs,
        "processedRowsPerSecond": 10.0,
        "batchDuration": 1000,
        "eventTime": {"watermark": "2026-01-01T00:01:00.000Z"},
        "stateOperators": [operator],
        "observedMetrics": observed or {},
    }


def test_the_progress_line_counts_dropped_rows_and_the_watchdog_warns_when_late_rows_jump():
    quiet = progress(0, 40, 0)
    assert format_progress(quiet) == "batch 0: 40 input rows, 10 rows/s, state 4 rows / 0.0 MiB, took 1.00 s"
    observed = {
        "source.bad_records": {"malformed": 1, "without_event_time": 2, "event_time_ahead": 1},
        "join_source.bad_records": {"malformed": 1, "without_event_time": 1, "event_time_ahead": 0},
    }
    assert format_progress(progress(1, 1200, 1234, observed)).endswith(
        "took 1.00 s, dropped 1,234 late (behind the watermark), 2 malformed, 3 without an event time,"
        " 1 with an event time too far ahead"
    )

    watchdog = StateWatchdog(None, "hdfs", 2.0, 0.8)
    late = {}
    # From 0 to some: loud. Some after some, a small share: quiet. Past a tenth of the input after
    # less: loud again. Still past it: quiet. None, then some: loud.
    for batch, (inputs, dropped) in enumerate([(40, 0), (40, 1), (40, 2), (40, 30), (40, 40), (40, 0), (40, 1)]):
        late[batch] = [
            warning for warning in watchdog.check(progress(batch, inputs, dropped)) if warning.kind == "late_rows"
        ]
    assert [batch for batch, warnings in late.items() if warnings] == [1, 3, 6]
    (first,) = late[1]
    assert first.loud
    assert first.message == (
        "LATE ROWS: batch 1 dropped 1 row as late (of 40 input rows): their event time is behind the watermark,"
        " 2026-01-01T00:01:00.000Z, so they are not in the output. If they are not that old, an event far ahead"
        " moved the watermark (query.max_event_time_ahead bounds it); if they are, an input arrives later than"
        " query.watermark allows: raise it."
    )


def test_max_event_time_ahead_takes_a_duration_or_no_bound(make_settings, write_settings):
    assert make_settings().query.max_event_time_ahead == "1 day"
    for off in (None, "none", "off", "null"):
        assert make_settings({"query": {"max_event_time_ahead": off}}).query.max_event_time_ahead is None
    path = write_settings()
    path.write_text(path.read_text().replace("max_event_time_ahead: 1 day", "max_event_time_ahead: off"))
    assert "max_event_time_ahead: off\n" in path.read_text()
    assert load_settings(path).query.max_event_time_ahead is None
    with pytest.raises(SettingsError, match="max_event_time_ahead"):
        make_settings({"query": {"max_event_time_ahead": "1 d"}})


def test_an_event_time_far_ahead_fails_naming_the_row_or_is_dropped(spark, make_settings):
    settings = make_settings({"source": {"type": "files"}})
    rows = [
        {"event_id": "e1", "key": "k", "event_time": "2026-01-01T00:00:05Z"},
        {"event_id": "e2", "key": "k", "event_time": "2100-01-01T00:00:00Z"},
    ]
    raw = spark.createDataFrame([(json.dumps(row),) for row in rows], "value string")
    events = events_from_json(raw, "value", EVENT_SCHEMA)
    origin = F.lit("file:///landing/events-7.json")
    # e3 is 23 hours ahead of its file, within the bound.
    late_file = raw.union(spark.createDataFrame([('{"event_id":"e3","key":"k","event_time":"2026-01-01T23:00:10Z"}',)]))
    arrival = Arrival(F.lit(datetime(2026, 1, 1, 0, 0, 10)), "the file's modification time")

    kept = without_bad_records(
        events_from_json(late_file, "value", EVENT_SCHEMA),
        EVENT_SCHEMA,
        "drop",
        origin,
        arrival,
        "source",
        settings.query,
    )
    assert sorted(row.event_id for row in kept.collect()) == ["e1", "e3"]
    unbounded = settings.query.model_copy(update={"max_event_time_ahead": None})
    assert without_bad_records(events, EVENT_SCHEMA, "drop", origin, arrival, "source", unbounded).count() == 2

    with pytest.raises((PySparkException, Py4JJavaError)) as failed:
        without_bad_records(events, EVENT_SCHEMA, "fail", origin, arrival, "source", settings.query).collect()
    (line,) = bad_record_advice(str(failed.value), settings)
    assert line == (
        "bad record: file:///landing/events-7.json holds a row without a usable event time, event_time"
        " 2100-01-01 00:00:00 is more than 1 day ahead of its arrival, the file's modification time"
        " 2026-01-01 00:00:10 (query.max_event_time_ahead, 1 day, is how far ahead of its arrival an event time"
        " may be; epoch milliseconds read as seconds"
        ' land some 50,000 years ahead): {"event_id":"e2","key":"k","event_time":"2100-01-01T00:00:00.000Z"}'
        + ADVICE_END
    )


def retime(files: list[Path]) -> None:
    """Give files modification times a second apart, in this order: the files source reads them so."""
    start = time.time() - len(files)
    for number, path in enumerate(files):
        os.utime(path, (start + number, start + number))


@pytest.mark.operator
@pytest.mark.streaming
def test_bad_records_fail_the_batch_in_one_line_or_are_dropped_and_counted(
    spark, make_settings, write_settings, tmp_path
):
    """Files: a malformed line, null, missing, 2100 and epoch-ms event times, a 1900 one and a timestamp
    Spark cannot read, in a file between good ones; and a good file whose last line was cut off.

    fail, as a user runs it (`python main.py`), on a checkpoint with one batch committed: exit 1, and
    on the console nothing past the query's start but its stop line and the job's one line, naming the
    file and the malformed record (Spark's ERROR lines and Java frames go to logs/spark.log); the
    batch uncommitted, the committed checkpoint and the output unchanged. Then drop, on the same
    checkpoint: every bad record dropped and counted on its batch's line, the 1900 one counted as late
    with the watchdog's warning, and every later good event in the output (the 2100 event did not move
    the watermark): the output equals the batch job on the good files.
    """
    if BAKED_OPERATOR not in ("windowed_aggregation", "deduplication"):
        pytest.skip("the sources' check is the same for every operator; a 1900 event is late for these two")
    changes = files_job(tmp_path, "parquet", ANY_PROVIDER, files=3)
    landing = Path(changes["source"]["files"]["path"])
    good = sorted(landing.glob("events-*.json"))
    shutil.copytree(landing, tmp_path / "good")
    expected = batch_expectation(
        spark, make_settings(deep_merge(changes, {"source": {"files": {"path": str(tmp_path / "good")}}}))
    )
    for later in good[1:]:
        later.unlink()  # they land after the first run, which commits batch 0 alone
    checkpoint, output = tmp_path / "checkpoint", tmp_path / "output"
    path = write_settings(changes)
    first = run_main("--settings", str(path))
    assert first.returncode == 0, first.stderr[-3000:]
    failing = committed_batches(checkpoint)[-1] + 1  # after good[0]'s batch (and a batch that moved the watermark)
    bad = landing / "events-bad.json"
    bad.write_text("\n".join([BROKEN_LINE, *BAD_LINES, UNREADABLE_TIME]) + "\n")
    for later in good[1:]:
        shutil.copy(tmp_path / "good" / later.name, later)
    with good[1].open("a") as cut:
        cut.write(CUT_LINE)  # a last line cut off mid-record, without its newline
    retime([good[0], bad, *good[1:]])  # the bad file is the next batch, before two files of later events
    committed = committed_digest(checkpoint, output)
    spark_log = PROJECT_DIR / "logs" / "spark.log"
    logged = spark_log.stat().st_size if spark_log.exists() else 0

    failed = run_python("main.py", "--settings", str(path), env=clean_env())

    assert failed.returncode == 1, failed.stderr[-3000:]
    # Past the query's start, the console holds two lines (where it held some 75): the progress stream's
    # line of the query's stop (stdout), and on stderr the job's one line, nothing else.
    assert jvm_free(failed.stderr).splitlines() == [
        f"bad record: file://{bad} holds a record that does not parse as EVENT_SCHEMA: {BROKEN_LINE[:100]}..."
        + ADVICE_END
    ]
    console = failed.stdout.splitlines()
    started = next(number for number, line in enumerate(console) if line.startswith("query ") and " started " in line)
    (stopped,) = console[started + 1 :]
    assert stopped.startswith(f"query {changes['query']['name']} stopped: ")
    with spark_log.open() as log:
        log.seek(logged)
        spark_said = log.read()
    assert "Exception in task" in spark_said and "\tat org.apache.spark." in spark_said  # the whole story, there
    assert committed_digest(checkpoint, output) == committed

    changes["source"]["files"]["on_bad_record"] = "drop"
    dropped = run_main("--settings", str(write_settings(changes)))

    assert dropped.returncode == 0, dropped.stderr[-3000:]
    lines = {
        int(line.split(":")[0].split()[1]): line for line in dropped.stdout.splitlines() if line.startswith("batch ")
    }
    assert lines[failing].startswith(f"batch {failing}: 7 input rows, ")
    assert lines[failing].endswith(
        ", dropped 1 late (behind the watermark), 2 malformed, 2 without an event time,"
        " 2 with an event time too far ahead"
    )
    assert lines[failing + 1].startswith(f"batch {failing + 1}: 41 input rows, ")
    assert lines[failing + 1].endswith(", dropped 1 malformed")
    assert not any(", dropped " in line for batch, line in lines.items() if batch > failing + 1)
    warnings = [line for line in dropped.stderr.splitlines() if line.startswith("LATE ROWS: ")]
    assert warnings == [
        f"LATE ROWS: batch {failing} dropped 1 row as late (of 7 input rows): their event time is behind the watermark,"
        " 2026-01-01T00:00:57.000Z, so they are not in the output. If they are not that old, an event far ahead"
        " moved the watermark (query.max_event_time_ahead bounds it); if they are, an input arrives later than"
        " query.watermark allows: raise it."
    ]
    assertDataFrameEqual(read_output(spark, make_settings(changes).sink), expected)


def committed_digest(checkpoint: Path, output: Path) -> dict[str, dict[str, str]]:
    """What a batch that fails leaves as it was: the committed batches, the state and the output (Spark
    has planned the batch's input, in offsets/ and sources/, before it runs)."""
    folders = {"commits": checkpoint / "commits", "state": checkpoint / "state", "output": output}
    return {name: digest(folder) for name, folder in folders.items()}


@pytest.mark.streaming
@pytest.mark.kafka
def test_a_kafka_record_without_a_usable_event_time_is_named_by_partition_and_offset(
    spark, kafka_broker, make_settings, write_settings, tmp_path
):
    """Kafka: a null event time and one in 2100 after three files' worth of events. fail names the
    first by topic, partition and offset, with the batch uncommitted; drop counts both and the output
    equals the batch job on the files."""
    changes = kafka_job(tmp_path, kafka_broker, "parquet", ANY_PROVIDER, files=3)
    topic = changes["source"]["kafka"]["topic"]
    produce(kafka_broker.bootstrap, topic, [json.dumps(NULL_TIME), BAD_LINES[2]])  # offsets 120, 121
    expected = batch_expectation(spark, make_settings(changes))

    failed = run_main("--settings", str(write_settings(changes)))  # the shared session has the Kafka connector

    assert failed.returncode == 1, failed.stderr[-3000:]
    assert failed.stderr.strip().splitlines()[-1] == (
        f"bad record: topic {topic} partition 0 offset 120 holds a row without a usable event time, event_time is"
        ' null or missing: {"event_id":"evt-null","key":"key-0","event_time":null}'
        + ADVICE_END.replace("source.files", "source.kafka")
    )
    assert committed_batches(tmp_path / "checkpoint") == [0, 1, 2]  # 40 records a batch; the fourth failed

    changes["source"]["kafka"]["on_bad_record"] = "drop"
    dropped = run_main("--settings", str(write_settings(changes)))

    assert dropped.returncode == 0, dropped.stderr[-3000:]
    (line,) = [line for line in dropped.stdout.splitlines() if line.startswith("batch 3: ")]
    assert line.startswith("batch 3: 2 input rows, ")
    assert line.endswith(", dropped 1 without an event time, 1 with an event time too far ahead")
    assertDataFrameEqual(read_output(spark, make_settings(changes).sink), expected)
