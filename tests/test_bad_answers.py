"""Every bad answer stops generation with one clear sentence and leaves nothing behind."""

from __future__ import annotations

import pytest
from cookiecutter.exceptions import FailedHookException, UndefinedVariableInTemplate

from .conftest import bake

SHADOWS_STDLIB = "would shadow the standard library's module"
SHADOWS_DEPENDENCY = "would shadow the module {!r} of a package the project depends on"
BAD_ANSWERS = [
    ({"package_name": "2fast"}, "package_name '2fast' is not a valid Python package name"),
    (
        {"package_name": "class"},
        "package_name 'class' is a Python keyword, so no import can name the package: give package_name another"
        " name (for example 'class_job').",
    ),
    # The package name made from the project name: said so, with both ways out.
    (
        {"project_name": "def"},
        "package_name 'def', the one project_name 'def' gives, is a Python keyword, so no import can name the"
        " package: give package_name another name (for example 'def_job'), or choose another project_name.",
    ),
    ({"package_name": "my-job"}, "package_name 'my-job' is not a valid Python package name"),
    ({"package_name": "json"}, f"package_name 'json' {SHADOWS_STDLIB} 'json'"),
    ({"package_name": "logging"}, f"package_name 'logging' {SHADOWS_STDLIB} 'logging'"),
    ({"package_name": "sys"}, f"package_name 'sys' {SHADOWS_STDLIB} 'sys'"),
    ({"package_name": "pyspark"}, "package_name 'pyspark' " + SHADOWS_DEPENDENCY.format("pyspark")),
    ({"package_name": "deltalake"}, "package_name 'deltalake' " + SHADOWS_DEPENDENCY.format("deltalake")),
    ({"package_name": "pyarrow"}, "package_name 'pyarrow' " + SHADOWS_DEPENDENCY.format("pyarrow")),
    ({"package_name": "numpy"}, "package_name 'numpy' " + SHADOWS_DEPENDENCY.format("numpy")),
    ({"package_name": "tests"}, "package_name 'tests' would shadow the project's own 'tests'"),
    ({"project_slug": "Bad Slug!"}, "project_slug 'Bad Slug!' is not a usable directory name"),
    ({"watermark": "soon"}, "watermark 'soon' is not an interval Spark can parse"),
    ({"watermark": ""}, "watermark is empty"),
    ({"window": "0 seconds"}, "window '0 seconds' must be longer than zero"),
    ({"watermark": "-5 minutes"}, "watermark '-5 minutes' is negative; a duration is a length of time"),
    ({"watermark": "10 mins"}, "watermark '10 mins' has the unit 'mins', which Spark does not read; write minutes."),
    ({"watermark": "1 month"}, "watermark '1 month' uses months; write it in days or weeks instead"),
    # Spark's real-time mode (machinery/core/real_time.py): its source, sinks, operators and store.
    ({"real_time": True}, "real_time needs source kafka: real_time (Spark's real-time mode) reads only from Kafka"),
    (
        {"real_time": True, "source": "kafka", "sink": "parquet"},
        "real_time needs sink kafka or console, not parquet: real_time (Spark's real-time mode) writes to no other sink",
    ),
    (
        {"real_time": True, "source": "kafka", "sink": "kafka", "stateful_operator": "stream_stream_join"},
        "real_time runs no stream_stream_join: real_time (Spark's real-time mode) runs a deduplication and an"
        " aggregation without a session window",
    ),
    (
        {"real_time": True, "source": "kafka", "sink": "console", "state_store_provider": "hdfs"},
        "real_time needs the rocksdb store: real_time (Spark's real-time mode) refuses hdfs; answer rocksdb or auto.",
    ),
    ({"watermark": "10 fortnights"}, "watermark '10 fortnights' has an unknown unit 'fortnights'"),
    ({"input_rows_per_second": "-5"}, "input_rows_per_second '-5' has a sign: write a number of rows per second"),
    ({"input_rows_per_second": "0"}, "input_rows_per_second '0' is not greater than zero"),
    ({"input_rows_per_second": "lots"}, "input_rows_per_second 'lots' is not a number"),
    ({"input_rows_per_second": "1e999"}, "input_rows_per_second '1e999' is too large to be a number"),
    ({"input_rows_per_second": "10,000"}, "input_rows_per_second '10,000' is not a number"),
    (
        {"input_rows_per_second": "1e300"},
        "input_rows_per_second '1e300' is more than 1,000,000,000,000,000, which no job",
    ),
    (
        {"key_cardinality": "10000000000000000"},
        "key_cardinality '10000000000000000' is not valid: write a whole number",
    ),
    ({"watermark": "1000 weeks 99999 days"}, "watermark '1000 weeks 99999 days' is longer than 36,500 days"),
    ({"state_bytes_per_row": "1.5"}, "state_bytes_per_row '1.5' is not a whole number: write a whole number of bytes"),
    ({"shuffle_partitions": "0"}, "shuffle_partitions '0' is not greater than zero"),
    ({"shuffle_partitions": "1e3"}, "shuffle_partitions '1e3' is not a whole number"),
    ({"shuffle_partitions": "automatic"}, "shuffle_partitions 'automatic' is not a number: write auto, or a whole"),
    ({"max_cores": "0"}, "max_cores '0' is not greater than zero: write auto, or a whole number of cores"),
    ({"max_cores": "2.5"}, "max_cores '2.5' is not a whole number"),
    ({"max_cores": "many"}, "max_cores 'many' is not a number"),
    ({"state_growth_factor": "0.5"}, "state_growth_factor '0.5' is below 1"),
    ({"key_cardinality": "many"}, "key_cardinality 'many' is not valid: write a whole number of distinct keys"),
    ({"key_cardinality": "0"}, "key_cardinality '0' is not valid"),
    (
        {"stateful_operator": "stream_stream_join", "join_input_rows_per_second": "-1"},
        "join_input_rows_per_second '-1' has a sign",
    ),
    ({"window": "a while"}, "window 'a while' is not an interval Spark can parse"),
    ({"join_range": "0 minutes"}, "join_range '0 minutes' must be longer than zero"),
    ({"stateful_operator": "custom_state", "session_timeout": "1 month"}, "session_timeout '1 month' uses months"),
    # Checked whatever the operator: every duration is written into settings.yaml.
    ({"stateful_operator": "deduplication", "window": "soon"}, "window 'soon' is not an interval Spark can parse"),
    (
        {"stateful_operator": "custom_state", "state_store_provider": "hdfs"},
        "custom_state needs the rocksdb state store (Spark runs transformWithState only on RocksDB);"
        " answer rocksdb or auto for state_store_provider.",
    ),
]


@pytest.mark.parametrize(("answers", "sentence"), BAD_ANSWERS, ids=[str(a) for a, _ in BAD_ANSWERS])
def test_bad_answer_fails_cleanly(out, capfd, answers, sentence):
    with pytest.raises(FailedHookException):
        bake(out, **answers)
    err = capfd.readouterr().err
    assert f"ERROR: {sentence}" in err
    assert "Traceback" not in err.split("Hook script failed")[-1]
    assert list(out.iterdir()) == []


def test_cookiecutter_itself_refuses_a_non_boolean(out):
    with pytest.raises(ValueError, match="maybe provided for variable changelog_checkpointing could not be converted"):
        bake(out, changelog_checkpointing="maybe")
    assert list(out.iterdir()) == []


def test_all_bad_answers_are_reported_at_once(out, capfd):
    bad = {
        "input_rows_per_second": "fast",
        "shuffle_partitions": "-1",
        "max_cores": "+8",
        "package_name": "2fast",
        "watermark": "soon",
        "window": "-1 minute",
        "session_timeout": "5 mins",
    }
    with pytest.raises(FailedHookException):
        bake(out, **bad)
    errors = [line for line in capfd.readouterr().err.splitlines() if line.startswith("ERROR: ")]
    # One line per bad answer, each naming it, durations and numbers alike.
    assert sorted(line.split()[1] for line in errors) == sorted(bad)


def test_code_in_a_text_answer_is_never_run(out, tmp_path):
    marker = tmp_path / "pwned"
    payload = f'"""); __import__("pathlib").Path({str(marker)!r}).touch(); ("""'
    project = bake(out, description=payload, author=payload)
    assert not marker.exists()
    assert payload in (project / "README.md").read_text(encoding="utf-8")


# Jinja in a text answer. With --no-input (or extra context, or a replay file) cookiecutter renders
# each answer as a template before any hook runs; local_extensions.SandboxExtension makes that
# rendering sandboxed, so these stop generation with cookiecutter's one message and run nothing.
JINJA_PAYLOADS = [
    "{{ cycler.__init__.__globals__.os.system('touch MARKER') }}",
    "{{ lipsum.__globals__['os'].popen('touch MARKER').read() }}",
    "{{ ''.__class__.__mro__[1].__subclasses__() }}{{ open('MARKER', 'w') }}",
    "{% for c in [].__class__.__base__.__subclasses__() %}{{ c }}{% endfor %}",
    "{{ cookiecutter.__class__.__init__.__globals__ }}",
    "{{ self._TemplateReference__context }}",
    "{{ undefined_name_that_does_not_exist }}",
]


@pytest.mark.parametrize("payload", JINJA_PAYLOADS)
@pytest.mark.parametrize("answer", ["description", "author", "project_name"])
def test_jinja_in_a_text_answer_stops_generation_and_runs_nothing(out, tmp_path, answer, payload):
    marker = tmp_path / "pwned"
    with pytest.raises(UndefinedVariableInTemplate) as caught:
        bake(out, **{answer: payload.replace("MARKER", str(marker))})
    assert caught.value.message == f"Unable to render variable '{answer}'"
    assert not marker.exists()
    assert list(out.iterdir()) == []


def test_harmless_jinja_and_quotes_render_as_text(out):
    # Jinja arithmetic is evaluated (cookiecutter has no switch to leave answers unrendered), and it
    # reaches no code; quotes, YAML and Python stay inert text.
    project = bake(out, description="{{ 7 * 7 }} events", author='O\'Brien "Bob" \\ key: [1]; import os')
    readme = (project / "README.md").read_text(encoding="utf-8")
    assert "49 events" in readme
    assert 'O\'Brien "Bob" \\ key: [1]; import os' in readme
