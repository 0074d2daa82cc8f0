"""Before the query starts: the Kafka broker answers, accepts the credentials, and has the topics.

Spark's Kafka source meets none of these as an error of its own: with no broker it retries until
a timeout deep inside the first batch, and a topic that does not exist is an empty input forever.
So, once the connector is loaded, the job first connects to each address, then asks the broker for its
topics once with Kafka's own AdminClient (from the connector's kafka-clients JAR, with the options
the source gets, SASL included), and turns each case into one line naming the setting. It reads
no record and commits nothing.
"""

from __future__ import annotations

import os
import re
import socket
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from ...core.settings import KafkaSourceSettings, Settings
from .sources import kafka_options

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

CONNECT_TIMEOUT_SECONDS = 5
ADMIN_TIMEOUT_SECONDS = 20


class KafkaSourceError(Exception):
    """The Kafka source the settings describe cannot be read: no broker, refused credentials, no topic."""


def kafka_inputs(settings: Settings) -> dict[str, KafkaSourceSettings]:
    return {section: source.kafka for section, source in settings.inputs.items() if source.type == "kafka"}


def require_brokers(settings: Settings) -> None:
    """A broker answers at each Kafka input's address: a TCP connection, quicker to fail than Kafka's client."""
    for section, kafka in kafka_inputs(settings).items():
        if not any(_answers(address) for address in kafka.bootstrap_servers.split(",")):
            raise KafkaSourceError(
                f"{section}.kafka.bootstrap_servers {kafka.bootstrap_servers}: no broker answers there (nothing"
                f" listens, or it is not reachable within {CONNECT_TIMEOUT_SECONDS} s); start the broker"
                " (`make kafka-up` starts a local one) or fix the address"
            )


def check_kafka_inputs(spark: SparkSession, settings: Settings, environ: Mapping[str, str] = os.environ) -> list[str]:
    """Raise KafkaSourceError when a Kafka input's broker refuses the credentials or lacks a topic; remarks else."""
    remarks = []
    for section, kafka in kafka_inputs(settings).items():
        where = f"{section}.kafka.bootstrap_servers {kafka.bootstrap_servers}"
        topics = _topics(spark, kafka, where, environ)
        if kafka.topic is not None:
            missing = [name.strip() for name in kafka.topic.split(",") if name.strip() not in topics]
            if missing:
                there = ", ".join(sorted(topics)[:10]) or "none"
                raise KafkaSourceError(
                    f"{section}.kafka.topic {kafka.topic}: no topic {', '.join(missing)} on"
                    f" {kafka.bootstrap_servers} (topics there: {there}); create it, or fix the name"
                )
        elif not any(re.fullmatch(str(kafka.topic_pattern), name) for name in topics):
            remarks.append(f"{section}.kafka.topic_pattern {kafka.topic_pattern}: no topic matches yet; the job waits")
    return remarks


def _answers(address: str) -> bool:
    host, _, port = address.rpartition(":")
    try:
        with socket.create_connection((host.strip("[]"), int(port)), timeout=CONNECT_TIMEOUT_SECONDS):
            return True
    except (OSError, ValueError):
        return False


def _topics(spark: SparkSession, kafka: KafkaSourceSettings, where: str, environ: Mapping[str, str]) -> set[str]:
    from py4j.protocol import Py4JJavaError

    jvm: Any = spark._jvm
    properties = jvm.java.util.Properties()
    for key, value in kafka_options(kafka, environ).items():
        if key.startswith("kafka."):
            properties.setProperty(key.removeprefix("kafka."), value)
    properties.setProperty("request.timeout.ms", str(ADMIN_TIMEOUT_SECONDS * 1000 // 2))
    properties.setProperty("default.api.timeout.ms", str(ADMIN_TIMEOUT_SECONDS * 1000))
    admin = jvm.org.apache.kafka.clients.admin.Admin.create(properties)
    try:
        names = admin.listTopics().names().get(ADMIN_TIMEOUT_SECONDS, jvm.java.util.concurrent.TimeUnit.SECONDS)
        return {str(name) for name in names}
    except Py4JJavaError as error:
        raise KafkaSourceError(_explain(error, kafka, where)) from None
    finally:
        admin.close()


def _explain(error: Exception, kafka: KafkaSourceSettings, where: str) -> str:
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
