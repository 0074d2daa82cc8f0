"""Streaming sources, each mapped to the query module's EVENT_SCHEMA (see contract.py)."""

from __future__ import annotations

import operator
import os
from collections.abc import Mapping
from functools import reduce

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import StructType

from ..contract import user_query
from ..durations import parse_duration
from ..settings import FilesSourceSettings, KafkaSourceSettings, RateSourceSettings, SourceSettings
from .schema_events import schema_events_from_rate

JAAS_MODULES = {
    "PLAIN": "org.apache.kafka.common.security.plain.PlainLoginModule",
    "SCRAM-SHA-256": "org.apache.kafka.common.security.scram.ScramLoginModule",
    "SCRAM-SHA-512": "org.apache.kafka.common.security.scram.ScramLoginModule",
}


def read_events(spark: SparkSession, source: SourceSettings) -> DataFrame:
    """The configured source as a stream of events."""
    if source.type == "files":
        return read_files(spark, source.files)
    if source.type == "kafka":
        return read_kafka(spark, source.kafka)
    return read_rate(spark, source.rate)


def read_rate(spark: SparkSession, rate: RateSourceSettings) -> DataFrame:
    if rate.rows_per_batch is not None:
        reader = (
            spark.readStream.format("rate-micro-batch")
            .option("rowsPerBatch", rate.rows_per_batch)
            .option("advanceMillisPerBatch", round(parse_duration(rate.advance_per_batch) * 1000))
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


def read_files(spark: SparkSession, files: FilesSourceSettings) -> DataFrame:
    """Files landing in a directory, parsed with the declared schema (never inferred)."""
    schema = user_query().EVENT_SCHEMA
    reader = spark.readStream.format(files.format).schema(schema).options(**files_options(files))
    return reader.load(files.path).select(*schema.fieldNames())


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


def read_kafka(spark: SparkSession, kafka: KafkaSourceSettings) -> DataFrame:
    """Kafka records whose value is a JSON event (the Spark Kafka connector must be on the classpath)."""
    raw = spark.readStream.format("kafka").options(**kafka_options(kafka)).load()
    return events_from_json(raw, "value", user_query().EVENT_SCHEMA, kafka.on_bad_record)


def events_from_json(raw: DataFrame, column: str, schema: StructType, on_bad_record: str) -> DataFrame:
    """A column of JSON text (a Kafka message value) -> events, parsed with the declared schema.

    on_bad_record "fail" stops the query at the first record that is not JSON; "drop" skips it.
    """
    mode = "FAILFAST" if on_bad_record == "fail" else "PERMISSIVE"
    parsed = raw.select(F.from_json(F.col(column).cast("string"), schema, {"mode": mode}).alias("event"))
    if on_bad_record == "drop":
        # PERMISSIVE turns a malformed record into a null struct, or a struct of nulls.
        fields = [F.col(f"event.{name}").isNotNull() for name in schema.fieldNames()]
        parsed = parsed.where(F.col("event").isNotNull() & reduce(operator.or_, fields))
    return parsed.select(*(F.col(f"event.{name}").alias(name) for name in schema.fieldNames()))
