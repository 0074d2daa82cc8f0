"""A checkpoint whose path has a space, '#' and '%', and one whose folders this user may not write.

One short job run (3 files, RocksDB, 2 partitions) makes the checkpoint; each test works on it or on a
copy. Spark's state readers and its repartition runner mangled such a path ("the checkpoint may be
damaged"); a folder made read-only read as damage too, where the fix is a permission.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from datetime import timedelta
from pathlib import Path
from urllib.parse import unquote, urlparse

import pytest
import yaml
from stream_job.machinery.core.checkpoint import path_records
from stream_job.machinery.job.endpoints.sample_input import write_sample_files

from .conftest import (
    PROJECT_DIR,
    clean_env,
    committed_batches,
    digest,
    files_job,
    jvm_free,
    run_cli,
    run_main,
    write_settings_file,
)

pytestmark = pytest.mark.streaming
AWKWARD = "a checkpoint #1 %41"


@pytest.fixture(scope="module")
def awkward(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A folder holding landing, output, the checkpoint (AWKWARD) and settings.yaml, after one run."""
    folder = tmp_path_factory.mktemp("paths")
    changes = files_job(folder, "parquet", "rocksdb", files=3)
    changes["query"]["checkpoint_location"] = str(folder / AWKWARD)
    path = write_settings_file(folder / "settings.yaml", changes)
    result = run_main("--settings", str(path))
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-3000:]
    return folder


def copied(folder: Path, into: Path) -> Path:
    """The job's folder copied as `cp -r` copies it, its settings pointing at the copy."""
    shutil.copytree(folder, into)
    settings = into / "settings.yaml"
    moved = json.dumps(yaml.safe_load(settings.read_text())).replace(json.dumps(str(folder))[1:-1], str(into))
    settings.write_text(yaml.safe_dump(json.loads(moved), sort_keys=False))
    return into


def copy_of(folder: Path, into: Path) -> Path:
    """The job's folder copied, and the paths Spark wrote into its checkpoint moved with it (as savepoint
    restore moves them): the file source's log names the copy's landing files."""
    copied(folder, into)
    for path in path_records.uris_in(into / AWKWARD):
        path_records.rewrite(path, [(folder, into)])
    return into


def test_a_job_folder_copied_without_its_paths_moved_is_refused_before_reading_its_files_again(awkward, tmp_path):
    """`cp -r` of a project: the file source's log names the files by the old folder's paths, so Spark
    read every landing file again, each result written twice. Refused, naming both folders."""
    folder = copied(awkward, tmp_path / "copy")
    before = digest(folder)
    result = run_main("--settings", str(folder / "settings.yaml"))
    assert result.returncode == 4, result.stderr[-3000:]
    assert (
        result.stderr.strip()
        .splitlines()[-1]
        .startswith(
            f"checkpoint error: source.files.path is {folder / 'landing'} in settings, but the checkpoint"
            f" {folder / AWKWARD} holds {awkward / 'landing'}: Spark's file source knows the files it read by their"
            " full path, and would read every file that moved with the checkpoint again, writing each result twice."
            f" Either set source.files.path back to {awkward / 'landing'}, or "
        )
    ), result.stderr[-3000:]
    assert digest(folder) == before


def inspect_json(*args: str) -> dict:
    result = run_cli("inspect", "--json", *args)
    assert result.returncode == 0, result.stderr[-3000:]
    return json.loads(result.stdout)


def test_inspect_reads_a_checkpoint_whose_path_has_a_space_hash_and_percent(awkward, tmp_path):
    before = digest(awkward / AWKWARD)
    found = inspect_json("--settings", str(awkward / "settings.yaml"))
    assert found["checkpoint"] == str(awkward / AWKWARD)
    plain = tmp_path / "plain"
    shutil.copytree(awkward / AWKWARD, plain)
    oracle = inspect_json("--checkpoint", str(plain))  # the same state at a path Spark takes as it is
    assert found["state_rows"] == oracle["state_rows"] > 0
    assert found["operators"] == oracle["operators"]
    assert digest(awkward / AWKWARD) == before


def test_repartition_moves_the_state_of_such_a_checkpoint(awkward, tmp_path):
    folder = copy_of(awkward, tmp_path / "copy #2 %")
    settings = folder / "settings.yaml"
    rows = inspect_json("--settings", str(settings))["state_rows"]
    result = run_cli("repartition", "--settings", str(settings), "--partitions", "4")
    if "has no state repartitioning" in result.stderr:
        pytest.skip(result.stderr.strip())
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-3000:]
    assert "damaged" not in result.stdout + result.stderr
    after = inspect_json("--settings", str(settings))
    assert after["state_rows"] == rows
    assert {operator["partitions"] for operator in after["operators"]} == {4}


def unprivileged() -> list[str]:
    """A command prefix under which a folder's mode bites: none for a user; for root, setpriv without the
    capabilities that let root read and write anywhere."""
    if os.geteuid() != 0:
        return []
    setpriv = shutil.which("setpriv")
    if setpriv is None:
        pytest.skip("root without setpriv: a chmod does not stop root")
    return [setpriv, "--bounding-set=-dac_override,-dac_read_search"]


def run_unprivileged(*args: str) -> subprocess.CompletedProcess[str]:
    command = [*unprivileged(), sys.executable, *args]
    return subprocess.run(command, cwd=PROJECT_DIR, capture_output=True, text=True, timeout=300, env=clean_env())


def test_a_checkpoint_folder_this_user_may_not_write_or_read_is_said_as_a_permission(awkward, tmp_path):
    """Read-only state folders: the run is refused before Spark, naming the folder and the chmod (it ran
    into Spark's commit error and read as damage); an unreadable offsets folder: check says so, no traceback."""
    folder = copy_of(awkward, tmp_path / "copy")
    checkpoint, settings = folder / AWKWARD, str(folder / "settings.yaml")
    state = checkpoint / "state"
    modes = {path: path.stat().st_mode for path in [state, *state.rglob("*")] if path.is_dir()}
    before = digest(folder)
    try:
        for path in modes:
            path.chmod(0o555)
        run = run_unprivileged("main.py", "--settings", settings)
        (checkpoint / "offsets").chmod(0)
        check = run_unprivileged("-m", "stream_job", "check", "--settings", settings)
    finally:
        (checkpoint / "offsets").chmod(0o755)
        for path, mode in modes.items():
            path.chmod(mode)
    assert run.returncode == 2, run.stdout[-2000:] + run.stderr[-3000:]
    assert run.stderr.splitlines() == [
        f"settings error: query.checkpoint_location = {str(checkpoint)!r}: this user cannot write in {state}, where"
        f" the job writes; give it write access to the whole folder (chmod -R u+rwX '{checkpoint}', or chown -R it"
        " to this user)"
    ]
    assert check.returncode == 2, check.stderr
    assert check.stderr.splitlines() == [
        f"permission error: {checkpoint / 'offsets'}: Permission denied for this user (nothing is damaged); give the"
        f" user that runs the job access: chmod -R u+rwX '{checkpoint / 'offsets'}' (or chown -R it to that user)"
    ]
    assert digest(folder) == before


def test_a_folder_made_read_only_while_the_job_runs_is_said_as_a_permission_not_damage(awkward, tmp_path):
    """The batch that meets it fails; the advice names the folder and the chmod, and restores nothing;
    followed, the job goes on from the failed batch, with no gap, to every landing file."""
    folder = copy_of(awkward, tmp_path / "running")
    checkpoint = folder / AWKWARD
    more = tmp_path / "more"
    write_sample_files(more, files=6, events_per_file=40, keys=4, advance_per_file=timedelta(minutes=2))
    for path in sorted(more.glob("events-*.json"))[3:]:  # later than what ran: three batches more
        path.rename(folder / "landing" / path.name.replace("events-", "events-1"))
    settings = folder / "settings.yaml"
    changes = yaml.safe_load(settings.read_text())
    changes["query"]["trigger"] = "1 second"
    settings.write_text(yaml.safe_dump(changes, sort_keys=False))
    state = checkpoint / "state"
    modes = {path: path.stat().st_mode for path in [state, *state.rglob("*")] if path.is_dir()}
    committed = len(committed_batches(checkpoint))
    with open(tmp_path / "job.log", "w") as log:
        job = subprocess.Popen(
            [*unprivileged(), sys.executable, "main.py", "--settings", str(settings), "--timeout", "240"],
            cwd=PROJECT_DIR,
            stdout=log,
            stderr=log,
            env=clean_env(),
        )
        try:
            deadline = time.monotonic() + 240
            while (
                len(committed_batches(checkpoint)) <= committed and job.poll() is None and time.monotonic() < deadline
            ):
                time.sleep(0.05)
            for path in modes:
                path.chmod(0o555)
            job.wait(timeout=240)
        finally:
            for path, mode in modes.items():
                path.chmod(mode)
    output = jvm_free((tmp_path / "job.log").read_text())
    assert job.returncode == 1, output[-3000:]
    lines = output.splitlines()
    advice = lines.index(next(line for line in lines if line.startswith("This user may not write there")))
    assert lines[advice - 1].startswith(f"not writable: {state}/")
    assert lines[advice] == (
        "This user may not write there (Permission denied): nothing is damaged, and nothing was committed past the"
        " last batch. To go on, give the user that runs the job write access: chmod -R u+rwX"
        f" '{checkpoint}' (or chown -R it to that user), then start again; the batch runs again."
    )
    assert "damaged there" not in output and "restore the checkpoint" not in output

    # The way on it gives: write access back (done above), then start again; the batch runs again.
    changes["query"]["trigger"] = "available_now"
    settings.write_text(yaml.safe_dump(changes, sort_keys=False))
    again = run_main("--settings", str(settings))
    assert again.returncode == 0, again.stderr[-3000:]
    batches = committed_batches(checkpoint)
    assert batches == list(range(len(batches))) and len(batches) > committed + 1, (committed, batches)
    read = {  # the file source's log: its merge files repeat the entries before them
        json.loads(line)["path"]
        for path in (checkpoint / "sources" / "0").glob("[0-9]*")
        for line in path.read_text().splitlines()[1:]
    }
    assert {Path(unquote(urlparse(uri).path)).name for uri in read} == {
        path.name for path in (folder / "landing").glob("*.json")
    }
