"""Disk errors provoked for real: a read-only checkpoint, and a disk that fills up mid-run.

Both need a file system the test can make read-only or small. Without root that is a chmod; as
root (where chmod does not stop writes) it is a read-only bind mount and a small tmpfs, which need
the mount privilege: the tests skip where neither is possible.
"""

from __future__ import annotations

import errno
import os
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from pyspark.testing import assertDataFrameEqual
from stream_job.machinery.job.endpoints.output import read_output
from stream_job.machinery.job.run.runner import run_query
from stream_job.machinery.job.spark.session import apply_confs

from .conftest import (
    ANY_PROVIDER,
    BAKED_OPERATOR,
    batch_expectation,
    committed_batches,
    digest,
    files_job,
    run_cli,
    run_main,
    start_job,
)

pytestmark = [pytest.mark.streaming, pytest.mark.faults]
AS_ROOT = os.geteuid() == 0


def mount(*args: str) -> None:
    done = subprocess.run(["mount", *args], capture_output=True, text=True)
    if done.returncode != 0:
        pytest.skip(f"cannot mount here ({done.stderr.strip()}): root without the mount privilege")


@contextmanager
def read_only(folder: Path) -> Iterator[None]:
    if not AS_ROOT:
        modes = {path: path.stat().st_mode for path in [folder, *folder.rglob("*")] if path.is_dir()}
        for path in modes:
            path.chmod(0o555)
        try:
            yield
        finally:
            for path, mode in modes.items():
                path.chmod(mode)
        return
    mount("--bind", str(folder), str(folder))
    try:
        subprocess.run(["mount", "-o", "remount,ro,bind", str(folder)], check=True)
        yield
    finally:
        subprocess.run(["umount", "-l", str(folder)], check=True)


@contextmanager
def small_disk(folder: Path, size_mb: int) -> Iterator[None]:
    if not AS_ROOT:
        pytest.skip("a small file system needs a tmpfs mount, which needs root")
    folder.mkdir()
    mount("-t", "tmpfs", "-o", f"size={size_mb}m", "tmpfs", str(folder))
    try:
        yield
    finally:
        subprocess.run(["umount", "-l", str(folder)], check=True)


def fill(folder: Path) -> Path:
    """Write zeros into folder until the file system is full; returns the filler file."""
    filler = folder / "filler"
    with open(filler, "wb") as out:
        try:
            while True:
                out.write(b"\0" * (1 << 20))
                out.flush()
        except OSError as error:
            assert error.errno == errno.ENOSPC
    return filler


def test_a_read_only_checkpoint_is_refused_before_spark_and_check_still_reads_it(
    spark, make_settings, write_settings, tmp_path
):
    changes = files_job(tmp_path, "parquet", ANY_PROVIDER, files=2)
    settings = make_settings(changes)
    apply_confs(spark, settings)
    assert run_query(spark, settings).exception() is None
    checkpoint, output = tmp_path / "checkpoint", tmp_path / "output"
    before = digest(checkpoint), digest(output)
    path = write_settings(changes)

    with read_only(checkpoint):
        run = run_main("--settings", str(path))
        check = run_cli("check", "--settings", str(path))
    assert run.returncode == 2, run.stderr
    reason = "Read-only file system" if AS_ROOT else "Permission denied"
    assert run.stderr == (
        f"settings error: query.checkpoint_location = {str(checkpoint)!r}: cannot write in {checkpoint} ({reason});"
        " choose a directory this user can write to, or fix its permissions\n"
    )
    assert "Spark" not in run.stdout
    assert check.returncode == 0, check.stderr
    assert check.stdout.endswith(f"consistent with the settings and the query's {BAKED_OPERATOR} (last batch 2)\n")
    assert (digest(checkpoint), digest(output)) == before


def test_a_full_disk_mid_run_stops_the_job_clearly_and_a_restart_after_freeing_space_is_exact(
    spark, make_settings, write_settings, tmp_path
):
    disk = tmp_path / "disk"
    with small_disk(disk, size_mb=64):
        changes = files_job(tmp_path, "parquet", ANY_PROVIDER, files=8)
        changes["query"]["checkpoint_location"] = str(disk / "checkpoint")
        changes["sink"]["path"] = str(disk / "output")
        path = write_settings(changes)
        settings = make_settings(changes)
        checkpoint = Path(settings.query.checkpoint_location)

        with open(tmp_path / "full.log", "w") as log:
            process = start_job(path, log)
            deadline = time.monotonic() + 240
            while len(committed_batches(checkpoint)) < 2 and process.poll() is None and time.monotonic() < deadline:
                time.sleep(0.01)
            filler = fill(disk)
            process.wait(timeout=240)
        failed = (tmp_path / "full.log").read_text()
        assert process.returncode == 1, failed[-3000:]
        # Spark's own lines of the failed batch go to logs/spark.log (the console has the job's), named here.
        details = next(line for line in failed.splitlines() if line.startswith("details: "))
        assert "No space left on device" in Path(details.rsplit(" is in ", 1)[1]).read_text(errors="replace")
        assert f"disk full: query.checkpoint_location {checkpoint} has 0.0 MiB free\n" in failed
        assert f"disk full: sink.path {disk / 'output'} has 0.0 MiB free\n" in failed
        stopped_at = committed_batches(checkpoint)
        assert 2 <= len(stopped_at) < 9 and stopped_at == list(range(len(stopped_at)))
        # What the sink shows is whole batches only: every row is one the full run also writes.
        expected = batch_expectation(spark, settings)
        assert read_output(spark, settings.sink).exceptAll(expected).count() == 0

        filler.unlink()
        restart = run_main("--settings", str(path))
        assert restart.returncode == 0, restart.stderr[-3000:]
        assertDataFrameEqual(read_output(spark, settings.sink), expected)
