"""The job and its tools through a Spark Connect server (`spark.remote`), with the client and the server killed.

The server is a process of its own, started here from the project's own pyspark (spark-submit's
SparkConnectServer class, local[2]), its Python workers on this interpreter with the project importable.
Every client is `python main.py` or `python -m stream_job` as a process of its own: one process holds one
of Spark Classic and Spark Connect, and this one runs the shared Classic session, which computes the batch
oracle from the landing files. CI runs these proofs in a default bake of their own (marker `connect`).
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import sysconfig
import time
import tomllib
from collections.abc import Iterable, Iterator
from importlib import metadata
from pathlib import Path

import pytest
import yaml
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from pyspark.testing import assertDataFrameEqual
from stream_job.machinery.core.operators import STARTERS
from stream_job.machinery.job.endpoints.output import read_output
from stream_job.machinery.job.plan.query_plan import CONNECT_UNCHECKED

from .conftest import (
    BAKED_OPERATOR,
    PROJECT_DIR,
    batch_expectation,
    clean_env,
    committed_batches,
    deep_merge,
    digest,
    expected_row_count,
    files_job,
    free_port,
    run_cli,
    run_python,
    start_job,
)
from .test_exactly_once import logged_batches

pytestmark = [pytest.mark.connect, pytest.mark.streaming]

SERVER_CLASS = "org.apache.spark.sql.connect.service.SparkConnectServer"
START_SECONDS = 120
# The other starters' projects, baked into this one by tests/test_machinery.py (outside the proofs' folder,
# where pytest would collect their own tests).
STARTER_PROJECTS = PROJECT_DIR / "connect-starters"
FILES = 10  # one per batch, two seconds apart: a run long enough to kill its client and then its server


class ConnectServer:
    """A local Spark Connect server on a port of its own, as a process group that a test may SIGKILL."""

    def __init__(self, folder: Path, options: Iterable[str] = (), env: dict[str, str] | None = None) -> None:
        """`options`: spark-submit's own (--packages, --conf), `env`: variables of its own (the AWS ones)."""
        self.options, self.env = list(options), env or {}
        self.port = free_port()
        self.url = f"sc://127.0.0.1:{self.port}"
        self.log = folder / "connect-server.log"
        self.process: subprocess.Popen | None = None

    def start(self) -> None:
        bin_folder = Path(sys.executable).parent
        env = {
            **clean_env(),
            "PATH": f"{bin_folder}{os.pathsep}{os.environ['PATH']}",  # spark-submit finds its Spark through it
            # The Python of its workers and foreachBatch: the project's libraries, not the project, whose code
            # travels with the query (job/spark/remote.py).
            "PYSPARK_PYTHON": sys.executable,
            **self.env,
        }
        command = [str(bin_folder / "spark-submit"), "--class", SERVER_CLASS, "--master", "local[2]", *self.options]
        command += ["--conf", f"spark.connect.grpc.binding.port={self.port}", "spark-internal"]
        with open(self.log, "a") as log:
            self.process = subprocess.Popen(
                command, cwd=self.log.parent, stdout=log, stderr=log, env=env, start_new_session=True
            )
        deadline = time.monotonic() + START_SECONDS
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                pytest.fail(f"the Connect server exited {self.process.returncode}: {self.log.read_text()[-3000:]}")
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=1).close()
                return
            except OSError:
                time.sleep(0.5)
        pytest.fail(f"the Connect server did not listen within {START_SECONDS} s: {self.log.read_text()[-3000:]}")

    def kill(self) -> None:
        if self.process is not None and self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait(timeout=60)


@pytest.fixture(scope="module")
def connect_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ConnectServer]:
    server = ConnectServer(tmp_path_factory.mktemp("connect"))
    server.start()
    yield server
    server.kill()


def connect_job(
    tmp_path: Path, server: ConnectServer, files: int = FILES, operator: str = BAKED_OPERATOR, **query: str
) -> dict:
    """files_job's run into parquet on RocksDB with changelog checkpointing, through the server."""
    changes = files_job(tmp_path, "parquet", "rocksdb", changelog=True, files=files, operator=operator)
    return deep_merge(changes, {"spark": {"remote": server.url}, "query": query})


def client(*args: str, cwd: Path = PROJECT_DIR) -> subprocess.CompletedProcess[str]:
    """`python args...` in the project folder (or another's), a Connect client process (no JVM of its own)."""
    return run_python(*args, env=clean_env(), cwd=cwd)


def wait_for(condition, what: str, process: subprocess.Popen | None = None, seconds: float = 180) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if condition():
            return
        if process is not None and process.poll() is not None:
            pytest.fail(f"the client ended (exit {process.returncode}) before {what}")
        time.sleep(0.05)
    pytest.fail(f"timed out waiting until {what}")


def test_a_job_through_connect_survives_its_client_and_its_server_killed(
    spark, connect_server, write_settings, make_settings, tmp_path
):
    """Client SIGKILLed mid-run: its query lives on in the server, and the next start takes it over
    (Spark's stopActiveRunOnRestart). Server SIGKILLed under a running client: one line, exit 1. The
    server back: the next start runs to the end. The output equals the batch job's, no row lost or twice."""
    changes = connect_job(tmp_path, connect_server, trigger="2 seconds")  # writes the landing files: once
    path = write_settings(changes)
    settings = make_settings(changes)
    checkpoint = Path(settings.query.checkpoint_location)

    with open(tmp_path / "first.log", "w") as log:
        first = start_job(path, log)
    wait_for(lambda: len(committed_batches(checkpoint)) >= 2, "two batches committed", first)
    os.killpg(first.pid, signal.SIGKILL)
    first.wait(timeout=30)
    orphan_from = max(committed_batches(checkpoint))
    # The query runs on in the server without its client: batches go on being committed.
    wait_for(lambda: max(committed_batches(checkpoint)) > orphan_from, "the orphaned query commits a batch")

    with open(tmp_path / "second.log", "w") as log:
        second = start_job(path, log)
    wait_for(lambda: "batch " in (tmp_path / "second.log").read_text(), "the second client runs a batch", second)
    in_flight = lambda: logged_batches(checkpoint)[-1] not in committed_batches(checkpoint)  # noqa: E731
    wait_for(in_flight, "a batch is in flight", second, seconds=60)
    connect_server.kill()
    assert second.wait(timeout=120) == 1
    said = (tmp_path / "second.log").read_text()
    assert said.count("spark connect error:") == 1, said
    line = next(line for line in said.splitlines() if line.startswith("spark connect error:"))
    assert line == (
        f"spark connect error: spark.remote {connect_server.url}: the Spark Connect server stopped answering while"
        f" query {settings.query.name} ran; its checkpoint is where the server keeps it: start the job again once"
        " the server is back (a batch in flight runs again)"
    )
    assert "Traceback" not in said and "Warning" not in said, said

    connect_server.start()
    available_now = deep_merge(changes, {"query": {"trigger": "available_now"}})
    finish = client("main.py", "--settings", str(write_settings(available_now, name="available-now.yaml")))
    assert finish.returncode == 0, finish.stdout[-2000:] + finish.stderr[-3000:]
    assert f"through Spark Connect {connect_server.url}" in finish.stdout
    assert committed_batches(checkpoint) == list(range(FILES + 1))  # each file, then the closing batch
    expected = batch_expectation(spark, settings)
    assert expected.count() == expected_row_count(settings.query.operator, files=FILES)
    assertDataFrameEqual(read_output(spark, settings.sink), expected)

    # The guard through Connect: a checkpoint pinned to 2 partitions refuses 3, and nothing changes.
    before = digest(checkpoint)
    drift = deep_merge(available_now, {"spark": {"shuffle_partitions": 3}})
    refused = client("main.py", "--settings", str(write_settings(drift, name="drift.yaml")))
    assert refused.returncode == 4, refused.stderr[-3000:]
    assert "shuffle_partitions" in refused.stderr and refused.stderr.count("\n") <= 3, refused.stderr
    assert digest(checkpoint) == before

    # inspect through the server's state sources reads what it reads on Spark Classic (this process's session).
    inspected = client("-m", "stream_job", "inspect", "--settings", str(path), "--json")
    assert inspected.returncode == 0, inspected.stderr[-3000:]
    on_classic = write_settings(deep_merge(available_now, {"spark": {"remote": None}}), name="classic.yaml")
    classic = run_cli("inspect", "--settings", str(on_classic), "--json")
    assert classic.returncode == 0, classic.stderr[-3000:]
    assert state_facts(inspected.stdout) == state_facts(classic.stdout)
    assert state_facts(classic.stdout)[:2] == (FILES, 8)  # the last batch; its 4 keys' two open windows

    # check, through the server: consistent; Spark's output-mode check is the start's there.
    checked = client("-m", "stream_job", "check", "--settings", str(path))
    assert checked.returncode == 0, checked.stderr[-3000:]
    lines = checked.stdout.splitlines()
    assert CONNECT_UNCHECKED in lines, checked.stdout
    assert lines[-1] == (
        f"checkpoint {checkpoint}: consistent with the settings and the query's windowed_aggregation (last batch {FILES})"
    )
    # repartition: Spark Classic's alone, one line, nothing changed.
    moved = client("-m", "stream_job", "repartition", "--settings", str(path))
    assert (moved.returncode, moved.stderr.count("\n")) == (4, 1), moved.stderr
    assert moved.stderr.startswith(f"repartition refused: {checkpoint}: Spark repartitions state in Spark Classic only")
    assert digest(checkpoint) == before


def state_facts(inspect_json: str) -> tuple:
    """What inspect says of the state: the batch, its rows, and each operator's rows per partition."""
    found = json.loads(inspect_json)
    operators = [
        (each["operator"], [store["rows_per_partition"] for store in each["stores"]]) for each in found["operators"]
    ]
    return found["batch_id"], found["state_rows"], operators


def test_no_server_at_spark_remote_is_one_line(write_settings, tmp_path):
    url = f"sc://127.0.0.1:{free_port()}"
    changes = deep_merge(files_job(tmp_path, "parquet", "rocksdb"), {"spark": {"remote": url}})
    started = time.monotonic()
    result = client("main.py", "--settings", str(write_settings(changes)))
    assert result.returncode == 3
    assert result.stderr.startswith(f"spark connect error: spark.remote {url}: no Spark Connect server answers at")
    assert result.stderr.count("\n") == 1, result.stderr
    assert time.monotonic() - started < 30
    assert not Path(changes["query"]["checkpoint_location"]).exists()


TOKEN = "tok-Zq81-never-printed"


def test_a_token_in_spark_remote_is_never_printed(connect_server, write_settings, tmp_path):
    """spark.remote with a token (Spark Connect's URL parameter): a bad value, no server, the server (without
    TLS) at 127.0.0.1, which the token makes the client speak TLS to (one line: the cause, the way out, nothing
    started), then the job run through it at `localhost` (where pyspark sends a token without TLS) and
    `config`. Nothing any of them printed, nor any file under logs/, holds the token."""
    port = connect_server.port
    changes = connect_job(tmp_path, connect_server, files=1, trigger="available_now")
    checkpoint = Path(changes["query"]["checkpoint_location"])

    def at(url: str, name: str) -> str:
        return str(write_settings(deep_merge(changes, {"spark": {"remote": url}}), name=name))

    bad = client("main.py", "--settings", at(f"sc://localhost:{port}/;token={TOKEN} x", "bad.yaml"))
    assert bad.returncode == 2, bad.stderr
    assert bad.stderr.startswith(f"settings error: spark.remote = 'sc://localhost:{port}/;token=<secret>': "), (
        bad.stderr
    )
    unanswered = f"sc://127.0.0.1:{free_port()}/;token="
    absent = client("main.py", "--settings", at(unanswered + TOKEN, "absent.yaml"))
    assert absent.returncode == 3, absent.stderr
    assert absent.stderr.startswith(f"spark connect error: spark.remote {unanswered}<secret>: no Spark Connect server")
    plain = client("main.py", "--settings", at(f"sc://127.0.0.1:{port}/;token={TOKEN}", "tls.yaml"))
    assert (plain.returncode, plain.stderr) == (
        3,
        f"spark connect error: spark.remote sc://127.0.0.1:{port}/;token=<secret>: the server at 127.0.0.1:{port}"
        " does not speak TLS, and the client speaks it because of the token in the URL; serve TLS there (or put a"
        " TLS proxy in front), or, for a server without TLS, drop the token from spark.remote where the server"
        f" asks none (sc://localhost:{port} on the server's machine sends the token without TLS); nothing was"
        " started\n",
    )
    assert not checkpoint.exists()

    local = at(f"sc://localhost:{port}/;token={TOKEN}", "local.yaml")
    ran = client("main.py", "--settings", local)
    assert ran.returncode == 0, ran.stdout[-2000:] + ran.stderr[-3000:]
    assert f" through Spark Connect sc://localhost:{port}/;token=<secret>, files -> parquet" in ran.stdout
    assert committed_batches(checkpoint) == [0, 1]
    shown = client("-m", "stream_job", "config", "--settings", local)
    assert shown.returncode == 0, shown.stderr
    assert f"  remote: sc://localhost:{port}/;token=<secret>\n" in shown.stdout

    printed = "".join(result.stdout + result.stderr for result in (bad, absent, plain, ran, shown))
    assert TOKEN not in printed
    logs = [path for path in (PROJECT_DIR / "logs").rglob("*") if path.is_file()]
    assert [path for path in logs if TOKEN.encode() in path.read_bytes()] == []


def test_spark_remote_without_the_connect_extra_is_one_line(write_settings, tmp_path):
    """A Python with the project's dependencies and not its `connect` extra, as `pip install -e .` makes it:
    the job and `check`, with a port that answers at spark.remote, end in one line naming the install, exit 3
    (as a missing Java), nothing written."""
    python = python_without_connect_extra(tmp_path / "venv")
    with socket.create_server(("127.0.0.1", 0)) as listening:
        url = f"sc://127.0.0.1:{listening.getsockname()[1]}"
        checkpoint = tmp_path / "checkpoint"
        path = str(write_settings({"spark": {"remote": url}, "query": {"checkpoint_location": str(checkpoint)}}))
        for command in (["main.py"], ["-m", "stream_job", "check"]):
            result = run_with(python, *command, "--settings", path)
            assert result.returncode == 3, result.stderr[-3000:]
            assert result.stderr.startswith(
                f"spark connect error: spark.remote {url}: this Python lacks the Spark Connect client's packages ("
            ), result.stderr
            assert result.stderr.endswith(
                "; install them: pip install -e '.[connect]' in the project (make install does); nothing was started\n"
            ), result.stderr
            assert result.stderr.count("\n") == 1 and result.stdout == "", result.stdout + result.stderr
    assert not checkpoint.exists()


def run_with(python: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(python), *args], cwd=PROJECT_DIR, capture_output=True, text=True, env=clean_env())


def python_without_connect_extra(venv: Path) -> Path:
    """A venv whose site-packages links to this environment's copies of the project's dependencies (its
    pyproject.toml's, and theirs) and of nothing else: no pandas, no grpcio. No download."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    site = next(venv.glob("lib/python*/site-packages"))
    installed = Path(sysconfig.get_paths()["purelib"])
    project = tomllib.loads((PROJECT_DIR / "pyproject.toml").read_text())["project"]["dependencies"]
    tops = {Path(file).parts[0] for dist in distributions(project) for file in dist.files or []}
    for top in sorted(tops - {"..", "__pycache__"}):
        if (installed / top).exists() and not top.endswith(".pth"):
            (site / top).symlink_to(installed / top)
    return venv / "bin" / "python"


def distributions(requirements: Iterable[str]) -> list[metadata.Distribution]:
    """The installed distributions these requirements take, with theirs, extras left out."""
    found: dict[str, metadata.Distribution] = {}
    waiting = list(requirements)
    while waiting:
        requirement = Requirement(waiting.pop())
        name = canonicalize_name(requirement.name)
        if name not in found and (requirement.marker is None or requirement.marker.evaluate({"extra": ""})):
            found[name] = metadata.distribution(requirement.name)
            waiting += found[name].requires or []
    return list(found.values())


def test_every_starter_runs_through_connect(spark, connect_server, tmp_path):
    """Each other starter's project, run through the same server to the end of its input: the rows its
    input's shape gives (expected_row_count; deduplicated_count's files repeat no event, so the windowed
    count's); the join, whose count that formula does not give under the starter's own settings, row for row
    what the same project writes on Spark Classic (a JVM of its own) from the same input."""
    starters = {folder.name: folder for folder in STARTER_PROJECTS.iterdir()} if STARTER_PROJECTS.is_dir() else {}
    assert sorted(starters) == sorted(set(STARTERS) - {BAKED_OPERATOR}), "tests/test_machinery.py bakes them"
    for operator, project in sorted(starters.items()):
        folder = tmp_path / operator
        changes = connect_job(folder, connect_server, files=6, operator=operator, trigger="available_now")
        own = yaml.safe_load((project / "settings.yaml").read_text())  # the starter's own (its query's params)
        modes = {"connect": connect_server.url, **({"classic": None} if operator == "stream_stream_join" else {})}
        outputs = []
        for mode, remote in modes.items():
            run = deep_merge(changes, {"spark": {"remote": remote}, "sink": {"path": str(folder / f"output-{mode}")}})
            run["query"]["checkpoint_location"] = str(folder / f"checkpoint-{mode}")
            settings_path = folder / f"{mode}.yaml"
            settings_path.write_text(yaml.safe_dump(deep_merge(own, run)))
            result = client("main.py", "--settings", str(settings_path), cwd=project)
            assert result.returncode == 0, f"{operator} {mode}: {result.stdout[-2000:]}{result.stderr[-3000:]}"
            outputs.append(spark.read.parquet(run["sink"]["path"]))
        if len(outputs) == 2:
            assert outputs[1].count() > 0, operator
            assertDataFrameEqual(outputs[0], outputs[1])
        else:
            counted_as = "windowed_aggregation" if operator == "deduplicated_count" else operator
            assert outputs[0].count() == expected_row_count(counted_as, files=6), operator
