"""Starts at the same instant: two jobs that need connectors, and a job beside `inspect`.

Ivy's cache is not safe for two processes: two JVMs resolving `--packages` together in one Ivy home
corrupted each other's downloads (CI lost a run's shared session to it). The project resolves its
connectors once into connector-jars/, under a lock on the Ivy home, and starts every JVM from those
files. Here two jobs of one project, each needing both connectors (Kafka's source and the delta-spark
writer), start together in two rounds, the first from an empty Ivy home, the second against the
warm one it left, with the project's connector-jars/ emptied again, so that every round races on a
resolution. The Ivy home's repository is a mirror on the file system (ivysettings.xml names it, as a
company's mirror would be named): Maven Central's files as the user's Ivy cache holds them, so that an
empty Ivy home costs seconds of copying, not a minute of downloads: `python main.py`, and `make submit` (its `packages --submit-args`
resolves, then spark-submit starts from the files as --jars). Beside them, in the second round,
`inspect` starts its own JVM on the checkpoint the round before left. Every process starts and
finishes, every job writes its whole output.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
from stream_job.machinery.core.settings import load_settings
from stream_job.machinery.job.spark.connector_jars import (
    DEFAULT_IVY_HOME,
    JAR_LIST,
    JARS_FOLDER,
    LOCK_FILE,
    resolved_jars,
)
from stream_job.machinery.job.spark.connectors import resolution_confs
from stream_job.machinery.job.spark.session import log_dir

from .conftest import PROJECT_DIR, clean_env, kafka_job, project_copy, write_settings_file

pytestmark = [pytest.mark.kafka, pytest.mark.delta_spark, pytest.mark.concurrent]

ROUNDS = 2  # one from an empty Ivy home, one against the warm one it left (every warm round races alike)
WAITED = "connectors: waiting for another start resolving JARs in"
# A repository in Ivy's own layout: the descriptors and JARs a resolution left in an Ivy cache.
MIRROR = """<ivysettings>
  <settings defaultResolver="mirror"/>
  <resolvers>
    <filesystem name="mirror">
      <ivy pattern="{cache}/[organisation]/[module]/ivy-[revision].xml"/>
      <artifact pattern="{cache}/[organisation]/[module]/[type]s/[artifact]-[revision](-[classifier]).[ext]"/>
    </filesystem>
  </resolvers>
</ivysettings>
"""


def started_together(project: Path, commands: list[list[str]]) -> list[subprocess.CompletedProcess[str]]:
    """Each command, run in the project, started at once; their results when all have ended."""
    processes = [
        subprocess.Popen(
            command,
            cwd=project,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=clean_env(),
        )
        for command in commands
    ]
    results = []
    for command, process in zip(commands, processes, strict=True):
        stdout, stderr = process.communicate(timeout=600)
        results.append(subprocess.CompletedProcess(command, process.returncode, stdout, stderr))
    return results


def test_two_jobs_and_inspect_started_together_all_start_and_finish(kafka_broker, tmp_path):
    project = project_copy(tmp_path, {})
    (project / JARS_FOLDER).unlink()  # a folder of this copy's own (not the project's), emptied every round
    for name in ("Makefile", "log4j2.properties"):  # make submit's
        shutil.copy(PROJECT_DIR / name, project)
    ivy = tmp_path / "ivy"  # empty: the first round fetches every descriptor and JAR from the mirror
    mirror = tmp_path / "ivysettings-mirror.xml"
    mirror.write_text(MIRROR.format(cache=DEFAULT_IVY_HOME / "cache"))
    inspected: Path | None = None
    for number in range(ROUNDS):
        shutil.rmtree(project / JARS_FOLDER, ignore_errors=True)
        jobs = []
        for name in ("a", "b"):
            folder = tmp_path / f"{tmp_path.name}-{number}{name}"  # its name names the job's topic
            changes = kafka_job(folder, kafka_broker, "delta-spark", "hdfs", files=1)
            if not jobs and number == 0:  # the mirror holds what these jobs need: the project resolves it
                resolved_jars(
                    resolution_confs(load_settings(write_settings_file(folder / "own.yaml", changes))), log_dir()
                )
            changes["spark"]["conf"].update({"spark.jars.ivy": str(ivy), "spark.jars.ivySettings": mirror.as_uri()})
            jobs.append(write_settings_file(folder.with_suffix(".yaml"), changes))
        make_submit = ["make", "-s", "submit", f"VENV={sys.prefix}", f"SETTINGS={jobs[1]}"]
        commands = [[sys.executable, "main.py", "--settings", str(jobs[0])], make_submit]
        if inspected is not None:
            commands.append([sys.executable, "-m", "stream_job", "inspect", "--settings", str(inspected), "--json"])
        started = time.monotonic()
        results = started_together(project, commands)
        for result in results:
            assert result.returncode == 0, f"round {number + 1}: {result.args}\n{result.stderr[-3000:]}"
            assert "Traceback" not in result.stderr, result.stderr[-3000:]
        for path, result in zip(jobs, results, strict=False):
            # One file of 40 events in one batch, all of it in the delta-spark table.
            assert "batch 0: 40 input rows" in result.stdout, result.stdout
            assert (path.with_suffix("") / "output" / "_delta_log" / f"{0:020d}.json").is_file()
        if inspected is not None:  # the state as of the last batch the job before committed
            commits = inspected.with_suffix("") / "checkpoint" / "commits"
            last = max(int(path.name) for path in commits.iterdir() if path.name.isdigit())
            assert results[2].stdout.startswith("{"), results[2].stdout + results[2].stderr[-2000:]
            assert json.loads(results[2].stdout)["batch_id"] == last
        # One resolution; the other start waited for it, then found the JARs in place.
        waits = [WAITED in result.stderr for result in results[:2]]
        assert waits.count(True) <= 1, [result.stderr for result in results]
        if number == 0:  # filling an empty Ivy home takes seconds: the other start is sure to meet the lock
            assert waits.count(True) == 1, [result.stderr[-2000:] for result in results]
        (folder,) = [path for path in (project / JARS_FOLDER).iterdir()]  # no half-built folder beside it
        listed = (folder / JAR_LIST).read_text().split()
        assert sorted(listed + [JAR_LIST, "packages.txt", "sha1.txt"]) == sorted(path.name for path in folder.iterdir())
        assert any(name.startswith("io.delta_delta-spark") for name in listed)
        assert any(name.startswith("org.apache.spark_spark-sql-kafka") for name in listed)
        print(f"round {number + 1}: {len(commands)} processes in {time.monotonic() - started:.1f} s, waits {waits}")
        inspected = jobs[0]
    assert (ivy / LOCK_FILE).is_file()
