"""The Kafka clusters a job reads from and writes to: the client options the settings build, and the
checks made before the query starts.

A Kafka endpoint's broker must answer, accept the credentials and have the topics. Spark's Kafka
connector meets none of these as an error of its own: with no broker it retries until a timeout deep
inside the first batch, a source topic that does not exist is an empty input forever, and a sink
topic is created by the broker (when it allows that) with its defaults. So, once the connector is
loaded, the job first connects to each address, then asks the broker for its topics once with
Kafka's own AdminClient (from the connector's kafka-clients JAR, with the options the endpoint gets,
SASL included; a real-time start also asks for the source topics' partitions there, which the task
slot check counts), and turns each case into one line naming the setting. It reads and writes no record.
On Spark Connect, where this process has no JVM for the AdminClient, the server's own connector asks
the broker instead: a batch read of each topic from its newest offsets to its newest (read_nothing).
That is slower than the AdminClient (0.2-0.5 s a topic against 0.04 s), so Classic keeps the AdminClient.
"""

from __future__ import annotations

import os
import re
import socket
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from pyspark.sql import SparkSession

from ...core.settings import KafkaConnection, KafkaSinkSettings, KafkaSourceSettings, Settings
from ..spark.remote import is_connect

CONNECT_TIMEOUT_SECONDS = 5
ADMIN_TIMEOUT_SECONDS = 20
# Kafka's client timeouts of the checks, as client options (the AdminClient's, and the connector's own admin).
CHECK_TIMEOUTS = {
    "kafka.request.timeout.ms": str(ADMIN_TIMEOUT_SECONDS * 1000 // 2),
    "kafka.default.api.timeout.ms": str(ADMIN_TIMEOUT_SECONDS * 1000),
}
# A batch read of no record: from the offsets at a time later than any record's (the newest offsets,
# by the strategy) to the newest. Fetching those offsets is the broker's answer; one attempt only.
READ_NOTHING = {
    "startingTimestamp": str(2**62),
    "startingOffsetsByTimestampStrategy": "latest",
    "endingOffsets": "latest",
    "fetchOffset.numRetries": "1",
}
UNLISTED = " (read through Spark's connector, which lists no topics)"
KAFKA_ERROR = re.compile(r"org\.apache\.kafka\.common\.errors\.(\w+): ([^\n]*)")
JAAS_MODULES = {
    "PLAIN": "org.apache.kafka.common.security.plain.PlainLoginModule",
    "SCRAM-SHA-256": "org.apache.kafka.common.security.scram.ScramLoginModule",
    "SCRAM-SHA-512": "org.apache.kafka.common.security.scram.ScramLoginModule",
}


class KafkaEndpointError(Exception):
    """A Kafka source or sink the settings describe cannot be used: no broker, refused credentials, no topic."""


def connection_options(kafka: KafkaConnection, environ: Mapping[str, str] = os.environ) -> dict[str, str]:
    """The client options of the address and security, and the user's own; secrets come from the
    environment variables named."""
    options = {"kafka.bootstrap.servers": kafka.bootstrap_servers, "kafka.security.protocol": kafka.security_protocol}
    if kafka.sasl_mechanism is not None:
        options["kafka.sasl.mechanism"] = kafka.sasl_mechanism
        password = environ[str(kafka.sasl_password_env)]
        options["kafka.sasl.jaas.config"] = (
            f'{JAAS_MODULES[kafka.sasl_mechanism]} required username="{_jaas_quote(str(kafka.sasl_username))}"'
            f' password="{_jaas_quote(password)}";'
        )
    options.update(kafka.options)
    options.update({key: environ[name] for key, name in kafka.secret_options.items()})
    return options


def _jaas_quote(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"')


def kafka_options(kafka: KafkaSourceSettings, environ: Mapping[str, str] = os.environ) -> dict[str, str]:
    """The Kafka source options the settings build; secrets come from the environment variables named."""
    options = {"startingOffsets": kafka.starting_offsets, "failOnDataLoss": str(kafka.fail_on_data_loss).lower()}
    if kafka.topic is not None:
        options["subscribe"] = kafka.topic
    else:
        options["subscribePattern"] = str(kafka.topic_pattern)
    if kafka.max_offsets_per_trigger is not None:
        options["maxOffsetsPerTrigger"] = str(kafka.max_offsets_per_trigger)
    return {**options, **connection_options(kafka, environ)}


def kafka_sink_options(kafka: KafkaSinkSettings, environ: Mapping[str, str] = os.environ) -> dict[str, str]:
    """The Kafka sink options the settings build; secrets come from the environment variables named."""
    return {**connection_options(kafka, environ), "topic": kafka.topic}


@dataclass
class EndpointsChecked:
    """What the checks found: the endpoints checked (each one's bootstrap_servers by its setting), remarks to
    print, and for a real-time start on Spark Classic the partitions of the topics the source reads (the task
    slot check's count, asked in the same request), else None."""

    servers: dict[str, str]
    remarks: list[str] = field(default_factory=list)
    kafka_partitions: int | None = None

    def unanswered(self) -> list[str]:
        """The endpoints where no broker answers now (a TCP connection), each as its setting and address."""
        return [
            f"{setting} {servers}"
            for setting, servers in self.servers.items()
            if not any(_answers(address) for address in servers.split(","))
        ]


def check_kafka_endpoints(
    spark: SparkSession, settings: Settings, environ: Mapping[str, str] = os.environ
) -> EndpointsChecked:
    """Raise KafkaEndpointError when no broker answers at a Kafka endpoint's address (a TCP connection first,
    quicker to fail than Kafka's client), or its broker refuses the credentials or lacks a topic."""
    servers = {
        f"{section}.kafka.bootstrap_servers": kafka.bootstrap_servers
        for section, kafka in settings.kafka_endpoints.items()
    }
    checked = EndpointsChecked(servers)
    for where in checked.unanswered():
        raise KafkaEndpointError(
            f"{where}: no broker answers there (nothing listens, or it is not reachable within"
            f" {CONNECT_TIMEOUT_SECONDS} s); start the broker (`make kafka-up` starts a local one) or fix the address"
        )
    for section, kafka in settings.kafka_endpoints.items():
        if is_connect(spark):
            read_nothing(spark, section, kafka, environ)
            continue
        where = f"{section}.kafka.bootstrap_servers {kafka.bootstrap_servers}"
        with _admin(spark, kafka, where, environ) as admin:
            topics = _topic_names(spark, admin)
            pattern = kafka.topic_pattern if isinstance(kafka, KafkaSourceSettings) else None
            if kafka.topic is not None:
                missing = [name.strip() for name in kafka.topic.split(",") if name.strip() not in topics]
                if missing:
                    there = ", ".join(sorted(topics)[:10]) or "none"
                    raise KafkaEndpointError(_no_topic(section, kafka, missing, f" (topics there: {there})"))
            elif not any(re.fullmatch(str(pattern), name) for name in topics):
                checked.remarks.append(f"{section}.kafka.topic_pattern {pattern}: no topic matches yet; the job waits")
            if section == "source" and settings.query.real_time and isinstance(kafka, KafkaSourceSettings):
                checked.kafka_partitions = _partitions(spark, admin, _read_topics(kafka, topics))
    return checked


def _no_topic(section: str, kafka: KafkaSourceSettings | KafkaSinkSettings, missing: list[str], there: str) -> str:
    return (
        f"{section}.kafka.topic {kafka.topic}: no topic {', '.join(missing)} on {kafka.bootstrap_servers}{there};"
        " create it, or fix the name"
    )


def read_nothing(
    spark: SparkSession,
    section: str,
    kafka: KafkaSourceSettings | KafkaSinkSettings,
    environ: Mapping[str, str] = os.environ,
) -> None:
    """The checks through Spark's own connector (where Spark runs: a Connect server's network and JARs):
    an empty batch read per topic, or of the pattern, with the endpoint's client options. A pattern that
    matches no topic reads nothing without an error, so it is not told apart here."""
    where = f"{section}.kafka.bootstrap_servers {kafka.bootstrap_servers}"
    client = {key: value for key, value in connection_options(kafka, environ).items() if key.startswith("kafka.")}
    pattern = kafka.topic_pattern if isinstance(kafka, KafkaSourceSettings) else None
    names = [name.strip() for name in kafka.topic.split(",")] if kafka.topic is not None else []
    subscriptions = [{"subscribe": name} for name in names] or [{"subscribePattern": str(pattern)}]
    for subscription in subscriptions:
        reader = spark.read.format("kafka").options(**client, **CHECK_TIMEOUTS, **READ_NOTHING, **subscription)
        try:
            reader.load().count()
        except Exception as error:  # whatever the read raised is the broker's answer (Classic: a Py4JJavaError)
            found = KAFKA_ERROR.search(str(error))
            kind, message = found.groups() if found else (type(error).__name__, str(error).splitlines()[0])
            if kind == "UnknownTopicOrPartitionException":
                raise KafkaEndpointError(_no_topic(section, kafka, [subscription["subscribe"]], UNLISTED)) from None
            raise KafkaEndpointError(_refusal(kind, message, kafka, where, "read the topic's offsets")) from None


def _answers(address: str) -> bool:
    host, _, port = address.rpartition(":")
    try:
        with socket.create_connection((host.strip("[]"), int(port)), timeout=CONNECT_TIMEOUT_SECONDS):
            return True
    except (OSError, ValueError):
        return False


@contextmanager
def _admin(spark: SparkSession, kafka: KafkaConnection, where: str, environ: Mapping[str, str]) -> Iterator[Any]:
    """Kafka's AdminClient with the endpoint's options; a refusal or a timeout becomes KafkaEndpointError."""
    from py4j.protocol import Py4JJavaError  # here: Spark Connect's pure-Python client has no py4j

    jvm: Any = spark._jvm
    properties = jvm.java.util.Properties()
    for key, value in connection_options(kafka, environ).items():
        if key.startswith("kafka."):
            properties.setProperty(key.removeprefix("kafka."), value)
    for key, value in CHECK_TIMEOUTS.items():
        properties.setProperty(key.removeprefix("kafka."), value)
    admin = jvm.org.apache.kafka.clients.admin.Admin.create(properties)
    try:
        yield admin
    except Py4JJavaError as error:
        raise KafkaEndpointError(_explain(error, kafka, where)) from None
    finally:
        admin.close()


def _answer(spark: SparkSession, future: Any) -> Any:
    return future.get(ADMIN_TIMEOUT_SECONDS, spark._jvm.java.util.concurrent.TimeUnit.SECONDS)  # type: ignore[union-attr]


def _topic_names(spark: SparkSession, admin: Any) -> set[str]:
    return {str(name) for name in _answer(spark, admin.listTopics().names())}


def source_partitions(spark: SparkSession, settings: Settings, environ: Mapping[str, str] = os.environ) -> int:
    """The partitions of the topics the Kafka source reads now (its topic list, or its pattern's matches):
    a real-time batch reads each with a task of its own. A start has them from check_kafka_endpoints."""
    kafka = settings.source.kafka
    where = f"source.kafka.bootstrap_servers {kafka.bootstrap_servers}"
    with _admin(spark, kafka, where, environ) as admin:
        return _partitions(spark, admin, _read_topics(kafka, _topic_names(spark, admin)))


def _read_topics(kafka: KafkaSourceSettings, names: set[str]) -> set[str]:
    """The topics among `names` the source reads: its topic list's, or its pattern's matches."""
    if kafka.topic is not None:
        return {name.strip() for name in kafka.topic.split(",")} & names
    return {name for name in names if re.fullmatch(str(kafka.topic_pattern), name)}


def _partitions(spark: SparkSession, admin: Any, read: set[str]) -> int:
    if not read:
        return 0
    topics = spark._jvm.java.util.ArrayList()  # type: ignore[union-attr]
    for name in read:
        topics.add(name)
    described = _answer(spark, admin.describeTopics(topics).allTopicNames())
    return sum(int(described.get(name).partitions().size()) for name in read)


def _explain(error: Exception, kafka: KafkaConnection, where: str) -> str:
    cause = error.java_exception  # type: ignore[attr-defined]
    while cause.getCause() is not None:
        cause = cause.getCause()
    kind, message = cause.getClass().getSimpleName(), str(cause.getMessage() or "")
    return _refusal(kind, message, kafka, where, "list the topics")


def _refusal(kind: str, message: str, kafka: KafkaConnection, where: str, asked: str) -> str:
    """The one line for Kafka's error `kind` (its exception's simple name) with its message."""
    if "Authentication" in kind:
        return (
            f"{where}: the broker refused the credentials of {kafka.sasl_username!r} ({kafka.sasl_mechanism}, the"
            f" password from ${kafka.sasl_password_env}): {message}; check sasl_username, sasl_mechanism and the"
            f" password in ${kafka.sasl_password_env}"
        )
    if "Timeout" in kind:
        return (
            f"{where}: the broker did not answer Kafka requests within {ADMIN_TIMEOUT_SECONDS} s ({message});"
            f" check security_protocol {kafka.security_protocol} against the broker's listener at that address"
        )
    return f"{where}: Kafka refused to {asked}: {kind}: {message}"
