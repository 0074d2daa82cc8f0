"""Bake every supported combination and check what comes out."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
import yaml
from cookiecutter.exceptions import FailedHookException

from .conftest import TEMPLATE, bake, recorded_answers, run_command, run_in

# A state large enough for RocksDB: 61 one-minute windows open in a 1-hour watermark, 60,000,000
# events in each at 1,000,000 rows/s: 3,660,000,000 rows x 100 B / 200 = 1.83 GB per partition.
LARGE_STATE = {"input_rows_per_second": "1000000", "watermark": "1 hour", "state_bytes_per_row": "100"}

PROVIDERS, SINKS, SOURCES = (
    ("auto", "hdfs", "rocksdb"),
    ("parquet", "delta", "console", "kafka"),
    ("rate", "files", "kafka"),
)
# Every provider x sink x platform; the source turns with the provider, so each sink meets each source.
COMBINATIONS = [
    pytest.param(
        {"state_store_provider": provider, "source": source, "sink": sink, "platform": platform},
        id=f"provider:{provider}-source:{source}-sink:{sink}-platform:{platform}",
    )
    for p, provider in enumerate(PROVIDERS)
    for s, sink in enumerate(SINKS)
    for source in [SOURCES[(p + s) % len(SOURCES)]]
    for platform in ("oss", "databricks")
]
# operator -> (the README's opening words, the line of the sizing report naming its rows).
OPERATORS = {
    "windowed_aggregation": ("job that counts events per key", "state rows     = 11.17 open windows"),
    "deduplication": (
        "job that drops repeated events",
        "state rows     = (2 x watermark 600 s + one batch 10 s) x 10,000 rows/s = 12,100,000 rows",
    ),
    "stream_stream_join": ("job that joins two event streams", "state rows     = left 10,000 rows/s x (600 s"),
    "custom_state": ("job that keeps its own state per key", "state rows     = active keys within timeout"),
    "deduplicated_count": (
        "job that counts each event once",
        "state rows     = 12,100,000 + 6,700,000 = 18,800,000 rows",
    ),
}
# A starter -> its stateful operators, in the order events reach them.
STARTER_OPERATORS = {name: [name] for name in OPERATORS} | {
    "deduplicated_count": ["deduplication", "windowed_aggregation"]
}


# operator -> a call only that operator's query makes.
QUERY_MARKERS = {
    "windowed_aggregation": "F.window(",
    "deduplication": ".dropDuplicatesWithinWatermark(",
    "stream_stream_join": ".join(right, condition",
    "custom_state": "sessions(wanted(events",
}


@pytest.mark.parametrize("operator", OPERATORS)
@pytest.mark.parametrize("provider", ["hdfs", "rocksdb"])
def test_every_operator_bakes_for_both_providers(out, capfd, operator, provider):
    if (operator, provider) == ("custom_state", "hdfs"):
        with pytest.raises(FailedHookException):
            bake(out, stateful_operator=operator, state_store_provider=provider)
        assert "ERROR: custom_state needs the rocksdb state store" in capfd.readouterr().err
        assert list(out.iterdir()) == []
        return
    project = bake(out, stateful_operator=operator, state_store_provider=provider)
    settings = settings_of(project)
    assert "operator" not in settings["query"]  # the query module declares it
    assert settings["state_store"]["provider"] == provider
    assert (settings["join_source"] is None) is (operator != "stream_stream_join")
    # The user's code holds the chosen operator's query only, and custom state code only for custom_state.
    query = (project / "stream_job" / "query.py").read_text()
    chain = STARTER_OPERATORS[operator]
    # A single operator's starter keeps its label; a chain has none (the plan says what it runs).
    assert (f'\nOPERATOR = "{operator}"\n' in query) is (len(chain) == 1)
    assert sorted(op for op, marker in QUERY_MARKERS.items() if marker in query) == sorted(chain)
    assert (project / "stream_job" / "sessions.py").is_file() is (operator == "custom_state")
    printed = capfd.readouterr()
    opening, rows_line = OPERATORS[operator]
    if len(chain) == 1:
        assert f"operator       = {operator}: " in printed.out + printed.err
    else:
        assert f"query          = 2 stateful operators, in the order events reach them: {' -> '.join(chain)}" in (
            printed.out + printed.err
        )
        assert [entry["operator"] for entry in settings["capacity"]["operators"]] == chain
    assert rows_line in printed.out + printed.err
    readme = (project / "README.md").read_text()
    assert [words for words, _ in OPERATORS.values() if words in readme] == [opening]
    # The job's estimate reads the operators from the query's plan: the same figures as the bake's.
    result = run_command(project, "estimate", "--json")
    estimate = json.loads(result.stdout)
    assert (result.returncode, estimate["operator"]) == (0, " -> ".join(chain))
    assert [part["operator"] for part in estimate["operators"]] == chain
    assert sum(part["rows"] for part in estimate["operators"]) == estimate["rows"]
    dependencies = tomllib.loads((project / "pyproject.toml").read_text())["project"]["dependencies"]
    assert ("pandas>=2.2,<3" in dependencies) is (operator == "custom_state")
    # The demo (on the default rate source) shows a join or custom state on sample files instead,
    # which end by themselves (available_now) rather than after a number of batches.
    makefile = (project / "Makefile").read_text()
    on_files = operator in ("stream_stream_join", "custom_state", "deduplicated_count")
    assert ("sample-input" in makefile.split("\ndemo:")[1]) is on_files
    assert ("STREAM_JOB_SOURCE__TYPE=files" in makefile) is on_files
    assert ("STREAM_JOB_JOIN_SOURCE__TYPE=files" in makefile) is (operator == "stream_stream_join")
    assert ("DEMO_STOP := --max-batches $(DEMO_BATCHES)" in makefile) is not on_files


def test_custom_state_on_auto_gets_rocksdb_with_the_reason(out, capfd):
    # Small enough for the HDFS-backed store's heap: RocksDB all the same, and the reason said.
    project = bake(out, stateful_operator="custom_state", input_rows_per_second="10", max_cores="2")
    assert settings_of(project)["state_store"]["provider"] == "rocksdb"
    assert "rocksdb although the sizing says hdfs: Spark runs transformWithState only on RocksDB." in (
        capfd.readouterr().out
    )


def test_join_bake_has_a_second_input_of_the_chosen_source(out):
    project = bake(out, stateful_operator="stream_stream_join", source="files", join_input_rows_per_second="250")
    settings = settings_of(project)
    assert settings["join_source"]["type"] == "files"
    assert settings["join_source"]["files"]["path"] == "landing/stream_job_join"
    assert settings["capacity"]["join_input_rows_per_second"] == 250
    assert settings["query"]["join"] == {"type": "inner", "range": "15 minutes"}
    result = run_command(project, "estimate", "--json")
    # left 10,000 x (600 + 900 + 2 batches of 10 s) + right 250 x (600 + 20) = 15,355,000 rows.
    assert json.loads(result.stdout)["rows"] == 15_355_000


# What `python -m <package> packages` must print for each answer: the JVM connectors spark-submit needs.
SPARK_VERSION = __import__("pyspark").__version__
EXPECTED_PACKAGES = {
    "kafka": f"org.apache.spark:spark-sql-kafka-0-10_2.13:{'.'.join(SPARK_VERSION.split('.')[:2])}.0",
    "delta": f"io.delta:delta-spark_{'.'.join(SPARK_VERSION.split('.')[:2])}_2.13:4.4.0",
}


def dry_run_make(project: Path, *arguments: str) -> subprocess.CompletedProcess[str]:
    """`make -n` in the bake, as a top-level make (CI runs these tests under `make test`)."""
    env = {name: value for name, value in os.environ.items() if name not in ("MAKEFLAGS", "MAKELEVEL", "MFLAGS")}
    command = ["make", "--no-print-directory", "-n", *arguments]
    return subprocess.run(command, cwd=project, capture_output=True, text=True, env=env)


def settings_of(project: Path) -> dict:
    return yaml.safe_load((project / "settings.yaml").read_text(encoding="utf-8"))


@pytest.mark.parametrize("operator", ["deduplication", "windowed_aggregation"])
def test_a_real_time_bake_is_set_up_for_sparks_real_time_mode(out, capfd, operator):
    project = bake(out, stateful_operator=operator, source="kafka", sink="kafka", real_time=True)
    settings = settings_of(project)
    assert settings["query"]["trigger"] == "real_time"
    assert settings["sink"]["output_mode"] == "update"
    store = settings["state_store"]
    assert (store["provider"], store["changelog_checkpointing"], store["integrity"]["checkpoint_format_version"]) == (
        "rocksdb",
        True,
        2,
    )
    # A core for the one-partition topic's task and one for each shuffle partition's.
    assert settings["spark"]["master"] == f"local[{settings['spark']['shuffle_partitions'] + 1}]"
    assert "pyspark>=4.3,<4.4" in tomllib.loads((project / "pyproject.toml").read_text())["project"]["dependencies"]
    query = (project / "stream_job" / "query.py").read_text()
    if operator == "deduplication":  # real-time mode runs dropDuplicates, not dropDuplicatesWithinWatermark
        assert 'OPERATOR = "drop_duplicates"' in query and 'dropDuplicates(["event_id", "event_time"])' in query
        assert ".dropDuplicatesWithinWatermark(" not in query
    assert "real-time mode runs all its tasks at once, each holding a task slot" in capfd.readouterr().out


def test_the_real_time_deduplication_says_it_keys_on_the_id_and_the_event_time_where_the_user_reads(out):
    """The real-time starter (dropDuplicates by event_id and event_time) lets a retry with a new event time
    through: the prompts, the README, the query and docs/settings.md say so, and what keys on the id alone."""
    prompts = json.loads((TEMPLATE / "cookiecutter.json").read_text())["__prompts__"]
    assert "(with real_time: same event_id and event_time)" in prompts["stateful_operator"]["deduplication"]
    assert "deduplication by event_id and event_time: a retry with a new event time passes" in prompts["real_time"]
    project = bake(out, stateful_operator="deduplication", source="kafka", sink="kafka", real_time=True)
    readme = " ".join((project / "README.md").read_text().split())
    assert "drops repeated events (the same `event_id` and `event_time`: in Spark's real-time mode a retry" in readme
    query = " ".join((project / "stream_job" / "query.py").read_text().split())
    assert "A retry that carries a new event time is a new event here." in query
    assert 'By the id alone: dropDuplicates(["event_id"]) keeps every id for ever' in query
    docs = " ".join((project / "docs" / "settings.md").read_text().split())
    assert "a retry that carries a new event time passes as a new event. By the id alone," in docs
    assert '`dropDuplicatesWithinWatermark(["event_id"])`, which forgets an id once the watermark passes,' in docs
    micro_batch = " ".join((bake(out / "micro", stateful_operator="deduplication") / "README.md").read_text().split())
    assert "drops repeated events (the same `event_id`) within a watermark" in micro_batch


@pytest.mark.parametrize("answers", COMBINATIONS)
def test_combination_bakes_clean(out, answers):
    project = bake(out, **answers)
    files = [path for path in project.rglob("*") if path.is_file()]
    texts = {path: path.read_text(encoding="utf-8") for path in files}
    leftovers = [
        str(path.relative_to(project)) for path, text in texts.items() if "{{ cookiecutter." in text or "{%" in text
    ]
    assert leftovers == []
    assert not [p for p in project.rglob("*") if "{{" in p.name]
    settings = settings_of(project)
    # The default answers' state needs more heap than one executor should give it: rocksdb.
    expected_provider = "rocksdb" if answers["state_store_provider"] == "auto" else answers["state_store_provider"]
    assert settings["state_store"]["provider"] == expected_provider
    assert settings["state_store"]["changelog_checkpointing"] is (expected_provider == "rocksdb")
    assert settings["sink"]["type"] == answers["sink"]
    assert settings["source"]["type"] == answers["source"]
    pyproject = tomllib.loads((project / "pyproject.toml").read_text())
    needs_deltalake = any(dep.startswith("deltalake") for dep in pyproject["project"]["dependencies"])
    assert needs_deltalake is (answers["sink"] == "delta")
    # Spark 4.3 passed the suite (README); the delta-spark writer has no Delta build for it yet.
    pin = "pyspark>=4.2.1,<4.3" if answers["sink"] == "delta" else "pyspark>=4.2.1,<4.4"
    assert pin in pyproject["project"]["dependencies"]
    makefile = (project / "Makefile").read_text()
    # make package works whatever the demo's shape (its variables once sat in a branch of one).
    package = dry_run_make(project, "package")
    assert package.returncode == 0 and package.stdout.rstrip().endswith("--deploy-mode client"), package.stderr
    assert "--master" not in package.stdout
    cluster = dry_run_make(project, "package", "MASTER=yarn", "DEPLOY_MODE=cluster")
    assert cluster.stdout.rstrip().endswith("--master yarn --deploy-mode cluster")
    assert ("sample-input" in makefile.split("\ndemo:")[1]) is (answers["source"] == "files")
    assert ("STREAM_JOB_SOURCE__TYPE=rate" in makefile) is (answers["source"] == "rate")
    # A kafka project's demo feeds a local broker of its own, and has the targets to run one.
    assert ("kafka feed" in makefile.split("\ndemo:")[1]) is (answers["source"] == "kafka")
    assert ("\nkafka-up:" in makefile) is (answers["source"] == "kafka")
    assert ("STREAM_JOB_SINK__DELTA__WRITER=deltalake" in makefile) is (answers["sink"] == "delta")
    assert settings["spark"]["platform"] == answers["platform"]
    recorded = recorded_answers(project)
    assert recorded["state_store_provider"] == answers["state_store_provider"]
    # The generated settings load in the generated package, and its estimate agrees with the bake.
    result = run_command(project, "estimate", "--json")
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["recommended_provider"] == "rocksdb"
    packages = run_command(project, "packages")
    expected = dict.fromkeys(
        EXPECTED_PACKAGES[answer] for answer in (answers["source"], answers["sink"]) if answer in EXPECTED_PACKAGES
    )
    assert (packages.returncode, packages.stdout) == (0, ",".join(expected) + "\n")


def test_a_zero_watermark_bakes(out):
    """Spark takes a zero watermark delay, and so do the settings: the answer was refused ("must be longer
    than zero")."""
    assert settings_of(bake(out, watermark="0 seconds"))["query"]["watermark"] == "0 seconds"


def machinery_files(package: Path) -> dict[str, bytes]:
    folder = package / "machinery"
    return {
        str(path.relative_to(folder)): path.read_bytes()
        for path in sorted(folder.rglob("*"))
        if path.is_file() and "__pycache__" not in path.parts
    }


def test_the_machinery_is_the_same_in_every_bake_and_free_of_template_syntax(out):
    """No answer reaches the machinery except through settings.yaml and the query module: it is the
    template's folder byte for byte, so that `cruft update` replaces it without a conflict."""
    template = machinery_files(TEMPLATE / "{{cookiecutter.project_slug}}" / "{{cookiecutter.package_name}}")
    assert len(template) > 30
    assert not [name for name, text in template.items() if re.search(rb"{{|{%|cookiecutter\.", text)]
    default = bake(out / "default")
    other = bake(
        out / "other",
        project_name="Orders",
        package_name="orders",
        stateful_operator="custom_state",
        source="files",
        sink="delta",
        platform="databricks",
    )
    assert machinery_files(default / "stream_job") == template
    assert machinery_files(other / "orders") == template
    # The user's side differs with the answers; that is what they own.
    assert (default / "stream_job" / "query.py").read_bytes() != (other / "orders" / "query.py").read_bytes()


def test_the_bench_example_stays_in_the_template(out):
    project = bake(out)
    assert not (project / "docs" / "bench-example").exists()
    example = TEMPLATE / "docs" / "bench-example"
    results = json.loads((example / "results.json").read_text())
    table = [line for line in (example / "summary.md").read_text().splitlines() if line.startswith("| ")]
    assert len(table) == 2 + len(results["results"]) == 11  # 3 configurations x 3 sizes
    assert {r["configuration"] for r in results["results"]} == {"hdfs", "rocksdb", "rocksdb+changelog"}
    assert (example / "chart.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_default_bake_prints_the_worked_example(out, capfd):
    project = bake(out)
    printed = capfd.readouterr().out
    # The headline (seed rule), then the windowed aggregation's own count: window ends every minute
    # over the 600 s watermark + a 10 s batch + the 60 s window, 11.17 open windows on average, x
    # 600,000 possible keys each (key cardinality unknown).
    assert "headline       = watermark 10 minutes (600 s) x 10,000 rows/s = 6,000,000 rows" in printed
    assert "= 6,700,000 rows" in printed
    # The payload, 64 B a row, and the HDFS heap it would take: + 322 B of measured overhead per row and
    # 470 B per store instance (machinery/core/sizing/store_costs.py): 6,700,000 x 386 B + 4 x 470 B.
    assert "payload        = 6,700,000 rows x 64 B = 428,800,000 B" in printed
    assert "hdfs heap      = 6,700,000 x 386 B + 4 x 470 B = 2,586,201,880 B (2.4 GiB)" in printed
    # Each partition is below 1 GiB, but a local run's driver holds all four: 2.4 GiB of state needs
    # 300 MiB + 2.4 GiB / 40% of heap, above the 4 GiB ceiling: rocksdb, and the heap at Spark's default.
    assert "per executor   = 4 partitions (a local run's driver holds every partition) x 616.6 MiB = 2.4 GiB" in printed
    assert (
        "recommendation = rocksdb: each partition is below 1 GiB, but one executor holds 4 of them: 6.3 GiB" in printed
    )
    assert "chosen         = rocksdb, changelog checkpointing on" in printed
    assert "heap           = 1g per executor (spark.driver_memory for local runs): Spark's default" in printed
    # The bytes per row are the answer, and the report says so, with the way to measure them.
    assert "bytes per row  = 64 B: state_bytes_per_row as given (the key and value columns), an assumption" in printed
    text = (project / "settings.yaml").read_text()
    assert "#   headline rows = 10 minutes x 10000 rows/s = 6,000,000" in text
    assert "#   per partition = 2,586,201,880 B / 4 = 646,550,470 B" in text
    assert "#     heap it needs there = 300 MiB + that / 40% (beside Spark's own memory) = 6,780,077,500 B" in text
    assert '  driver_memory: "1g"' in text
    # The cores beside the memory: in the settings' comment and the README's sizing table. RocksDB holds
    # fewer rows per core: the rate needs 2 cores, 4 partitions.
    assert "# Cores from the rate:\n  #   windowed_aggregation on rocksdb: 10,000 rows/s / " in text
    readme = (project / "README.md").read_text()
    assert "| at 10,000 rows/s | memory | cores |\n| --- | --- | --- |\n" in readme
    assert (
        "| comes to | 2,023 MiB of native memory and 96 MiB of local disk on rocksdb | 2 cores needed (70% load) |"
        in readme
    )
    assert "| pinned | provider rocksdb | 4 shuffle partitions |" in readme
    assert "#   payload = 6,700,000 x 64 B = 428,800,000 B; 64 B per row" in text
    assert "#     (key + value columns) is your answer, not a measurement:" in text
    assert "#     `python -m stream_job estimate --calibrate` measures the footprint per row" in text
    assert "#   recommended: rocksdb; requested: auto; written: rocksdb, spark.driver_memory 1g" in text
    assert (
        "# checkpoint can be moved later with the job stopped (python -m stream_job repartition, Spark 4.2+);" in text
    )


def test_large_state_gets_rocksdb_with_changelog(out, capfd):
    project = bake(out, **LARGE_STATE)
    printed = capfd.readouterr().out
    assert "recommendation = rocksdb" in printed
    assert "The partitions of a rocksdb checkpoint can be changed later with the job stopped" in printed
    assert "keeps that way open" not in printed
    store = settings_of(project)["state_store"]
    assert (store["provider"], store["changelog_checkpointing"]) == ("rocksdb", True)
    result = run_command(project, "estimate", "--json")
    sizing = json.loads(result.stdout)
    # 61.17 open windows x 60,000,000 keys; x (100 + 322) B of heap + 470 B per partition, / the partitions,
    # 2 per core the rate needs (max_cores not known).
    partitions = settings_of(project)["spark"]["shuffle_partitions"]
    assert partitions == 2 * sizing["cores_needed"] == sizing["partitions"]["recommended"]
    assert sizing["rows"] == 3_670_000_000
    assert sizing["bytes_per_partition"] == (3_670_000_000 * 422 + partitions * 470) // partitions


def test_changelog_can_be_turned_off(out):
    project = bake(out, **LARGE_STATE, changelog_checkpointing=False)
    assert settings_of(project)["state_store"]["changelog_checkpointing"] is False


def test_choice_against_the_sizing_is_kept_with_a_loud_warning(out, capfd):
    project = bake(out, **LARGE_STATE, state_store_provider="hdfs")
    printed = capfd.readouterr()
    assert "WARNING: you chose hdfs but the sizing recommends rocksdb" in printed.err
    assert "!" * 78 in printed.err
    assert settings_of(project)["state_store"]["provider"] == "hdfs"
    assert "# WARNING: you chose hdfs" in (project / "settings.yaml").read_text()


def test_partitions_are_advised_from_the_cores_with_the_reasoning(out, capfd):
    project = bake(out, max_cores="3")
    printed = capfd.readouterr()
    # 2 tasks per core x 3 cores; the default state, 6,700,000 rows x 386 B of heap + 6 x 470 B, at 6 partitions.
    settings = settings_of(project)
    assert (settings["spark"]["shuffle_partitions"], settings["capacity"]["max_cores"]) == (6, 3)
    assert "shuffle partitions = 6, advised 6:" in printed.out
    assert "!" * 78 not in printed.out + printed.err
    text = (project / "settings.yaml").read_text()
    assert "  # shuffle_partitions requested: auto; max_cores: 3\n  # shuffle partitions = 6, advised 6:" in text
    assert "  #   2 tasks per core x 3 cores = 6\n" in text
    assert "per partition = 2,586,202,820 B / 6 = 431,033,803 B" in text
    # The job's own estimate gives the same advice from settings.yaml.
    report = run_command(project, "estimate").stdout
    assert "  shuffle partitions = 6, advised 6:\n    2 tasks per core x 3 cores = 6\n" in report


def test_a_rate_that_needs_more_cores_than_max_cores_is_baked_with_a_loud_warning(out, capfd):
    project = bake(out, input_rows_per_second="1000000", watermark="1 minute", max_cores="2")
    printed = capfd.readouterr()
    sizing = json.loads(run_command(project, "estimate", "--json").stdout)
    needed = sizing["cores_needed"]
    assert needed > 2
    assert "!" * 78 in printed.err
    assert f"WARNING: the answered rate needs {needed} cores (" in printed.err
    assert "more than max_cores 2: batches would outlast the trigger" in printed.err
    # max_cores is known: the partitions follow it, and the settings keep the reasoning.
    assert settings_of(project)["spark"]["shuffle_partitions"] == 4
    assert (
        f"cores needed = {sizing['cores']['busy_cores']:.2f} / 70% load = {needed}"
        in (project / "settings.yaml").read_text()
    )
    # The project's own check says it too, and still passes: the rate is an answer, not a fault.
    check = run_command(project, "estimate", "--check")
    assert check.returncode == 0
    assert f"sizing check WARNING: the answered rate needs {needed} cores" in check.stderr


def test_partitions_are_raised_for_a_large_state(out):
    # RocksDB's disk with growth: 3,670,000,000 rows x 100 B x 0.22, and 1.5 flushes of a 10 s batch's
    # 20,000,000 changed rows x 100 B x 0.35 (+ instances), is 76 GiB, x 2 growth = 152 GiB; within
    # 8 GiB per partition that is 20 partitions, a multiple of 4 cores.
    project = bake(out, **LARGE_STATE, max_cores="4", state_growth_factor="2")
    settings = settings_of(project)
    assert (settings["spark"]["shuffle_partitions"], settings["state_store"]["provider"]) == (20, "rocksdb")
    assert (
        "raised to 20: 152.3 GiB of local disk with growth needs 20 partitions"
        in (project / "settings.yaml").read_text()
    )


@pytest.mark.parametrize(
    ("answers", "warning"),
    [
        ({"max_cores": "8", "shuffle_partitions": "200"}, "every batch runs 25 waves of state-store tasks"),
        ({"max_cores": "8", "shuffle_partitions": "4"}, "the stateful stage can never use more than 4 of them"),
        ({**LARGE_STATE, "shuffle_partitions": "2"}, "holds 38.1 GiB of local disk with growth, beyond 8.0 GiB"),
    ],
    ids=["too-many", "too-few", "too-large"],
)
def test_partitions_against_the_advice_are_kept_with_a_loud_warning(out, capfd, answers, warning):
    project = bake(out, **answers)
    printed = capfd.readouterr()
    assert "!" * 78 in printed.err
    assert warning in printed.err
    assert "Kept as chosen; check it before the first run, because the checkpoint pins it." in printed.err
    assert settings_of(project)["spark"]["shuffle_partitions"] == int(answers["shuffle_partitions"])
    assert warning in (project / "settings.yaml").read_text()


def test_growth_factor_moves_the_decision(out):
    # 12,738,470 B of heap per partition x 600 = 7,643,082,000 B: over 1 GiB.
    project = bake(out, state_growth_factor="600")
    assert settings_of(project)["state_store"]["provider"] == "rocksdb"


def test_names_are_derived_and_overridable(out):
    project = bake(out, project_name="Clicks Per User")
    assert project.name == "clicks-per-user"
    assert (project / "clicks_per_user" / "machinery" / "core" / "sizing" / "capacity.py").is_file()
    project = bake(out, project_name="Orders", project_slug="orders-job", package_name="orders")
    assert project.name == "orders-job"
    assert (project / "orders" / "query.py").is_file()


AWKWARD = [
    "Quote \"double\" and 'single'",
    "Back\\slash \\n not a newline",
    "Ünïcødé — ñame ✓",
    "Colon: value # not a comment",
    "{not jinja} [yaml] & <html>",
]


@pytest.mark.parametrize("text", AWKWARD)
def test_awkward_text_answers_stay_inert_and_parseable(out, text):
    project = bake(out, project_name="Awkward", description=text, author=text)
    pyproject = tomllib.loads((project / "pyproject.toml").read_text(encoding="utf-8"))
    assert pyproject["project"]["description"] == text
    assert pyproject["project"]["authors"] == [{"name": text}]
    assert settings_of(project)["spark"]["app_name"] == "awkward"
    assert recorded_answers(project)["description"] == text


def test_unicode_project_name_gets_an_ascii_slug(out):
    project = bake(out, project_name="Zähler für Sitzungen")
    assert project.name == "zahler-fur-sitzungen"
    assert (project / "zahler_fur_sitzungen").is_dir()


def test_cli_bake_from_a_relative_template_path(out):
    """`cookiecutter .` from the template folder: hooks must not depend on the path as typed."""
    cli = Path(sys.executable).parent / "cookiecutter"
    result = subprocess.run([str(cli), "--no-input", "-o", str(out), "."], cwd=TEMPLATE, capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    assert "recommendation = rocksdb" in result.stdout
    assert (out / "stream-job" / "settings.yaml").is_file()
    bad = subprocess.run(
        [str(cli), "--no-input", "-o", str(out / "bad"), ".", "watermark=soon"],
        cwd=TEMPLATE,
        capture_output=True,
        text=True,
    )
    assert bad.returncode != 0
    assert "ERROR: watermark 'soon' is not an interval Spark can parse" in bad.stderr
    assert not (out / "bad" / "stream-job").exists()


@pytest.mark.parametrize("answers", [{}, {"stateful_operator": "stream_stream_join", "source": "files"}])
def test_the_generated_ci_workflow_runs_the_projects_own_gates(out, answers):
    project = bake(out, **answers)
    workflow = yaml.safe_load((project / ".github" / "workflows" / "ci.yml").read_text())
    steps = workflow["jobs"]["test"]["steps"]
    uses = {step["uses"].split("@")[0]: step.get("with", {}) for step in steps if "uses" in step}
    assert uses["actions/setup-java"]["java-version"] == "17"
    assert uses["actions/setup-python"]["python-version"] == "3.11"
    assert "actions/checkout" in uses
    runs = [step["run"] for step in steps if "run" in step]
    assert runs[0] == "make install" and "make lint" in runs and runs[-1] == "make test"
    makefile = (project / "Makefile").read_text()
    for run in runs:
        if run.startswith("make "):
            assert f"\n{run.split()[1]}:" in makefile, run
    # The sizing check is a real command of the project: it passes as baked, and fails (exit 2)
    # once the capacity figures outgrow an HDFS-backed store.
    sizing = next(run for run in runs if "estimate --check" in run)
    package = recorded_answers(project)["package_name"]
    arguments = sizing.split("python ", 1)[1].split()
    assert arguments[:2] == ["-m", package]
    passed = run_in(project, *arguments)
    assert passed.returncode == 0, passed.stderr
    assert passed.stdout.startswith("sizing check: state_store.provider ")
    if recorded_answers(project)["stateful_operator"] == "windowed_aggregation":
        env_name = f"{package.upper()}_CAPACITY__INPUT_ROWS_PER_SECOND"
        outgrown = subprocess.run(
            [sys.executable, *arguments],
            cwd=project,
            capture_output=True,
            text=True,
            env={
                **os.environ,
                env_name: "1e7",
                f"{package.upper()}_STATE_STORE__PROVIDER": "hdfs",
                f"{package.upper()}_STATE_STORE__CHANGELOG_CHECKPOINTING": "false",
            },
        )
        assert outgrown.returncode == 2
        assert "sizing check failed: state_store.provider is hdfs but the sizing of settings.yaml needs rocksdb" in (
            outgrown.stderr
        )


# Top-level mappings of databricks.yml as the Asset Bundle configuration reference documents them.
BUNDLE_TOP_LEVEL = {
    "bundle", "include", "variables", "workspace", "artifacts", "resources", "targets", "sync", "permissions",
    "run_as", "presets", "experimental", "scripts", "python",
}  # fmt: skip
TASK_TYPES = {"spark_python_task", "python_wheel_task", "notebook_task", "spark_jar_task", "spark_submit_task"}


def effective_settings(project: Path, package: str, env: dict[str, str]) -> dict:
    """The settings the generated job would run with (`config`), under these environment overrides."""
    result = subprocess.run(
        [sys.executable, "-m", package, "config"],
        cwd=project,
        capture_output=True,
        text=True,
        env={**os.environ, **env},
    )
    assert result.returncode == 0, result.stderr
    return yaml.safe_load(result.stdout)["settings"]


def leaves(tree: dict, prefix: tuple[str, ...] = ()) -> list[tuple[tuple[str, ...], object]]:
    found = []
    for key, value in tree.items():
        found += leaves(value, (*prefix, key)) if isinstance(value, dict) and value else [((*prefix, key), value)]
    return found


def test_databricks_projects_get_an_asset_bundle_that_runs_the_entry_point(out):
    oss = bake(out / "oss")
    assert not (oss / "databricks.yml").exists() and not (oss / "serverless_main.py").exists()
    project = bake(out / "databricks", platform="databricks", stateful_operator="stream_stream_join")
    text = (project / "databricks.yml").read_text()
    bundle = yaml.safe_load(text)
    assert set(bundle) <= BUNDLE_TOP_LEVEL and bundle["bundle"]["name"] == project.name
    assert {name: target.get("mode") for name, target in bundle["targets"].items()} == {
        "dev": "development",
        "prod": "production",
    }
    assert [name for name, target in bundle["targets"].items() if target.get("default")] == ["dev"]
    package = recorded_answers(project)["package_name"]
    jobs = bundle["resources"]["jobs"]
    assert set(jobs) == {package, f"{package}_serverless"}
    tasks = {}
    for name, each in jobs.items():
        assert each["max_concurrent_runs"] == 1
        (tasks[name],) = each["tasks"]
        assert len(TASK_TYPES & set(tasks[name])) == 1
        assert (project / tasks[name]["spark_python_task"]["python_file"]).is_file()
    job, task = jobs[package], tasks[package]
    python_task = task["spark_python_task"]
    assert python_task["parameters"] == ["--settings", "${var.settings_file}"]
    # Every ${var.X} is a declared variable, and the environment the task names exists.
    used = set(re.findall(r"\$\{var\.([a-z_]+)\}", text))
    assert used and used <= set(bundle["variables"])
    # Classic job compute (serverless runs streams available-now only): the task's cluster is defined,
    # and the project's wheel is installed on it.
    assert task["job_cluster_key"] in {cluster["job_cluster_key"] for cluster in job["job_clusters"]}
    (cluster,) = job["job_clusters"]
    assert {"spark_version", "node_type_id", "num_workers"} <= set(cluster["new_cluster"])
    assert task["libraries"] == [{"whl": "./dist/*.whl"}]
    assert "environments" not in job
    # settings.yaml's local folders move to the volume through the job's environment overrides: each
    # is a real settings field, and no other local folder is left.
    volume = bundle["variables"]["volume"]["default"]
    assert volume == f"/Volumes/main/default/{package}"
    env = {
        name: value.replace("${var.volume}", volume) for name, value in cluster["new_cluster"]["spark_env_vars"].items()
    }
    local = effective_settings(project, package, {})
    on_databricks = effective_settings(project, package, env)
    moved = {path: value for path, value in leaves(on_databricks) if value != dict(leaves(local))[path]}
    folders = {
        ("query", "checkpoint_location"): f"{volume}/checkpoints",
        ("sink", "path"): f"{volume}/output",
        ("source", "files", "path"): f"{volume}/landing",
        ("join_source", "files", "path"): f"{volume}/landing_join",
    }
    assert moved == folders
    assert [path for path, value in leaves(on_databricks) if str(value).startswith(str(project))] == []
    assert settings_of(project)["spark"]["platform"] == "databricks"

    # The serverless job: no cluster, the wheel from its environment, and the cluster's overrides as
    # arguments that serverless_main.py sets before the command, plus the available-now trigger and the
    # store serverless runs (its state store confs cannot be set there); validated as the cluster's are.
    serverless, task = jobs[f"{package}_serverless"], tasks[f"{package}_serverless"]
    assert "job_clusters" not in serverless and "job_cluster_key" not in task and "libraries" not in task
    (environment,) = serverless["environments"]
    assert environment["environment_key"] == task["environment_key"]
    assert environment["spec"]["dependencies"] == ["./dist/*.whl"]
    assert serverless["trigger"]["periodic"] and serverless["trigger"]["pause_status"] == "PAUSED"
    parameters = [value.replace("${var.volume}", volume) for value in task["spark_python_task"]["parameters"]]
    separator = parameters.index("--")
    assert parameters[separator + 1 :] == ["run", "--settings", "${var.settings_file}"]
    assignments = dict(parameter.split("=", 1) for parameter in parameters[:separator])
    assert {name: assignments.get(name) for name in env} == env
    on_serverless = effective_settings(project, package, assignments)
    serverless_store = {
        ("query", "trigger"): "available_now",
        ("state_store", "provider"): "rocksdb",
        ("state_store", "changelog_checkpointing"): True,
        # The bake's rate source, as the rate-micro-batch source an available-now run needs: a second's rows.
        ("source", "rate", "rows_per_batch"): 10000,
        ("join_source", "rate", "rows_per_batch"): 10000,
    }
    moved = {path: value for path, value in leaves(on_serverless) if value != dict(leaves(local))[path]}
    assert moved == folders | {
        path: value for path, value in serverless_store.items() if dict(leaves(local))[path] != value
    }
    # serverless_main.py sets them: the command after `--` reads the same settings.
    through_main = subprocess.run(
        [sys.executable, "serverless_main.py", *parameters[:separator], "--", "config"],
        cwd=project,
        capture_output=True,
        text=True,
        env={**os.environ},
    )
    assert through_main.returncode == 0, through_main.stderr
    assert yaml.safe_load(through_main.stdout)["settings"] == on_serverless
