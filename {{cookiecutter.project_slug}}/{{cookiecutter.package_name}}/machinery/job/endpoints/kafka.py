"""The Kafka clusters a job reads from and writes to: the client options the settings build, and the
checks made before the query starts.

A Kafka endpoint's broker must answer, accept the credentials and have the topics. Spark's Kafka
connector meets none of these as an error of its own: with no broker it retries until a timeout deep
inside the first batch, a source topic that does not exist is an empty input forever, and a sink
topic is created by the broker (when it allows that) with its defaults. So, once the connector is
loaded, the job first connects to each address, then asks the broker for its topics once with
Kafka's own AdminClient (from the connector's kafka-clients JAR, with the options the endpoint gets,
SASL included), and turns each case into one line naming the setting. It reads and writes no record.
"""

from __future__ import annotations

import os
import re
import socket
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any

from py4j.protocol import Py4JJavaError
from pyspark.sql import SparkSession

from ...core.settings import KafkaConnection, KafkaSourceSettings, Settings

CONNECT_TIMEOUT_SECONDS = 5
ADMIN_TIMEOUT_SECONDS = 20
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


def require_brokers(settings: Settings) -> None:
    """A broker answers at each Kafka endpoint's address: a TCP connection, quicker to fail than Kafka's client."""
    for section, kafka in settings.kafka_endpoints.items():
        if not any(_answers(address) for address in kafka.bootstrap_servers.split(",")):
            raise KafkaEndpointError(
                f"{section}.kafka.bootstrap_servers {kafka.bootstrap_servers}: no broker answers there (nothing"
                f" listens, or it is not reachable within {CONNECT_TIMEOUT_SECONDS} s); start the broker"
                " (`make kafka-up` starts a local one) or fix the address"
            )


def check_kafka_endpoints(
    spark: SparkSession, settings: Settings, environ: Mapping[str, str] = os.environ
) -> list[str]:
    """Raise KafkaEndpointError when a Kafka endpoint's broker refuses the credentials or lacks a topic;
    remarks else."""
    remarks = []
    for section, kafka in settings.kafka_endpoints.items():
        where = f"{section}.kafka.bootstrap_servers {kafka.bootstrap_servers}"
        topics = _topics(spark, kafka, where, environ)
        pattern = kafka.topic_pattern if isinstance(kafka, KafkaSourceSettings) else None
        if kafka.topic is not None:
            missing = [name.strip() for name in kafka.topic.split(",") if name.strip() not in topics]
            if missing:
                there = ", ".join(sorted(topics)[:10]) or "none"
                raise KafkaEndpointError(
                    f"{section}.kafka.topic {kafka.topic}: no topic {', '.join(missing)} on"
                    f" {kafka.bootstrap_servers} (topics there: {there}); create it, or fix the name"
                )
        elif not any(re.fullmatch(str(pattern), name) for name in topics):
            remarks.append(f"{section}.kafka.topic_pattern {pattern}: no topic matches yet; the job waits")
    return remarks


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
    jvm: Any = spark._jvm
    properties = jvm.java.util.Properties()
    for key, value in connection_options(kafka, environ).items():
        if key.startswith("kafka."):
            properties.setProperty(key.removeprefix("kafka."), value)
    properties.setProperty("request.timeout.ms", str(ADMIN_TIMEOUT_SECONDS * 1000 // 2))
    properties.setProperty("default.api.timeout.ms", str(ADMIN_TIMEOUT_SECONDS * 1000))
    admin = jvm.org.apache.kafka.clients.admin.Admin.create(properties)
    try:
        yield admin
    except Py4JJavaError as error:
        raise KafkaEndpointError(_explain(error, kafka, where)) from None
    finally:
        admin.close()


def _answer(spark: SparkSession, future: Any) -> Any:
    return future.get(ADMIN_TIMEOUT_SECONDS, spark._jvm.java.util.concurrent.TimeUnit.SECONDS)  # type: ignore[union-attr]


def _topics(spark: SparkSession, kafka: KafkaConnection, where: str, environ: Mapping[str, str]) -> set[str]:
    with _admin(spark, kafka, where, environ) as admin:
        return {str(name) for name in _answer(spark, admin.listTopics().names())}


def source_partitions(spark: SparkSession, settings: Settings, environ: Mapping[str, str] = os.environ) -> int:
    """The partitions of the topics the Kafka source reads now (its topic list, or its pattern's matches):
    a real-time batch reads each with a task of its own."""
    kafka = settings.source.kafka
    where = f"source.kafka.bootstrap_servers {kafka.bootstrap_servers}"
    with _admin(spark, kafka, where, environ) as admin:
        names = {str(name) for name in _answer(spark, admin.listTopics().names())}
        if kafka.topic is not None:
            read = {name.strip() for name in kafka.topic.split(",")} & names
        else:
            read = {name for name in names if re.fullmatch(str(kafka.topic_pattern), name)}
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
    return f"{where}: Kafka refused to list the topics: {kind}: {message}"
