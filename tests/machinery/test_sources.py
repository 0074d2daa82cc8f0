"""Source options built from settings, and JSON events parsed with the declared schema."""

from __future__ import annotations

from datetime import datetime

import pytest
from py4j.protocol import Py4JJavaError
from pyspark.errors import PySparkException
from pyspark.sql import functions as F
from pyspark.testing import assertDataFrameEqual
from stream_job.machinery.core.settings import load_settings
from stream_job.machinery.job.endpoints.kafka import kafka_options
from stream_job.machinery.job.endpoints.sources import Arrival, events_from_json, files_options, without_bad_records
from stream_job.query import EVENT_SCHEMA

SASL = {
    "security_protocol": "SASL_SSL",
    "sasl_mechanism": "SCRAM-SHA-512",
    "sasl_username": "svc-stream",
    "sasl_password_env": "KAFKA_TEST_PASSWORD",
}


def test_files_options_default(make_settings):
    files = make_settings({"source": {"files": {"max_files_per_trigger": 5}}}).source.files
    assert files_options(files) == {
        "latestFirst": "false",
        "maxFilesPerTrigger": "5",
        "mode": "PERMISSIVE",
        "columnNameOfCorruptRecord": "_unparsed_record",
    }


def test_files_options_csv_archive_drop(make_settings, tmp_path):
    files = make_settings(
        {
            "source": {
                "files": {
                    "path": str(tmp_path / "landing"),
                    "format": "csv",
                    "max_files_per_trigger": None,
                    "clean_source": "archive",
                    "archive_dir": str(tmp_path / "archive"),
                    "csv_header": False,
                    "on_bad_record": "drop",
                }
            }
        }
    ).source.files
    assert files_options(files) == {
        "latestFirst": "false",
        "cleanSource": "archive",
        "sourceArchiveDir": str(tmp_path / "archive"),
        "mode": "PERMISSIVE",
        "columnNameOfCorruptRecord": "_unparsed_record",
        "header": "false",
    }


def test_unquoted_off_in_yaml_means_off(write_settings, tmp_path):
    path = write_settings()
    path.write_text(path.read_text().replace("clean_source: 'off'", "clean_source: off"))
    assert "clean_source: off\n" in path.read_text()
    assert load_settings(path).source.files.clean_source == "off"


def test_parquet_files_take_no_parse_mode(make_settings):
    files = make_settings({"source": {"files": {"format": "parquet", "clean_source": "delete"}}}).source.files
    assert files_options(files) == {"latestFirst": "false", "maxFilesPerTrigger": "1000", "cleanSource": "delete"}


def test_kafka_options_plaintext(make_settings):
    kafka = make_settings(
        {"source": {"kafka": {"bootstrap_servers": "b1:9092,b2:9092", "max_offsets_per_trigger": 50000}}}
    ).source.kafka
    assert kafka_options(kafka, environ={}) == {
        "kafka.bootstrap.servers": "b1:9092,b2:9092",
        "startingOffsets": "earliest",
        "failOnDataLoss": "true",
        "kafka.security.protocol": "PLAINTEXT",
        "subscribe": "events",
        "maxOffsetsPerTrigger": "50000",
    }


def test_kafka_sasl_password_comes_from_the_named_variable(make_settings):
    kafka = make_settings({"source": {"kafka": SASL}}).source.kafka
    options = kafka_options(kafka, environ={"KAFKA_TEST_PASSWORD": 'pa"ss\\word'})
    assert options["kafka.security.protocol"] == "SASL_SSL"
    assert options["kafka.sasl.mechanism"] == "SCRAM-SHA-512"
    # Quotes and backslashes in the password are escaped for the JAAS line.
    assert options["kafka.sasl.jaas.config"] == (
        "org.apache.kafka.common.security.scram.ScramLoginModule required"
        ' username="svc-stream" password="pa\\"ss\\\\word";'
    )


def test_kafka_plain_pattern_extra_and_secret_options(make_settings):
    kafka = make_settings(
        {
            "source": {
                "kafka": {
                    **SASL,
                    "sasl_mechanism": "PLAIN",
                    "topic": None,
                    "topic_pattern": "events-.*",
                    "starting_offsets": "latest",
                    "fail_on_data_loss": False,
                    "options": {"kafka.ssl.truststore.location": "/etc/kafka/truststore.jks"},
                    "secret_options": {"kafka.ssl.truststore.password": "TRUSTSTORE_PASSWORD"},
                }
            }
        }
    ).source.kafka
    options = kafka_options(kafka, environ={"KAFKA_TEST_PASSWORD": "p", "TRUSTSTORE_PASSWORD": "t"})
    assert options["subscribePattern"] == "events-.*"
    assert "subscribe" not in options
    assert options["startingOffsets"] == "latest"
    assert options["failOnDataLoss"] == "false"
    assert options["kafka.sasl.jaas.config"].startswith("org.apache.kafka.common.security.plain.PlainLoginModule")
    assert options["kafka.ssl.truststore.location"] == "/etc/kafka/truststore.jks"
    assert options["kafka.ssl.truststore.password"] == "t"


GOOD = '{"event_id": "e1", "key": "k1", "event_time": "2026-01-01T00:00:05Z"}'


def test_json_values_parse_with_the_declared_schema(spark):
    raw = spark.createDataFrame(
        [(GOOD.encode(),), (b'{"event_id": "e2", "key": "k2", "event_time": null}',)], "value binary"
    )
    events = events_from_json(raw, "value", EVENT_SCHEMA).select(*EVENT_SCHEMA.fieldNames())
    expected = spark.createDataFrame([("e1", "k1", datetime(2026, 1, 1, 0, 0, 5)), ("e2", "k2", None)], EVENT_SCHEMA)
    assertDataFrameEqual(events, expected)


@pytest.mark.parametrize("on_bad_record", ["fail", "drop"])
def test_each_record_is_parsed_once(spark, make_settings, on_bad_record):
    """The check reads the parsed columns many times. Spark's optimizer must not copy from_json into each read:
    it pushes a filter below a plain select, and the plan then parsed each record 16 times, in a plan that a
    real-time batch makes anew (benchmarks/results/kafka_parse.md)."""
    raw = spark.createDataFrame([(GOOD.encode(), datetime(2026, 1, 1, 0, 1))], "value binary, arrived timestamp")
    events = events_from_json(raw, "value", EVENT_SCHEMA, keep=("arrived",))
    arrival = Arrival(F.col("arrived"), "its Kafka timestamp")
    query = make_settings().query
    checked = without_bad_records(events, EVENT_SCHEMA, on_bad_record, F.lit("topic t"), arrival, "source", query)
    plan = checked.select(*EVENT_SCHEMA.fieldNames())._jdf.queryExecution().optimizedPlan().toString()
    assert plan.count("from_json(") == 1, plan
    assert [row.event_id for row in checked.collect()] == ["e1"]


def test_bad_json_is_dropped_or_fails_naming_it(spark, make_settings):
    raw = spark.createDataFrame([(GOOD.encode(),), (b"not json at all",)], "value binary")
    events = events_from_json(raw, "value", EVENT_SCHEMA)
    query = make_settings().query
    arrival = Arrival(F.lit(datetime(2026, 1, 1, 0, 1)), "its Kafka timestamp")
    dropped = without_bad_records(events, EVENT_SCHEMA, "drop", F.lit("topic t"), arrival, "source", query)
    assert [row.event_id for row in dropped.collect()] == ["e1"]
    # Spark raises it from the JVM: a Py4JJavaError here, a StreamingQueryException in a running query.
    with pytest.raises((PySparkException, Py4JJavaError), match="bad record in source topic t: a record that does not"):
        without_bad_records(events, EVENT_SCHEMA, "fail", F.lit("topic t"), arrival, "source", query).collect()
