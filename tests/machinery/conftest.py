"""Shared fixtures of the machinery's proofs: one local Spark session, settings written to real files.

These tests run inside a real bake of the template (tests/test_machinery.py copies them there), on
the bake's own example query: the operator is the one its query module declares.
"""

from __future__ import annotations

import contextlib
import copy
import hashlib
import importlib
import io
import json
import os
import socket
import subprocess
import sys
import types
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any, TextIO

import pytest
import yaml
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from stream_job.machinery import commands
from stream_job.machinery.core.contract import user_query
from stream_job.machinery.core.durations import parse_duration
from stream_job.machinery.core.settings import ENV_PREFIX, Settings, load_settings
from stream_job.machinery.job.endpoints.sample_input import UNIQUE_KEYS, write_sample_files
from stream_job.machinery.job.spark.connector_jars import JARS_FOLDER
from stream_job.machinery.job.spark.connectors import kafka_fallback, resolution_confs
from stream_job.machinery.job.spark.driver_jvm import launch_driver_jvm
from stream_job.machinery.job.spark.session import log_dir, start_confs
from stream_job.machinery.operations import local_kafka
from stream_job.machinery.testing import run_batch
from stream_job.query import EVENT_SCHEMA, OPERATOR

PROJECT_DIR = Path(__file__).resolve().parents[1]
PROJECT_SETTINGS = PROJECT_DIR / "settings.yaml"


def run_python(
    *args: str, env: dict[str, str] | None = None, timeout: float = 300, cwd: Path = PROJECT_DIR
) -> subprocess.CompletedProcess[str]:
    """`python args...` in the project folder (or cwd, such as a project_copy), as a real separate process."""
    return subprocess.run([sys.executable, *args], cwd=cwd, capture_output=True, text=True, timeout=timeout, env=env)


def start_job(settings_path: Path | str, log: TextIO, cwd: Path = PROJECT_DIR) -> subprocess.Popen:
    """`python main.py --settings PATH` started as a separate process (in cwd, such as a project_copy),
    its output into log."""
    return subprocess.Popen(
        [sys.executable, "main.py", "--settings", str(settings_path)],
        cwd=cwd,
        stdout=log,
        stderr=log,
        env=clean_env(),
        start_new_session=True,  # its own process group: a SIGKILL takes its JVM with it (kill_mid_batch)
    )


def run_cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """`python -m stream_job args...` run in this process, on the shared session when one is active (the
    command takes it instead of starting a JVM of its own), in the project folder, with the environment
    without the developer's settings overrides plus env: its exit code and what it printed. A proof whose
    subject is the process (a signal, a fresh JVM) uses run_python instead."""
    stdout, stderr = io.StringIO(), io.StringIO()
    saved, folder = dict(os.environ), os.getcwd()
    os.environ.clear()
    os.environ.update({**clean_env_of(saved), **(env or {})})
    os.chdir(PROJECT_DIR)
    try:
        with contextlib.redirect_stdout(stdout), contextlib.redirect_stderr(stderr):
            try:
                code = commands.main(list(args))
            except SystemExit as exit:  # argparse's usage errors
                code = exit.code if isinstance(exit.code, int) else 1
    finally:
        os.chdir(folder)
        os.environ.clear()
        os.environ.update(saved)
    return subprocess.CompletedProcess(["-m", "stream_job", *args], code, stdout.getvalue(), stderr.getvalue())


def run_cli_process(*args: str) -> subprocess.CompletedProcess[str]:
    """`python -m stream_job args...` as a real process of its own (a fresh JVM), without the developer's
    settings overrides."""
    return run_python("-m", "stream_job", *args, env=clean_env())


def run_main(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """What `python main.py args...` does (the `run` command), in this process: see run_cli."""
    return run_cli("run", *args, env=env)


def run_job_of(sink: str, settings_path: Path) -> subprocess.CompletedProcess[str]:
    """The job on settings_path to the end of its input: in a process of its own for the delta-spark
    writer (its session extensions cannot join the shared session), else in this process (run_main)."""
    if sink == "delta-spark":
        return run_python("main.py", "--settings", str(settings_path), env=clean_env())
    return run_main("--settings", str(settings_path))


def pytest_configure(config: pytest.Config) -> None:
    for marker in (
        "operator: depends on the bake's operator; runs in the bake of every operator",
        "streaming: runs real streaming queries on local Spark",
        "faults: provokes a fault for real: SIGKILL or SIGTERM, a damaged checkpoint, a read-only or full disk",
        "soak: 50 batches of the aggregation, to see that state levels off",
        "secondary: a proof another test makes more strictly (the test says which); CI leaves it out, make test-all runs it",
        "cluster: starts a Spark standalone cluster (a master and two workers) on 127.0.0.1",
        "kafka: reads a real Kafka broker on 127.0.0.1 (the project's local one, from Maven Central)",
        "concurrent: starts processes of one project at the same instant (CI runs it beside the default bake's others)",
        "delta_spark: needs Delta Lake's JVM build for the installed Spark (there is none for Spark 4.3)",
        "chains: queries of several stateful operators written into a copy of the project (test_chains.py)",
        "state_files: the state's files moved or damaged: savepoints, integrity faults (a second default bake runs them)",
        "delta_merge: update mode into Delta by MERGE (test_delta_merge.py; a second default bake runs them)",
        "real_time: Spark's real-time mode run for real (pyspark 4.3 and a broker): CI's real-time bake runs them",
        "connect: through a Spark Connect server the test starts (spark.remote): CI's Connect bake runs them",
    ):
        config.addinivalue_line("markers", marker)


PACKAGE_DIR = next(path.parent for path in PROJECT_DIR.glob("*/query.py"))


def edited_source(module: str, edits: Mapping[str, str]) -> str:
    """The text of the package's module (query.py, or another of the user's, such as custom_state's
    sessions.py) with edits: old -> new text, each found exactly once."""
    path = PACKAGE_DIR / module
    text = path.read_text()
    for old, new in edits.items():
        assert text.count(old) == 1, f"{old!r} is not in {path} exactly once"
        text = text.replace(old, new)
    return text


def project_copy(folder: Path, query_edits: dict[str, str], module: str = "query.py") -> Path:
    """The project (main.py and its package) copied into folder, with its query.py (or another module
    of the user's) edited: a user's code change, made for real, on a copy, for a proof whose subject is
    a process (a SIGKILL, a fresh JVM); edited_query runs the change in this process."""
    import shutil

    project = folder / "project"
    shutil.copytree(PACKAGE_DIR, project / PACKAGE_DIR.name, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(PROJECT_DIR / "main.py", project)
    # The project's connectors: resolved once, shared by its copies (they resolve into it what it lacks).
    shutil.copy(PROJECT_DIR / "ivysettings.xml", project)
    (PROJECT_DIR / JARS_FOLDER).mkdir(exist_ok=True)
    (project / JARS_FOLDER).symlink_to(PROJECT_DIR / JARS_FOLDER)
    (project / PACKAGE_DIR.name / module).write_text(edited_source(module, query_edits))
    return project


@contextlib.contextmanager
def edited_query(query_edits: Mapping[str, str], module: str = "query.py") -> Iterator[None]:
    """For the block, this process's commands (run_cli, run_main) and the machinery run the package's
    query.py (or another module of the user's, as project_copy takes) with edits, on the shared session:
    the module is compiled from the edited text under its own name, and the contract's cached module dropped
    before and after. Spark's Python workers import the files: an edited processor serves only what the
    driver does with it (its declared state, a refusal before the query starts)."""
    name = f"{PACKAGE_DIR.name}.{Path(module).stem}"
    edited = types.ModuleType(name)
    edited.__file__ = str(PACKAGE_DIR / module)
    edited.__package__ = PACKAGE_DIR.name
    saved, package = importlib.import_module(name), sys.modules[PACKAGE_DIR.name]
    sys.modules[name] = edited
    setattr(package, Path(module).stem, edited)
    user_query.cache_clear()
    try:
        exec(compile(edited_source(module, query_edits), edited.__file__, "exec"), edited.__dict__)
        yield
    finally:
        sys.modules[name] = saved
        setattr(package, Path(module).stem, saved)
        user_query.cache_clear()


def secondary_among(names: Iterable[str], secondary: Collection[str]) -> list[Any]:
    """Parameters `names`, those in `secondary` marked secondary (CI leaves them out, make test-all runs them)."""
    return [pytest.param(name, marks=[pytest.mark.secondary] if name in secondary else []) for name in names]


def jvm_free(stderr: str) -> str:
    """stderr without what a JVM says of itself whatever the job does: the line every Spark 4.2 JVM prints
    at start (docs/operations.md says why), and Spark's warning that the UI's port was taken (by another
    test's Spark) and the next one is tried."""
    noise = ("Using incubator modules", "could not bind on port")
    return "".join(line for line in stderr.splitlines(keepends=True) if not any(words in line for words in noise))


def free_port() -> int:
    """A TCP port free on 127.0.0.1 now (for a Spark UI or daemon the test starts)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def clean_env() -> dict[str, str]:
    """This environment without the developer's own settings overrides."""
    return clean_env_of(os.environ)


def clean_env_of(environ: Mapping[str, str]) -> dict[str, str]:
    return {name: value for name, value in environ.items() if not name.upper().startswith(ENV_PREFIX)}


def digest(folder: Path) -> dict[str, str]:
    """Every file under folder with a hash of its bytes."""
    return {
        str(path.relative_to(folder)): hashlib.sha256(path.read_bytes()).hexdigest()
        for path in sorted(folder.rglob("*"))
        if path.is_file()
    }


def state_key_records(checkpoint: Path) -> list[dict[str, Any]]:
    """The state key records Spark wrote in the checkpoint's state_key folder, oldest first."""
    lines = [line for path in (checkpoint / "state_key").glob("part-*") for line in path.read_text().splitlines()]
    return sorted(map(json.loads, lines), key=lambda record: record["version"])


def committed_batches(checkpoint: Path | str) -> list[int]:
    commits = Path(checkpoint) / "commits"
    return sorted(int(path.name) for path in commits.iterdir() if path.name.isdigit()) if commits.is_dir() else []


# The operator of the bake's query module: every test runs it (a bake holds one operator's code).
BAKED_OPERATOR = OPERATOR
# A modification time for landing files a test orders itself (LANDED + i for the i-th): an hour ago, after
# every test's event times (the files source bounds each event time by its file's modification time).
LANDED = int(datetime.now().timestamp()) - 3_600
# The default bake's operator: the bake where proofs that do not depend on the operator run.
DEFAULT_OPERATOR = "windowed_aggregation"
# A provider every operator runs on, for tests about something else than the provider.
ANY_PROVIDER = "rocksdb" if BAKED_OPERATOR == "custom_state" else "hdfs"
FILES_JOB_JOIN_RANGE = timedelta(minutes=1)
FILES_JOB_SESSION_TIMEOUT = timedelta(minutes=1)


def operator_changes(operator: str, join_landing: Path | None = None) -> dict[str, Any]:
    """Settings changes for an operator's starter (the bake's, or another bake's: test_connect's starters): a
    second landing directory for a join, shorter spans."""
    changes: dict[str, Any] = {"query": {}, "join_source": None}
    if operator == "stream_stream_join":
        join_files = {"path": str(join_landing), "max_files_per_trigger": 1}
        changes["join_source"] = {"type": "files", "files": join_files}
        changes["query"]["join"] = {"type": "left_outer", "range": f"{FILES_JOB_JOIN_RANGE.seconds} seconds"}
    if operator == "custom_state":
        changes["query"]["custom_state"] = {"session_timeout": f"{FILES_JOB_SESSION_TIMEOUT.seconds} seconds"}
    return changes


def files_job(
    tmp_path: Path, sink: str, provider: str, changelog: bool = False, files: int = 6, operator: str = BAKED_OPERATOR
) -> dict[str, Any]:
    """Settings changes for a deterministic run: `files` landing files, one per micro-batch, until all are done.

    Each file covers two minutes of event time, 40 events 3 s apart, and the watermark is one
    minute, so a crash or replay has several batches with output to get wrong. Per operator:
    4 keys in turn and 1-minute windows; for the join, a key per order and the payments in a
    second directory (15 s, 45 s or 90 s after their order, every fifth order unpaid) with a
    1-minute range; for custom_state, runs of 10 events per key, i.e. sessions of 30 s, 93 s apart.
    """
    if operator == "custom_state" and provider == "hdfs":
        pytest.skip("custom_state runs only on the RocksDB state store")
    landing, join_landing = tmp_path / "landing", tmp_path / "landing-join"
    keys = UNIQUE_KEYS if operator == "stream_stream_join" else 4
    shape = {"files": files, "events_per_file": 40, "keys": keys, "advance_per_file": timedelta(minutes=2)}
    if operator == "custom_state":
        shape["run_length"] = 10
    write_sample_files(landing, **shape)
    if operator == "stream_stream_join":
        delays = tuple(FILES_JOB_JOIN_RANGE * share for share in (0.25, 0.75, 1.5))
        write_sample_files(join_landing, **shape, payment_delays=delays)
    changes = {
        "spark": {"shuffle_partitions": 2, "platform": "oss", "master": "local[2]"},
        "state_store": {"provider": provider, "changelog_checkpointing": changelog},
        "source": {"type": "files", "files": {"path": str(landing), "max_files_per_trigger": 1}},
        # "delta" is the deltalake writer, "delta-spark" Spark's own Delta sink (its JARs from Maven).
        "sink": {
            "type": "delta" if sink.startswith("delta") else sink,
            "output_mode": "append",
            "path": str(tmp_path / "output"),
            "delta": {"writer": "delta-spark" if sink == "delta-spark" else "deltalake"},
        },
        "query": {
            "name": f"test_{tmp_path.name}",
            "watermark": "1 minute",
            "window": "1 minute",
            "checkpoint_location": str(tmp_path / "checkpoint"),
            "trigger": "available_now",
        },
    }
    if sink == "delta-spark":
        # Delta rebuilds its log's snapshot over 50 partitions by default, most of a small batch's time
        # on local[2]; 2 (as Delta's own tests set) halves it. A test speed-up, not production advice.
        changes["spark"]["conf"] = {"spark.databricks.delta.snapshotPartitions": 2}
    return deep_merge(changes, operator_changes(operator, join_landing))


# The SASL users of the tests' broker: PLAIN and SCRAM-SHA-256 both know them.
KAFKA_USERS = {"alice": "alice-secret-Zq81"}


@pytest.fixture(scope="session")
def kafka_broker(tmp_path_factory: pytest.TempPathFactory):
    """One real Kafka broker (the project's local_kafka) for the run, with a SASL listener; stopped at the end."""
    directory = tmp_path_factory.mktemp("kafka-broker")
    broker = local_kafka.start(directory, users=KAFKA_USERS)
    yield broker
    local_kafka.stop(directory)


def kafka_job(
    tmp_path: Path,
    broker: local_kafka.Broker,
    sink: str,
    provider: str,
    files: int = 6,
    topics: tuple[str, str] | None = None,
) -> dict[str, Any]:
    """files_job's run with its inputs read from Kafka: each landing file's events produced, in order, to a
    one-partition topic per input (named after the test unless given), and one file's worth per
    micro-batch (max_offsets_per_trigger). The files stay where files_job wrote them, so
    batch_expectation computes the same oracle from them."""
    changes = files_job(tmp_path, sink, provider, files=files)
    for number, section in enumerate(("source", "join_source")):
        if changes.get(section) is None:
            continue
        landing = sorted(Path(changes[section]["files"]["path"]).glob("events-*.json"))
        lines = [path.read_text().splitlines() for path in landing]
        topic = topics[number] if topics else f"{tmp_path.name}-{section}"
        create_topic(broker.bootstrap, topic)
        produce(broker.bootstrap, topic, (line for file in lines for line in file))
        kafka = {"bootstrap_servers": broker.bootstrap, "topic": topic, "max_offsets_per_trigger": len(lines[0])}
        changes[section] = deep_merge(changes[section], {"type": "kafka", "kafka": kafka})
    return changes


# A topic made and records written by Kafka's own client in this run's shared session, whose JVM has Spark's
# Kafka connector and its kafka-clients, where local_kafka's create_topic and produce start a JVM of Kafka's
# command-line tools each (3 to 5 s a call on 2 cores, some 60 calls a CI run). test_kafka's
# starting-offsets proof makes its topic with the project's own tools.
def create_topic(bootstrap: str, topic: str, partitions: int = 1) -> None:
    """local_kafka.create_topic in this process: the topic, unless it exists."""
    jvm = SparkSession.builder.getOrCreate()._jvm
    admin = jvm.org.apache.kafka.clients.admin.Admin.create(_kafka_client_properties(jvm, bootstrap))
    try:
        if not admin.listTopics().names().get().contains(topic):
            optional = jvm.java.util.Optional
            # The broker's default replication factor: 1 (its only broker).
            new = jvm.org.apache.kafka.clients.admin.NewTopic(topic, optional.of(partitions), optional.empty())
            admin.createTopics(jvm.java.util.Collections.singletonList(new)).all().get()
    finally:
        admin.close()


def produce(bootstrap: str, topic: str, values: Iterable[str]) -> None:
    """local_kafka.produce in this process: one record per value, in order, with no key, each acknowledged."""
    jvm = SparkSession.builder.getOrCreate()._jvm
    properties = _kafka_client_properties(jvm, bootstrap)
    for serializer in ("key.serializer", "value.serializer"):
        properties.put(serializer, "org.apache.kafka.common.serialization.StringSerializer")
    producer = jvm.org.apache.kafka.clients.producer.KafkaProducer(properties)
    try:
        record = jvm.org.apache.kafka.clients.producer.ProducerRecord
        sent = [producer.send(record(topic, value.replace("\n", " "))) for value in values]
        producer.flush()
        for each in sent:
            each.get()
    finally:
        producer.close()


def _kafka_client_properties(jvm: Any, bootstrap: str) -> Any:
    properties = jvm.java.util.Properties()
    properties.put("bootstrap.servers", bootstrap)
    return properties


def kafka_offsets(checkpoint: Path | str, batch: int) -> dict[str, dict[str, int]]:
    """The Kafka offsets (topic -> partition -> next offset) that batch's offsets file holds, all sources merged."""
    lines = (Path(checkpoint) / "offsets" / str(batch)).read_text().splitlines()[2:]
    merged: dict[str, dict[str, int]] = {}
    for line in lines:
        for topic, partitions in json.loads(line).items():
            merged.setdefault(topic, {}).update(partitions)
    return merged


def read_events_batch(spark: SparkSession, path: str) -> DataFrame:
    return spark.read.schema(EVENT_SCHEMA).json(path)


def final_watermark(spark: SparkSession, settings: Settings) -> datetime:
    """Where an available-now run leaves the watermark: the newest event time less the delay, on the
    input that is furthest behind (Spark takes the minimum over a join's two inputs)."""
    newest = min(
        read_events_batch(spark, source.files.path).agg(F.max("event_time")).first()[0]
        for source in settings.inputs.values()
    )
    return newest - timedelta(seconds=parse_duration(settings.query.watermark, zero=True))


def batch_expectation(spark: SparkSession, settings: Settings) -> DataFrame:
    """The same computation as a batch job on the same files (in order, none late), as a stream emits it.

    Deduplication emits each first event, and an inner join each match, at once. Rows that wait
    for the watermark are emitted once it passes them, and an available-now run ends with a batch
    that moves the watermark to final_watermark: a window ending by then, an unmatched order whose
    range ended before it, a session whose timeout ran out before it.
    """
    events = read_events_batch(spark, settings.source.files.path)
    watermark = F.lit(final_watermark(spark, settings))
    query = settings.query
    if query.operator == "custom_state":
        return session_expectation(spark, events, settings)
    join_events = None if settings.join_source is None else read_events_batch(spark, settings.join_source.files.path)
    result = run_batch(spark, events, join_events, query=query)
    if query.operator == "windowed_aggregation":
        return result.where(F.col("window_end") <= watermark)
    if query.operator == "stream_stream_join" and query.join.type == "left_outer":
        join_range = timedelta(seconds=parse_duration(query.join.range))
        return result.where(F.col("join_event_id").isNotNull() | (F.col("event_time") + F.lit(join_range) < watermark))
    return result


def session_expectation(spark: SparkSession, events: DataFrame, settings: Settings) -> DataFrame:
    """custom_state as plain Python over all events: every session a later one closed, and any whose
    timeout ran out before the final watermark."""
    from stream_job.sessions import OUTPUT_SCHEMA, advance  # a custom_state bake's own module

    timeout = timedelta(seconds=parse_duration(settings.query.custom_state.session_timeout))
    recent = settings.query.custom_state.recent_events
    watermark = final_watermark(spark, settings)
    by_key: dict[str, list] = {}
    for row in events.collect():
        by_key.setdefault(row.key, []).append((row.event_time, row.event_id))
    rows = []
    for key, key_events in by_key.items():
        closed, still_open = advance(None, sorted(key_events), timeout, recent)
        if still_open.session_end + timeout < watermark:
            closed.append(still_open)
        rows += [session.row(key) for session in closed]
    return spark.createDataFrame(rows, OUTPUT_SCHEMA)


def expected_row_count(operator: str, files: int) -> int:
    """Rows the files_job input yields, counted by hand from its shape (see files_job).

    Deduplication keeps all 40 x files events (none repeat). The windowed count closes windows
    0 .. 2 x files - 3 (the newest event is at 2 x files minutes less 3 s), 4 keys each. The join:
    8 of every 15 orders match (paid, and within 15 s or 45 s); the other orders are emitted alone
    once the watermark (the newest order less a minute) passes their time plus the one-minute
    range. custom_state: 4 sessions per file, all closed but the last file's.
    """
    events = 40 * files
    if operator == "deduplication":
        return events
    if operator == "windowed_aggregation":
        return (2 * files - 2) * 4
    if operator == "custom_state":
        return 4 * (files - 1)
    newest_order_s = events * 3 - 3
    matched = [n % 5 != 4 and n % 3 != 2 for n in range(events)]
    unmatched_emitted = [not match and 3 * n + 60 < newest_order_s - 60 for n, match in enumerate(matched)]
    return sum(matched) + sum(unmatched_emitted)


# The session fixture `spark` (local[2], 2 shuffle partitions, UTC) and the stop of leftover streams
# are the project's own, from its tests/conftest.py: tests/test_machinery.py loads it as a plugin.


@pytest.fixture(scope="session", autouse=True)
def _shared_session(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> SparkSession:
    """The one local session of this run, up before any proof: the commands run_cli runs take it. Its JVM
    starts as a job's does (launch_driver_jvm: a JVM that dies at its start is one line naming why, its
    output kept in the captured stderr and logs/jvm-start.log), with Spark's Kafka connector from the
    project's connector-jars/ (resolved there first when the project has none), so that jobs reading
    Kafka run in-process too; the delta-spark writer's session extensions cannot join a running session,
    so its jobs are processes."""
    kafka = load_settings(write_settings_file(tmp_path_factory.mktemp("kafka") / "settings.yaml", KAFKA_SOURCE))
    confs = start_confs(resolution_confs(kafka), kafka_fallback(kafka))
    launch_driver_jvm(
        {**confs, "spark.master": "local[2]", "spark.driver.memory": kafka.spark.driver_memory}, log_dir()
    )
    return request.getfixturevalue("spark")


# Settings whose job reads Kafka: the connector they need is the one the shared session starts with.
KAFKA_SOURCE = {"source": {"type": "kafka"}, "sink": {"type": "parquet", "output_mode": "append"}}


@pytest.fixture(autouse=True)
def _no_settings_from_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    """A developer's own overrides must not leak into the tests."""
    import os

    for name in list(os.environ):
        if name.upper().startswith(ENV_PREFIX):
            monkeypatch.delenv(name)


def deep_merge(base: dict[str, Any], changes: dict[str, Any]) -> dict[str, Any]:
    merged = copy.deepcopy(base)
    for key, value in changes.items():
        if isinstance(value, dict) and isinstance(merged.get(key), dict):
            merged[key] = deep_merge(merged[key], value)
        else:
            merged[key] = value
    return merged


@pytest.fixture
def write_settings(tmp_path: Path) -> Callable[..., Path]:
    """Write the project's settings.yaml with changes into tmp_path; return the file's path."""

    def write(changes: dict[str, Any] | None = None, name: str = "settings.yaml") -> Path:
        return write_settings_file(tmp_path / name, changes)

    return write


def write_settings_file(path: Path, changes: dict[str, Any] | None = None) -> Path:
    """The project's settings.yaml plus changes, written to path."""
    data = yaml.safe_load(PROJECT_SETTINGS.read_text())
    path.write_text(yaml.safe_dump(deep_merge(data, changes or {}), sort_keys=False))
    return path


@pytest.fixture
def make_settings(write_settings: Callable[..., Path]) -> Callable[..., Settings]:
    """Settings loaded, the real way, from a file holding the project's settings plus changes."""

    def make(changes: dict[str, Any] | None = None) -> Settings:
        return load_settings(write_settings(changes))

    return make
