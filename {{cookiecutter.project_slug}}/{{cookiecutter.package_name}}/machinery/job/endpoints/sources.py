"""Streaming sources, each mapped to the query module's EVENT_SCHEMA (see contract.py).

The files and Kafka sources also check each row's event time (with_usable_event_time): a row without
one, or with one far ahead of the processing time, is a bad record like one that does not parse.
"""

from __future__ import annotations

import operator
import os
from collections.abc import Mapping, Sequence
from datetime import timedelta
from functools import reduce

from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import StructType

from ...core.contract import user_query
from ...core.settings import FilesSourceSettings, KafkaSourceSettings, QuerySettings, RateSourceSettings, Settings
from .kafka import connection_options
from .schema_events import SchemaRolesError, roles, schema_events_from_rate

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
    options = {"startingOffsets": kafka.starting_offsets, "failOnDataLoss": str(kafka.fail_on_data_loss).lower()}
    if kafka.topic is not None:
        options["subscribe"] = kafka.topic
    else:
        options["subscribePattern"] = str(kafka.topic_pattern)
    if kafka.max_offsets_per_trigger is not None:
        options["maxOffsetsPerTrigger"] = str(kafka.max_offsets_per_trigger)
    return {**options, **connection_options(kafka, environ)}


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
