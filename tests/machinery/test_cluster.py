"""The job on a real Spark standalone cluster on this machine: a master and two workers on
127.0.0.1, the job submitted in client mode with the command `package` prints (the package zipped
for --py-files, settings.yaml by --files), one worker killed (with its executor) mid-run, and the
exact output at the end. Every daemon is stopped by its process group, even when the test fails."""

from __future__ import annotations

import json
import os
import re
import shlex
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from pyspark.testing import assertDataFrameEqual
from stream_job.machinery.job.endpoints.output import read_output

from .conftest import (
    PROJECT_DIR,
    PROJECT_SETTINGS,
    batch_expectation,
    clean_env,
    committed_batches,
    files_job,
    run_cli,
)

pytestmark = [pytest.mark.streaming, pytest.mark.faults, pytest.mark.cluster]

SPARK_HOME = Path(__import__("pyspark").__file__).resolve().parent
BIN = Path(sys.executable).parent


def start_daemon(log: Path, *arguments: str) -> subprocess.Popen:
    """A Spark daemon in its own process group, so that its executors go with it."""
    command = [str(SPARK_HOME / "bin" / "spark-class"), *arguments]
    env = {**clean_env(), "SPARK_HOME": str(SPARK_HOME)}
    return subprocess.Popen(command, stdout=open(log, "w"), stderr=subprocess.STDOUT, env=env, start_new_session=True)


def bound_port(log: Path, service: str) -> int:
    """The port a daemon bound for a service, from its log ("Successfully started service ... on port N")."""
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        found = re.search(rf"Successfully started service '{service}' on port (\d+)", log.read_text(errors="replace"))
        if found:
            return int(found.group(1))
        time.sleep(0.2)
    raise AssertionError(f"{service} did not say its port in 60 s: {log.read_text(errors='replace')[-2000:]}")


def stop_group(process: subprocess.Popen) -> None:
    for number in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(process.pid, number)
        except ProcessLookupError:
            return
        try:
            process.wait(timeout=10)
            return
        except subprocess.TimeoutExpired:
            continue


def alive_workers(webui_port: int) -> int:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{webui_port}/json/", timeout=2) as page:
            return sum(worker["state"] == "ALIVE" for worker in json.load(page)["workers"])
    except OSError:
        return 0


@pytest.fixture
def standalone_cluster(tmp_path: Path) -> Iterator[tuple[str, list[subprocess.Popen]]]:
    # Port 0: the master binds free ports itself and says which (a port chosen here could be taken first).
    processes = [
        start_daemon(
            tmp_path / "master.log", "org.apache.spark.deploy.master.Master",
            "--host", "127.0.0.1", "--port", "0", "--webui-port", "0",
        )
    ]  # fmt: skip
    try:
        port, webui = (
            bound_port(tmp_path / "master.log", "sparkMaster"),
            bound_port(tmp_path / "master.log", "MasterUI"),
        )
        for number in (1, 2):
            processes.append(
                start_daemon(
                    tmp_path / f"worker{number}.log", "org.apache.spark.deploy.worker.Worker",
                    "--host", "127.0.0.1", "--cores", "1", "--memory", "1g", "--webui-port", "0",
                    "--work-dir", str(tmp_path / f"work{number}"), f"spark://127.0.0.1:{port}",
                )
            )  # fmt: skip
        deadline = time.monotonic() + 60
        while alive_workers(webui) < 2:
            assert time.monotonic() < deadline, "the standalone cluster did not come up in 60 s"
            time.sleep(0.5)
        yield f"spark://127.0.0.1:{port}", processes[1:]
    finally:
        for process in reversed(processes):
            stop_group(process)


def test_a_worker_killed_mid_run_loses_nothing_on_a_standalone_cluster(
    spark, make_settings, write_settings, tmp_path, standalone_cluster
):
    master, workers = standalone_cluster
    # The project's own operator and state store: RocksDB must reload a lost executor's state elsewhere.
    store = yaml.safe_load(PROJECT_SETTINGS.read_text())["state_store"]
    # A worker killed once 4 batches are committed: 4 more and the closing one run without it.
    changes = files_job(tmp_path, "parquet", store["provider"], store["changelog_checkpointing"], files=8)
    path = write_settings(changes)
    settings = make_settings(changes)
    package = run_cli("package", "--settings", str(path), "--out", str(tmp_path / "dist"), "--master", master)
    assert package.returncode == 0, package.stderr
    assert (tmp_path / "dist" / "stream_job.zip").is_file()
    command = shlex.split(package.stdout)
    assert command[:5] == ["spark-submit", "--master", master, "--deploy-mode", "client"]
    # This machine's workers have 1 core and 1 GiB each; the executors must fit in them.
    command[5:5] = ["--conf", "spark.executor.memory=512m", "--conf", "spark.executor.cores=1"]
    command[0] = str(BIN / "spark-submit")
    env = {**clean_env(), "PYSPARK_PYTHON": sys.executable, "PATH": f"{BIN}:{os.environ['PATH']}"}
    with open(tmp_path / "job.log", "w") as log:
        # Its own process group: spark-submit's JVM and the Python driver it starts go together.
        job = subprocess.Popen(
            command, cwd=PROJECT_DIR, stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True
        )
        try:
            deadline = time.monotonic() + 180
            while len(committed_batches(settings.query.checkpoint_location)) < 4:
                assert job.poll() is None, (tmp_path / "job.log").read_text()[-3000:]
                assert time.monotonic() < deadline, "the job did not commit 4 batches in 180 s"
                time.sleep(0.2)
            os.killpg(workers[0].pid, signal.SIGKILL)  # the worker and its executor: a lost machine
            job.wait(timeout=300)
        finally:
            stop_group(job)
    log_text = (tmp_path / "job.log").read_text()
    assert job.returncode == 0, log_text[-3000:]
    assert "Lost executor" in log_text
    assert committed_batches(settings.query.checkpoint_location) == list(range(9))
    assertDataFrameEqual(read_output(spark, settings.sink), batch_expectation(spark, settings))
