"""The Kafka source against a real broker: options honoured, SASL, and each bad input as one line.

The broker is the project's own local one (`kafka up`: Kafka from Maven Central, KRaft, on
127.0.0.1, with a SASL listener for PLAIN and SCRAM-SHA-256), one for the whole run. Each test runs
the job as `python main.py` in its own process with Spark's Kafka connector fetched by Ivy, and
reads Spark's own figures back: the progress lines, the offsets in the checkpoint, the output.
Exactly-once across a SIGKILL on every operator is test_exactly_once's Kafka case.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from pyspark.testing import assertDataFrameEqual
from stream_job.machinery.core.settings import load_settings
from stream_job.machinery.job.endpoints.kafka import KafkaEndpointError, read_nothing
from stream_job.machinery.job.endpoints.output import read_output
from stream_job.machinery.operations import local_kafka

from .conftest import (
    ANY_PROVIDER,
    BAKED_OPERATOR,
    KAFKA_USERS,
    batch_expectation,
    clean_env,
    committed_batches,
    create_topic,
    digest,
    files_job,
    jvm_free,
    kafka_job,
    kafka_offsets,
    produce,
    run_cli,
    run_main,
    run_python,
)

pytestmark = [pytest.mark.streaming, pytest.mark.kafka]

INPUT_ROWS = re.compile(r"^batch (\d+): ([\d,]+) input rows", re.MULTILINE)
PASSWORD_ENV = "KAFKA_TEST_PASSWORD"


def input_rows(stdout: str) -> list[int]:
    """Input rows per batch, from the job's own progress lines (Spark's numInputRows)."""
    return [int(rows.replace(",", "")) for _, rows in INPUT_ROWS.findall(stdout)]


def event_lines(tmp_path: Path, files: int = 2) -> list[str]:
    """files_job's events as JSON lines (40 per file), for topics the test fills itself."""
    files_job(tmp_path / "events", "parquet", ANY_PROVIDER, files=files)
    return [
        line
        for path in sorted((tmp_path / "events" / "landing").glob("events-*.json"))
        for line in path.read_text().splitlines()
    ]


def job_on_topic(tmp_path: Path, bootstrap: str, **kafka: object) -> dict:
    """files_job's settings (parquet) with the source reading Kafka instead, as given."""
    changes = files_job(tmp_path, "parquet", ANY_PROVIDER, files=1)
    changes["source"] = {"type": "kafka", "kafka": {"bootstrap_servers": bootstrap, **kafka}}
    return changes


def run_job(path: Path, *args: str):
    """The job in-process, on the shared session (it starts with the Kafka connector)."""
    return run_main("--settings", str(path), *args)


def run_job_process(path: Path, password: str):
    """The job as a process of its own, with the SASL password in its environment: all it prints, Spark's
    own log included, is searched for the password."""
    return run_python("main.py", "--settings", str(path), env={**clean_env(), PASSWORD_ENV: password})


def test_topic_pattern_and_max_offsets_per_trigger_are_honoured(kafka_broker, write_settings, tmp_path):
    lines = event_lines(tmp_path)  # 80 events
    prefix = tmp_path.name
    for topic, values in ((f"{prefix}-a", lines[:40]), (f"{prefix}-b", lines[40:]), (f"{prefix}-other", lines)):
        create_topic(kafka_broker.bootstrap, topic)
        produce(kafka_broker.bootstrap, topic, values)
    changes = job_on_topic(
        tmp_path,
        kafka_broker.bootstrap,
        topic=None,
        topic_pattern=f"{re.escape(prefix)}-[ab]",
        max_offsets_per_trigger=30,
    )
    result = run_job(write_settings(changes))

    assert result.returncode == 0, result.stderr[-3000:]
    rows = input_rows(result.stdout)
    assert sum(rows) == 80 and max(rows) <= 30 and len([r for r in rows if r]) >= 3
    last = committed_batches(tmp_path / "checkpoint")[-1]
    assert kafka_offsets(tmp_path / "checkpoint", last) == {f"{prefix}-a": {"0": 40}, f"{prefix}-b": {"0": 40}}

    # The checkpoint holds the offsets of -a and -b: subscribing to -other alone is refused before Spark starts.
    other = {**changes["source"]["kafka"], "topic": f"{prefix}-other", "topic_pattern": None}
    refused = run_job(write_settings({**changes, "source": {**changes["source"], "kafka": other}}, name="other.yaml"))
    assert refused.returncode == 4, refused.stderr[-3000:]
    (line,) = refused.stderr.strip().splitlines()
    assert line.startswith(f"checkpoint error: source.kafka.topic is {prefix}-other in settings, but the checkpoint")
    assert f"holds {prefix}-a, {prefix}-b: its offsets are those of these topics" in line


def test_starting_offsets_latest_skips_what_the_topic_held_before_the_first_start(
    kafka_broker, write_settings, tmp_path
):
    lines = event_lines(tmp_path)
    topic = f"{tmp_path.name}-t"
    local_kafka.create_topic(kafka_broker.bootstrap, topic)
    local_kafka.produce(kafka_broker.bootstrap, topic, lines[:40])
    path = write_settings(job_on_topic(tmp_path, kafka_broker.bootstrap, topic=topic, starting_offsets="latest"))

    first = run_job(path)
    local_kafka.produce(kafka_broker.bootstrap, topic, lines[40:])
    second = run_job(path)

    assert first.returncode == 0 and second.returncode == 0, first.stderr[-2000:] + second.stderr[-2000:]
    # The 40 records that were there at the first start are never read; the 40 after it are.
    assert sum(input_rows(first.stdout)) == 0
    assert sum(input_rows(second.stdout)) == 40


def test_cluster_ids_never_look_like_an_option():
    # One in 64 random ids starts with "-", which the storage tool took for an option (seen in CI).
    ids = {local_kafka.cluster_id() for _ in range(2000)}
    assert len(ids) == 2000 and not [cluster for cluster in ids if cluster.startswith("-")]
    assert all(len(cluster) == 22 for cluster in ids)


# PLAIN is secondary: the two mechanisms differ only in the JAAS login module's name.
@pytest.mark.parametrize("mechanism", [pytest.param("PLAIN", marks=pytest.mark.secondary), "SCRAM-SHA-256"])
def test_sasl_reads_with_the_password_from_the_named_variable_and_never_prints_it(
    kafka_broker, write_settings, tmp_path, mechanism
):
    (user, password), lines = next(iter(KAFKA_USERS.items())), event_lines(tmp_path, files=1)
    topic = f"{tmp_path.name}-t"
    create_topic(kafka_broker.bootstrap, topic)
    produce(kafka_broker.bootstrap, topic, lines)
    sasl = {"security_protocol": "SASL_PLAINTEXT", "sasl_mechanism": mechanism, "sasl_username": user}
    sasl["sasl_password_env"] = PASSWORD_ENV
    path = write_settings(job_on_topic(tmp_path, kafka_broker.sasl_bootstrap, topic=topic, **sasl))

    result = run_job_process(path, password)

    assert result.returncode == 0, result.stderr[-3000:]
    assert sum(input_rows(result.stdout)) == 40
    # A quiet console with a connector fetched: Ivy's report of the resolution went to logs/packages.log.
    assert jvm_free(result.stderr) == "", result.stderr[-3000:]
    assert password not in result.stdout + result.stderr + path.read_text()


REFUSED_ALICE = (
    "the broker refused the credentials of 'alice' (SCRAM-SHA-256, the password from $KAFKA_TEST_PASSWORD):"
    " Authentication failed during authentication due to invalid credentials with SASL mechanism SCRAM-SHA-256;"
    " check sasl_username, sasl_mechanism and the password in $KAFKA_TEST_PASSWORD"
)


def test_wrong_credentials_are_one_line_and_start_nothing(spark, kafka_broker, write_settings, tmp_path):
    topic = f"{tmp_path.name}-t"
    create_topic(kafka_broker.bootstrap, topic)
    sasl = {"security_protocol": "SASL_PLAINTEXT", "sasl_mechanism": "SCRAM-SHA-256", "sasl_username": "alice"}
    path = write_settings(
        job_on_topic(tmp_path, kafka_broker.sasl_bootstrap, topic=topic, sasl_password_env=PASSWORD_ENV, **sasl)
    )

    result = run_job_process(path, "not-her-password-7")

    assert result.returncode == 2
    assert result.stderr.strip().splitlines()[-1] == (
        f"kafka error: source.kafka.bootstrap_servers {kafka_broker.sasl_bootstrap}: {REFUSED_ALICE}"
    )
    assert "not-her-password-7" not in result.stdout + result.stderr
    assert not (tmp_path / "checkpoint").exists()

    # Spark Connect's way, where no AdminClient runs: an empty read of each topic through the session's own
    # connector (here the shared session's). The same lines, bar the list of the topics there.
    alice = load_settings(path).source.kafka
    read_nothing(spark, "source", alice, {PASSWORD_ENV: KAFKA_USERS["alice"]})  # the topic is there: no error
    with pytest.raises(KafkaEndpointError) as refused:
        read_nothing(spark, "source", alice, {PASSWORD_ENV: "not-her-password-7"})
    assert str(refused.value) == f"source.kafka.bootstrap_servers {kafka_broker.sasl_bootstrap}: {REFUSED_ALICE}"
    missing = alice.model_copy(update={"topic": f"{topic},no-such-topic-y"})
    with pytest.raises(KafkaEndpointError) as not_there:
        read_nothing(spark, "source", missing, {PASSWORD_ENV: KAFKA_USERS["alice"]})
    assert str(not_there.value) == (
        f"source.kafka.topic {topic},no-such-topic-y: no topic no-such-topic-y on {kafka_broker.sasl_bootstrap} (read"
        " through Spark's connector, which lists no topics); create it, or fix the name"
    )


def test_no_broker_and_no_topic_are_one_line_each_and_start_nothing(kafka_broker, write_settings, tmp_path):
    nobody = f"127.0.0.1:{local_kafka._free_port()}"
    down = run_job(write_settings(job_on_topic(tmp_path, nobody, topic="events"), name="down.yaml"))
    missing = run_job(write_settings(job_on_topic(tmp_path, kafka_broker.bootstrap, topic="no-such-topic-x")))

    assert down.returncode == 2
    assert down.stderr.strip().splitlines()[-1] == (
        f"kafka error: source.kafka.bootstrap_servers {nobody}: no broker answers there (nothing listens, or it is"
        " not reachable within 5 s); start the broker (`make kafka-up` starts a local one) or fix the address"
    )
    assert missing.returncode == 2
    last = missing.stderr.strip().splitlines()[-1]
    assert last.startswith(
        f"kafka error: source.kafka.topic no-such-topic-x: no topic no-such-topic-x on {kafka_broker.bootstrap}"
        " (topics there: "
    )
    assert last.endswith("); create it, or fix the name")
    assert not (tmp_path / "checkpoint").exists()


def test_a_malformed_value_stops_the_batch_with_fail_and_is_skipped_with_drop(
    spark, kafka_broker, write_settings, make_settings, tmp_path
):
    """One record that is not JSON among good ones: fail stops uncommitted, drop then goes on and loses no good row."""
    changes = kafka_job(tmp_path, kafka_broker, "parquet", ANY_PROVIDER, files=3)
    topic = changes["source"]["kafka"]["topic"]
    produce(kafka_broker.bootstrap, topic, ["{not json"])  # after the 3 files
    changes["source"]["kafka"]["max_offsets_per_trigger"] = None  # one batch, the bad record in it
    path = write_settings(changes)
    settings = make_settings(changes)
    checkpoint = tmp_path / "checkpoint"

    failed = run_job(path)
    assert failed.returncode == 1
    assert failed.stderr.strip().splitlines() == [
        f"bad record: topic {topic} partition 0 offset 120 holds a record that does not parse as EVENT_SCHEMA:"
        " {not json; source.kafka.on_bad_record is fail, so the batch stopped uncommitted (nothing of it was"
        " written). Fix or remove the row at its source, or set on_bad_record to drop to skip and count such rows;"
        " the next start runs the batch again."
    ]
    assert committed_batches(checkpoint) == []
    assert not list((tmp_path / "output").glob("*.parquet"))

    path = write_settings(
        {**changes, "source": {**changes["source"], "kafka": {**changes["source"]["kafka"], "on_bad_record": "drop"}}}
    )
    dropped = run_job(path)
    assert dropped.returncode == 0, dropped.stderr[-3000:]
    assert sum(input_rows(dropped.stdout)) == 121  # Spark counts the record it read, and then dropped
    (dropping,) = [line for line in dropped.stdout.splitlines() if ", dropped " in line]
    assert dropping.endswith(", dropped 1 malformed")
    assertDataFrameEqual(read_output(spark, settings.sink), batch_expectation(spark, settings))


def test_records_deleted_before_they_were_read_stop_the_job_or_are_skipped(kafka_broker, write_settings, tmp_path):
    """failOnDataLoss: true stops with the data-loss line and commits nothing more; false goes on without them."""
    lines = event_lines(tmp_path)
    topic = f"{tmp_path.name}-t"
    create_topic(kafka_broker.bootstrap, topic)
    produce(kafka_broker.bootstrap, topic, lines[:40])
    changes = job_on_topic(tmp_path, kafka_broker.bootstrap, topic=topic, max_offsets_per_trigger=40)
    path = write_settings(changes)
    checkpoint = tmp_path / "checkpoint"
    first = run_job(path)  # available-now: the 40 records there are
    assert first.returncode == 0, first.stderr[-2000:]
    assert kafka_offsets(checkpoint, committed_batches(checkpoint)[-1]) == {topic: {"0": 40}}
    produce(kafka_broker.bootstrap, topic, lines[40:])

    # Retention, by hand: records 40..59, which the job has not read, are gone.
    local_kafka.delete_records(kafka_broker.bootstrap, topic, 0, 60, tmp_path)
    before = digest(checkpoint / "commits")
    stopped = run_job(path)
    assert stopped.returncode == 1
    assert (
        stopped.stderr.strip()
        .splitlines()[-1]
        .startswith("data loss: records the checkpoint still needed were deleted from Kafka before they were read")
    )
    assert "source.kafka.fail_on_data_loss is true" in stopped.stderr
    assert digest(checkpoint / "commits") == before

    changes["source"]["kafka"]["fail_on_data_loss"] = False
    went_on = run_job(write_settings(changes))
    assert went_on.returncode == 0, went_on.stderr[-3000:]
    assert sum(input_rows(went_on.stdout)) == 20  # 60..79
    assert kafka_offsets(checkpoint, committed_batches(checkpoint)[-1]) == {topic: {"0": 80}}


@pytest.mark.operator
@pytest.mark.delta_spark
@pytest.mark.skipif(BAKED_OPERATOR != "stream_stream_join", reason="the seed scenario joins orders and payments")
def test_orders_and_payments_from_kafka_into_delta_then_the_order_waiting_for_its_payment(
    spark, kafka_broker, write_settings, make_settings, tmp_path
):
    """The seed scenario whole: two topics, a left outer join within a time range, Spark's Delta sink, then
    `inspect --key` on the newest order, which is never paid (every fifth order)."""
    changes = kafka_job(tmp_path, kafka_broker, "delta-spark", "rocksdb", files=3, topics=("orders", "payments"))
    path = write_settings(changes)
    settings = make_settings(changes)

    # A process: Spark's Delta sink (delta-spark) needs its session extensions from the start.
    result = run_python("main.py", "--settings", str(path), env=clean_env())
    assert result.returncode == 0, result.stderr[-3000:]
    assertDataFrameEqual(read_output(spark, settings.sink), batch_expectation(spark, settings))

    lookup = run_cli("inspect", "--settings", str(path), "--key", "key-119", "--json")
    assert lookup.returncode == 0, lookup.stderr[-3000:]
    order = json.loads(lookup.stdout)
    assert order["held"] and order["why"].startswith(
        "held at batch 3 in left-keyToNumValues, left-keyWithIndexToValue:"
    )
    (row,) = [row for row in order["rows"] if row["store"] == "left-keyWithIndexToValue"]
    assert (row["value"]["event_id"], row["value"]["matched"]) == ("evt-119", False)
