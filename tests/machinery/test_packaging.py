"""`package`: the zip for --py-files and the spark-submit line, without starting Spark (the
standalone cluster test runs that line)."""

from __future__ import annotations

import shlex
import zipfile
from pathlib import Path

import pytest

from .conftest import PROJECT_DIR, run_cli


def test_package_zips_every_module_and_prints_the_submit_line(write_settings, tmp_path):
    # A rate source and a parquet sink need no connector JARs: no --packages.
    plain = {"source": {"type": "rate"}, "sink": {"type": "parquet"}}
    settings = write_settings({"spark": {"master": "spark://10.0.0.5:7077"}, **plain})
    result = run_cli("package", "--settings", str(settings), "--out", str(tmp_path / "dist"))
    assert result.returncode == 0, result.stderr
    zipped = zipfile.ZipFile(tmp_path / "dist" / "stream_job.zip").namelist()
    modules = sorted(str(path.relative_to(PROJECT_DIR)) for path in (PROJECT_DIR / "stream_job").rglob("*.py"))
    assert sorted(zipped) == modules
    assert shlex.split(result.stdout) == [
        "spark-submit", "--master", "spark://10.0.0.5:7077", "--deploy-mode", "client",
        "--py-files", str(tmp_path / "dist" / "stream_job.zip"), "--files", str(settings),
        "main.py", "--settings", str(settings),
    ]  # fmt: skip


@pytest.mark.delta_spark
def test_cluster_mode_reads_the_shipped_copy_and_delta_brings_its_package(write_settings, tmp_path):
    delta = {"type": "delta", "delta": {"writer": "delta-spark", "version": "4.4.0"}}
    settings = write_settings({"source": {"type": "rate"}, "sink": delta})
    result = run_cli(
        "package", "--settings", str(settings), "--out", str(tmp_path), "--master", "yarn", "--deploy-mode", "cluster"
    )
    assert result.returncode == 0, result.stderr
    command = shlex.split(result.stdout)
    (coordinate,) = command[command.index("--packages") + 1].split(",")
    assert coordinate.startswith("io.delta:delta-spark_4.") and coordinate.endswith(":4.4.0")
    # In cluster mode the driver runs on the cluster, where --files put settings.yaml in its folder.
    assert command[-3:] == ["main.py", "--settings", Path(settings).name]
    refused = run_cli("package", "--settings", str(settings), "--deploy-mode", "remote")
    assert refused.returncode == 2 and "invalid choice: 'remote'" in refused.stderr
