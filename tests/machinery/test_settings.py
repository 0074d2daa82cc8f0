"""Settings: the generated file loads, overrides work, and bad input is one clear line per field."""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

import pytest
import yaml
from stream_job.machinery.settings import ENV_PREFIX, SettingsError, load_settings

from .conftest import BAKED_OPERATOR, PROJECT_DIR, PROJECT_SETTINGS, deep_merge, run_python


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
    ({"spark": {"shuffle_partitions": -3}}, "spark.shuffle_partitions = -3: Input should be greater than 0"),
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
        "output_mode update is not supported by the parquet sink, which only appends rows",
    ),
    (
        {"sink": {"type": "delta", "output_mode": "update"}},
        "output_mode update is not supported by the delta sink, which only appends rows",
    ),
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
        "windowed_aggregation",
        {"join_source": {"type": "rate"}},
        "settings: join_source is set but the query runs windowed_aggregation, which reads one input; set"
        " join_source to null",
    ),
    (
        "stream_stream_join",
        {"join_source": None},
        "settings: the query runs stream_stream_join but join_source is null; add a join_source section",
    ),
    (
        "custom_state",
        {"state_store": {"provider": "hdfs", "changelog_checkpointing": False}},
        "settings: the query runs custom_state but state_store.provider is hdfs: Spark runs transformWithState"
        " only on RocksDB; set state_store.provider to rocksdb",
    ),
    (
        "stream_stream_join",
        {"join_source": {"type": "rate"}, "sink": {"type": "console", "output_mode": "update"}},
        "settings: the query runs stream_stream_join but sink.output_mode is update: stream_stream_join emits"
        " each row once, final, and Spark runs it in append mode only; set sink.output_mode to append",
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
]


def run_main_without_java(path: Path, tmp_path: Path, env: dict[str, str] | None = None):
    """`python main.py --settings path` with no Java on PATH: a Spark start would be exit 3, not 2."""
    bare = {"PATH": str(Path(sys.executable).parent), "HOME": str(tmp_path), **(env or {})}
    return run_python("main.py", "--settings", str(path), env=bare)


def assert_refused_before_spark(result, expected: str, checkpoint: Path) -> None:
    """Exit 2, every stderr line a `settings error:` line, one of them the expected, nothing created."""
    assert result.returncode == 2, result.stderr
    lines = result.stderr.splitlines()
    assert lines and all(line.startswith("settings error: ") for line in lines), lines
    assert any(expected in line for line in lines), lines
    assert not checkpoint.exists()


@pytest.mark.parametrize(("changes", "expected"), BAD_VALUES)
def test_bad_settings_file_exits_2_naming_the_field_before_spark(write_settings, tmp_path, changes, expected):
    checkpoint = tmp_path / "checkpoint"
    path = write_settings(deep_merge({"query": {"checkpoint_location": str(checkpoint)}}, changes))
    assert_refused_before_spark(run_main_without_java(path, tmp_path), expected, checkpoint)


@pytest.mark.operator
@pytest.mark.parametrize(("operator", "changes", "expected"), OPERATOR_BAD_VALUES)
def test_operator_rules_exit_2_before_spark(write_settings, tmp_path, operator, changes, expected):
    if operator != BAKED_OPERATOR:
        pytest.skip(f"the {operator} bake runs it")
    checkpoint = tmp_path / "checkpoint"
    path = write_settings(deep_merge({"query": {"checkpoint_location": str(checkpoint)}}, changes))
    assert_refused_before_spark(run_main_without_java(path, tmp_path), expected, checkpoint)


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
    assert_refused_before_spark(run_main_without_java(path, tmp_path), expected, tmp_path / "checkpoints")


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
    result = run_python("main.py", "--settings", str(path))
    assert result.returncode == 2
    assert result.stderr.splitlines() == [
        f"settings error: spark.shuffle_partitions = 0: Input should be greater than 0 (in {path});"
        " expected a whole number of partitions greater than zero"
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
    result = run_python("main.py", "--settings", str(write_settings(changes)))
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
    result = run_python("main.py", "--max-batches", "0")
    assert result.returncode == 2
    assert "argument --max-batches: '0' must be greater than zero" in result.stderr


def test_missing_java_is_a_sentence(write_settings, tmp_path):
    path = write_settings({"source": {"type": "rate"}, "query": {"checkpoint_location": str(tmp_path / "cp")}})
    env = {"PATH": str(Path(sys.executable).parent), "HOME": str(tmp_path)}  # no java, no JAVA_HOME
    result = run_python("main.py", "--settings", str(path), env=env)
    assert result.returncode == 3
    assert result.stderr.startswith("java error: Java was not found (no JAVA_HOME, no java on PATH)")
    assert "Traceback" not in result.stderr
