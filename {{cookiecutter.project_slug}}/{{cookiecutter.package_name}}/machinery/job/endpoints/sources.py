"""Streaming sources, each mapped to the query module's EVENT_SCHEMA (see contract.py).

The files and Kafka sources also check each record (without_bad_records): one that does not parse
with EVENT_SCHEMA, or whose event time is missing or far ahead of the record's arrival, is a bad record.
"""

from __future__ import annotations

import operator
from collections.abc import Sequence
from datetime import timedelta
from functools import reduce
from typing import NamedTuple

from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import StringType, StructField, StructType

from ...core.contract import user_query
from ...core.settings import FilesSourceSettings, KafkaSourceSettings, QuerySettings, RateSourceSettings, Settings
from .kafka import kafka_options
from .schema_events import SchemaRolesError, roles, schema_events_from_rate

# How the error a bad record raises begins (commands/run.py finds it by this), and the counts of the bad
# records dropped, by kind, as each batch's observed metrics "<section>.bad_records".
BAD_RECORD_ERROR = "bad record in"
BAD_RECORDS_OBSERVATION = "bad_records"
MALFORMED = "malformed"
WITHOUT_EVENT_TIME = "without_event_time"
EVENT_TIME_AHEAD = "event_time_ahead"
# How the line of an event time too far ahead goes on (run/advice.py finds it by this).
AHEAD_OF_ARRIVAL = "ahead of its arrival,"

# Spark's parsers keep the text of a record that does not parse in this column (PERMISSIVE mode), so that the
# job counts or names it: DROPMALFORMED drops it uncounted, FAILFAST names neither the record nor its file.
UNPARSED = "_unparsed_record"
PARSE_OPTIONS = {"mode": "PERMISSIVE", "columnNameOfCorruptRecord": UNPARSED}
PARSED_FORMATS = ("json", "csv")
# How much of a record that does not parse its error shows.
SHOWN_CHARS = 100
# The column that holds each record's arrival (Arrival) until the check, dropped after it.
ARRIVAL = "_arrival_time"


class Arrival(NamedTuple):
    """When a record reached its source: the bound its event time may be ahead of by query.max_event_time_ahead.

    The record's own time (a file's modification time, a Kafka record's timestamp), not the batch's
    current_timestamp(): Spark writes that into the generated code as a literal that changes every batch,
    so the stage was compiled again each batch; and the record's time is the same when a batch runs again.
    """

    time: Column
    said: str  # what the time is, for the bad record's line


def read_inputs(spark: SparkSession, settings: Settings) -> tuple[DataFrame, DataFrame | None]:
    """The stream of each input the settings name: the source's, and join_source's where it is set (else None)."""
    streams = {section: read_events(spark, settings, section) for section in settings.inputs}
    return streams["source"], streams.get("join_source")


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
    if files.format in PARSED_FORMATS:
        options.update(PARSE_OPTIONS)
    if files.format == "csv":
        options["header"] = str(files.csv_header).lower()
    return options


def read_files(spark: SparkSession, files: FilesSourceSettings, section: str, query: QuerySettings) -> DataFrame:
    """Files landing in a directory, parsed with the declared schema (never inferred); a bad record is
    named by its file."""
    schema = user_query().EVENT_SCHEMA
    parsed = files.format in PARSED_FORMATS
    reader = spark.readStream.format(files.format).schema(with_unparsed(schema) if parsed else schema)
    # The metadata column is read beside the file's columns, before any other projection hides it.
    loaded = reader.options(**files_options(files)).load(files.path)
    events = loaded.withColumn(ARRIVAL, F.col("_metadata.file_modification_time"))
    if not parsed:  # parquet: every record parses
        events = events.withColumn(UNPARSED, F.lit(None).cast("string"))
    arrival = Arrival(F.col(ARRIVAL), "the file's modification time")
    checked = without_bad_records(events, schema, files.on_bad_record, F.input_file_name(), arrival, section, query)
    return checked.select(*schema.fieldNames())


def read_kafka(spark: SparkSession, kafka: KafkaSourceSettings, section: str, query: QuerySettings) -> DataFrame:
    """Kafka records whose value is a JSON event (the Spark Kafka connector must be on the classpath);
    a bad record is named by its topic, partition and offset."""
    schema = user_query().EVENT_SCHEMA
    raw = spark.readStream.format("kafka").options(**kafka_options(kafka)).load()
    keep = ("topic", "partition", "offset", F.col("timestamp").alias(ARRIVAL))
    events = events_from_json(raw, "value", schema, keep=keep)
    origin = F.format_string("topic %s partition %d offset %d", "topic", "partition", "offset")
    arrival = Arrival(F.col(ARRIVAL), "its Kafka timestamp")
    checked = without_bad_records(events, schema, kafka.on_bad_record, origin, arrival, section, query)
    return checked.select(*schema.fieldNames())


def with_unparsed(schema: StructType) -> StructType:
    """The schema Spark's parsers read with: the declared one, and UNPARSED for a record that does not parse."""
    return StructType([*schema.fields, StructField(UNPARSED, StringType())])


def events_from_json(raw: DataFrame, column: str, schema: StructType, keep: Sequence[str | Column] = ()) -> DataFrame:
    """A column of JSON text (a Kafka message value) -> events, parsed with the declared schema, the text of
    a record that does not parse in UNPARSED (without_bad_records counts or names it), and the raw columns
    named in keep (the record's partition and offset, say) beside them."""
    event = F.from_json(F.col(column).cast("string"), with_unparsed(schema), PARSE_OPTIONS)
    # Exploded from a one-element array so that each record is parsed once. Spark's optimizer pushes a filter
    # (without_bad_records' on_bad_record fail) below a plain select and copies from_json into each of its
    # reads, 16 of them: 0.62 of a bare parse's rows/s against 0.92 now, in a plan 2.6 times as long that
    # each real-time batch plans anew (benchmarks/results/kafka_parse.md). It does not push one below a Generate.
    parsed = raw.select(F.explode(F.array(event)).alias("event"), *keep)
    return parsed.select("event.*", *parsed.columns[1:])


def without_bad_records(
    events: DataFrame,
    schema: StructType,
    on_bad_record: str,
    origin: Column,
    arrival: Arrival,
    section: str,
    query: QuerySettings,
) -> DataFrame:
    """The events that are not bad records, from rows parsed with with_unparsed(schema).

    A bad record does not parse (its text is in UNPARSED: a line cut off, a timestamp Spark cannot
    read), or has no usable event time (event_time_kinds). With on_bad_record "fail" the batch stops
    at the first, its error naming the origin (where it came from), what is wrong and the record; with
    "drop" each is dropped and counted, by kind, in the batch's observed metrics <section>.bad_records.
    """
    unparsed = F.col(UNPARSED)
    malformed = unparsed.isNotNull()
    # kind -> (which rows, what the error says of one); the kinds exclude each other: each record counts once.
    kinds = {MALFORMED: (malformed, F.lit("a record that does not parse as EVENT_SCHEMA"))}
    kinds.update(event_time_kinds(schema, query, arrival, parsed=~malformed))
    bad = reduce(operator.or_, (rows for rows, _ in kinds.values()))
    if on_bad_record == "drop":
        counts = [F.count_if(rows).alias(kind) for kind, (rows, _) in kinds.items()]
        return events.observe(f"{section}.{BAD_RECORDS_OBSERVATION}", *counts).where(~bad)
    what = F.coalesce(*(F.when(rows, said) for rows, said in kinds.values()))
    cut = F.concat(F.substring(unparsed, 1, SHOWN_CHARS), F.lit("..."))
    shown = F.when(F.length(unparsed) > SHOWN_CHARS, cut).otherwise(unparsed)
    record = F.coalesce(shown, F.to_json(F.struct(*schema.fieldNames()), {"ignoreNullFields": "false"}))
    message = F.format_string(f"{BAD_RECORD_ERROR} {section} %s: %s; row %s", origin, what, record)
    # raise_error is evaluated for the bad rows only; the others pass (the condition is then null).
    return events.where(F.when(bad, F.raise_error(message)).isNull())


def event_time_kinds(
    schema: StructType, query: QuerySettings, arrival: Arrival, parsed: Column
) -> dict[str, tuple[Column, Column]]:
    """The parsed rows whose event time (EVENT_SCHEMA's first timestamp column: schema_events.roles)
    cannot be trusted: null or missing, or more than query.max_event_time_ahead past the record's arrival
    (None: no bound); for without_bad_records.

    A null event time would pass every watermark (a windowed count drops the row without a word, a
    deduplication keeps its id for ever), and one far ahead (2100, or epoch milliseconds read as
    seconds) would move the watermark past every later event.
    """
    try:
        name = roles(schema).event_time
    except SchemaRolesError:
        return {}  # no timestamp column: the query makes its event time itself
    event_time = F.col(name)
    unusable = "a row without a usable event time"
    kinds = {WITHOUT_EVENT_TIME: (parsed & event_time.isNull(), F.lit(f"{unusable}, {name} is null or missing"))}
    if query.max_ahead_seconds is not None:
        ahead = event_time > arrival.time + F.lit(timedelta(seconds=query.max_ahead_seconds))
        named = name.replace("%", "%%")  # format_string's pattern holds it as text
        bound = query.max_event_time_ahead
        said = f"{unusable}, {named} %s is more than {bound} {AHEAD_OF_ARRIVAL} {arrival.said} %s"
        shown = F.format_string(said, event_time.cast("string"), arrival.time.cast("string"))
        kinds[EVENT_TIME_AHEAD] = (parsed & ahead, shown)
    return kinds
