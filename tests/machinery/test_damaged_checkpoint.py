"""A damaged checkpoint: the job recovers correctly, or stops naming the file and the ways out.

Each case takes a real checkpoint (three landing files run through the windowed count, once per
store configuration and restored from a pristine copy for each case), damages one file the way a
crash or a bad copy would, adds two more landing files and starts
`python main.py`. It must never go on silently with wrong state: either the exit is 0 and the
whole output equals the batch computation over all five files, or the exit is non-zero, the
message names the damaged file, and the output is what the first run wrote, untouched.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path

import pytest
from pyspark.testing import assertDataFrameEqual
from stream_job.machinery.core.settings import load_settings
from stream_job.machinery.job.endpoints.output import read_output
from stream_job.machinery.job.endpoints.sample_input import write_sample_files
from stream_job.machinery.job.run.runner import run_query
from stream_job.machinery.job.spark.session import apply_confs

from .conftest import batch_expectation, digest, files_job, run_main, write_settings_file

pytestmark = [pytest.mark.streaming, pytest.mark.faults]

RECOVERY = "restore the checkpoint from a copy, or set query.checkpoint_location to a new directory"


def newest(folder: Path, suffix: str = "") -> Path:
    entries = [path for path in folder.iterdir() if path.name.removesuffix(suffix).isdigit()]
    return max(entries, key=lambda path: int(path.name.removesuffix(suffix)))


def truncate(path: Path, keep: float = 0.0) -> Path:
    path.write_bytes(path.read_bytes()[: int(path.stat().st_size * keep)])
    return path


def remove(path: Path) -> Path:
    path.unlink()
    return path


def remove_with_checksum(path: Path) -> Path:
    (path.parent / f".{path.name}.crc").unlink(missing_ok=True)
    return remove(path)


def digit_changed(path: Path) -> Path:
    """The first digit of a commit's watermark one higher: the record still parses."""
    text = path.read_text()
    at = text.index('"nextBatchWatermarkMs":') + len('"nextBatchWatermarkMs":')
    path.write_text(text[:at] + str((int(text[at]) + 1) % 10) + text[at + 1 :])
    return path


# case -> (configuration, damage(checkpoint) -> the damaged file, expected exit, expected message).
CASES: dict[str, tuple[str, Callable[[Path], Path], int, str]] = {
    "hdfs-newest-delta-truncated": ("hdfs", lambda cp: truncate(newest(cp / "state/0/0", ".delta")), 1, "file"),
    "hdfs-newest-delta-removed": ("hdfs", lambda cp: remove(newest(cp / "state/0/0", ".delta")), 1, "file"),
    "changelog-newest-truncated": (
        "rocksdb-changelog",
        lambda cp: truncate(newest(cp / "state/0/0", ".changelog")),
        1,
        "file",
    ),
    "rocksdb-newest-snapshot-removed": (
        "rocksdb",
        lambda cp: remove(newest(cp / "state/0/0", ".zip")).with_suffix(""),  # Spark asks for N.changelog
        1,
        "file",
    ),
    "offsets-half-written": ("hdfs", lambda cp: truncate(newest(cp / "offsets"), 0.5), 4, "guard"),
    "metadata-half-written": ("hdfs", lambda cp: truncate(cp / "metadata", 0.5), 4, "guard"),
    "state-metadata-half-written": ("hdfs", lambda cp: truncate(cp / "state/0/_metadata/metadata", 0.5), 4, "guard"),
    "commit-removed-checksum-left": ("hdfs", lambda cp: remove(newest(cp / "commits")), 4, "checksum"),
    "commit-removed-with-checksum": ("rocksdb", lambda cp: remove_with_checksum(newest(cp / "commits")), 0, "replay"),
    "commit-half-written": ("rocksdb-changelog", lambda cp: truncate(newest(cp / "commits"), 0.5), 4, "guard"),
    "commit-changed": ("hdfs", lambda cp: digit_changed(newest(cp / "commits")), 4, "checksum"),
}
# Refusals whose way on is to remove files: case -> (the words that say it, what doing it removes).
FOLLOWED: dict[str, tuple[str, Callable[[Path], object]]] = {
    "commit-removed-checksum-left": ("too, and Spark runs batch", lambda path: None),
    "commit-half-written": ("remove it and", remove_with_checksum),
    "commit-changed": ("remove it and", remove_with_checksum),
}
CONFIGURATIONS = {"hdfs": ("hdfs", False), "rocksdb": ("rocksdb", False), "rocksdb-changelog": ("rocksdb", True)}


class FirstRuns:
    """The first run of each configuration, made once and restored for each case that damages it.

    The checkpoint's file-source log and the parquet sink's log hold absolute paths, so a case
    works in the very folder its first run used: restored there from the pristine copy."""

    def __init__(self, spark, folder: Path) -> None:
        self.spark, self.folder = spark, folder

    def restore(self, configuration: str) -> Path:
        work, pristine = self.folder / configuration, self.folder / f"{configuration}.pristine"
        if not pristine.exists():
            changes = files_job(work, "parquet", *CONFIGURATIONS[configuration], files=3)
            settings = load_settings(write_settings_file(work / "settings.yaml", changes))
            apply_confs(self.spark, settings)
            assert run_query(self.spark, settings).exception() is None
            shutil.copytree(work, pristine)
        shutil.rmtree(work)
        shutil.copytree(pristine, work)
        return work


@pytest.fixture(scope="module")
def first_runs(spark, tmp_path_factory) -> FirstRuns:
    return FirstRuns(spark, tmp_path_factory.mktemp("first-runs"))


@pytest.mark.parametrize("case", CASES)
def test_damaged_checkpoint_recovers_or_stops_naming_the_file(spark, first_runs, case):
    configuration, damage, exit_code, outcome = CASES[case]
    work = first_runs.restore(configuration)
    path = work / "settings.yaml"
    settings = load_settings(path)
    checkpoint = work / "checkpoint"
    damaged = damage(checkpoint)
    write_sample_files(work / "landing", files=2, events_per_file=40, keys=4, advance_per_file=timedelta(minutes=2))
    output_before = digest(work / "output")

    result = run_main("--settings", str(path))

    assert result.returncode == exit_code, result.stderr[-3000:]
    if outcome == "replay":  # Spark runs the uncommitted batch again, and the rest
        assertDataFrameEqual(read_output(spark, settings.sink), batch_expectation(spark, settings))
        return
    errors = [line for line in result.stderr.splitlines() if line.startswith(("checkpoint", "query", "The checkpoint"))]
    if outcome == "file":  # Spark failed loading the state; the job names the file
        assert any(line.startswith(f"checkpoint file: {damaged}") for line in errors), "\n".join(errors)
        assert any(RECOVERY in line for line in errors), errors
    elif outcome == "guard":  # found before Spark starts
        assert errors == [f"checkpoint error: {damaged}: " + errors[0].split(": ", 2)[2]], errors
        assert RECOVERY in errors[0]
    elif damaged.exists():  # changed after Spark wrote it: Spark would read it as it is
        assert errors[0].startswith(f"checkpoint error: {damaged} does not match its checksum"), errors
    else:  # the commit's checksum file left behind: Spark would blame "concurrent queries"
        checksum = damaged.parent / f".{damaged.name}.crc"
        assert errors[0].startswith(f"checkpoint error: {checksum} is left without {damaged}"), errors
    assert digest(work / "output") == output_before  # nothing written on a failed start
    if case in FOLLOWED:  # the way on the line gives, followed: the batch runs again, nothing lost
        words, removal = FOLLOWED[case]
        assert words in errors[0], errors
        removal(damaged)
        (damaged.parent / f".{damaged.name}.crc").unlink(missing_ok=True)
        again = run_main("--settings", str(path))
        assert again.returncode == 0, again.stderr[-3000:]
        assertDataFrameEqual(read_output(spark, settings.sink), batch_expectation(spark, settings))
