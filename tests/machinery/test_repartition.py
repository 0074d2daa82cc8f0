"""`repartition`: a RocksDB checkpoint's state moved into other partitions, and every refusal.

The job runs as its own process on the files source (available-now, one landing file per batch);
the landing files arrive in three parts, and between the parts the checkpoint is repartitioned
4 -> 8 and back to 4 by the real command (Spark's offline runner underneath). The whole output is
compared with the same computation as a batch job on all the files: no row lost or written twice
across the changes. Each refusal is checked to leave the checkpoint byte for byte as it was.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from deltalake import DeltaTable
from pyspark.sql import functions as F
from pyspark.testing import assertDataFrameEqual
from stream_job.machinery.core.checkpoint.sink_log import COMPACT_INTERVAL_CONF
from stream_job.machinery.job.endpoints.output import read_output
from stream_job.machinery.testing import run_batch

from .conftest import (
    BAKED_OPERATOR,
    DEFAULT_OPERATOR,
    PROJECT_DIR,
    batch_expectation,
    clean_env,
    committed_batches,
    digest,
    expected_row_count,
    files_job,
    jvm_free,
    read_events_batch,
    run_cli,
    run_main,
    start_job,
)

pytestmark = [pytest.mark.streaming]


def landing_dirs(settings) -> list[Path]:
    return [Path(source.files.path) for source in settings.inputs.values()]


def hold_back(settings, keep: int, aside: Path) -> None:
    """Move all but the first `keep` landing files of each input aside (they arrive later)."""
    for landing in landing_dirs(settings):
        held = aside / landing.name
        held.mkdir(parents=True, exist_ok=True)
        for path in sorted(landing.iterdir())[keep:]:
            path.rename(held / path.name)


def let_arrive(settings, count: int, aside: Path) -> None:
    """Move the next `count` held-back files of each input into its landing folder."""
    for landing in landing_dirs(settings):
        for path in sorted((aside / landing.name).iterdir())[:count]:
            path.rename(landing / path.name)


def pinned_partitions(checkpoint: Path) -> int:
    newest = max(int(path.name) for path in (checkpoint / "offsets").iterdir() if path.name.isdigit())
    metadata = json.loads((checkpoint / "offsets" / str(newest)).read_text().splitlines()[1])
    return int(metadata["conf"]["spark.sql.shuffle.partitions"])


def sink_entry_line(batch: int, interval: int, settings) -> str:
    name = f"{batch}.compact" if (batch + 1) % interval == 0 else str(batch)
    return f"log has batch {batch} as one without files ({settings.sink.path}/_spark_metadata/{name})"


def run_job(settings_path: Path):
    result = run_main("--settings", str(settings_path))
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-3000:]
    return result


def repartition(settings_path: Path, *flags: str):
    return run_cli("repartition", "--settings", str(settings_path), *flags)


@pytest.mark.operator
def test_repartition_4_to_8_and_back_keeps_the_output_exact(spark, make_settings, write_settings, tmp_path):
    changes = files_job(tmp_path, "parquet", "rocksdb", changelog=True, files=6)
    changes["spark"]["shuffle_partitions"] = 4
    # The parquet sink's log needs an entry for each batch the runner adds, merged ones included: with
    # a merge every 4 batches both repartitions land on a merge batch (3, 7); every 5, Spark's own
    # merges (4, 9) read the plain entries written for them. Two bakes take each.
    interval = 4 if BAKED_OPERATOR in (DEFAULT_OPERATOR, "stream_stream_join") else 5
    changes["spark"]["conf"] = {COMPACT_INTERVAL_CONF: interval}
    settings_4 = write_settings(changes)
    settings = make_settings(changes)
    changes["spark"]["shuffle_partitions"] = 8
    settings_8 = write_settings(changes, name="settings-8.yaml")
    checkpoint = Path(settings.query.checkpoint_location)
    hold_back(settings, 2, tmp_path / "later")

    run_job(settings_4)
    assert pinned_partitions(checkpoint) == 4
    last = committed_batches(checkpoint)[-1]

    # The settings ask for 8 partitions: the guard points at repartition, which moves the state there.
    refused = run_main("--settings", str(settings_8))
    assert refused.returncode == 4
    assert "python -m stream_job repartition --partitions 8" in refused.stderr
    moved = repartition(settings_8)
    assert moved.returncode == 0, moved.stdout[-3000:] + moved.stderr[-3000:]
    assert f"state of batch {last}: 4 -> 8 partitions" in moved.stdout
    assert "rows before and after" in moved.stdout
    assert f"done: batch {last + 1} holds the state in 8 partitions" in moved.stdout
    assert "the copy was removed" in moved.stdout
    assert sink_entry_line(last + 1, interval, settings) in moved.stdout
    assert not list(tmp_path.glob("checkpoint.before-repartition*"))
    assert pinned_partitions(checkpoint) == 8
    assert committed_batches(checkpoint)[-1] == last + 1

    # The old count is now the drift; the new one runs, and inspect sees 8 partitions per store.
    stale = run_main("--settings", str(settings_4))
    assert stale.returncode == 4
    assert "spark.shuffle_partitions is 4 in settings, but the checkpoint" in stale.stderr
    assert "holds 8" in stale.stderr
    let_arrive(settings, 2, tmp_path / "later")
    run_job(settings_8)
    inspected = run_cli("inspect", "--settings", str(settings_8), "--json")
    assert inspected.returncode == 0, inspected.stderr[-3000:]
    for operator in json.loads(inspected.stdout)["operators"]:
        assert operator["partitions"] == 8
        assert all(len(store["rows_per_partition"]) == 8 for store in operator["stores"])

    back = repartition(settings_8, "--partitions", "4", "--keep-copy")
    assert back.returncode == 0, back.stdout[-3000:] + back.stderr[-3000:]
    assert "8 -> 4 partitions" in back.stdout
    assert "set spark.shuffle_partitions to 4" in back.stdout
    assert sink_entry_line(committed_batches(checkpoint)[-1], interval, settings) in back.stdout
    copies = list(tmp_path.glob("checkpoint.before-repartition-*"))
    assert len(copies) == 1 and pinned_partitions(copies[0]) == 8
    assert pinned_partitions(checkpoint) == 4
    let_arrive(settings, 2, tmp_path / "later")
    run_job(settings_4)

    # Across both changes: every row of the batch computation on all six files, none twice.
    assertDataFrameEqual(read_output(spark, settings.sink), batch_expectation(spark, settings))


# The default bake's query: the recording does not depend on the operator (the rewrite of each operator's
# state is test_repartition_4_to_8_and_back_keeps_the_output_exact's).
@pytest.mark.skipif(BAKED_OPERATOR != DEFAULT_OPERATOR, reason="its query")
@pytest.mark.parametrize("mode", ["append", "update"])
def test_a_delta_table_records_the_repartition_batch_and_the_job_goes_on_exact(
    spark, make_settings, write_settings, tmp_path, mode
):
    """The runner's batch runs no query, so no writer commits it: repartition commits it to the table
    itself, as the writers commit a batch without rows (the query's transaction alone). Without it the
    next start, `check` and `savepoint create` refuse the table as one that lost committed output. In
    update mode the table is MERGEd into; the batch is recorded alike. A kill after the table's commit
    (the state as the kill leaves it: the copy kept under its working name) finishes forward, as a
    table's commit cannot be taken back."""
    files = 3
    changes = files_job(tmp_path, "delta", "rocksdb", changelog=True, files=files)
    changes["spark"]["shuffle_partitions"] = 4
    changes["sink"]["output_mode"] = mode
    settings_4 = write_settings(changes)
    settings = make_settings(changes)
    changes["spark"]["shuffle_partitions"] = 8
    settings_8 = write_settings(changes, name="settings-8.yaml")
    checkpoint, table = Path(settings.query.checkpoint_location), settings.sink.path
    hold_back(settings, 2, tmp_path / "later")
    run_job(settings_4)
    last = committed_batches(checkpoint)[-1]
    query = json.loads((checkpoint / "metadata").read_text())["id"]

    moved = repartition(settings_8, "--keep-copy")
    assert moved.returncode == 0, moved.stdout[-3000:] + moved.stderr[-3000:]
    checked = run_cli("check", "--settings", str(settings_8))
    assert checked.returncode == 0, checked.stdout[-2000:] + checked.stderr[-2000:]
    assert f"the Delta table {table} has batch {last + 1} as one without rows" in moved.stdout
    assert DeltaTable(table).transaction_version(query) == last + 1

    # Killed after the table's commit: the start refuses, repartition finishes the repartition.
    kept = checkpoint.with_name(f"checkpoint.before-repartition-{last}")
    kept.rename(checkpoint.with_name(f"checkpoint.repartitioning-{last}-to-8"))
    assert run_cli("check", "--settings", str(settings_8)).returncode == 4
    finished = repartition(settings_8)
    assert finished.returncode == 0, finished.stdout[-3000:] + finished.stderr[-3000:]
    assert (
        f"finished the repartition into 8 partitions that stopped after the Delta table had recorded its batch {last + 1}"
        in finished.stdout
    )
    assert "nothing to do" in finished.stdout
    assert not [path for path in tmp_path.iterdir() if ".repartition" in path.name]
    assert pinned_partitions(checkpoint) == 8 and committed_batches(checkpoint)[-1] == last + 1

    let_arrive(settings, 1, tmp_path / "later")
    run_job(settings_8)
    held = read_output(spark, settings.sink)
    events = read_events_batch(spark, settings.source.files.path)
    if mode == "append":  # the closed windows, counted by hand from the input's shape
        expected, rows = batch_expectation(spark, settings), expected_row_count(BAKED_OPERATOR, files)
    else:  # every window's current count: the batch query on all the input
        expected = run_batch(spark, events, query=settings.query)
        rows = events.select(F.window("event_time", settings.query.window), "key").distinct().count()
    assert held.count() == rows
    assertDataFrameEqual(held, expected.select(*held.columns))
    assert run_cli("check", "--settings", str(settings_8)).returncode == 0


def test_repartition_refusals_name_the_way_out_and_change_nothing(spark, make_settings, write_settings, tmp_path):
    from stream_job.machinery.core.checkpoint.run_lock import holder

    # Changelog checkpointing on: --finish-last-batch runs a batch in the session that reads the state.
    changes = files_job(tmp_path / "rocks", "parquet", "rocksdb", changelog=True, files=3)
    changes["spark"]["shuffle_partitions"] = 4
    path = write_settings(changes)
    settings = make_settings(changes)
    checkpoint = Path(settings.query.checkpoint_location)

    def refused(*flags: str, settings_path: Path = path, expect: str) -> None:
        before = digest(checkpoint) if checkpoint.exists() else None
        result = repartition(settings_path, *flags)
        assert result.returncode == 4, result.stdout[-2000:] + result.stderr[-2000:]
        assert result.stderr.startswith("repartition refused: ") and expect in result.stderr, result.stderr
        assert len(result.stderr.strip().splitlines()) == 1
        assert (digest(checkpoint) if checkpoint.exists() else None) == before

    refused("--partitions", "8", expect="no committed batch")
    assert not checkpoint.exists()
    run_job(path)
    refused("--partitions", "4", expect="already holds its state in 4 partitions")
    remote_query = {**changes["query"], "checkpoint_location": "hdfs://namenode/cp"}
    remote = write_settings({**changes, "query": remote_query}, name="remote.yaml")
    before = digest(checkpoint)
    result = repartition(remote, "--partitions", "8")
    assert result.returncode == 4 and "is not on the local file system" in result.stderr
    assert digest(checkpoint) == before
    # On S3 it runs on a copy here (tests/machinery/test_object_store.py), with its output on the store too.
    s3_query = {**changes["query"], "checkpoint_location": "s3a://bucket/cp"}
    result = repartition(write_settings({**changes, "query": s3_query}, name="s3-cp.yaml"), "--partitions", "8")
    assert result.returncode == 4, result.stderr
    assert f"s3a://bucket/cp is on an object store and sink.path {changes['sink']['path']} is not: repartition" in (
        result.stderr
    ), result.stderr
    remote_sink = write_settings({**changes, "sink": {**changes["sink"], "path": "s3a://bucket/out"}}, name="s3.yaml")
    result = repartition(remote_sink, "--partitions", "8")
    assert result.returncode == 4 and "the parquet output s3a://bucket/out is not on the local" in result.stderr
    assert digest(checkpoint) == before

    # A copy left in the way by an earlier repartition.
    last = committed_batches(checkpoint)[-1]
    in_the_way = checkpoint.with_name(f"checkpoint.before-repartition-{last}")
    in_the_way.mkdir()
    refused("--partitions", "8", expect="remove it or move it away")
    in_the_way.rmdir()

    # A batch the job left unfinished (offsets logged, no commit): refused, then finished on request.
    commit = checkpoint / "commits" / str(last)
    commit.unlink()
    (checkpoint / "commits" / f".{last}.crc").unlink()
    refused("--partitions", "8", expect=f"batch {last} of {checkpoint} did not commit")
    finished = repartition(path, "--partitions", "8", "--finish-last-batch")
    assert finished.returncode == 0, finished.stdout[-3000:] + finished.stderr[-3000:]
    assert f"running batch {last}" in finished.stdout
    assert f"done: batch {last + 1} holds the state in 8 partitions" in finished.stdout
    assert committed_batches(checkpoint)[-1] == last + 1
    rows = read_output(spark, settings.sink)
    assert rows.count() == rows.distinct().count()  # batch {last} ran again: nothing written twice

    # A running job holds the checkpoint: repartition and a second job are both refused.
    changes["spark"]["shuffle_partitions"] = 8
    changes["query"]["trigger"] = "1 second"
    running = write_settings(changes, name="running.yaml")
    with open(tmp_path / "job.log", "w") as log:
        job = start_job(running, log)
        try:
            deadline = time.monotonic() + 120
            while time.monotonic() < deadline and holder(checkpoint) is None and job.poll() is None:
                time.sleep(0.1)
            assert holder(checkpoint) == f"process {job.pid}"
            refused("--partitions", "4", settings_path=running, expect=f"in use by process {job.pid}")
            second = run_main("--settings", str(running))
            assert second.returncode == 4
            assert f"checkpoint error: {checkpoint} is in use by process {job.pid}" in second.stderr
        finally:
            # A lock dies with the job's processes, its Python and its JVM: a crashed job leaves nothing to
            # clean up (the JVM, killed too, takes moments to be gone).
            os.killpg(job.pid, signal.SIGKILL)
            job.wait(timeout=120)
    deadline = time.monotonic() + 30
    while holder(checkpoint) is not None and time.monotonic() < deadline:
        time.sleep(0.1)
    assert holder(checkpoint) is None

    # The HDFS-backed store: Spark cannot repartition it; the refusal says what can be done.
    hdfs = files_job(tmp_path / "hdfs", "parquet", "hdfs", files=2)
    hdfs_path = write_settings(hdfs, name="hdfs.yaml")
    run_job(hdfs_path)
    checkpoint = Path(hdfs["query"]["checkpoint_location"])
    refused("--partitions", "8", settings_path=hdfs_path, expect="holds the state of the hdfs store")
    three = write_settings({**hdfs, "spark": {**hdfs["spark"], "shuffle_partitions": 3}}, name="hdfs-3.yaml")
    drift = run_main("--settings", str(three))
    assert drift.returncode == 4
    assert "a checkpoint of the hdfs store cannot be repartitioned" in drift.stderr
    shutil.rmtree(tmp_path / "hdfs")


def test_a_job_stopped_by_max_batches_repartitions_as_it_is(spark, make_settings, write_settings, tmp_path):
    """A processing-time job stopped by --max-batches lands on a batch boundary: repartition takes the
    checkpoint as it is (no --finish-last-batch), and the output stays exact."""
    changes = files_job(tmp_path, "parquet", "rocksdb", changelog=True, files=5)
    changes["spark"]["shuffle_partitions"] = 4
    changes["query"]["trigger"] = "1 second"
    path = write_settings(changes)
    settings = make_settings(changes)
    checkpoint = Path(settings.query.checkpoint_location)

    stopped = run_main("--settings", str(path), "--max-batches", "2")
    assert stopped.returncode == 0, stopped.stdout[-2000:] + stopped.stderr[-3000:]
    assert "batches committed (--max-batches 2): stopping once the batch in flight commits" in stopped.stdout
    last = committed_batches(checkpoint)[-1]
    assert f"stopped on a batch boundary: batch {last} committed, nothing in flight" in stopped.stdout
    assert max(int(path.name) for path in (checkpoint / "offsets").iterdir() if path.name.isdigit()) == last

    moved = repartition(path, "--partitions", "8")
    assert moved.returncode == 0, moved.stdout[-3000:] + moved.stderr[-3000:]
    assert f"done: batch {last + 1} holds the state in 8 partitions" in moved.stdout
    changes["spark"]["shuffle_partitions"] = 8
    changes["query"]["trigger"] = "available_now"
    run_job(write_settings(changes, name="settings-8.yaml"))
    assertDataFrameEqual(read_output(spark, settings.sink), batch_expectation(spark, settings))


# Where a repartition is killed, each seen from outside as the file that step makes: the copy being made,
# the copy whole, the runner's batch logged, the runner's batch committed, the sink's log entry for it,
# and the copy being removed once the new state counts.
KILL_STEPS = ("copying", "copied", "runner started", "runner committed", "output recorded", "copy discarded")
# The copy's steps are file operations, the same whatever the operator: the default bake kills at them,
# every operator's bake (three of them) at the steps of Spark's runner and the sink's log.
RUNNER_STEPS = ("runner started", "runner committed", "output recorded")
COPY_STEPS = tuple(step for step in KILL_STEPS if step not in RUNNER_STEPS)


def _reached(step: str, checkpoint: Path, output: Path, batch: int) -> bool:
    beside = [path.name for path in checkpoint.parent.iterdir()] if checkpoint.parent.is_dir() else []
    working = [name for name in beside if ".repartitioning-" in name]
    log = output / "_spark_metadata"
    return {
        "copying": any(name.endswith(".partial") for name in working),
        "copied": any(not name.endswith((".partial", ".removing")) for name in working),
        "runner started": (checkpoint / "offsets" / str(batch)).exists(),
        "runner committed": (checkpoint / "commits" / str(batch)).exists(),
        "output recorded": (log / str(batch)).exists() or (log / f"{batch}.compact").exists(),
        "copy discarded": any(name.endswith(".removing") for name in working),
    }[step]


def _kill_at(step: str, process, checkpoint: Path, output: Path, batch: int) -> str | None:
    """SIGKILL the process as soon as the step, or a later one, is seen: a short step (a small copy) can
    pass between two looks, and the kill then lands at the step the repartition has reached. That step,
    None when the process ended before (too fast to catch)."""
    later = KILL_STEPS[KILL_STEPS.index(step) :]
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline and process.poll() is None:
        try:
            reached = [candidate for candidate in later if _reached(candidate, checkpoint, output, batch)]
        except (FileNotFoundError, IndexError, ValueError):  # a file read while it is renamed or written
            reached = []
        if reached:
            # The whole group, Python and its JVM: a JVM whose Python parent alone is killed lives on until
            # it reads the end of its stdin, and its runner wrote into the checkpoint the recovery had just
            # put back (an offsets file's temporary, seen once in CI).
            os.killpg(process.pid, signal.SIGKILL)
            process.wait(timeout=60)
            return reached[-1]
        time.sleep(0.002)
    process.wait(timeout=60)
    return None


# The steps and the kills are the same for every operator's state (the rewrite of each operator's
# state is test_repartition_4_to_8_and_back_keeps_the_output_exact's, in every bake): the default bake only.
def test_a_repartition_killed_at_any_step_leaves_the_old_or_the_new_checkpoint(
    spark, make_settings, write_settings, tmp_path
):
    """Killed at each of its steps, the repartition leaves the old checkpoint and output, or the new ones,
    complete: the start and `check` name the one thing to do, `repartition` puts the checkpoint back
    byte for byte (or finds the new state done), and the job's output stays exact."""
    changes = files_job(tmp_path, "parquet", "rocksdb", changelog=True, files=4)
    changes["spark"]["shuffle_partitions"] = 4
    by_count = {4: write_settings(changes, name="settings-4.yaml")}
    changes["spark"]["shuffle_partitions"] = 8
    by_count[8] = write_settings(changes, name="settings-8.yaml")
    settings = make_settings(changes)
    checkpoint, output = Path(settings.query.checkpoint_location), Path(settings.sink.path)
    hold_back(settings, 2, tmp_path / "later")
    run_job(by_count[4])

    outcomes = []
    steps = COPY_STEPS if BAKED_OPERATOR == DEFAULT_OPERATOR else RUNNER_STEPS
    for step in steps:
        count = pinned_partitions(checkpoint)
        target = 8 if count == 4 else 4
        batch = committed_batches(checkpoint)[-1] + 1
        before, log_before = digest(checkpoint), digest(output / "_spark_metadata")
        with open(tmp_path / f"repartition-{step}.log", "w") as log:
            process = subprocess.Popen(
                [sys.executable, "-m", "stream_job", "repartition", "--settings", str(by_count[target])],
                cwd=PROJECT_DIR,
                stdout=log,
                stderr=log,
                env=clean_env(),
                start_new_session=True,  # its own process group: the kill takes its JVM with it
            )
            killed_at = _kill_at(step, process, checkpoint, output, batch)
        said = (tmp_path / f"repartition-{step}.log").read_text()
        # The last two steps are short: the repartition may have finished before the kill landed.
        assert killed_at or (step in ("output recorded", "copy discarded") and process.returncode == 0), (
            step,
            said[-3000:],
        )
        step = killed_at or step

        beside = [path.name for path in checkpoint.parent.iterdir() if ".repartitioning-" in path.name]
        working_copy = [name for name in beside if not name.endswith((".partial", ".removing"))]
        finished_new = not working_copy and pinned_partitions(checkpoint) == target
        if beside:
            # The start and check refuse with the one way on, before Spark starts: nothing changes.
            for refused in (
                run_main("--settings", str(by_count[count])),
                run_cli("check", "--settings", str(by_count[count])),
            ):
                assert refused.returncode == 4, refused.stdout[-2000:] + refused.stderr[-2000:]
                line = jvm_free(refused.stderr).strip()
                assert len(line.splitlines()) == 1, line
                assert "did not finish" in line or "left" in line, line
                if "did not finish" in line:
                    assert f"repartition --partitions {target} again" in line
        # repartition with the count the checkpoint now holds only puts things right, without Spark.
        now = target if finished_new else count
        recovery = run_cli("repartition", "--settings", str(by_count[now]), "--partitions", str(now))
        assert recovery.returncode in (0, 4), recovery.stdout[-2000:] + recovery.stderr[-2000:]
        if beside:
            assert recovery.returncode == 0 and "nothing to do" in recovery.stdout, recovery.stdout + recovery.stderr
        outcome = "new" if finished_new else "old"
        if finished_new:
            assert committed_batches(checkpoint)[-1] == batch
            assert (output / "_spark_metadata" / str(batch)).exists() or (
                output / "_spark_metadata" / f"{batch}.compact"
            ).exists()
        else:
            after = digest(checkpoint)
            after.pop(".running", None)
            before.pop(".running", None)
            assert after == before, step  # byte for byte the checkpoint before the repartition
            assert digest(output / "_spark_metadata") == log_before, step
        assert not [path for path in checkpoint.parent.iterdir() if ".repartition" in path.name], step
        outcomes.append((step, outcome))
    # The steps up to the runner's commit can only end in the old checkpoint.
    before_commit = [outcome for step, outcome in outcomes if KILL_STEPS.index(step) <= 3]
    assert before_commit == ["old"] * len(before_commit), outcomes

    # A last repartition into 8 partitions that runs through, then the rest of the input.
    if pinned_partitions(checkpoint) == 4:
        moved = repartition(by_count[8])
        assert moved.returncode == 0, moved.stdout[-3000:] + moved.stderr[-3000:]
    let_arrive(settings, 2, tmp_path / "later")
    run_job(by_count[8])
    assertDataFrameEqual(read_output(spark, settings.sink), batch_expectation(spark, settings))
