"""Streaming sources, each mapped to the query module's EVENT_SCHEMA (see contract.py).

The files and Kafka sources also check each row's event time (with_usable_event_time): a row without
one, or with one far ahead of the processing time, is a bad record like one that does not parse.

Before the query starts, a Kafka source's broker must answer, accept the credentials and have the
topics. Spark's Kafka source meets none of these as an error of its own: with no broker it retries
until a timeout deep inside the first batch, and a topic that does not exist is an empty input
forever. So, once the connector is loaded, the job first connects to each address, then asks the
broker for its topics once with Kafka's own AdminClient (from the connector's kafka-clients JAR,
with the options the source gets, SASL included), and turns each case into one line naming the
setting. It reads no record and commits nothing.
"""

from __future__ import annotations

import operator
import os
import re
import socket
from collections.abc import Mapping, Sequence
from datetime import timedelta
from functools import reduce
from typing import Any

from py4j.protocol import Py4JJavaError
from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import StructType

from ...core.contract import user_query
from ...core.settings import FilesSourceSettings, KafkaSourceSettings, QuerySettings, RateSourceSettings, Settings
from .schema_events import SchemaRolesError, roles, schema_events_from_rate

CONNECT_TIMEOUT_SECONDS = 5
ADMIN_TIMEOUT_SECONDS = 20
JAAS_MODULES = {
    "PLAIN": "org.apache.kafka.common.security.plain.PlainLoginModule",
    "SCRAM-SHA-256": "org.apache.kafka.common.security.scram.ScramLoginModule",
    "SCRAM-SHA-512": "org.apache.kafka.common.security.scram.ScramLoginModule",
}


# How the error a row without a usable event time raises begins (commands/run.py finds it by this), and
# the counts of such rows dropped, as each batch's observed metrics "<section>.event_time".
UNUSABLE_EVENT_TIME = "unusable event time in"
EVENT_TIME_OBSERVATION = "event_time"
WITHOUT_EVENT_TIME = "without_event_time"
EVENT_TIME_AHEAD = "event_time_ahead"


def read_events(spark: SparkSession, settings: Settings, section: str = "source") -> DataFrame:
    """The input of settings section `section` (source, or join_source) as a stream of events."""
    source = settings.inputs[section]
    if source.type == "files":
        return read_files(spark, source.files, section, settings.query)
    if source.type == "kafka":
        return read_kafka(spark, source.kafka, section, settings.query)
    return read_rate(spark, source.rate)


def read_rate(spark: SparkSession, rate: RateSourceSettings) -> DataFrame:
    if rate.rows_per_batch is not None:
        reader = (
            spark.readStream.format("rate-micro-batch")
            .option("rowsPerBatch", rate.rows_per_batch)
            .option("advanceMillisPerBatch", rate.advance_millis)
            .option("startTimestamp", rate.start_timestamp_ms)
        )
    else:
        reader = spark.readStream.format("rate").option("rowsPerSecond", rate.rows_per_second)
    if rate.num_partitions is not None:
        reader = reader.option("numPartitions", rate.num_partitions)
    query = user_query()
    if hasattr(query, "events_from_rate"):
        return query.events_from_rate(reader.load(), rate.keys)
    return schema_events_from_rate(query.EVENT_SCHEMA, reader.load(), rate.keys)


def files_options(files: FilesSourceSettings) -> dict[str, str]:
    """The file source options the settings build (pure, so tests can check them)."""
    # Oldest files first: newest-first would let old files arrive after the watermark passed them.
    options = {"latestFirst": "false"}
    if files.max_files_per_trigger is not None:
        options["maxFilesPerTrigger"] = str(files.max_files_per_trigger)
    if files.clean_source != "off":
        options["cleanSource"] = files.clean_source
    if files.archive_dir is not None:
        options["sourceArchiveDir"] = files.archive_dir
    if files.format in ("json", "csv"):
        options["mode"] = "FAILFAST" if files.on_bad_record == "fail" else "DROPMALFORMED"
    if files.format == "csv":
        options["header"] = str(files.csv_header).lower()
    return options


def read_files(spark: SparkSession, files: FilesSourceSettings, section: str, query: QuerySettings) -> DataFrame:
    """Files landing in a directory, parsed with the declared schema (never inferred); a row is
    named by its file when its event time is not usable."""
    schema = user_query().EVENT_SCHEMA
    reader = spark.readStream.format(files.format).schema(schema).options(**files_options(files))
    events = reader.load(files.path)
    checked = with_usable_event_time(events, schema, files.on_bad_record, F.input_file_name(), section, query)
    return checked.select(*schema.fieldNames())


def kafka_options(kafka: KafkaSourceSettings, environ: Mapping[str, str] = os.environ) -> dict[str, str]:
    """The Kafka source options the settings build; secrets come from the environment variables named."""
    options = {
        "kafka.bootstrap.servers": kafka.bootstrap_servers,
        "startingOffsets": kafka.starting_offsets,
        "failOnDataLoss": str(kafka.fail_on_data_loss).lower(),
        "kafka.security.protocol": kafka.security_protocol,
    }
    if kafka.topic is not None:
        options["subscribe"] = kafka.topic
    else:
        options["subscribePattern"] = str(kafka.topic_pattern)
    if kafka.max_offsets_per_trigger is not None:
        options["maxOffsetsPerTrigger"] = str(kafka.max_offsets_per_trigger)
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


def read_kafka(spark: SparkSession, kafka: KafkaSourceSettings, section: str, query: QuerySettings) -> DataFrame:
    """Kafka records whose value is a JSON event (the Spark Kafka connector must be on the classpath);
    a record is named by its topic, partition and offset when its event time is not usable."""
    schema = user_query().EVENT_SCHEMA
    raw = spark.readStream.format("kafka").options(**kafka_options(kafka)).load()
    events = events_from_json(raw, "value", schema, kafka.on_bad_record, keep=("topic", "partition", "offset"))
    origin = F.format_string("topic %s partition %d offset %d", "topic", "partition", "offset")
    checked = with_usable_event_time(events, schema, kafka.on_bad_record, origin, section, query)
    return checked.select(*schema.fieldNames())


def events_from_json(
    raw: DataFrame, column: str, schema: StructType, on_bad_record: str, keep: Sequence[str] = ()
) -> DataFrame:
    """A column of JSON text (a Kafka message value) -> events, parsed with the declared schema, and
    the raw columns named in keep (the record's partition and offset, say) beside them.

    on_bad_record "fail" stops the query at the first record that is not JSON; "drop" skips it.
    """
    mode = "FAILFAST" if on_bad_record == "fail" else "PERMISSIVE"
    parsed = raw.select(F.from_json(F.col(column).cast("string"), schema, {"mode": mode}).alias("event"), *keep)
    if on_bad_record == "drop":
        # PERMISSIVE turns a malformed record into a null struct, or a struct of nulls.
        fields = [F.col(f"event.{name}").isNotNull() for name in schema.fieldNames()]
        parsed = parsed.where(F.col("event").isNotNull() & reduce(operator.or_, fields))
    return parsed.select(*(F.col(f"event.{name}").alias(name) for name in schema.fieldNames()), *keep)


def with_usable_event_time(
    events: DataFrame, schema: StructType, on_bad_record: str, origin: Column, section: str, query: QuerySettings
) -> DataFrame:
    """The events whose event time (EVENT_SCHEMA's first timestamp column: schema_events.roles) can
    be trusted: set, and at most query.max_event_time_ahead past the processing time of the batch (None: no bound).

    A null event time would pass every watermark (a windowed count drops the row without a word, a
    deduplication keeps its id for ever), and one far ahead (2100, or epoch milliseconds read as
    seconds) would move the watermark past every later event. Either row is a bad record: with
    on_bad_record "fail" the batch stops, its error naming the row and origin (where it came from);
    with "drop" the row is dropped and counted in the batch's observed metrics <section>.event_time.
    """
    try:
        name = roles(schema).event_time
    except SchemaRolesError:
        return events  # no timestamp column: the query makes its event time itself
    event_time = F.col(name)
    missing = event_time.isNull()
    max_ahead = query.max_event_time_ahead
    if query.max_ahead_seconds is None:
        ahead = F.lit(False)
    else:
        ahead = event_time > F.current_timestamp() + F.lit(timedelta(seconds=query.max_ahead_seconds))
    if on_bad_record == "drop":
        counts = (F.count_if(missing).alias(WITHOUT_EVENT_TIME), F.count_if(ahead).alias(EVENT_TIME_AHEAD))
        return events.observe(f"{section}.{EVENT_TIME_OBSERVATION}", *counts).where(~missing & ~ahead)
    named = name.replace("%", "%%")  # format_string's patterns below hold it as text
    why = F.when(missing, F.lit(f"{name} is null or missing")).otherwise(
        F.format_string(f"{named} %s is more than {max_ahead} ahead of the processing time", event_time.cast("string"))
    )
    row = F.to_json(F.struct(*schema.fieldNames()), {"ignoreNullFields": "false"})
    message = F.format_string(f"{UNUSABLE_EVENT_TIME} {section} %s: %s; row %s", origin, why, row)
    # raise_error is evaluated for the bad rows only; the others pass (the condition is then null).
    return events.where(F.when(missing | ahead, F.raise_error(message)).isNull())


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
