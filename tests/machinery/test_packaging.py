"""`package`: the zip for --py-files and the spark-submit line, without starting Spark (the
standalone cluster test runs that line)."""

from __future__ import annotations

import shlex
import shutil
import zipfile
from pathlib import Path

import pytest

from .conftest import PROJECT_DIR, clean_env, run_cli, run_python


def test_package_zips_every_module_and_prints_the_submit_line(write_settings, tmp_path):
    # A rate source and a parquet sink need no connector JARs: no --packages.
    plain = {"source": {"type": "rate"}, "sink": {"type": "parquet"}}
    settings = write_settings({"spark": {"master": "spark://10.0.0.5:7077"}, **plain})
    result = run_cli("package", "--settings", str(settings), "--out", str(tmp_path / "dist"))
    assert result.returncode == 0, result.stderr
    zip_path = tmp_path / "dist" / "stream_job.zip"
    zipped = zipfile.ZipFile(zip_path).namelist()
    modules = sorted(str(path.relative_to(PROJECT_DIR)) for path in (PROJECT_DIR / "stream_job").rglob("*.py"))
    # What a cluster never runs stays out: the local Kafka broker, bench and its scratch runs, and the tests' surface.
    bench = ["bench", "bench_run", "bench_report", "scratch_run", "store_configurations"]
    left_out = ["stream_job/machinery/testing.py", *(f"stream_job/machinery/operations/{name}.py" for name in bench)]
    left_out += ["stream_job/machinery/operations/local_kafka.py"]
    assert sorted(zipped) == sorted(set(modules) - set(left_out))
    # The job's command line starts from the zip alone, as the driver does on a cluster.
    alone = tmp_path / "driver"
    alone.mkdir()
    shutil.copy(PROJECT_DIR / "main.py", alone)
    env = {**clean_env(), "PYTHONPATH": str(zip_path)}
    started = run_python("main.py", "--help", cwd=alone, env=env)
    assert (started.returncode, started.stderr) == (0, "")
    assert "--max-batches" in started.stdout
    commands = run_python("-m", "stream_job", "--help", cwd=alone, env=env)
    assert commands.returncode == 0, commands.stderr
    assert "bench" in commands.stdout and "kafka" in commands.stdout  # listed; their tools are not shipped
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
