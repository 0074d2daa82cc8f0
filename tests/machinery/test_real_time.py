"""Spark's real-time mode (`query.trigger: real_time`): its refusals, and its runs killed and restarted.

The refusals run in the default bake on any Spark: the settings' (source, sink, output mode, store,
format version) before a JVM starts, the plan's (an operator or Python outside Spark's allowlist) with the
shared session, and Spark below 4.3. The runs need Spark 4.3 and a broker: CI runs them (marker
`real_time`) in a real-time bake on pyspark 4.3.0 with the 4.2.0 Kafka connector (tests/test_machinery.py),
each in one process killed with SIGKILL mid-stream and restarted in this one. The Kafka sink is at least
once: a result written by the batch the kill abandoned is written again at the restart, the same record.
And what ends a real-time run, each one line: a bad record, partitions added to the source topic, the
broker stopped (and the start once it is back).
"""

from __future__ import annotations

import json
import os
import shlex
import signal
import subprocess
import threading
import time
from collections import Counter
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pyspark
import pytest
from stream_job.machinery.core import real_time
from stream_job.machinery.job.spark.connectors import PROVEN_KAFKA_CONNECTORS, spark_minor
from stream_job.machinery.operations import local_kafka

from .conftest import (
    BAKED_OPERATOR,
    PROJECT_DIR,
    clean_env,
    committed_batches,
    create_topic,
    deep_merge,
    digest,
    edited_query,
    files_job,
    jvm_free,
    kafka_offsets,
    produce,
    project_copy,
    run_cli,
    run_cli_process,
    run_main,
    run_python,
    start_job,
)
from .test_chains import replaced
from .test_exactly_once import logged_batches
from .test_kafka_sink import records

SPARK_WITH_REAL_TIME = tuple(int(part) for part in pyspark.__version__.split(".")[:2]) >= (4, 3)
pytestmark = pytest.mark.streaming
runs_real_time = [
    pytest.mark.real_time,
    pytest.mark.kafka,
    pytest.mark.skipif(not SPARK_WITH_REAL_TIME, reason="real-time mode runs state from Spark 4.3 on"),
]
REAL_TIME = {
    "sink": {"output_mode": "update"},
    "state_store": {
        "provider": "rocksdb",
        "changelog_checkpointing": True,
        "integrity": {"checkpoint_format_version": 2},
    },
    "query": {"trigger": "real_time 1 second"},
}
BASE_TIME = datetime(2026, 1, 5, tzinfo=UTC)


def test_a_real_time_trigger_the_settings_do_not_fit_is_one_line_each_and_starts_nothing(write_settings, tmp_path):
    changes = deep_merge(
        files_job(tmp_path, "parquet", "hdfs"), {"query": {"trigger": "real_time"}, "sink": {"output_mode": "append"}}
    )
    changes["state_store"] = {
        "provider": "hdfs",
        "changelog_checkpointing": False,
        "integrity": {"checkpoint_format_version": 1},
    }
    path = write_settings(changes)
    before = digest(tmp_path)
    refused = run_cli("run", "--settings", str(path))
    assert refused.returncode == 2, refused.stderr[-3000:]
    assert refused.stderr.splitlines() == [
        "settings error: query.trigger is real_time but source.type is files: Spark's real-time mode reads only from"
        " Kafka; set source.type to kafka, or set query.trigger to an interval such as '1 second'",
        "settings error: query.trigger is real_time but sink.type is parquet: Spark's real-time mode writes only to"
        " Kafka or the console (its allowlist of sinks); set sink.type to kafka, or set query.trigger to an interval"
        " such as '1 second'",
        "settings error: query.trigger is real_time but sink.output_mode is append: Spark's real-time mode runs in"
        " update mode only (each changed result written as it changes); set sink.output_mode to update",
        "settings error: query.trigger is real_time but state_store.provider is hdfs: Spark's real-time mode refuses"
        " the HDFS-backed store; set state_store.provider to rocksdb (on a new checkpoint if one exists)",
    ]
    assert digest(tmp_path) == before
    short = write_settings(deep_merge(changes, {"query": {"trigger": "real_time 100 milliseconds"}}))
    refused = run_cli("run", "--settings", str(short))
    assert refused.returncode == 2
    assert "query.trigger = 'real_time 100 milliseconds': real_time batches of 100 milliseconds would commit" in (
        refused.stderr
    )


@pytest.mark.skipif(SPARK_WITH_REAL_TIME, reason="the refusal of a Spark without real-time mode for state")
def test_a_real_time_trigger_on_spark_4_2_is_one_line_and_starts_no_jvm(write_settings, tmp_path):
    kafka = {"type": "kafka", "kafka": {"bootstrap_servers": "127.0.0.1:9", "topic": "events"}}
    changes = deep_merge(REAL_TIME, {"source": kafka, "sink": {"type": "console"}})
    changes["query"]["checkpoint_location"] = str(tmp_path / "checkpoint")
    refused = run_cli("run", "--settings", str(write_settings(changes)))
    assert refused.returncode == 2, refused.stderr[-3000:]
    assert refused.stderr.splitlines() == [
        f"settings error: query.trigger is real_time but this is Spark {pyspark.__version__}: a stateful query runs"
        " in real time from Spark 4.3 on; pip install 'pyspark>=4.3,<4.4' (and pin it in pyproject.toml), or set"
        " query.trigger to an interval such as '1 second'"
    ]
    assert not (tmp_path / "checkpoint").exists()


@pytest.mark.skipif(BAKED_OPERATOR != "windowed_aggregation", reason="edits the windowed count's query")
def test_check_refuses_an_operator_or_python_that_real_time_mode_does_not_run(write_settings, tmp_path):
    kafka = {"type": "kafka", "kafka": {"bootstrap_servers": "127.0.0.1:9", "topic": "events"}}
    path = write_settings(deep_merge(REAL_TIME, {"source": kafka, "sink": {"type": "console"}}))
    within = {
        '.groupBy(F.window("event_time", query.window).alias("window"), "key")': '.dropDuplicatesWithinWatermark(["event_id"])'
        '.groupBy(F.window("event_time", query.window).alias("window"), "key")'
    }
    python = {
        '.where(~F.col("key").isin(query.params.ignored_keys))': '.where(F.udf(lambda key: True, "boolean")("key"))'
    }
    expected = {
        "within": "settings error: query.trigger is real_time but the query runs deduplication -> windowed_aggregation:"
        " Spark's real-time mode runs no deduplication, only a deduplication by dropDuplicates and an aggregation"
        " without a session window (its allowlist) (dropDuplicates with the event time among its columns is: it"
        " drops each id once the watermark passes); change the query, or set query.trigger to an interval such as"
        " '1 second'",
        "python": "settings error: query.trigger is real_time but the query calls Python (the UDF <lambda>): Spark's"
        " real-time mode runs no Python UDF (its allowlist); write it with Spark's functions, or set query.trigger"
        " to an interval such as '1 second'",
    }
    for name, edits in (("within", within), ("python", python)):
        with edited_query(edits):
            refused = run_cli("check", "--settings", str(path))
        assert refused.returncode == 2, refused.stderr[-3000:]
        assert refused.stderr.splitlines() == [expected[name]]


def real_time_job(broker: local_kafka.Broker, tmp_path: Path, shuffle_partitions: int = 1) -> tuple[dict, dict]:
    """Settings of a real-time run from a one-partition topic to another, and the topics' names."""
    topics = {"in": f"{tmp_path.name}-in", "out": f"{tmp_path.name}-out"}
    for topic in topics.values():
        create_topic(broker.bootstrap, topic)
    kafka = {"bootstrap_servers": broker.bootstrap}
    changes = deep_merge(
        REAL_TIME,
        {
            "spark": {"master": "local[2]", "shuffle_partitions": shuffle_partitions},
            "source": {"type": "kafka", "kafka": {**kafka, "topic": topics["in"], "starting_offsets": "earliest"}},
            "sink": {"type": "kafka", "kafka": {**kafka, "topic": topics["out"]}},
            "query": {"checkpoint_location": str(tmp_path / "checkpoint"), "watermark": "10 minutes"},
        },
    )
    return changes, topics


def events(first: int, count: int, repeats: int = 0) -> list[str]:
    """Events first.. first+count-1, a second apart (and some microseconds past it), over 5 keys; the first
    `repeats` of them sent twice."""
    times = {n: BASE_TIME + timedelta(seconds=n, microseconds=n + 1) for n in range(first, first + count)}
    made = [{"event_id": f"e{n}", "key": f"k{n % 5}", "event_time": moment.isoformat()} for n, moment in times.items()]
    return [json.dumps(event) for event in made + made[:repeats]]


def wait_for(condition, what: str, process: subprocess.Popen, seconds: float = 120) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        if process.poll() is not None:
            pytest.fail(f"the job ended (exit {process.returncode}) before {what}")
        if time.monotonic() > deadline:
            pytest.fail(f"waited {seconds} s for {what}")
        time.sleep(0.2)


def killed_mid_stream(spark, path: Path, broker, topics: dict, produced: list[str], cwd: Path, log: Path) -> int:
    """Run the job as a process (in cwd) on `produced`, SIGKILL it while a batch runs whose results are out;
    return that batch, which the checkpoint has not committed."""
    checkpoint = path.parent / "checkpoint"
    produce(broker.bootstrap, topics["in"], produced[: len(produced) // 2])
    with open(log, "w") as output:
        process = start_job(path, output, cwd=cwd)
        try:
            wait_for(lambda: len(committed_batches(checkpoint)) >= 2, "two committed batches", process)
            # Then the rest, read and written by the batch in flight, which the kill abandons uncommitted.
            written = len(records(spark, broker.bootstrap, topics["out"]).collect())
            produce(broker.bootstrap, topics["in"], produced[len(produced) // 2 :])
            wait_for(
                lambda: len(records(spark, broker.bootstrap, topics["out"]).collect()) > written, "results", process
            )
            # A real-time query always has a batch in flight: the next starts as one commits.
            os.killpg(process.pid, signal.SIGKILL)
            process.wait(timeout=60)
        finally:
            if process.poll() is None:
                process.kill()
    assert process.returncode == -signal.SIGKILL, log.read_text()[-3000:]
    # A real-time batch logs its offsets as it ends (its end offsets are where it stopped reading), just
    # before its commit: the batch the kill abandoned is the one after the last commit, logged or not.
    in_flight = committed_batches(checkpoint)[-1] + 1
    assert logged_batches(checkpoint)[-1] <= in_flight
    return in_flight


# Batches of a restart in real time: the one the kill abandoned, run again, then one for what was sent while
# the job was down; the stop lets the batch then in flight commit too (a busy machine may start a batch's
# tasks too late to read in it). Each takes about 1.5 s on 2 cores, where --timeout 10 ran some 7.
RESTART_BATCHES = 2


def restarted(path: Path, in_flight: int) -> subprocess.CompletedProcess[str]:
    """The job run again in this process for RESTART_BATCHES batches, the batch the kill abandoned run again
    first, stopped on a batch boundary."""
    run = run_main("--settings", str(path), "--max-batches", str(RESTART_BATCHES))
    assert run.returncode == 0, run.stderr[-3000:]
    assert f"batch {in_flight}:" in run.stdout
    assert "stopped on a batch boundary" in run.stdout, run.stdout[-3000:]
    return run


def values_by_key(spark, broker, topic: str) -> dict[str, set[str]]:
    """Each record key of the topic -> the values written under it (a repeat adds none)."""
    found: dict[str, set[str]] = {}
    for row in records(spark, broker.bootstrap, topic).collect():
        found.setdefault(row.key, set()).add(row.value)
    return found


# The query of the real-time bake's deduplication starter, in place of the windowed count's.
DEDUPLICATION = replaced(
    """def stateful_query(events, query, join_events=None):
    return events.withWatermark("event_time", query.watermark).dropDuplicates(["event_id", "event_time"])"""
)
# Two halves, the second sent while the first run's batch is in flight; more while the job is down.
SENT = events(0, 40, repeats=10) + events(40, 40, repeats=10)
WHILE_DOWN = events(80, 30, repeats=5)


@pytest.mark.parametrize("_", [pytest.param(None, marks=runs_real_time, id="real-time")])
def test_a_deduplication_killed_mid_stream_in_real_time_writes_each_event_and_repeats_only_whole_records(
    spark, kafka_broker, write_settings, tmp_path, _
):
    changes, topics = real_time_job(kafka_broker, tmp_path)
    changes["sink"]["kafka"]["key_columns"] = ["event_id"]
    path = write_settings(changes)
    copy = project_copy(tmp_path, DEDUPLICATION)
    in_flight = killed_mid_stream(spark, path, kafka_broker, topics, SENT, copy, tmp_path / "first-run.log")
    produce(kafka_broker.bootstrap, topics["in"], WHILE_DOWN)
    with edited_query(DEDUPLICATION):
        restarted(path, in_flight)
    written = values_by_key(spark, kafka_broker, topics["out"])
    # Every event once at least, and a repeat only the whole record again: one value per event id.
    assert sorted(json.loads(key)["event_id"] for key in written) == sorted(
        {json.loads(e)["event_id"] for e in SENT + WHILE_DOWN}
    )
    assert all(len(values) == 1 for values in written.values())
    # Each event time as it was sent, to the microsecond (the state's), not cut to milliseconds.
    sent = {event["event_id"]: event["event_time"] for event in map(json.loads, SENT + WHILE_DOWN)}
    for value in (json.loads(value) for values in written.values() for value in values):
        assert datetime.fromisoformat(value["event_time"]) == datetime.fromisoformat(sent[value["event_id"]])


def window_counts(lines: list[str]) -> Counter:
    """(key, window start) -> events: the windowed count as a batch job makes it, 1-minute windows."""
    counted: Counter = Counter()
    for event in map(json.loads, lines):
        moment = datetime.fromisoformat(event["event_time"])
        counted[(event["key"], moment.replace(second=0, microsecond=0).isoformat())] += 1
    return counted


def latest_counts(written: dict[str, set[str]]) -> dict[tuple[str, str], int]:
    """(key, window start) -> the highest count written: update mode writes each count as it grows."""
    latest: dict[tuple[str, str], int] = {}
    for values in written.values():
        for row in map(json.loads, values):
            group = (row["key"], datetime.fromisoformat(row["window_start"]).isoformat())
            latest[group] = max(latest.get(group, 0), row["events"])
    return latest


@pytest.mark.parametrize("_", [pytest.param(None, marks=runs_real_time, id="real-time")])
def test_a_windowed_count_killed_mid_stream_in_real_time_counts_each_event_once_and_goes_on_in_micro_batches(
    spark, kafka_broker, write_settings, tmp_path, _
):
    changes, topics = real_time_job(kafka_broker, tmp_path)
    path = write_settings(changes)
    in_flight = killed_mid_stream(spark, path, kafka_broker, topics, SENT, PROJECT_DIR, tmp_path / "first-run.log")
    produce(kafka_broker.bootstrap, topics["in"], WHILE_DOWN)
    restarted(path, in_flight)
    expected = window_counts(SENT + WHILE_DOWN)
    # A count written twice (the replayed batch's) is the same count: no event counted twice, none missed.
    assert latest_counts(values_by_key(spark, kafka_broker, topics["out"])) == dict(expected)

    # The same checkpoint goes on in micro-batches, as Spark allows: the guard lets it, the counts go on.
    later = events(110, 10)
    produce(kafka_broker.bootstrap, topics["in"], later)
    micro = write_settings(deep_merge(changes, {"query": {"trigger": "1 second"}}), name="micro-batch.yaml")
    run = run_main("--settings", str(micro), "--max-batches", "1")  # a micro-batch reads all there is
    assert run.returncode == 0, run.stderr[-3000:]
    assert latest_counts(values_by_key(spark, kafka_broker, topics["out"])) == dict(
        window_counts(SENT + WHILE_DOWN + later)
    )


@pytest.mark.parametrize("_", [pytest.param(None, marks=runs_real_time, id="real-time")])
def test_too_few_task_slots_for_a_real_time_batch_is_one_line_before_the_query_starts(
    spark, kafka_broker, write_settings, tmp_path, _
):
    """The slot check counts the source topic's partitions from the endpoint check's answer: one Kafka
    AdminClient per endpoint (source and sink), the source's asked once."""
    changes, _topics = real_time_job(kafka_broker, tmp_path, shuffle_partitions=2)
    admins = admin_clients_made(spark)
    refused = run_cli("run", "--settings", str(write_settings(changes)))
    assert admin_clients_made(spark) - admins == 2
    assert refused.returncode == 2, refused.stderr[-3000:]
    assert refused.stderr.splitlines()[-1] == (
        "settings error: query.trigger is real_time but the job has 2 task slots (cores) and a real-time batch runs"
        " all its tasks at once: 1 for the source topic's partitions + 2 (spark.shuffle_partitions) = 3; give the"
        " job 3 cores (spark.master local[3], or more executor cores), or lower spark.shuffle_partitions on a new"
        " checkpoint"
    )
    assert not (tmp_path / "checkpoint" / "offsets").exists()


def admin_clients_made(spark) -> int:
    """The Kafka AdminClients this JVM has made (their client id's sequence): how often the job asked a broker."""
    admin_class = spark._jvm.org.apache.kafka.clients.admin.KafkaAdminClient._java_lang_class
    sequence = admin_class.getDeclaredField("ADMIN_CLIENT_ID_SEQUENCE")
    sequence.setAccessible(True)
    return int(sequence.get(None))  # py4j hands the AtomicInteger over as its value


@pytest.mark.parametrize("_", [pytest.param(None, marks=runs_real_time, id="real-time")])
def test_the_operators_refused_and_run_are_those_of_the_installed_sparks_allowlist(spark, _):
    """core/real_time.py's table, read against the allowlist of the Spark that runs (its private sets)."""
    jvm = spark._jvm
    allowlist = jvm.java.lang.Class.forName("org.apache.spark.sql.execution.streaming.runtime.RealTimeModeAllowlist$")

    def allowed(field: str) -> set[str]:
        member = allowlist.getDeclaredField(field)
        member.setAccessible(True)
        names, items = set(), member.get(None).iterator()
        while items.hasNext():
            names.add(str(items.next()))
        return names

    operators = allowed("allowedOperators")
    node = "org.apache.spark.sql.execution.{}".format
    assert {kind for kind, name in real_time.NODES.items() if node(name) in operators} == set(real_time.ALLOWED)
    assert not {node(name) for name in real_time.PYTHON_NODES} & operators
    for name in real_time.NODES.values():  # each node named is one of that release's classes
        jvm.java.lang.Class.forName(node(name))
    sinks = {name.rsplit(".", 1)[-1] for name in allowed("allowedSinks")}
    assert {"KafkaSourceProvider$KafkaTable", "ConsoleTable$"} <= sinks


@pytest.mark.real_time
@pytest.mark.skipif(
    spark_minor(pyspark.__version__) not in PROVEN_KAFKA_CONNECTORS, reason="a Spark with a proven Kafka pairing"
)
def test_the_bake_as_generated_starts_on_the_proven_kafka_connector_where_spark_s_own_is_not_served():
    """The real-time bake's settings.yaml as written (spark.kafka_connector_version null) asks for the connector
    of Spark's own minor, 4.3.0 on pyspark 4.3.0, which the Maven Central mirror CI runs against does not
    serve: the project resolves the proven 4.2.0 instead, once (the shared session's start did, as a job's
    first start does), and each start from those JARs says so in one line. The real-time runs above ran on it."""
    assert "\n  kafka_connector_version: null\n" in (PROJECT_DIR / "settings.yaml").read_text()
    minor = spark_minor(pyspark.__version__)
    own, proven = (f"spark-sql-kafka-0-10_2.13:{version}" for version in (f"{minor}.0", PROVEN_KAFKA_CONNECTORS[minor]))
    result = run_cli_process("packages", "--submit-args")  # make submit's, on the project's own settings
    assert result.returncode == 0, result.stderr[-3000:]
    assert jvm_free(result.stderr).splitlines() == [
        f"connectors: {own} (Spark {minor}'s own) is not served by Maven Central or the mirror in ivysettings.xml:"
        f" running on {proven}, the connector proven on Spark {minor} (real-time mode included); delete"
        f" connector-jars/ to ask for {own} again, or set spark.kafka_connector_version"
    ]
    jars = shlex.split(result.stdout)[1].split(",")
    assert [Path(jar).name for jar in jars if "spark-sql-kafka" in jar] == [
        f"org.apache.spark_{proven.replace(':', '-')}.jar"
    ]
    assert (Path(jars[0]).parent / "packages.txt").read_text() == f"org.apache.spark:{proven}\n"


def once_committed(checkpoint: Path, action) -> threading.Thread:
    """A thread that runs action once the job running on checkpoint committed a batch (2 minutes at most)."""

    def run() -> None:
        deadline = time.monotonic() + 120
        while not committed_batches(checkpoint) and time.monotonic() < deadline:
            time.sleep(0.2)
        action()

    thread = threading.Thread(target=run)
    thread.start()
    return thread


BROKEN = '{"event_id": "e5", "key": "k0", "event_time": '  # a record cut off mid-value


@pytest.mark.parametrize("_", [pytest.param(None, marks=runs_real_time, id="real-time")])
def test_a_bad_record_in_real_time_is_the_jobs_one_line_as_in_micro_batches(
    spark, kafka_broker, write_settings, tmp_path, _
):
    """As `python main.py` on the real-time bake's cores (4 shuffle partitions, local[5]): the shuffle's
    reading tasks fail with `Connection to streaming shuffle writer 0 closed` as the task that met the bad
    record does, and Spark ended the query with whichever failure reached it first (the readers' in 2 of 5
    runs); and each wrote ERROR lines (some 20). Now the console holds the job's one line naming the record,
    exit 1, the batch uncommitted, and no count of an event after the bad record written."""
    changes, topics = real_time_job(kafka_broker, tmp_path, shuffle_partitions=4)
    changes["spark"]["master"] = "local[5]"
    before = events(0, 5)
    produce(kafka_broker.bootstrap, topics["in"], [*before, BROKEN, *events(5, 5)])

    failed = run_python("main.py", "--settings", str(write_settings(changes)), env=clean_env())

    assert failed.returncode == 1, failed.stderr[-3000:]
    # A warning may come (a state store slow to load on busy cores), and the connector's line where the
    # proven pairing runs (its own proof above); no ERROR line, no Java exception.
    said = [line for line in jvm_free(failed.stderr).splitlines() if not line.startswith("connectors: ")]
    assert [line for line in said if " WARN " not in line] == [
        f"bad record: topic {topics['in']} partition 0 offset 5 holds a record that does not parse as EVENT_SCHEMA:"
        f" {BROKEN}; source.kafka.on_bad_record is fail, so the batch stopped uncommitted (the results of its"
        " records before this one may be out already, and are written again when it runs again). Fix or remove"
        " the row at its source, or set on_bad_record to drop to skip and count such rows; the next start runs"
        " the batch again."
    ]
    # No commit reached the bad record (a first batch may end having read nothing: busy cores start its tasks late).
    checkpoint = tmp_path / "checkpoint"
    assert all(kafka_offsets(checkpoint, batch)[topics["in"]]["0"] <= 5 for batch in committed_batches(checkpoint))
    counted_before = window_counts(before)
    for group, count in latest_counts(values_by_key(spark, kafka_broker, topics["out"])).items():
        assert count <= counted_before[group]  # nothing past the bad record was counted


@pytest.mark.parametrize("_", [pytest.param(None, marks=runs_real_time, id="real-time")])
def test_partitions_added_to_the_source_topic_while_real_time_runs_are_one_line_and_the_restart_names_the_cores(
    kafka_broker, write_settings, tmp_path, _
):
    """The job's 2 task slots hold the topic's one partition and the shuffle partition; a second partition,
    added once a batch committed, makes the next batch need 3: Spark refuses it
    (CONCURRENT_SCHEDULER_INSUFFICIENT_SLOT, its raw text before). One line, exit 1, and the start after it
    says the cores it needs."""
    changes, topics = real_time_job(kafka_broker, tmp_path)
    path = write_settings(changes)
    produce(kafka_broker.bootstrap, topics["in"], events(0, 10))
    alter = ("--bootstrap-server", kafka_broker.bootstrap, "--alter", "--topic", topics["in"], "--partitions", "2")

    adding = once_committed(tmp_path / "checkpoint", lambda: local_kafka.run_tool(local_kafka.TOPIC_COMMAND, *alter))
    failed = run_main("--settings", str(path), "--timeout", "120")
    adding.join()

    assert failed.returncode == 1, failed.stdout[-2000:] + failed.stderr[-3000:]
    assert failed.stderr.splitlines() == [
        "real-time: a batch needs 3 task slots at once and 2 are free: the source topic gained partitions while the"
        " job ran, more than the task slots it has (a real-time batch runs a task per partition and one per shuffle"
        " partition, all at once); the batch did not start, nothing of it was written: start the job again, and its"
        " start counts the partitions against the cores and says how many it needs"
    ]
    restart = run_main("--settings", str(path))
    assert restart.returncode == 2, restart.stderr[-3000:]
    assert (
        "2 for the source topic's partitions + 1 (spark.shuffle_partitions) = 3; give the job 3 cores"
        in (restart.stderr.splitlines()[-1])
    )


@pytest.mark.parametrize("_", [pytest.param(None, marks=runs_real_time, id="real-time")])
def test_a_broker_stopped_while_real_time_runs_is_one_line_and_the_start_once_it_is_back_goes_on_exactly(
    spark, kafka_broker, write_settings, tmp_path, _
):
    """The project's broker stopped (its stop command) once a batch committed: Kafka's client gives up
    (here in seconds: Spark's default is 3 attempts of 60 s, so some 3 minutes) and the job says so in one
    line, exit 1, where it said Kafka's raw TimeoutException; the broker started again, the next start goes
    on, and the counts equal the input's. (Back within those 3 minutes, the job goes on by itself.)"""
    changes, topics = real_time_job(kafka_broker, tmp_path)
    changes["source"]["kafka"]["options"] = {
        "kafka.default.api.timeout.ms": "4000",
        "kafka.request.timeout.ms": "2000",
        "fetchOffset.numRetries": "1",
    }
    path = write_settings(changes)
    sent = events(0, 20)
    produce(kafka_broker.bootstrap, topics["in"], sent)

    stopping = once_committed(tmp_path / "checkpoint", lambda: local_kafka.stop(kafka_broker.directory))
    try:
        failed = run_main("--settings", str(path), "--timeout", "120")
    finally:
        stopping.join()
        local_kafka.start(kafka_broker.directory)  # the same port and topics, for this test and the others

    assert failed.returncode == 1, failed.stdout[-2000:] + failed.stderr[-3000:]
    (line,) = failed.stderr.splitlines()
    where = f"bootstrap_servers {kafka_broker.bootstrap}"
    assert line.startswith("kafka: the Kafka client gave up on the broker while the job ran (TimeoutException: ")
    assert line.endswith(
        f"; no broker answers at source.kafka.{where} nor at sink.kafka.{where} now. The checkpoint holds every"
        " committed batch: start the job once the broker is back, and the batch in flight runs again (its results"
        " written again to a Kafka sink, which is at least once)"
    )
    later = events(20, 10)
    produce(kafka_broker.bootstrap, topics["in"], later)
    assert run_main("--settings", str(path), "--max-batches", str(RESTART_BATCHES)).returncode == 0
    assert latest_counts(values_by_key(spark, kafka_broker, topics["out"])) == dict(window_counts(sent + later))
