"""Fault injection: the job process killed again and again at chosen points, or stopped by a signal.

Each case starts `python main.py` on six landing files (one per batch, available-now), SIGKILLs
it at each kill point in turn (restarting it on the same checkpoint every time), lets the last
start finish, and compares the whole sink with the same computation as a batch job. The kill
points: while a batch runs (its offsets logged, its commit not), and just after a commit (the
commit file written, the next batch not yet logged, or only just).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest
from pyspark.testing import assertDataFrameEqual
from stream_job.machinery.core.checkpoint.files import source_offsets
from stream_job.machinery.core.checkpoint.run_lock import holder
from stream_job.machinery.job.endpoints.output import read_output
from stream_job.machinery.job.run.stopping import StopSignals

from .conftest import (
    ANY_PROVIDER,
    BAKED_OPERATOR,
    batch_expectation,
    clean_env,
    committed_batches,
    expected_row_count,
    files_job,
    jvm_free,
    run_main,
    run_python,
    start_job,
)
from .test_exactly_once import kill_mid_batch, logged_batches

pytestmark = [pytest.mark.streaming, pytest.mark.faults]

KILL_POINTS = ("mid-batch", "after-commit")
DEADLINE_SECONDS = 240
CONFIGURATIONS = [
    # Secondary: the HDFS-backed store is crashed mid-batch under every shape of test_shapes.py.
    pytest.param("hdfs", False, marks=pytest.mark.secondary, id="hdfs"),
    # Secondary: the custom_state bake crashes RocksDB without changelog (test_exactly_once).
    pytest.param("rocksdb", False, marks=pytest.mark.secondary, id="rocksdb"),
    pytest.param("rocksdb", True, id="rocksdb-changelog"),
]


def kill_at(process: subprocess.Popen, checkpoint: Path, point: str) -> bool:
    """SIGKILL the job at `point`, after it committed at least one batch in this run; False if it ended first."""
    committed_before = len(committed_batches(checkpoint))
    deadline = time.monotonic() + DEADLINE_SECONDS
    while time.monotonic() < deadline:
        if process.poll() is not None:
            return False
        committed, logged = committed_batches(checkpoint), logged_batches(checkpoint)
        progressed = len(committed) > committed_before
        running = logged and logged[-1] not in committed
        if progressed and (point == "after-commit" or running):
            process.send_signal(signal.SIGKILL)
            process.wait(timeout=30)
            return True
        time.sleep(0.005)
    process.kill()
    pytest.fail(f"the job reached no {point} kill point in {DEADLINE_SECONDS} s")


@pytest.mark.parametrize(("provider", "changelog"), CONFIGURATIONS)
def test_repeated_kills_lose_and_repeat_nothing(spark, make_settings, write_settings, tmp_path, provider, changelog):
    if BAKED_OPERATOR == "custom_state" and provider == "hdfs":
        pytest.skip("custom_state runs only on the RocksDB state store")
    changes = files_job(tmp_path, "parquet", provider, changelog)
    path = write_settings(changes)
    settings = make_settings(changes)
    checkpoint = Path(settings.query.checkpoint_location)

    kills = []
    for number, point in enumerate(KILL_POINTS):
        with open(tmp_path / f"run-{number}.log", "w") as log:
            process = start_job(path, log)
            if kill_at(process, checkpoint, point):
                kills.append((point, committed_batches(checkpoint)[-1]))
    assert [point for point, _ in kills] == list(KILL_POINTS)

    last = run_python("main.py", "--settings", str(path), env=clean_env())
    assert last.returncode == 0, last.stderr[-3000:]
    # A quiet console after a crash too: what Spark does to recover (each state partition read again
    # from its files) is in logs/spark.log.
    assert jvm_free(last.stderr) == "", last.stderr[-3000:]
    # Batch boundaries may shift across restarts (available-now plans the rest anew), so the
    # batches are checked for gaps, and the output for exactness.
    committed = committed_batches(checkpoint)
    assert committed == list(range(len(committed))) and len(committed) >= 6, (kills, committed)
    expected = batch_expectation(spark, settings)
    assert expected.count() == expected_row_count(settings.query.operator, files=6)
    assertDataFrameEqual(read_output(spark, settings.sink), expected)


def test_sigint_is_handled_as_sigterm_is():
    """Ctrl-C takes the same path as SIGTERM (tested end to end below): a flag the polling loop reads."""
    with StopSignals() as signals:
        os.kill(os.getpid(), signal.SIGINT)
        time.sleep(0.1)  # the handler runs between bytecodes of this, the main thread
        assert signals.received == "SIGINT"
    assert signal.getsignal(signal.SIGINT) is not signals._record  # the previous handler is back


def test_graceful_stop_exits_0_and_the_next_start_continues(spark, make_settings, write_settings, tmp_path):
    sent = signal.SIGTERM
    changes = files_job(tmp_path, "parquet", ANY_PROVIDER, files=5)
    path = write_settings(changes)
    settings = make_settings(changes)
    checkpoint = Path(settings.query.checkpoint_location)
    # The fifth file arrives after the stop: the restart has input, and its closing batch moves the
    # watermark over everything (an available-now start with no new input runs no batch at all).
    landing = Path(settings.source.files.path)
    last_file = sorted(landing.iterdir())[-1]
    held = last_file.rename(tmp_path / last_file.name)

    with open(tmp_path / "first-run.log", "w") as log:
        process = start_job(path, log)
        in_flight = kill_mid_batch(process, checkpoint, sent)
    first_run = (tmp_path / "first-run.log").read_text()
    assert process.returncode == 0, first_run[-3000:]
    assert f"{signal.Signals(sent).name} received: stopping once the batch in flight commits" in first_run
    # The batch in flight committed, and the stop landed on a batch boundary: nothing logged past the last commit.
    assert "stopped on a batch boundary" in first_run, first_run[-3000:]
    stopped_at = committed_batches(checkpoint)
    assert stopped_at == list(range(len(stopped_at))) and stopped_at[-1] >= in_flight
    assert logged_batches(checkpoint)[-1] == stopped_at[-1]

    held.rename(last_file)
    restart = run_main("--settings", str(path))
    assert restart.returncode == 0, restart.stderr[-3000:]
    # The restart goes on from the stop, with no gap: one file per batch (the file source's log offset
    # moves by 1), then the closing batch (by 0) that moves the watermark past the last windows.
    resumed = committed_batches(checkpoint)
    assert resumed == list(range(len(resumed))) and resumed[-1] > stopped_at[-1], resumed
    files_read = [json.loads(source_offsets(checkpoint, batch)[0])["logOffset"] for batch in resumed]
    steps = [after - before for before, after in zip([-1, *files_read], files_read, strict=False)]
    # Once in CI the restart committed 5 batches, not 6. Spark's file source logs the files of the next
    # batch (sources/0/N) before the offsets file of that batch, and a stop that lands between the two
    # leaves the source's log one entry ahead: the restart then reads that entry's file together with the
    # next one, two files in one batch (a step of 2), and the same input in one batch fewer. The steps
    # say which happened; nothing else may.
    assert steps in ([1, 1, 1, 1, 1, 0], *([1] * i + [2] + [1] * (3 - i) + [0] for i in range(4))), steps
    assertDataFrameEqual(read_output(spark, settings.sink), batch_expectation(spark, settings))


def driver_jvm(parent: int) -> int:
    """The pid of the driver JVM a job process started (spark-submit's scripts exec java in its place;
    the job may run other short JVMs beside it, such as `java -version`)."""
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        for proc in Path("/proc").glob("[0-9]*"):
            try:
                status = (proc / "status").read_text()
                command = (proc / "cmdline").read_bytes().split(b"\0")
            except OSError:
                continue
            if f"\nPPid:\t{parent}\n" in status and b"org.apache.spark.deploy.SparkSubmit" in command:
                return int(proc.name)
        time.sleep(0.1)
    pytest.fail(f"process {parent} started no driver JVM in 60 s")


def test_a_jvm_outliving_its_killed_python_holds_the_checkpoint_until_it_exits(
    spark, make_settings, write_settings, tmp_path
):
    """`kill -9` of the job's Python alone: its JVM runs on for seconds, until it sees its Python gone,
    while the run lock had gone with the Python, so a quick restart ran beside it. The JVM shares the lock
    now: named as its holder, and a restart waits for it to exit (here it is held stopped until the
    restart has said so), then runs to the exact output."""
    changes = files_job(tmp_path, "parquet", ANY_PROVIDER, files=3)
    path = write_settings(changes)
    settings = make_settings(changes)
    checkpoint = Path(settings.query.checkpoint_location)
    with open(tmp_path / "killed.log", "w") as log:
        process = start_job(path, log)
        jvm = driver_jvm(process.pid)
        while not committed_batches(checkpoint):
            assert process.poll() is None, (tmp_path / "killed.log").read_text()[-3000:]
            time.sleep(0.05)
        os.kill(jvm, signal.SIGSTOP)  # it cannot exit before the restart has met it
        process.send_signal(signal.SIGKILL)
        process.wait(timeout=30)
    restart_log = tmp_path / "restart.log"
    try:
        assert (
            holder(checkpoint) == f"process {jvm} (the Spark JVM of a job whose Python ended; it exits within seconds)"
        )
        with open(restart_log, "w") as log:
            restart = start_job(path, log)
            waiting = f"checkpoint: waiting for process {jvm}, the Spark JVM of a job whose Python ended, to exit"
            deadline = time.monotonic() + 60
            while waiting not in restart_log.read_text():
                assert time.monotonic() < deadline and restart.poll() is None, restart_log.read_text()[-3000:]
                time.sleep(0.05)
    finally:
        os.kill(jvm, signal.SIGCONT)
    assert restart.wait(timeout=300) == 0, restart_log.read_text()[-3000:]
    assert not Path(f"/proc/{jvm}").exists()
    assertDataFrameEqual(read_output(spark, settings.sink), batch_expectation(spark, settings))
