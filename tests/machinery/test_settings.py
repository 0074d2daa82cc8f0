"""Settings: the generated file loads, overrides work, and bad input is one clear line per field."""

from __future__ import annotations

import json
import sys
import tempfile
import time
from pathlib import Path

import pytest
import yaml
from pyspark.testing import assertDataFrameEqual
from stream_job.machinery.core.plan_operators import PlanOperator
from stream_job.machinery.core.settings import ENV_PREFIX, SettingsError, load_settings

from .conftest import (
    ANY_PROVIDER,
    BAKED_OPERATOR,
    PROJECT_DIR,
    PROJECT_SETTINGS,
    batch_expectation,
    clean_env,
    deep_merge,
    digest,
    files_job,
    run_cli,
    run_main,
    run_python,
    write_settings_file,
)


def test_generated_settings_load():
    raw = yaml.safe_load(PROJECT_SETTINGS.read_text())
    settings = load_settings(PROJECT_SETTINGS)
    assert settings.spark.shuffle_partitions == raw["spark"]["shuffle_partitions"]
    assert settings.query.watermark == raw["query"]["watermark"]
    assert settings.state_store.provider in ("hdfs", "rocksdb")
    assert settings.sizing().recommended_provider in ("hdfs", "rocksdb")
    # Relative paths are made absolute against the settings file's folder.
    assert settings.query.checkpoint_location == str(PROJECT_DIR / "checkpoints" / "stream_job")


def test_environment_overrides_the_file(make_settings, monkeypatch):
    monkeypatch.setenv(f"{ENV_PREFIX}SPARK__SHUFFLE_PARTITIONS", "7")
    monkeypatch.setenv(f"{ENV_PREFIX}QUERY__WATERMARK", "30 seconds")
    settings = make_settings({"spark": {"shuffle_partitions": 3}})
    assert settings.spark.shuffle_partitions == 7
    assert settings.query.watermark == "30 seconds"
    assert settings.sink.type == yaml.safe_load(PROJECT_SETTINGS.read_text())["sink"]["type"]  # untouched


def test_keyword_overrides_win_over_environment(write_settings, monkeypatch):
    monkeypatch.setenv(f"{ENV_PREFIX}SPARK__SHUFFLE_PARTITIONS", "7")
    settings = load_settings(write_settings(), spark={"shuffle_partitions": 9})
    assert settings.spark.shuffle_partitions == 9


def errors_for(make_settings, changes) -> list[str]:
    with pytest.raises(SettingsError) as caught:
        make_settings(changes)
    return caught.value.lines


# A place no user may create files in (sysfs on Linux), standing for a read-only disk.
UNWRITABLE = "/sys"
# Malformed settings, each a real settings.yaml given to `python main.py` (see test_bad_settings_...).
BAD_VALUES = [
    # Values the settings once took, then failed with a traceback: in the sizing's arithmetic, or in Spark.
    (
        {"capacity": {"input_rows_per_second": 1e308}},
        "capacity.input_rows_per_second = 1e+308: Input should be less than or equal to 1000000000000000",
    ),
    (
        {"state_store": {"min_batches_to_retain": 99999999999999999999}},
        "state_store.min_batches_to_retain = 99999999999999999999: Input should be less than or equal to 2147483647",
    ),
    ({"query": {"watermark": "99999999999 days"}}, "'99999999999 days' is longer than 36,500 days; write a shorter"),
    ({"capacity": {"state_growth_factor": 1e9}}, "capacity.state_growth_factor = 1000000000.0: Input should be less"),
    ({"spark": {"shuffle_partitions": -3}}, "spark.shuffle_partitions = -3: Input should be greater than 0"),
    (
        {"spark": {"kafka_connector_version": "latest"}},
        "spark.kafka_connector_version = 'latest': String should match pattern",
    ),
    # pydantic reads true as 1: one partition pinned into a new checkpoint, without a word.
    ({"spark": {"shuffle_partitions": True}}, "spark.shuffle_partitions = True: true is not a number"),
    ({"capacity": {"state_bytes_per_row": False}}, "capacity.state_bytes_per_row = False: false is not a number"),
    (
        {"spark": {"shuffle_partitions": "many"}},
        "spark.shuffle_partitions = 'many': Input should be a valid integer",
    ),
    (
        {"spark": {"shufle_partitions": 4}},
        "spark.shufle_partitions: unknown key (did you mean shuffle_partitions?)",
    ),
    ({"query": {"watermark": "ten minutes"}}, "query.watermark = 'ten minutes': 'ten minutes' is not an interval"),
    ({"query": {"trigger": "sometimes"}}, "query.trigger = 'sometimes'"),
    (
        {"state_store": {"provider": "memory"}},
        "state_store.provider = 'memory': Input should be 'hdfs' or 'rocksdb'",
    ),
    (
        {"state_store": {"provider": "hdfs", "changelog_checkpointing": True}},
        "changelog_checkpointing is true but provider is hdfs",
    ),
    (
        {"sink": {"type": "parquet", "output_mode": "update"}},
        "output_mode update is not supported by the parquet sink, which only appends rows; use output_mode append (or the delta sink",
    ),
    ({"sink": {"delta": {"key_columns": "key"}}}, "sink.delta.key_columns = 'key': Input should be a valid list"),
    ({"sink": {"delta": {"writer": "spark"}}}, "sink.delta.writer = 'spark': Input should be 'delta-spark' or"),
    ({"sink": {"delta": {"version": "latest"}}}, "sink.delta.version = 'latest': String should match pattern"),
    ({"source": {"type": "socket"}}, "source.type = 'socket': Input should be 'rate', 'files' or 'kafka'"),
    ({"source": {"files": {"format": "xml"}}}, "source.files.format = 'xml': Input should be 'json', 'csv'"),
    ({"source": {"files": {"max_files_per_trigger": 0}}}, "source.files.max_files_per_trigger = 0"),
    (
        {"source": {"files": {"clean_source": "archive"}}},
        "source.files: clean_source is archive but archive_dir is null",
    ),
    (
        {"source": {"files": {"archive_dir": "/tmp/archive"}}},
        "source.files: archive_dir is set but clean_source is off",
    ),
    (
        {"source": {"kafka": {"topic_pattern": "events-.*"}}},
        "source.kafka: set exactly one of topic and topic_pattern",
    ),
    (
        {"source": {"kafka": {"security_protocol": "SASL_SSL"}}},
        "source.kafka: security_protocol SASL_SSL needs sasl_mechanism, sasl_username, sasl_password_env",
    ),
    (
        {"source": {"kafka": {"sasl_username": "svc"}}},
        "source.kafka: sasl_username would be ignored with security_protocol PLAINTEXT",
    ),
    (
        {"source": {"kafka": {"options": {"kafka.ssl.keystore.password": "hunter2"}}}},
        "kafka.ssl.keystore.password would put a secret in settings.yaml; move it to secret_options",
    ),
    (
        {"source": {"kafka": {"options": {"subscribe": "other"}}}},
        "subscribe is managed by source.kafka.topic",
    ),
    (
        {"source": {"kafka": {"sasl_password_env": "my password"}}},
        "source.kafka.sasl_password_env = 'my password': String should match pattern",
    ),
    ({"source": {"kafka": {"bootstrap_servers": "a:1, b:2"}}}, "source.kafka.bootstrap_servers = 'a:1, b:2'"),
    (
        {"sink": {"kafka": {"options": {"topic": "other"}}}},
        "topic is managed by sink.kafka.topic",
    ),
    (
        {"sink": {"kafka": {"security_protocol": "SASL_PLAINTEXT", "sasl_mechanism": "PLAIN"}}},
        "sink.kafka: security_protocol SASL_PLAINTEXT needs sasl_username, sasl_password_env",
    ),
    ({"sink": {"kafka": {"key_columns": []}}}, "sink.kafka.key_columns = []: List should have at least 1 item"),
    ({"sink": {"kafka": {"topic": "a,b"}}}, "sink.kafka.topic = 'a,b': String should match pattern"),
    (
        {"spark": {"conf": {"spark.hadoop.fs.azure.account.key.acct.dfs.core.windows.net": "c2VjcmV0"}}},
        "spark.conf: spark.hadoop.fs.azure.account.key.acct.dfs.core.windows.net would put a secret in settings.yaml;"
        " move it to spark.secret_conf, which names the environment variable holding the value",
    ),
    (
        {"monitoring": {"progress_format": "xml"}},
        "monitoring.progress_format = 'xml': Input should be 'text' or 'json'",
    ),
    (
        {"monitoring": {"state_warning_factor": 1}},
        "monitoring.state_warning_factor = 1: Input should be greater than 1",
    ),
    (
        {"monitoring": {"hdfs_memory_warning_share": 1.5}},
        "monitoring.hdfs_memory_warning_share = 1.5: Input should be less than or equal to 1",
    ),
    (
        {"monitoring": {"quiet_after": "15m"}},
        "monitoring.quiet_after = '15m': '15m' has the unit 'm', which Spark does not read; write minutes",
    ),
    (
        {"query": {"quiet_input_after": "10m"}},
        "query.quiet_input_after = '10m': '10m' has the unit 'm', which Spark does not read; write minutes",
    ),
    (
        {"query": {"quiet_input_after": "10 minutes", "trigger": "real_time"}},
        "settings: query.quiet_input_after is '10 minutes' but query.trigger is real_time: real-time mode reads no"
        " Python source, which the heartbeats come from; set query.quiet_input_after to null, or use an interval"
        " trigger such as '10 seconds'",
    ),
    (
        {"query": {"quiet_input_after": "10 minutes"}, "spark": {"remote": "sc://localhost:15002"}},
        "settings: query.quiet_input_after is '10 minutes' but the job runs through Spark Connect"
        " (sc://localhost:15002): the heartbeats are timed by a file on the driver's machine, which the server does"
        " not share; set query.quiet_input_after to null, or run on spark.master",
    ),
    (
        {"spark": {"conf": {"spark.sql.streaming.metricsEnabled": "true"}}},
        "spark.sql.streaming.metricsEnabled is managed by the setting monitoring.metrics_enabled",
    ),
    (
        {"spark": {"secret_conf": {"spark.hadoop.fs.s3a.secret.key": "my key"}}},
        "spark.secret_conf.spark.hadoop.fs.s3a.secret.key = 'my key': String should match pattern",
    ),
    ({"sink": {"output_mode": "complete"}}, "sink.output_mode = 'complete': Input should be 'append' or 'update'"),
    (
        {"spark": {"conf": {"spark.sql.shuffle.partitions": "8"}}},
        "spark.sql.shuffle.partitions is managed by the setting spark.shuffle_partitions",
    ),
    (
        {"source": {"rate": {"advance_per_batch": "10 microseconds"}}},
        "source.rate.advance_per_batch = '10 microseconds': the rate-micro-batch source advances in whole",
    ),
    (
        {"query": {"trigger": "available_now"}, "source": {"type": "rate", "rate": {"rows_per_batch": None}}},
        "query.trigger available_now does not work with the clock-driven rate source",
    ),
    (
        {"capacity": {"state_growth_factor": 0.5}},
        "capacity.state_growth_factor = 0.5: Input should be greater than or equal to 1",
    ),
    ({"capacity": {"key_cardinality": 0}}, "capacity.key_cardinality = 0: Input should be greater than 0"),
    (
        {"query": {"join": {"type": "full_outer"}}},
        "query.join.type = 'full_outer': Input should be 'inner' or 'left_outer'",
    ),
    ({"query": {"join": {"range": "soon"}}}, "query.join.range = 'soon': 'soon' is not an interval"),
    (
        {"query": {"custom_state": {"session_timeout": "0 seconds"}}},
        "query.custom_state.session_timeout = '0 seconds': '0 seconds' must be longer than zero",
    ),
    # Numbers that pass `greater than zero` and broke the sizing, or Spark, once it had started.
    (
        {"capacity": {"state_growth_factor": float("inf")}},
        "capacity.state_growth_factor = inf: Input should be a finite number",
    ),
    (
        {"capacity": {"input_rows_per_second": float("nan")}},
        "capacity.input_rows_per_second = nan: Input should be a finite number",
    ),
    (
        {"spark": {"shuffle_partitions": 99999999999999999999}},
        "spark.shuffle_partitions = 99999999999999999999: Input should be less than or equal to 2147483647",
    ),
    (
        {"spark": {"conf": {"spark.sql.session.timeZone": None}}},
        "spark.conf.spark.sql.session.timeZone = None: a Spark conf value is text, a number or true/false",
    ),
    # Taken as a folder named by a space, beside settings.yaml.
    (
        {"sink": {"path": " "}},
        "sink.path = ' ': is blank, which names no folder (or one named by spaces); give a directory path or URI",
    ),
]
# Rules about the operator, which the code declares: each runs in the bake of its operator.
OPERATOR_BAD_VALUES = [
    (
        "windowed_aggregation",
        {"query": {"operator": "deduplication"}},
        "settings.yaml key query.operator: the query's stateful operators are set by the code (stream_job.query),"
        " and read from its plan; remove it here (to run other operators, change the query and start a new"
        " checkpoint)",
    ),
    (
        "stream_stream_join",
        {
            "source": {"type": "files", "files": {"path": "landing/same"}},
            "join_source": {"type": "files", "files": {"path": "landing/same"}},
        },
        "join_source.files.path is 'landing/same', the same directory as source.files.path;",
    ),
    (
        "stream_stream_join",
        {"query": {"trigger": "available_now"}, "source": {"type": "files"}, "join_source": {"type": "rate"}},
        "query.trigger available_now does not work with the clock-driven rate source of join_source",
    ),
    (
        "stream_stream_join",
        {"source": {"type": "rate"}, "join_source": {"type": "files", "files": {"path": "no-such-payments"}}},
        "/no-such-payments': no such directory; create it (files landing there are read in order of arrival)",
    ),
]
# What the operators of the query's plan need: read from the plan (not the starter's OPERATOR label,
# which the user's query may have left behind), so refused once Spark has read it, before a batch.
PLAN_BAD_VALUES = [
    (
        "custom_state",
        {"state_store": {"provider": "hdfs", "changelog_checkpointing": False}},
        "the query runs custom_state but state_store.provider is hdfs: Spark runs transformWithState only on"
        " RocksDB; set state_store.provider to rocksdb (with a new checkpoint if one exists)",
    ),
    (
        "stream_stream_join",
        {"sink": {"type": "console", "output_mode": "update"}, "query": {"join": {"type": "left_outer"}}},
        "the query runs stream_stream_join but sink.output_mode is update: stream_stream_join emits each row"
        " once, final, and Spark runs it in append mode only; set sink.output_mode to append",
    ),
]
# Environment overrides: malformed values, and names that match no setting.
BAD_ENVIRONMENT = [
    (
        {"QUERY__PARAMS__IGNORED_KEYS": "key-0"},
        "query.params: ignored_keys = 'key-0': Input should be a valid list"
        f" (from environment variable {ENV_PREFIX}QUERY__PARAMS__IGNORED_KEYS)",
    ),
    (
        {"SPARK__SHUFFLE_PARTITIONS": "-1"},
        "spark.shuffle_partitions = '-1': Input should be greater than 0"
        f" (from environment variable {ENV_PREFIX}SPARK__SHUFFLE_PARTITIONS)",
    ),
    (
        {"STATE_STORE__CHANGELOG_CHECKPOINTING": "maybe"},
        "state_store.changelog_checkpointing = 'maybe': Input should be a valid boolean",
    ),
    ({"QUERY__WATERMARK": "soon"}, "query.watermark = 'soon': 'soon' is not an interval Spark can parse"),
    ({"SOURCE__TYPE": "socket"}, "source.type = 'socket': Input should be 'rate', 'files' or 'kafka'"),
    (
        {"SPARK__SHUFLE_PARTITIONS": "8"},
        f"spark.shufle_partitions: unknown key (did you mean shuffle_partitions?) (from environment variable {ENV_PREFIX}SPARK__SHUFLE_PARTITIONS)",
    ),
    (
        {"QUERYY__WATERMARK": "1 minute"},
        f"environment variable {ENV_PREFIX}QUERYY__WATERMARK: names no settings"
        f" section (did you mean {ENV_PREFIX}QUERY__...?)",
    ),
    # A mapping or a list given as text that is not JSON (pydantic-settings named only the section).
    (
        {"SPARK__CONF": "not json"},
        f"environment variable {ENV_PREFIX}SPARK__CONF = 'not json': not JSON, and spark.conf is a mapping of Spark"
        f""" conf names to values; give JSON such as '{{"name": "value"}}', or set one key as"""
        f" {ENV_PREFIX}SPARK__CONF__<KEY>",
    ),
    (
        {"CAPACITY__OPERATORS": "deduplication"},
        f"environment variable {ENV_PREFIX}CAPACITY__OPERATORS = 'deduplication': not JSON, and capacity.operators is"
        " a list of one entry per stateful operator of the query; give JSON such as '[...]'",
    ),
    # A bad value inside the variable's JSON: the variable is named, not settings.yaml.
    (
        {"SPARK__CONF": '{"spark.sql.session.timeZone": ["UTC"]}'},
        "spark.conf.spark.sql.session.timeZone = ['UTC']: a Spark conf value is text, a number or true/false"
        f" (from environment variable {ENV_PREFIX}SPARK__CONF)",
    ),
    (
        {"CAPACITY__STATE_GROWTH_FACTOR": "inf"},
        "capacity.state_growth_factor = 'inf': Input should be a finite number"
        f" (from environment variable {ENV_PREFIX}CAPACITY__STATE_GROWTH_FACTOR)",
    ),
    (
        {"SPARK__SHUFFLE_PARTITIONS": "99999999999999999999"},
        "spark.shuffle_partitions = '99999999999999999999': Input should be less than or equal to 2147483647"
        f" (from environment variable {ENV_PREFIX}SPARK__SHUFFLE_PARTITIONS)",
    ),
]


def run_main_without_java(path: Path, tmp_path: Path, env: dict[str, str] | None = None):
    """`python main.py --settings path` with no Java on PATH: a Spark start would be exit 3, not 2."""
    bare = {"PATH": str(Path(sys.executable).parent), "HOME": str(tmp_path), **(env or {})}
    return run_python("main.py", "--settings", str(path), env=bare)


def assert_refused_before_spark(result, expected: str, checkpoint: Path, one_line: bool = True) -> None:
    """Exit 2, one `settings error:` line on stderr (or one per bad field), the expected in it, nothing created."""
    assert result.returncode == 2, result.stderr
    lines = result.stderr.splitlines()
    assert lines and all(line.startswith("settings error: ") for line in lines), lines
    assert any(expected in line for line in lines), lines
    assert len(lines) == 1 or not one_line, lines
    assert not checkpoint.exists()


@pytest.mark.parametrize(("changes", "expected"), BAD_VALUES)
def test_bad_settings_file_exits_2_naming_the_field_before_spark(write_settings, tmp_path, changes, expected):
    checkpoint = tmp_path / "checkpoint"
    path = write_settings(deep_merge({"query": {"checkpoint_location": str(checkpoint)}}, changes))
    assert_refused_before_spark(run_main_without_java(path, tmp_path), expected, checkpoint)


def operator_settings(write_settings, tmp_path: Path, operator: str, changes: dict) -> tuple[Path, Path]:
    """The settings with changes and a checkpoint in tmp_path, in the bake of `operator` (else skipped)."""
    if operator != BAKED_OPERATOR:
        pytest.skip(f"the {operator} bake runs it")
    checkpoint = tmp_path / "checkpoint"
    return write_settings(deep_merge({"query": {"checkpoint_location": str(checkpoint)}}, changes)), checkpoint


@pytest.mark.operator
@pytest.mark.parametrize(("operator", "changes", "expected"), OPERATOR_BAD_VALUES)
def test_operator_rules_exit_2_before_spark(write_settings, tmp_path, operator, changes, expected):
    path, checkpoint = operator_settings(write_settings, tmp_path, operator, changes)
    assert_refused_before_spark(run_main_without_java(path, tmp_path), expected, checkpoint)


@pytest.mark.operator
@pytest.mark.parametrize(("operator", "changes", "expected"), PLAN_BAD_VALUES)
def test_what_the_plans_operators_need_is_refused_before_a_batch(write_settings, tmp_path, operator, changes, expected):
    path, checkpoint = operator_settings(write_settings, tmp_path, operator, changes)
    run = run_main("--settings", str(path))
    assert (run.returncode, run.stderr) == (2, f"settings error: {expected}\n")
    assert not checkpoint.exists()


# What Spark also runs in update mode loads with it (checked on Spark 4.2.1): a deduplication, and an
# inner or left semi join, the type read from the query's plan; an outer join is refused (above).
@pytest.mark.operator
@pytest.mark.parametrize("operator", ["deduplication", "stream_stream_join"])
def test_what_spark_runs_in_update_mode_is_accepted_there(make_settings, operator):
    if operator != BAKED_OPERATOR:
        pytest.skip(f"the {operator} bake runs it")
    settings = make_settings({"sink": {"type": "console", "output_mode": "update"}})
    assert settings.sink.output_mode == "update"
    if operator == "stream_stream_join":

        def join(join_type: str) -> list[PlanOperator]:
            return [PlanOperator(0, operator, "Join", "key", "10 seconds", join_type=join_type)]

        assert settings.plan_problems(join("LeftSemi")) == []
        (problem,) = settings.plan_problems(join("FullOuter"))
        assert "sink.output_mode is update" in problem and "set sink.output_mode to append" in problem


def test_the_operator_cannot_be_overridden_from_the_environment(write_settings, tmp_path):
    checkpoint = tmp_path / "checkpoint"
    path = write_settings({"query": {"checkpoint_location": str(checkpoint)}})
    env = {f"{ENV_PREFIX}QUERY__OPERATOR": "deduplication"}
    expected = f"environment variable {ENV_PREFIX}QUERY__OPERATOR: the query's stateful operators are set by the code"
    assert_refused_before_spark(run_main_without_java(path, tmp_path, env), expected, checkpoint)


@pytest.mark.parametrize(("variables", "expected"), BAD_ENVIRONMENT)
def test_bad_environment_override_exits_2_naming_the_variable(write_settings, tmp_path, variables, expected):
    checkpoint = tmp_path / "checkpoint"
    path = write_settings({"query": {"checkpoint_location": str(checkpoint)}})
    env = {f"{ENV_PREFIX}{name}": value for name, value in variables.items()}
    assert_refused_before_spark(run_main_without_java(path, tmp_path, env), expected, checkpoint)


def test_the_querys_own_parameters_are_checked_by_its_params_model(make_settings, monkeypatch):
    assert make_settings().query.params.ignored_keys == []
    assert make_settings({"query": {"params": {"ignored_keys": ["key-1"]}}}).query.params.ignored_keys == ["key-1"]
    monkeypatch.setenv(f"{ENV_PREFIX}QUERY__PARAMS__IGNORED_KEYS", '["key-0", "key-2"]')  # JSON, as for a list
    assert make_settings().query.params.ignored_keys == ["key-0", "key-2"]
    monkeypatch.delenv(f"{ENV_PREFIX}QUERY__PARAMS__IGNORED_KEYS")
    (line,) = errors_for(make_settings, {"query": {"params": {"threshold": 3}}})
    assert line.startswith("query.params: threshold is not a field of Params in stream_job.query (in ")


def test_checks_across_keys_name_the_section_not_its_whole_content(make_settings):
    (line,) = errors_for(make_settings, {"state_store": {"provider": "hdfs", "changelog_checkpointing": True}})
    assert line.startswith("state_store: changelog_checkpointing is true but provider is hdfs")
    assert "min_batches_to_retain" not in line
    (line,) = errors_for(
        make_settings,
        {"query": {"trigger": "available_now"}, "source": {"type": "rate", "rate": {"rows_per_batch": None}}},
    )
    assert line.startswith("settings: query.trigger available_now does not work")
    assert "checkpoint_location" not in line


def test_every_bad_field_gets_its_own_line(make_settings):
    lines = errors_for(make_settings, {"spark": {"shuffle_partitions": 0}, "query": {"watermark": "x"}})
    assert len(lines) == 2
    assert lines[0].startswith("spark.shuffle_partitions = 0")
    assert lines[1].startswith("query.watermark = 'x'")
    assert all("expected" in line for line in lines)


def test_a_zero_watermark_is_taken_run_and_sized(spark, tmp_path):
    """Spark takes a zero watermark delay (an event older than the newest is late); the settings refused
    it ("must be longer than zero"). It loads, the job runs on it, and the estimate sizes it."""
    changes = deep_merge(files_job(tmp_path, "parquet", ANY_PROVIDER, files=2), {"query": {"watermark": "0 seconds"}})
    path = write_settings_file(tmp_path / "settings.yaml", changes)
    run = run_main("--settings", str(path))
    assert run.returncode == 0, run.stderr[-3000:]
    expected = batch_expectation(spark, load_settings(path))
    assert expected.count() > 0
    assertDataFrameEqual(spark.read.parquet(str(tmp_path / "output")), expected)
    estimate = run_cli("estimate", "--settings", str(path))
    assert estimate.returncode == 0, estimate.stderr[-3000:]
    assert "headline       = watermark 0 seconds (0 s) x 10,000 rows/s = 0 rows" in estimate.stdout


def test_every_folder_setting_refuses_a_blank_path(make_settings):
    blank = {
        "source": {"files": {"path": " ", "clean_source": "archive", "archive_dir": "\t"}},
        "sink": {"path": "  "},
        "query": {"checkpoint_location": ""},
    }
    lines = errors_for(make_settings, blank)
    fields = ["source.files.path", "source.files.archive_dir", "sink.path", "query.checkpoint_location"]
    assert [line.split(" = ")[0] for line in lines] == fields
    assert all(": is blank, which names no folder" in line for line in lines)


def test_bad_environment_value_names_the_variable(make_settings, monkeypatch):
    monkeypatch.setenv(f"{ENV_PREFIX}SPARK__SHUFFLE_PARTITIONS", "0")
    (line,) = errors_for(make_settings, {})
    assert f"from environment variable {ENV_PREFIX}SPARK__SHUFFLE_PARTITIONS" in line


def test_missing_section_is_named(write_settings, tmp_path):
    path = write_settings()
    text = path.read_text().replace("capacity:", "unused_capacity:")
    path.write_text(text)
    with pytest.raises(SettingsError) as caught:
        load_settings(path)
    assert any(line.startswith("capacity: missing") for line in caught.value.lines)
    assert any(line.startswith("unused_capacity: unknown key") for line in caught.value.lines)


@pytest.mark.parametrize(
    ("content", "expected"),
    [
        (b"", "empty; copy the settings.yaml the project was generated with"),
        (b"spark: [unclosed\n", "not valid YAML at line 2"),
        (b"- a\n- list\n", "expected a mapping of sections, got list"),
        (b"spark:\n  app_name: caf\xe9\n", "not UTF-8 text"),
        (b"spark:\n  shuffle_partitions: 4\n", "state_store: missing"),
    ],
    ids=["empty", "unparseable", "a-list", "not-utf8", "sections-missing"],
)
def test_unusable_files(tmp_path, content, expected):
    path = tmp_path / "settings.yaml"
    path.write_bytes(content)
    assert_refused_before_spark(
        run_main_without_java(path, tmp_path), expected, tmp_path / "checkpoints", one_line=False
    )


def test_a_key_given_twice_is_refused_naming_it_and_its_lines(tmp_path):
    """PyYAML keeps the last of two equal keys: a second `spark:` section would reset the first's keys."""
    text = PROJECT_SETTINGS.read_text()
    lines = text.splitlines()
    spark_line = lines.index("spark:") + 1
    twice = tmp_path / "twice.yaml"
    twice.write_text(f"{text}spark:\n  shuffle_partitions: 4\n")
    partitions_line = next(number for number, line in enumerate(lines, 1) if line.startswith("  shuffle_partitions:"))
    repeated = tmp_path / "repeated.yaml"
    repeated.write_text(text.replace("  shuffle_partitions:", "  shuffle_partitions: 4\n  shuffle_partitions:", 1))
    for path, expected in (
        (
            twice,
            f"key spark appears twice, at lines {spark_line} and {len(lines) + 1}: the second section would silently"
            " replace the whole first one; merge them into one",
        ),
        (
            repeated,
            f"key spark.shuffle_partitions appears twice, at lines {partitions_line} and {partitions_line + 1}: the"
            " second would silently win; keep one",
        ),
    ):
        result = run_main_without_java(path, tmp_path)
        assert result.returncode == 2, result.stderr
        assert result.stderr.splitlines() == [f"settings error: settings file {path}: {expected}"]
        assert not (tmp_path / "checkpoints").exists()


def test_aliases_that_expand_too_far_are_refused_at_once(tmp_path):
    """A "billion laughs" file, 9 aliases on each of 9 levels (9^9 values), is one short line in well
    under a second of work; aliases that stay small still load."""
    levels = ['l0: &l0 ["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]']
    levels += [f"l{n}: &l{n} [{', '.join([f'*l{n - 1}'] * 9)}]" for n in range(1, 9)]
    bomb = tmp_path / "bomb.yaml"
    bomb.write_text("\n".join(levels) + "\n" + PROJECT_SETTINGS.read_text())
    started = time.monotonic()
    result = run_main_without_java(bomb, tmp_path)
    assert time.monotonic() - started < 30  # the Python start dominates; unbounded, it allocates gigabytes
    assert result.returncode == 2, result.stderr[:2000]
    assert result.stderr.splitlines() == [
        f"settings error: settings file {bomb}: its aliases expand to more than 10,000 values (at *l3, line 5);"
        " write the values out, or repeat fewer"
    ]
    small = tmp_path / "small.yaml"
    text = PROJECT_SETTINGS.read_text().replace("spark:", "spark: &spark", 1)
    small.write_text(text.replace("\nsink:", "\nunused: *spark\nsink:", 1))
    (line,) = settings_error_lines(small)
    assert line == f"unused: unknown key (in {small}); remove it"


def settings_error_lines(path: Path) -> list[str]:
    with pytest.raises(SettingsError) as caught:
        load_settings(path)
    return caught.value.lines


def test_a_path_starting_with_a_tilde_is_in_the_home_folder(write_settings, tmp_path):
    home = tmp_path / "home"
    (home / "landing").mkdir(parents=True)
    changes = {
        "source": {"type": "files", "files": {"path": "~/landing", "clean_source": "archive", "archive_dir": "~/done"}},
        "sink": {"path": "~/output"},
        "query": {"checkpoint_location": "~/checkpoint"},
    }
    result = run_cli("config", "--settings", str(write_settings(changes)), env=_home(home))
    assert result.returncode == 0, result.stderr
    for setting in ("path: " + str(home / "landing"), f"archive_dir: {home / 'done'}", f"path: {home / 'output'}"):
        assert setting in result.stdout
    assert f"checkpoint_location: {home / 'checkpoint'}" in result.stdout
    assert "~" not in result.stdout
    missing = deep_merge(changes, {"source": {"files": {"path": "~/no-landing"}}})
    result = run_main_without_java(write_settings(missing), tmp_path, {"HOME": str(home)})
    assert result.stderr.splitlines() == [
        f"settings error: source.files.path = '{home / 'no-landing'}': no such directory; create it (files landing"
        " there are read in order of arrival) or fix the path"
    ]
    assert not (home / "checkpoint").exists()


def _home(home: Path) -> dict[str, str]:
    return {**clean_env(), "HOME": str(home)}


# Folders one inside another, or the same: (settings changes with {root} for tmp_path, the line).
OVERLAPS = {
    "output-inside-checkpoint": (
        {"sink": {"path": "{root}/checkpoint/output"}},
        "sink.path = '{root}/checkpoint/output': is inside query.checkpoint_location '{root}/checkpoint': the"
        " output's files and the checkpoint's would mix, and removing or restoring the checkpoint would take the"
        " output with it; give each its own directory, side by side",
    ),
    "checkpoint-inside-output": (
        {"sink": {"path": "{root}"}},
        "query.checkpoint_location = '{root}/checkpoint': is inside sink.path '{root}': the output's files and the"
        " checkpoint's would mix, and removing or restoring the checkpoint would take the output with it; give"
        " each its own directory, side by side",
    ),
    "landing-is-output": (
        {"source": {"type": "files", "files": {"path": "{root}/output"}}, "sink": {"path": "{root}/output"}},
        "source.files.path = '{root}/output': is the same directory as sink.path '{root}/output': every file landing"
        " there would be ignored for good (Spark reads a folder holding a sink's log as that sink's output, and"
        " nothing else); give each its own directory, side by side",
    ),
    "landing-inside-output": (
        {"source": {"type": "files", "files": {"path": "{root}/output/landing"}}, "sink": {"path": "{root}/output"}},
        "source.files.path = '{root}/output/landing': is inside sink.path '{root}/output': the input files would mix"
        " with those of sink.path; give each its own directory, side by side",
    ),
    "output-inside-landing": (
        {"source": {"type": "files", "files": {"path": "{root}/landing"}}, "sink": {"path": "{root}/landing/out"}},
        "sink.path = '{root}/landing/out': is inside source.files.path '{root}/landing': the source would read the"
        " files of sink.path as input; give each its own directory, side by side",
    ),
    "landing-inside-checkpoint": (
        {"source": {"type": "files", "files": {"path": "{root}/checkpoint/landing"}}},
        "source.files.path = '{root}/checkpoint/landing': is inside query.checkpoint_location '{root}/checkpoint':"
        " the input files would mix with those of query.checkpoint_location; give each its own directory, side by"
        " side",
    ),
}


@pytest.mark.parametrize(("changes", "expected"), OVERLAPS.values(), ids=OVERLAPS.keys())
def test_folders_inside_each_other_are_refused(write_settings, tmp_path, changes, expected):
    """Each a real run refused in one line, the folders as they were (a landing folder that is the output
    ran with exit 0, no batch, every input ignored for good)."""
    (tmp_path / "output").mkdir()
    (tmp_path / "landing").mkdir()
    text = json.dumps(deep_merge({"query": {"checkpoint_location": "{root}/checkpoint"}}, changes))
    path = write_settings(json.loads(text.replace("{root}", str(tmp_path))))
    before = digest(tmp_path)
    result = run_main_without_java(path, tmp_path)
    assert result.returncode == 2, result.stderr
    assert result.stderr.splitlines() == [f"settings error: {expected.format(root=tmp_path)}"]
    assert digest(tmp_path) == before
    assert not (tmp_path / "checkpoint").exists()


def test_a_partition_count_no_batch_gets_through_is_refused_before_the_first_run(write_settings, tmp_path):
    """100,000 partitions on local[2] ran (batch 0 never ended, and the count was pinned for good): refused
    before Spark, with the count to set."""
    checkpoint = tmp_path / "checkpoint"
    local = {
        "spark": {"master": "local[2]", "shuffle_partitions": 100_000},
        "query": {"checkpoint_location": str(checkpoint)},
    }
    result = run_main_without_java(write_settings(local), tmp_path)
    assert result.stderr.splitlines() == [
        "settings error: spark.shuffle_partitions = 100000: 100,000 partitions on up to 2 cores: every batch would"
        " run 50,000 waves of state-store tasks per stateful operator, more than 1,000: batch 0 would not finish;"
        f" the first run would pin the count into checkpoint {checkpoint}: set it to 4 (2 per core)"
    ]
    assert result.returncode == 2
    cluster = deep_merge(local, {"spark": {"master": "spark://nowhere:7077"}, "capacity": {"max_cores": None}})
    result = run_main_without_java(write_settings(cluster), tmp_path)
    assert result.stderr.splitlines() == [
        "settings error: spark.shuffle_partitions = 100000: 100,000 partitions are more than 20,000 (2 per core on"
        " 10,000 cores), each a state-store task in every batch; the first run would pin the count into checkpoint"
        f" {checkpoint}: set it to what python -m stream_job estimate advises (with capacity.max_cores, the cores it"
        " runs on)"
    ]
    assert result.returncode == 2
    assert not checkpoint.exists()
    # --local-partitions replaces the count: the run goes on to Spark (no Java here: exit 3).
    result = run_python(
        "main.py", "--settings", str(write_settings(local)), "--local-partitions", env=_no_java(tmp_path)
    )
    assert result.returncode == 3, result.stderr


def test_a_partition_count_of_many_waves_is_warned_about_and_a_pinned_one_told_the_way_out(write_settings, tmp_path):
    checkpoint = tmp_path / "checkpoint"
    changes = {
        "spark": {"master": "local[2]", "shuffle_partitions": 200},
        "state_store": {"provider": "rocksdb"},
        "query": {"checkpoint_location": str(checkpoint)},
    }
    result = run_main_without_java(write_settings(changes), tmp_path)
    assert result.returncode == 3, result.stderr  # on to Spark: no Java here
    assert (
        "partitions: WARNING: 200 partitions on up to 2 cores: every batch runs 100 waves of state-store tasks per"
        " stateful operator, each with its fixed cost, and this first run pins the count into checkpoint"
        f" {checkpoint}; if that is not meant, stop now and set spark.shuffle_partitions to 4 (2 per core)\n"
    ) in result.stdout
    # A checkpoint that pins a count no batch gets through already: the run goes on, told the way out.
    (checkpoint / "offsets").mkdir(parents=True)
    pinned = {"batchWatermarkMs": 0, "batchTimestampMs": 0, "conf": {"spark.sql.shuffle.partitions": "100000"}}
    (checkpoint / "offsets" / "0").write_text(f"v1\n{json.dumps(pinned)}\n")
    changes["spark"]["shuffle_partitions"] = 100_000
    result = run_main_without_java(write_settings(changes), tmp_path)
    assert result.returncode == 3, result.stderr
    assert (
        f"partitions: WARNING: checkpoint {checkpoint} pins 100000 shuffle partitions: 100,000 partitions on up to 2"
        " cores: every batch would run 50,000 waves of state-store tasks per stateful operator, more than 1,000:"
        " batch 0 would not finish; stop the job and move the state into fewer partitions: python -m stream_job"
        " repartition --partitions N\n"
    ) in result.stdout


def _no_java(tmp_path: Path) -> dict[str, str]:
    return {"PATH": str(Path(sys.executable).parent), "HOME": str(tmp_path)}


def test_missing_file(tmp_path):
    with pytest.raises(SettingsError, match="not found"):
        load_settings(tmp_path / "nope.yaml")


def test_checkpoint_location_that_is_a_file(make_settings, tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory")
    (line,) = errors_for(make_settings, {"query": {"checkpoint_location": str(blocker)}})
    assert "is a file, not a directory" in line


def test_bad_settings_exit_2_with_one_line_per_field_and_no_spark(write_settings, tmp_path):
    checkpoint = tmp_path / "checkpoint"
    path = write_settings({"spark": {"shuffle_partitions": 0}, "query": {"checkpoint_location": str(checkpoint)}})
    result = run_main("--settings", str(path))
    assert result.returncode == 2
    assert result.stderr.splitlines() == [
        f"settings error: spark.shuffle_partitions = 0: Input should be greater than 0 (in {path});"
        " expected a whole number of partitions greater than zero (python -m stream_job estimate advises one)"
    ]
    assert "Traceback" not in result.stderr
    assert not checkpoint.exists()


def test_archive_dir_inside_the_landing_directory(make_settings, tmp_path):
    (line,) = errors_for(
        make_settings,
        {
            "source": {
                "files": {
                    "path": str(tmp_path / "landing"),
                    "clean_source": "archive",
                    "archive_dir": str(tmp_path / "landing" / "done"),
                }
            }
        },
    )
    assert line.startswith("source.files.archive_dir = ")
    assert "is inside source.files.path" in line


@pytest.mark.parametrize(
    ("changes", "expected"),
    [
        (
            {"source": {"type": "files", "files": {"path": "no-such-landing"}}},
            "source.files.path = '{root}/no-such-landing': no such directory; create it (files landing there are"
            " read in order of arrival) or fix the path",
        ),
        (
            {
                "source": {
                    "type": "kafka",
                    "kafka": {
                        "security_protocol": "SASL_SSL",
                        "sasl_mechanism": "PLAIN",
                        "sasl_username": "svc",
                        "sasl_password_env": "NO_SUCH_KAFKA_PASSWORD_VARIABLE",
                    },
                }
            },
            "source.kafka.sasl_password_env = 'NO_SUCH_KAFKA_PASSWORD_VARIABLE': the environment variable"
            " NO_SUCH_KAFKA_PASSWORD_VARIABLE is not set (or is empty); export it before starting the job",
        ),
        (
            {
                "source": {"type": "rate"},
                "spark": {"secret_conf": {"spark.hadoop.fs.s3a.secret.key": "NO_SUCH_S3_KEY"}},
            },
            "spark.secret_conf.spark.hadoop.fs.s3a.secret.key = 'NO_SUCH_S3_KEY': the environment variable"
            " NO_SUCH_S3_KEY is not set (or is empty); export it before starting the job",
        ),
        (
            {"source": {"type": "rate"}, "sink": {"type": "parquet", "path": f"{UNWRITABLE}/output"}},
            f"sink.path = '{UNWRITABLE}/output': cannot write in {UNWRITABLE} (Permission denied); choose a"
            " directory this user can write to, or fix its permissions",
        ),
    ],
    ids=[
        "missing-landing-directory",
        "missing-secret",
        "missing-secret-conf",
        "unwritable-output",
    ],
)
def test_what_a_run_needs_is_checked_before_spark_starts(write_settings, tmp_path, changes, expected):
    if UNWRITABLE in str(changes) and _can_write_in(UNWRITABLE):
        pytest.skip(f"{UNWRITABLE} is writable on this machine, so it cannot stand for a read-only place")
    changes = deep_merge(changes, {"query": {"checkpoint_location": str(tmp_path / "checkpoint")}})
    result = run_main("--settings", str(write_settings(changes)))
    assert result.returncode == 2, result.stderr
    assert result.stderr.splitlines() == [f"settings error: {expected.format(root=tmp_path)}"]
    assert not (tmp_path / "checkpoint").exists()


def _can_write_in(folder: str) -> bool:
    try:
        tempfile.NamedTemporaryFile(dir=folder).close()
        return True
    except OSError:
        return False


def test_bad_flag_exits_2(tmp_path):
    result = run_main("--max-batches", "0")
    assert result.returncode == 2
    assert "argument --max-batches: '0' must be greater than zero" in result.stderr


def test_missing_java_is_a_sentence(write_settings, tmp_path):
    path = write_settings({"source": {"type": "rate"}, "query": {"checkpoint_location": str(tmp_path / "cp")}})
    env = {"PATH": str(Path(sys.executable).parent), "HOME": str(tmp_path)}  # no java, no JAVA_HOME
    result = run_python("main.py", "--settings", str(path), env=env)
    assert result.returncode == 3
    assert result.stderr.startswith("java error: Java was not found (no JAVA_HOME, no java on PATH)")
    assert "Traceback" not in result.stderr
