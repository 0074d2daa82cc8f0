"""Exactly-once across a real crash: SIGKILL the job process mid-run, restart it, compare with a batch job.

The job runs as `python main.py` in its own process on the files source (six landing files, one
per micro-batch, available-now trigger), or on the same events read from a real Kafka broker (one
file's worth per micro-batch). The test kills it with SIGKILL while a batch is in flight
(its offsets are logged, its commit is not), restarts it on the same checkpoint, and compares the
whole sink with the same computation run as a batch job on the same files: no row lost, none twice.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from datetime import timedelta
from pathlib import Path

import pytest
from pyspark.sql import functions as F
from pyspark.testing import assertDataFrameEqual
from stream_job.machinery.core.durations import parse_duration
from stream_job.machinery.core.settings import Settings
from stream_job.machinery.job.endpoints.output import read_output
from stream_job.machinery.testing import run_batch

from .conftest import (
    BAKED_OPERATOR,
    DEFAULT_OPERATOR,
    PROJECT_DIR,
    batch_expectation,
    clean_env,
    committed_batches,
    edited_query,
    expected_row_count,
    files_job,
    final_watermark,
    kafka_job,
    kafka_offsets,
    project_copy,
    read_events_batch,
    run_job_of,
    run_main,
    run_python,
    start_job,
)
from .test_output_guard import table_moved_away_is_refused
from .test_state_rows import FULL_OUTER, LEFT_SEMI

pytestmark = [pytest.mark.streaming, pytest.mark.faults]

KILL_AFTER_COMMITS = 2
KILL_DEADLINE_SECONDS = 240


def logged_batches(checkpoint: Path) -> list[int]:
    offsets = checkpoint / "offsets"
    return sorted(int(path.name) for path in offsets.iterdir() if path.name.isdigit()) if offsets.is_dir() else []


def crash_mid_batch(settings_path: Path, checkpoint: Path, log: Path, cwd: Path = PROJECT_DIR) -> int:
    """Start the job as a process (in cwd, such as a project_copy), SIGKILL it mid-batch, and return the
    batch it abandoned uncommitted."""
    with open(log, "w") as output:
        process = start_job(settings_path, output, cwd=cwd)
        in_flight = kill_mid_batch(process, checkpoint)
    assert process.returncode == -signal.SIGKILL
    assert in_flight not in committed_batches(checkpoint)
    return in_flight


def edited_query_killed_and_restarted(path: Path, settings: Settings, edits: dict[str, str], tmp_path: Path) -> None:
    """The job of query.py with `edits`, killed mid-batch (in a project_copy) and restarted in-process to
    the end of its input, running the batch it abandoned again. With 4 input files the kill comes in the
    third batch, and the restart runs two more and the closing one."""
    checkpoint = Path(settings.query.checkpoint_location)
    in_flight = crash_mid_batch(path, checkpoint, tmp_path / "first-run.log", cwd=project_copy(tmp_path, edits))
    with edited_query(edits):
        restart = run_main("--settings", str(path))
    assert restart.returncode == 0, restart.stderr[-3000:]
    assert f"batch {in_flight}:" in restart.stdout


def kill_mid_batch(process: subprocess.Popen, checkpoint: Path, sent: int = signal.SIGKILL) -> int:
    """Signal the job once it has committed a few batches and the next one is running; return that batch id."""
    deadline = time.monotonic() + KILL_DEADLINE_SECONDS
    while time.monotonic() < deadline:
        if process.poll() is not None:
            pytest.fail(f"the job ended (exit {process.returncode}) before it could be killed mid-run")
        # The offsets log first: a batch that commits between the two reads is then seen committed, not
        # taken for one in flight (read the other way round, it looked running when it had just committed).
        logged = logged_batches(checkpoint)
        committed = committed_batches(checkpoint)
        if len(committed) >= KILL_AFTER_COMMITS and logged and logged[-1] not in committed:
            # The whole group, Python and its JVM: SIGKILL as a crash takes them; SIGTERM as systemd's
            # default KillMode and `timeout` send it (the JVM ignores it, the job stops on a boundary).
            os.killpg(process.pid, sent)
            process.wait(timeout=60)
            return logged[-1]
        time.sleep(0.01)
    process.kill()
    pytest.fail("the job did not reach a running batch in time")


# Each operator's bake crashes its own query once, on the files source into parquet on RocksDB (the
# custom_state bake: RocksDB without changelog): what the operator's state does across a SIGKILL.
# The default bake crashes its query the strictest way instead: read from a real Kafka broker, into
# delta through Spark's own Delta sink (delta-spark, the default writer; the JARs of both from Maven
# Central), which no operator changes, so it runs there alone. The other cases are secondary, since
# what they add is proven elsewhere: the repeated kills of test_fault_injection crash the default
# bake's query into parquet on RocksDB at two kill points, and test_shapes kills every shape on the
# HDFS-backed store; a parquet sink's commit does not
# depend on the operator, nor a restored state on the sink it feeds; the deltalake writer's skip of a
# replayed batch is test_delta_writer's.
SECONDARY = pytest.mark.secondary
CASES = [
    pytest.param("parquet", "hdfs", "files", marks=SECONDARY, id="parquet-hdfs"),
    pytest.param(
        "parquet",
        "rocksdb",
        "files",
        marks=[pytest.mark.operator, *([SECONDARY] if BAKED_OPERATOR == DEFAULT_OPERATOR else [])],
        id="parquet-rocksdb",
    ),
    pytest.param("delta", "hdfs", "files", marks=SECONDARY, id="delta-hdfs"),
    pytest.param("delta", "rocksdb", "files", marks=[pytest.mark.operator, SECONDARY], id="delta-rocksdb"),
    pytest.param(
        "delta-spark",
        "rocksdb",
        "files",
        marks=[pytest.mark.operator, SECONDARY, pytest.mark.delta_spark],
        id="delta-spark-rocksdb",
    ),
    pytest.param(
        "delta-spark",
        "rocksdb",
        "kafka",
        marks=[pytest.mark.kafka, pytest.mark.delta_spark],
        id="kafka-delta-spark-rocksdb",
    ),
]

# The restart, then Spark's own Delta reader on its session (the tests' shared session has no Delta JARs;
# one JVM for both, where a reader of its own started another): what it reads is copied to parquet for
# the shared session to compare.
RESTART_THEN_READ_WITH_SPARK = """
import sys
from stream_job.machinery.commands import main
from stream_job.machinery.core.settings import load_settings
from stream_job.machinery.job.spark.session import build_session
code = main(["run", "--settings", sys.argv[1]])
if code == 0:
    settings = load_settings(sys.argv[1])
    build_session(settings).read.format("delta").load(settings.sink.path).write.parquet(sys.argv[2])
sys.exit(code)
"""


def restarted_and_read_by_sparks_delta_reader(settings_path: Path, copy: Path) -> subprocess.CompletedProcess[str]:
    """`python main.py --settings settings_path` (run_job_of's for delta-spark), and in the same process
    the table read by Spark's Delta reader into copy."""
    return run_python("-c", RESTART_THEN_READ_WITH_SPARK, str(settings_path), str(copy), env=clean_env())


@pytest.mark.parametrize(("sink", "provider", "source"), CASES)
def test_sigkill_mid_batch_then_restart_loses_and_repeats_nothing(
    spark, make_settings, write_settings, tmp_path, request, sink, provider, source
):
    if source == "kafka":
        changes = kafka_job(tmp_path, request.getfixturevalue("kafka_broker"), sink, provider)
    else:
        changes = files_job(tmp_path, sink, provider)
    path = write_settings(changes)
    settings = make_settings(changes)
    checkpoint = Path(settings.query.checkpoint_location)

    in_flight = crash_mid_batch(path, checkpoint, tmp_path / "first-run.log")
    if sink.startswith("delta"):  # the table moved away meanwhile: refused; put back, the restart goes on
        table_moved_away_is_refused(path, settings, tmp_path / "moved-away")
        (tmp_path / "moved-away").rename(settings.sink.path)

    # Spark's Delta reader sees the table too (once: reading a table does not depend on the operator).
    read_by_spark = sink == "delta-spark" and BAKED_OPERATOR == DEFAULT_OPERATOR
    if read_by_spark:
        restart = restarted_and_read_by_sparks_delta_reader(path, tmp_path / "read-by-spark")
    else:
        restart = run_job_of(sink, path)
    assert restart.returncode == 0, restart.stderr[-3000:]
    # The restart ran the killed batch again, then the rest: six files, then the closing batch.
    assert committed_batches(checkpoint) == list(range(7))
    assert f"batch {in_flight}:" in restart.stdout
    if source == "kafka":
        # Every record of every topic read, by the offsets the last batch committed (40 per file).
        topics = {
            settings.inputs[section].kafka.topic: {"0": 240 if section == "source" else 192}
            for section in settings.inputs
        }
        assert kafka_offsets(checkpoint, 6) == topics

    expected = batch_expectation(spark, settings)
    assert expected.count() == expected_row_count(settings.query.operator, files=6)
    # Read by deltalake (read_output) for a Delta table, whichever writer made it.
    assertDataFrameEqual(read_output(spark, settings.sink), expected)
    if read_by_spark:  # the same rows
        assertDataFrameEqual(spark.read.parquet(str(tmp_path / "read-by-spark")), expected)


# The join types the starter's join.type does not offer, written into its query (test_state_rows'
# edits) and killed mid-batch as the starter's left outer join is above. The oracle is the batch
# join as a stream emits it: a left semi join emits each left row at its first match, at once; a
# full outer join each match at once, and an unmatched row once the watermark passes where no row of
# the other side can match it: a left row its range after its time (as the left outer join above), a
# right row at its own time (the left rows it could still match are no older than it).
JOIN_TYPES_KILLED = {"left semi": LEFT_SEMI, "full outer": FULL_OUTER}


@pytest.mark.operator
@pytest.mark.skipif(BAKED_OPERATOR != "stream_stream_join", reason="the join bake's query is edited")
@pytest.mark.parametrize("join_type", list(JOIN_TYPES_KILLED))
def test_a_join_type_killed_mid_batch_restarts_to_the_batch_join(
    spark, make_settings, write_settings, tmp_path, join_type
):
    edits = JOIN_TYPES_KILLED[join_type]
    changes = files_job(tmp_path, "parquet", "rocksdb", files=4)
    settings = make_settings(changes)
    edited_query_killed_and_restarted(write_settings(changes), settings, edits, tmp_path)
    with edited_query(edits):
        orders, payments = (read_events_batch(spark, each.files.path) for each in settings.inputs.values())
        joined = run_batch(spark, orders, payments, query=settings.query)
    if join_type == "left semi":
        expected = joined
    else:
        watermark = F.lit(final_watermark(spark, settings))
        span = F.lit(timedelta(seconds=parse_duration(settings.query.join.range)))
        unmatched_left, unmatched_right = F.col("join_event_id").isNull(), F.col("event_id").isNull()
        # No unmatched payment at the watermark itself, where a strict and a loose bound would differ.
        assert joined.where(unmatched_right & (F.col("join_event_time") == watermark)).count() == 0
        expected = joined.where(
            (~unmatched_left & ~unmatched_right)
            | (unmatched_left & (F.col("event_time") + span < watermark))
            | (unmatched_right & (F.col("join_event_time") < watermark))
        )
        assert expected.where(unmatched_left).count() > 0 and expected.where(unmatched_right).count() > 0
    assert expected.count() > 0
    assertDataFrameEqual(read_output(spark, settings.sink), expected)
