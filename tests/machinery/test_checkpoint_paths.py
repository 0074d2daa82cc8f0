"""A checkpoint whose path has a space, '#' and '%', one whose folders this user may not write, and a
job folder copied with it (`cp -r`), refused until a savepoint moves the paths Spark wrote.

One short job run (3 files, RocksDB, 2 partitions) makes the checkpoint; each test works on it or on a
copy. Spark's state readers and its repartition runner mangled such a path ("the checkpoint may be
damaged"); a folder made read-only read as damage too, where the fix is a permission.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
import sys
import time
from datetime import timedelta
from pathlib import Path
from urllib.parse import unquote, urlparse

import pytest
import yaml
from pyspark.testing import assertDataFrameEqual
from stream_job.machinery.core.checkpoint import path_records
from stream_job.machinery.core.checkpoint.files import START_OVER
from stream_job.machinery.core.checkpoint.sink_log import read_sink_log
from stream_job.machinery.core.settings import load_settings
from stream_job.machinery.job.endpoints.output import read_output
from stream_job.machinery.job.endpoints.sample_input import write_sample_files

from .conftest import (
    PROJECT_DIR,
    batch_expectation,
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
    """The job's folder copied, and the paths Spark wrote into it moved with it (as savepoint restore
    moves them): the file source's log names the copy's landing files, the sink's log its output's."""
    copied(folder, into)
    for path in path_records.uris_in(into):
        path_records.rewrite(path, [(folder, into)])
    return into


def land_later_files(landing: Path, scratch: Path) -> None:
    """Three files more into landing, their events after those of the fixture's three (in file order too)."""
    write_sample_files(scratch, files=6, events_per_file=40, keys=4, advance_per_file=timedelta(minutes=2))
    for path in sorted(scratch.glob("events-*.json"))[3:]:
        path.rename(landing / path.name.replace("events-", "events-1"))


def savepoint_way(written_for: Path, checkpoint: Path, output: Path, landing: Path) -> tuple[str, str]:
    """The end of the copy refusal's line, which gives the savepoint way out, and its restore command."""
    restore = (
        f"python -m stream_job savepoint restore SAVEPOINT --checkpoint {shlex.quote(str(checkpoint))} --output"
        f" {shlex.quote(str(output))} --landing {shlex.quote(str(landing))}"
    )
    return (
        "Move the job with its paths by a savepoint: in the project it was copied or moved from (the one holding"
        f" {written_for}), python -m stream_job savepoint create SAVEPOINT; here, move the copied"
        f" {shlex.quote(str(checkpoint))} and {shlex.quote(str(output))} aside, then {restore}; or {START_OVER}"
    ), restore


def test_a_copied_job_folder_is_refused_and_moved_by_the_savepoint_way_its_line_gives(awkward, spark, tmp_path):
    """`cp -r` of a project, checkpoint and all: the file source's log names the files it read by the
    original's paths (Spark would read every landing file again, each result twice), the parquet sink's
    log the files it committed (the copy's output would be read from the original's folder, and lost
    with it). Refused in one line naming both, and the way that moves the paths: a savepoint of the
    original, restored in the copy. Run as the line words it, the copy goes on alone, the original
    deleted: every file of its sink's log in its own output, which holds the batch computation's rows."""
    original = copy_of(awkward, tmp_path / "original")
    folder = copied(original, tmp_path / "copy")
    settings_path = folder / "settings.yaml"
    checkpoint, output, landing = folder / AWKWARD, folder / "output", folder / "landing"
    before = digest(folder)
    result = run_main("--settings", str(settings_path))
    assert result.returncode == 4, result.stdout[-2000:] + result.stderr[-3000:]
    way, restore = savepoint_way(original / "landing", checkpoint, output, landing)
    assert result.stderr.strip().splitlines() == [
        f"checkpoint error: source.files.path is {landing} in settings, but the checkpoint {checkpoint} holds"
        f" {original / 'landing'}: Spark's file source knows the files it read by their full path, and would read"
        " every file that moved with the checkpoint again, writing each result twice; sink.path is"
        f" {output} in settings, but its log {output / '_spark_metadata'} lists committed files in"
        f" {original / 'output'}: Spark reads the output through those paths, and it would be lost with that"
        f" folder. {way}"
    ]
    assert digest(folder) == before

    # The way out as the line words it: a savepoint in the original, restored here.
    savepoint = tmp_path / "savepoint #1"
    made = run_cli("savepoint", "create", "--settings", str(original / "settings.yaml"), str(savepoint))
    assert made.returncode == 0, made.stdout[-2000:] + made.stderr[-3000:]
    for copy in (checkpoint, output):
        copy.rename(tmp_path / f"aside {copy.name}")
    restored = run_cli(*shlex.split(restore.replace("SAVEPOINT", shlex.quote(str(savepoint))))[3:])
    assert restored.returncode == 0, restored.stdout[-2000:] + restored.stderr[-3000:]

    shutil.rmtree(original)
    land_later_files(landing, tmp_path / "later")
    ran = run_main("--settings", str(settings_path))
    assert ran.returncode == 0, ran.stdout[-2000:] + ran.stderr[-3000:]
    assert committed_batches(checkpoint)[-1] > json.loads((savepoint / "manifest.json").read_text())["batch"]
    log = read_sink_log(output)
    assert log is not None and log.live_files and all(output in path.parents for path in log.live_files), log
    shown = run_cli("show-output", "--settings", str(settings_path))
    assert shown.returncode == 0 and f"rows in {output}" in shown.stdout, shown.stderr[-3000:]
    settings = load_settings(settings_path)
    assertDataFrameEqual(read_output(spark, settings.sink), batch_expectation(spark, settings))


def test_a_copy_reading_the_originals_landing_is_refused_for_its_outputs_log(awkward, tmp_path):
    """What the copy refusal used to advise: the copy pointed back at the original's landing folder. Its
    checkpoint then reads right, but its output's log lists the original's files, which the copy would
    read there and lose with that folder: refused, both folders named, nothing changed."""
    original = copy_of(awkward, tmp_path / "original")
    folder = copied(original, tmp_path / "copy")
    settings_path = folder / "settings.yaml"
    changes = yaml.safe_load(settings_path.read_text())
    changes["source"]["files"]["path"] = str(original / "landing")
    settings_path.write_text(yaml.safe_dump(changes, sort_keys=False))
    checkpoint, output = folder / AWKWARD, folder / "output"
    before = digest(folder)
    result = run_main("--settings", str(settings_path))
    assert result.returncode == 4, result.stdout[-2000:] + result.stderr[-3000:]
    way, _ = savepoint_way(original / "output", checkpoint, output, original / "landing")
    assert result.stderr.strip().splitlines() == [
        f"checkpoint error: sink.path is {output} in settings, but its log {output / '_spark_metadata'} lists"
        f" committed files in {original / 'output'}: Spark reads the output through those paths, and it would be"
        f" lost with that folder. {way}"
    ]
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
    land_later_files(folder / "landing", tmp_path / "more")  # three batches more
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
