"""`savepoint`: a stopped job's checkpoint and output taken whole, moved to new folders, and continued.

The job runs as its own process on the files source (available-now, one landing file per batch). After
the first half of the input, a savepoint is taken; the checkpoint, the output and the landing folder are
then deleted or moved away, and the savepoint is restored into other folders (the landing folder's new
place given too). Nothing under the new folders names an old one, `verify` finds the state rows of the
manifest, and the job, pointed at the new folders, reads the second half: its whole output equals the
same computation as a batch job on all the files. Each refusal is one line and changes nothing.
"""

from __future__ import annotations

import re
import shlex
import shutil
from pathlib import Path

import pytest
import yaml
from pyspark.testing import assertDataFrameEqual
from stream_job.machinery.core.checkpoint.path_records import moved_uri
from stream_job.machinery.core.checkpoint.run_lock import holding
from stream_job.machinery.core.settings import ENV_PREFIX, load_settings
from stream_job.machinery.job.endpoints.output import read_output

from .conftest import ANY_PROVIDER, batch_expectation, committed_batches, deep_merge, digest, files_job, run_cli
from .test_repartition import hold_back, let_arrive, run_job

pytestmark = [pytest.mark.streaming, pytest.mark.state_files]


def refused(*args: str, expected: str, code: int = 4) -> str:
    result = run_cli("savepoint", *args)
    assert result.returncode == code, result.stdout[-2000:] + result.stderr[-3000:]
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and expected in lines[0], result.stderr
    return lines[0]


def files_naming(folder: Path, old: list[Path]) -> list[str]:
    """Files under folder whose bytes name one of the old folders."""
    return [
        str(path)
        for path in folder.rglob("*")
        if path.is_file() and any(str(place).encode() in path.read_bytes() for place in old)
    ]


def test_a_job_moved_by_a_savepoint_goes_on_to_the_batch_computations_output(spark, write_settings, tmp_path):
    changes = files_job(tmp_path, "parquet", ANY_PROVIDER, files=4)
    settings_path = write_settings(changes)
    settings = load_settings(settings_path)
    checkpoint, output = Path(settings.query.checkpoint_location), Path(settings.sink.path)
    landing = Path(settings.source.files.path)
    hold_back(settings, 2, tmp_path / "later")
    run_job(settings_path)
    last = committed_batches(checkpoint)[-1]
    savepoint = tmp_path / "savepoints" / "before-move"

    # Refusals before anything is copied: a job on the checkpoint, a filled target, a batch not committed.
    before = digest(checkpoint)
    with holding(str(checkpoint), "the test", settings.query.lease_seconds):
        line = refused("create", "--settings", str(settings_path), str(savepoint), expected="is in use by process")
        assert line.startswith("savepoint refused: ") and "stop the job first" in line
    filled = tmp_path / "filled"
    (filled / "notes.txt").parent.mkdir()
    (filled / "notes.txt").write_text("mine")
    refused("create", "--settings", str(settings_path), str(filled), expected=f"{filled} is not an empty folder")
    half = tmp_path / "half-batch"
    shutil.copytree(checkpoint, half)
    for name in (str(last), f".{last}.crc"):  # the job killed before it wrote the commit record
        (half / "commits" / name).unlink()
    half_settings = write_settings(deep_merge(changes, {"query": {"checkpoint_location": str(half)}}), name="half.yaml")
    line = refused("create", "--settings", str(half_settings), str(savepoint), expected=f"batch {last} of {half}")
    assert "is logged but not committed" in line and "--max-batches 1" in line
    assert digest(checkpoint) == before and not savepoint.exists() and (filled / "notes.txt").read_text() == "mine"

    made = run_cli("savepoint", "create", "--settings", str(settings_path), str(savepoint))
    assert made.returncode == 0, made.stdout[-2000:] + made.stderr[-3000:]
    assert f"done: {savepoint} holds batch {last} of query" in made.stdout
    assert "  operator 0 (" in made.stdout and " rows" in made.stdout
    assert digest(checkpoint) == before

    # The originals gone: deleted, and the landing folder moved (the second half lands in its new place).
    shutil.rmtree(checkpoint)
    shutil.rmtree(output)
    moved = tmp_path / "elsewhere"
    moved.mkdir()
    # Spaces in the new names: Spark writes them %20-encoded in some files and as they are in others; and
    # ' #', where YAML cuts an unquoted value.
    new = {"checkpoint": moved / "state of job #2", "output": moved / "new output", "landing": moved / "new landing"}
    landing.rename(new["landing"])
    restored = run_cli(
        "savepoint",
        "restore",
        str(savepoint),
        "--checkpoint",
        str(new["checkpoint"]),
        "--output",
        str(new["output"]),
        "--landing",
        str(new["landing"]),
    )
    assert restored.returncode == 0, restored.stdout[-2000:] + restored.stderr[-3000:]
    # What to set, printed as YAML reads it pasted after its key, and as environment variables.
    wanted = {
        "query.checkpoint_location": new["checkpoint"],
        "sink.path": new["output"],
        "source.files.path": new["landing"],
    }
    printed = dict(re.findall(r"^  ([a-z_.]+): (.+)$", restored.stdout, re.MULTILINE))
    assert {key: yaml.safe_load(f"{key}: {value}")[key] for key, value in printed.items()} == {
        key: str(path) for key, path in wanted.items()
    }
    exported = dict(re.findall(r"^  export (\w+)=(.+)$", restored.stdout, re.MULTILINE))
    assert {name: shlex.split(value) for name, value in exported.items()} == {
        ENV_PREFIX + key.upper().replace(".", "__"): [str(path)] for key, path in wanted.items()
    }
    assert files_naming(new["checkpoint"], [checkpoint, output, landing]) == []
    assert files_naming(new["output"], [checkpoint, output, landing]) == []
    assert any(path.is_file() for path in (new["checkpoint"] / "sources").rglob("*"))

    checked = run_cli(
        "savepoint", "verify", str(savepoint), "--checkpoint", str(new["checkpoint"]), "--output", str(new["output"])
    )
    assert checked.returncode == 0, checked.stdout[-2000:] + checked.stderr[-3000:]
    assert "the restored files match the manifest" in checked.stdout

    moved_changes = deep_merge(
        changes,
        {
            "query": {"checkpoint_location": str(new["checkpoint"])},
            "sink": {"path": str(new["output"])},
            "source": {"files": {"path": str(new["landing"])}},
        },
    )
    moved_settings = write_settings(moved_changes, name="moved.yaml")
    (tmp_path / "later" / landing.name).rename(tmp_path / "later" / new["landing"].name)  # held back for it
    let_arrive(load_settings(moved_settings), 2, tmp_path / "later")
    run_job(moved_settings)
    assert committed_batches(new["checkpoint"])[-1] > last
    settings_now = load_settings(moved_settings)
    assertDataFrameEqual(read_output(spark, settings_now.sink), batch_expectation(spark, settings_now))

    # Both ways: a file the manifest does not list is named (a stray data file in the output would be read as
    # output, an extra offsets file as a batch); and no restore into the savepoint, or into a job's checkpoint.
    stray = savepoint / "output" / "part-stray.snappy.parquet"
    shutil.copy2(next((savepoint / "output").glob("*.parquet")), stray)
    line = refused("verify", str(savepoint), expected=f"{stray} is not in the savepoint's manifest")
    assert line.startswith("savepoint error: ")
    stray.unlink()
    extra = savepoint / "checkpoint" / "offsets" / "999"
    extra.write_text("v1\n{}\n")
    refused("verify", str(savepoint), expected=f"{extra} is not in the savepoint's manifest")
    extra.unlink()
    inside = savepoint / "restored"
    refused(
        "restore",
        str(savepoint),
        "--checkpoint",
        str(inside),
        "--output",
        str(tmp_path / "o"),
        expected=f"{inside} overlaps the savepoint {savepoint}",
    )
    nested = new["checkpoint"] / "restored"
    refused(
        "restore",
        str(savepoint),
        "--checkpoint",
        str(nested),
        "--output",
        str(tmp_path / "o"),
        expected=f"{nested} is inside {new['checkpoint']}, a checkpoint",
    )
    assert not inside.exists() and not nested.exists() and not (tmp_path / "o").exists()

    # A damaged savepoint: verify names the file; restore refuses it and writes nothing.
    target = next(path for path in sorted((savepoint / "checkpoint" / "state").rglob("*")) if path.is_file())
    target.write_bytes(target.read_bytes()[:-1] + bytes([target.read_bytes()[-1] ^ 1]))
    line = refused("verify", str(savepoint), expected=f"{target} differs from the manifest")
    assert line.startswith("savepoint error: ") and "the savepoint is damaged" in line
    again = tmp_path / "again"
    refused(
        "restore",
        str(savepoint),
        "--checkpoint",
        str(again / "cp"),
        "--output",
        str(again / "out"),
        expected=str(target),
    )
    refused(
        "restore",
        str(savepoint),
        "--checkpoint",
        str(new["checkpoint"]),
        "--output",
        str(again / "out"),
        expected=f"{new['checkpoint']} is not an empty folder",
    )
    assert not again.exists()


def test_moved_paths_read_exactly_as_spark_writes_them(spark, tmp_path):
    """The files source matches the files it lists with its log as strings: a moved folder's entries must be
    the very strings Spark writes for the new folder, in both forms it writes (Hadoop's Path.toUri, encoded,
    and Path.toString, as it is), whatever the folder's name holds."""
    hadoop_path = spark._jvm.org.apache.hadoop.fs.Path
    files = hadoop_path(str(tmp_path)).getFileSystem(spark._jsc.hadoopConfiguration())
    old, new = tmp_path / "old", tmp_path / "a b#c%d@e+f,g;h=i$j&k'l(m)n!o~p:q é[r]{s}"
    for name in ("events-1.json", "x y%25.json"):
        before, after = (files.makeQualified(hadoop_path(str(folder / name))) for folder in (old, new))
        assert moved_uri(before.toUri().toString(), [(old, new)]) == after.toUri().toString()
        assert moved_uri(before.toString(), [(old, new)]) == after.toString()
