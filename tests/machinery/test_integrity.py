"""A checkpoint that checks itself: real faults in a RocksDB checkpoint with changelog checkpointing,
with the integrity features on (format version 2, file and row checksums, auto snapshot repair) and
off (format version 1, no row checksums, no repair). Each fault must end repaired, with the whole
output equal to the batch computation and a line saying what was skipped, or refused with a line
naming the file, the output untouched: never a silent wrong answer.

A first run of each feature set (three landing files, snapshots uploaded every version) is made once
and restored for each case; two more landing files then arrive and `python main.py` restarts.
"""

from __future__ import annotations

import shutil
from datetime import timedelta
from pathlib import Path

import pytest
import yaml
from pyspark.testing import assertDataFrameEqual
from stream_job.machinery.core.confs import INTEGRITY_CONFS
from stream_job.machinery.core.settings import SettingsError, load_settings
from stream_job.machinery.job.endpoints.output import read_output
from stream_job.machinery.job.endpoints.sample_input import write_sample_files
from stream_job.machinery.job.guard.checkpoint import check_checkpoint
from stream_job.machinery.job.guard.state_checks import snapshot_version
from stream_job.machinery.job.spark.session import spark_confs

from .conftest import (
    batch_expectation,
    clean_env,
    deep_merge,
    digest,
    files_job,
    run_main,
    run_python,
    write_settings_file,
)

pytestmark = [pytest.mark.streaming, pytest.mark.faults, pytest.mark.state_files]

ON = {"checkpoint_format_version": 2, "file_checksums": True, "row_checksums": True, "auto_snapshot_repair": True}
OFF = {"checkpoint_format_version": 1, "file_checksums": True, "row_checksums": False, "auto_snapshot_repair": False}
# A snapshot at every version, uploaded at once: so that a restart loads a snapshot, not only changelogs.
SNAPSHOT_EVERY_VERSION = {
    "spark.sql.streaming.stateStore.minDeltasForSnapshot": 1,
    "spark.sql.streaming.stateStore.maintenanceInterval": "100ms",
}
FEATURES = {"on": ON, "off": OFF}


class FirstRuns:
    """The first run of each feature set, made once (in its own process, where the maintenance
    interval applies) and restored into the same folder for each case: the checkpoint's file-source
    log and the parquet sink's log hold absolute paths."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder

    def restore(self, features: str) -> Path:
        work, pristine = self.folder / features, self.folder / f"{features}.pristine"
        if not pristine.exists():
            changes = files_job(work, "parquet", "rocksdb", changelog=True, files=3)
            changes = deep_merge(changes, {"state_store": {"integrity": FEATURES[features]}})
            changes["spark"]["conf"] = SNAPSHOT_EVERY_VERSION
            write_settings_file(work / "settings.yaml", changes)
            first = run_python("main.py", "--settings", str(work / "settings.yaml"), env=clean_env())
            assert first.returncode == 0, first.stderr[-3000:]
            shutil.copytree(work, pristine)
        shutil.rmtree(work)
        shutil.copytree(pristine, work)
        return work


@pytest.fixture(scope="module")
def first_runs(tmp_path_factory) -> FirstRuns:
    return FirstRuns(tmp_path_factory.mktemp("integrity"))


def newest_snapshot(store: Path) -> Path:
    snapshots = [path for path in store.glob("*.zip") if snapshot_version(path) is not None]
    assert snapshots, f"no snapshot was uploaded in {store}"
    return max(snapshots, key=lambda path: snapshot_version(path) or 0)


def flip_byte(path: Path) -> Path:
    """One bit of the middle byte flipped, the file's length kept: what bit rot or a bad copy leaves."""
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0x01
    path.write_bytes(bytes(data))
    return path


def restart(work: Path):
    write_sample_files(work / "landing", files=2, events_per_file=40, keys=4, advance_per_file=timedelta(minutes=2))
    return run_main("--settings", str(work / "settings.yaml"))


def test_a_damaged_snapshot_is_repaired_with_the_features_and_refused_naming_it_without(spark, first_runs):
    work = first_runs.restore("on")
    settings = load_settings(work / "settings.yaml")
    damaged = flip_byte(newest_snapshot(work / "checkpoint/state/0/0"))

    result = restart(work)

    assert result.returncode == 0, result.stderr[-3000:]
    said = [line for line in result.stdout.splitlines() if line.startswith(f"checkpoint: {damaged} is damaged")]
    assert said and "auto snapshot repair is on: Spark skips it" in said[0], result.stdout[-3000:]
    assertDataFrameEqual(read_output(spark, settings.sink), batch_expectation(spark, settings))

    # Without the features the same fault is refused before Spark starts, naming the file, nothing touched.
    work = first_runs.restore("off")
    damaged = flip_byte(newest_snapshot(work / "checkpoint/state/0/0"))
    before = digest(work)
    refused = run_main("--settings", str(work / "settings.yaml"))
    assert refused.returncode == 4, refused.stderr[-3000:]
    assert refused.stderr.strip().splitlines() == [
        f"checkpoint error: {damaged} is damaged (its zip checksum fails) and Spark would fail loading it: set"
        " state_store.integrity.auto_snapshot_repair to true (Spark then rebuilds that version from an older"
        " snapshot and the changelogs after it); or restore the checkpoint from a copy, or set"
        " query.checkpoint_location to a new directory and sink.path to an empty one, and reprocess the input from"
        " the start"
    ]
    assert digest(work) == before


def version_of(path: Path) -> int:
    return int(path.name.split("_")[0].split(".")[0])


def only_snapshot_cut(work: Path) -> tuple[Path, Path]:
    """Store 0/0 with its newest snapshot alone, cut to 0 bytes after a copy of the checkpoint was taken:
    (the snapshot, the copy)."""
    newest = newest_snapshot(work / "checkpoint/state/0/0")
    for snapshot in newest.parent.glob("*.zip"):
        if snapshot != newest:
            snapshot.unlink()
    copy = work / "checkpoint copy"
    shutil.copytree(work / "checkpoint", copy)
    newest.write_bytes(b"")
    return newest, copy


def test_a_damaged_first_snapshot_is_rebuilt_from_the_empty_state_or_refused_and_a_copy_restored(spark, first_runs):
    """The only snapshot of a store cut to 0 bytes: auto repair rebuilds it from version 0 while every
    changelog since is kept; once maintenance has deleted the first of them nothing can, and the way
    out that the refusal gives, a copy of the checkpoint put back, loses nothing."""
    work = first_runs.restore("on")
    settings = load_settings(work / "settings.yaml")
    newest, _ = only_snapshot_cut(work)
    loaded = version_of(newest)  # three landing files, one per batch: the snapshot of the last

    result = restart(work)

    assert result.returncode == 0, result.stderr[-3000:]
    assert (
        f"checkpoint: {newest} is damaged (its zip checksum fails); auto snapshot repair is on: Spark skips it and"
        f" rebuilds version {loaded} of that state store from the empty state (version 0) and the {loaded}"
        " changelogs after it"
    ) in result.stdout.splitlines(), result.stdout[-3000:]
    assertDataFrameEqual(read_output(spark, settings.sink), batch_expectation(spark, settings))
    # The in-process run unloaded its state stores, their maintenance done: no snapshot upload of its
    # lands in the checkpoint restored next (session.release_state_stores).
    state_store = getattr(spark.sparkContext._jvm.org.apache.spark.sql.execution.streaming.state, "StateStore$")
    assert not getattr(state_store, "MODULE$").isMaintenanceRunning()

    # Maintenance deleted the first changelog: the repair has nothing to start from, and says so.
    work = first_runs.restore("on")
    newest, copy = only_snapshot_cut(work)
    next(newest.parent.glob("1[._]*changelog")).unlink()
    write_sample_files(work / "landing", files=2, events_per_file=40, keys=4, advance_per_file=timedelta(minutes=2))
    before = digest(work)
    refused = run_main("--settings", str(work / "settings.yaml"))
    assert refused.returncode == 4, refused.stderr[-3000:]
    assert refused.stderr.strip().splitlines() == [
        f"checkpoint error: {newest} is damaged (its zip checksum fails) and Spark would fail loading it: auto"
        f" snapshot repair cannot rebuild version {loaded} of that state store: no sound snapshot below it has every"
        " changelog after it kept, within 500 versions; or restore the checkpoint from a copy, or set"
        " query.checkpoint_location to a new directory and sink.path to an empty one, and reprocess the input from"
        " the start"
    ]
    assert digest(work) == before

    # The way out: the checkpoint put back from the copy; the run goes on, its output whole.
    shutil.rmtree(work / "checkpoint")
    shutil.copytree(copy, work / "checkpoint")
    restored = run_main("--settings", str(work / "settings.yaml"))
    assert restored.returncode == 0, restored.stderr[-3000:]
    assertDataFrameEqual(read_output(spark, settings.sink), batch_expectation(spark, settings))


@pytest.mark.parametrize("features", ["on", pytest.param("off", marks=pytest.mark.secondary)])
def test_a_flipped_byte_in_a_changelog_is_refused_naming_the_file(first_runs, features):
    """The changelog of the newest version of a store whose snapshots are gone (as before its first
    upload), so that the restart must replay it."""
    work = first_runs.restore(features)
    store = work / "checkpoint/state/0/0"
    for snapshot in store.glob("*.zip*"):
        snapshot.unlink()
    changelogs = [path for path in store.glob("*.changelog") if path.name.split("_")[0].split(".")[0].isdigit()]
    damaged = flip_byte(max(changelogs, key=lambda path: int(path.name.split("_")[0].split(".")[0])))
    output_before = digest(work / "output")

    result = restart(work)

    assert result.returncode == 1, result.stdout[-2000:] + result.stderr[-3000:]
    errors = [line for line in result.stderr.splitlines() if line.startswith("checkpoint file: ")]
    assert errors == [f"checkpoint file: {damaged}"], result.stderr[-3000:]
    assert digest(work / "output") == output_before


def test_a_changed_format_version_or_row_checksums_is_refused_before_spark(first_runs):
    """Neither is read back by Spark from where it could tell: format version 2's files are named by
    unique ids the commit log holds, and row checksums are pinned in the offsets."""
    work = first_runs.restore("on")
    checkpoint = work / "checkpoint"
    before = digest(checkpoint)
    for field, value, held in (("checkpoint_format_version", 1, "2"), ("row_checksums", False, "true")):
        data = yaml.safe_load((work / "settings.yaml").read_text())
        data["state_store"]["integrity"][field] = value
        path = work / f"{field}.yaml"
        path.write_text(yaml.safe_dump(data, sort_keys=False))
        report = check_checkpoint(load_settings(path))
        assert [drift.setting for drift in report.drifts] == [f"state_store.integrity.{field}"]
        message = report.drifts[0].message(str(checkpoint))
        assert message.startswith(f"state_store.integrity.{field} is {str(value).lower()} in settings,"), message
        assert f"holds {held}:" in message and f"set state_store.integrity.{field} back to {held}" in message
    assert digest(checkpoint) == before


def test_the_integrity_settings_are_the_only_way_to_their_confs(make_settings):
    confs = spark_confs(make_settings({"state_store": {"provider": "rocksdb", "integrity": ON}}))
    assert {field: confs[conf] for field, conf in INTEGRITY_CONFS.items()} == {
        "checkpoint_format_version": "2",
        "file_checksums": "true",
        "row_checksums": "true",
        "auto_snapshot_repair": "true",
    }
    with pytest.raises(SettingsError) as caught:
        make_settings({"spark": {"conf": {INTEGRITY_CONFS["row_checksums"]: True}}})
    assert any("managed by the setting state_store.integrity.row_checksums" in line for line in caught.value.lines)
    with pytest.raises(SettingsError) as caught:
        hdfs = {"provider": "hdfs", "changelog_checkpointing": False, "integrity": {"checkpoint_format_version": 2}}
        make_settings({"state_store": hdfs})
    assert len(caught.value.lines) == 1 and "set integrity.checkpoint_format_version to 1" in caught.value.lines[0]
