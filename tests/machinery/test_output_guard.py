"""Input and output that cannot silently lose data: the start refuses, in one line, a checkpoint whose
committed output is gone (the parquet sink's log, or a file it lists) or whose source is another kind
than the one that wrote its offsets. Each refusal leaves the checkpoint byte for byte as it was, and
the job, once the output is back, goes on to an output equal to the batch computation."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from pyspark.testing import assertDataFrameEqual
from stream_job.machinery.job.endpoints.output import read_output

from .conftest import ANY_PROVIDER, batch_expectation, digest, files_job, run_cli, run_main

pytestmark = [pytest.mark.streaming]


def refused_start(settings_path: Path, checkpoint: Path, expected: str) -> str:
    before = digest(checkpoint)
    result = run_main("--settings", str(settings_path))
    assert result.returncode == 4, result.stdout[-2000:] + result.stderr[-3000:]
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("checkpoint error: ") and expected in lines[0], result.stderr
    assert digest(checkpoint) == before
    return lines[0]


def test_lost_output_and_a_changed_source_are_refused_in_one_line(spark, make_settings, write_settings, tmp_path):
    changes = files_job(tmp_path, "parquet", ANY_PROVIDER, files=3)
    path = write_settings(changes)
    settings = make_settings(changes)
    checkpoint, output = Path(settings.query.checkpoint_location), Path(settings.sink.path)
    landing = Path(settings.source.files.path)
    later = tmp_path / "later"
    later.mkdir()
    for file in sorted(landing.iterdir())[2:]:
        file.rename(later / file.name)
    first = run_main("--settings", str(path))
    assert first.returncode == 0, first.stderr[-3000:]
    kept = tmp_path / "output-copy"
    shutil.copytree(output, kept)

    # The whole output deleted between runs: refused, and show-output says the same in one line.
    shutil.rmtree(output)
    refused_start(path, checkpoint, f"sink.path {output} has lost committed output: _spark_metadata")
    shown = run_cli("show-output", "--settings", str(path))
    assert shown.returncode == 4 and shown.stderr.startswith("show-output error: sink.path"), shown.stderr
    assert len(shown.stderr.strip().splitlines()) == 1

    # One committed data file deleted: named.
    shutil.copytree(kept, output)
    data_file = sorted(output.glob("*.parquet"))[0]
    data_file.unlink()
    refused_start(path, checkpoint, f"1 of the files its log lists as committed are gone ({data_file})")
    shutil.copy2(kept / data_file.name, data_file)

    # Another source on this checkpoint: the offsets of the files source cannot be read by the rate source.
    rate = write_settings({**changes, "source": {"type": "rate", "rate": {"rows_per_batch": 10}}}, name="rate.yaml")
    line = refused_start(rate, checkpoint, "source.type is rate-micro-batch in settings, but the checkpoint")
    assert "holds files: Spark continues a checkpoint from the offsets its source wrote" in line
    # The output put back: the job goes on, and nothing was lost.
    for file in later.iterdir():
        file.rename(landing / file.name)
    rest = run_main("--settings", str(path))
    assert rest.returncode == 0, rest.stderr[-3000:]
    assertDataFrameEqual(read_output(spark, settings.sink), batch_expectation(spark, settings))


def test_the_rate_sources_offsets_are_not_read_by_the_micro_batch_rate_source(write_settings, tmp_path):
    changes = {
        "source": {"type": "rate", "rate": {"rows_per_second": 100}},
        "sink": {"type": "parquet", "path": str(tmp_path / "output")},
        "query": {"checkpoint_location": str(tmp_path / "checkpoint"), "trigger": "1 second"},
        "spark": {"shuffle_partitions": 2, "master": "local[2]"},
        "state_store": {"provider": ANY_PROVIDER},
    }
    path = write_settings(changes)
    ran = run_main("--settings", str(path), "--max-batches", "1")
    assert ran.returncode == 0, ran.stderr[-3000:]
    micro = write_settings({**changes, "source": {"type": "rate", "rate": {"rows_per_batch": 100}}}, name="micro.yaml")
    line = refused_start(micro, tmp_path / "checkpoint", "source.type is rate-micro-batch in settings")
    assert "holds rate: Spark continues" in line and "set source.type back to rate," in line
