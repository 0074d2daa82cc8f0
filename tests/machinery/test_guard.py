"""The checkpoint guard on real checkpoints: drift is refused before anything is touched."""

from __future__ import annotations

import sys
import time
from dataclasses import replace
from datetime import timedelta
from pathlib import Path

import pytest
from stream_job.machinery.core.checkpoint.files import LOCAL, watermark_stand
from stream_job.machinery.core.settings import load_settings
from stream_job.machinery.job.endpoints.sample_input import write_sample_files
from stream_job.machinery.job.guard.checkpoint import changelog_notes, check_checkpoint
from stream_job.machinery.job.run.runner import run_query
from stream_job.machinery.job.spark.session import apply_confs
from stream_job.machinery.job.spark.session_files import SessionFiles, checkpoint_files
from stream_job.machinery.operations.inspection import checkpoint_facts, inspect_checkpoint

from .conftest import (
    ANY_PROVIDER,
    BAKED_OPERATOR,
    PACKAGE_DIR,
    clean_env,
    committed_batches,
    deep_merge,
    digest,
    edited_query,
    files_job,
    jvm_free,
    project_copy,
    run_cli,
    run_main,
    run_python,
    write_settings_file,
)

pytestmark = pytest.mark.streaming


def run_checkpoint(spark, folder: Path, provider: str, operator: str = BAKED_OPERATOR) -> dict:
    """A real checkpoint: two landing files through the operator (2 partitions); returns its settings changes."""
    changes = files_job(folder, "parquet", provider, files=2, operator=operator)
    settings = load_settings(write_settings_file(folder / "settings.yaml", changes))
    apply_confs(spark, settings)
    assert run_query(spark, settings).exception() is None
    return changes


@pytest.fixture(scope="module")
def checkpoints(spark, tmp_path_factory) -> dict[str, tuple[Path, dict]]:
    """One checkpoint per provider, shared by the tests that only read it."""
    made = {}
    for provider in ("hdfs", "rocksdb"):
        folder = tmp_path_factory.mktemp(f"guard-{provider}")
        made[provider] = (folder, run_checkpoint(spark, folder, provider))
    return made


DRIFTS = {
    "hdfs-to-rocksdb": ("hdfs", {"state_store": {"provider": "rocksdb"}}, "state_store.provider is rocksdb", "hdfs"),
    "rocksdb-to-hdfs": (
        "rocksdb",
        {"state_store": {"provider": "hdfs", "changelog_checkpointing": False}},
        "state_store.provider is hdfs",
        "rocksdb",
    ),
    "more-partitions": ("hdfs", {"spark": {"shuffle_partitions": 4}}, "spark.shuffle_partitions is 4", "2"),
    "fewer-partitions": ("rocksdb", {"spark": {"shuffle_partitions": 1}}, "spark.shuffle_partitions is 1", "2"),
    "pinned-spark-conf": (
        "hdfs",
        {"spark": {"conf": {"spark.sql.streaming.stateStore.compression.codec": "zstd"}}},
        "spark.conf.spark.sql.streaming.stateStore.compression.codec is zstd",
        "lz4",
    ),
}


@pytest.mark.parametrize(("provider", "change", "setting", "held"), DRIFTS.values(), ids=DRIFTS.keys())
def test_drift_is_refused_and_the_checkpoint_untouched(checkpoints, provider, change, setting, held):
    folder, changes = checkpoints[provider]
    checkpoint, output = folder / "checkpoint", folder / "output"
    before = digest(checkpoint), digest(output)
    path = write_settings_file(folder / "drifted.yaml", deep_merge(changes, change))

    run = run_main("--settings", str(path))
    assert run.returncode == 4, run.stderr
    expected = f"checkpoint error: {setting} in settings, but the checkpoint {checkpoint} holds {held}: "
    (line,) = run.stderr.splitlines()
    assert line.startswith(expected), line
    way_on = {  # the partitions of RocksDB state can move; nothing else converts
        "spark.shuffle_partitions is 4": " (a checkpoint of the hdfs store cannot be repartitioned: Spark's"
        " repartitioning reads RocksDB state only).",
        "spark.shuffle_partitions is 1": "; or keep the state and move it into 1 partition with the job stopped:"
        " python -m stream_job repartition --partitions 1.",
    }.get(setting, " (the existing state cannot be converted).")
    assert line.endswith(
        f"Either set {setting.split(' is ')[0]} back to {held}, or set query.checkpoint_location to a new"
        f" directory and sink.path to an empty one, and reprocess the input from the start{way_on}"
    ), line
    assert "Spark" not in run.stdout  # refused before any session started
    if setting.startswith("state_store.provider"):
        assert "changelog" not in run.stdout  # no word on changelogs across providers
    assert (digest(checkpoint), digest(output)) == before

    check = run_cli("check", "--settings", str(path))
    assert (check.returncode, check.stderr) == (4, run.stderr)


def test_check_passes_on_a_consistent_checkpoint_and_without_one(checkpoints, tmp_path):
    folder, changes = checkpoints["hdfs"]
    check = run_cli("check", "--settings", str(write_settings_file(folder / "same.yaml", changes)))
    # The query's plan is read in a local session: the JVM's own start-up warning is its only word.
    assert (check.returncode, jvm_free(check.stderr)) == (0, "")
    assert check.stdout == (
        f"checkpoint {folder / 'checkpoint'}: consistent with the settings and the query's {BAKED_OPERATOR}"
        " (last batch 2)\n"
    )

    # A new checkpoint writes into a new output: against the old one, its batches would be skipped (refused).
    fresh = deep_merge(
        changes, {"query": {"checkpoint_location": str(tmp_path / "new")}, "sink": {"path": str(tmp_path / "new-out")}}
    )
    check = run_cli("check", "--settings", str(write_settings_file(tmp_path / "fresh.yaml", fresh)))
    assert (check.returncode, check.stderr) == (0, "")
    assert check.stdout == (
        f"checkpoint: no checkpoint yet at {tmp_path / 'new'}: this run starts one\n"
        f"query: {BAKED_OPERATOR}, fits the settings; nothing to compare with yet\n"
    )


def test_an_error_in_the_projects_own_code_is_one_line_naming_its_file_and_line(spark, tmp_path):
    """A typo in query.py: check said nothing without a checkpoint, and the start ended in a traceback.
    Both now name the file, the line and the error, exit 2, and nothing is started."""
    changes = files_job(tmp_path, "parquet", ANY_PROVIDER, files=1)
    path = write_settings_file(tmp_path / "settings.yaml", changes)
    source = (PACKAGE_DIR / "query.py").read_text()
    begins = source.index("def stateful_query(")
    signature = source[begins : source.index(":\n", begins) + 2]
    typo = {signature: signature + "    nope\n"}  # the first line of its body
    line = source[:begins].count("\n") + signature.count("\n") + 1
    for command in ("check", "run"):
        with edited_query(typo):
            result = run_cli(command, "--settings", str(path))
        assert result.returncode == 2, result.stderr[-3000:]
        assert result.stderr.strip().splitlines()[-1] == (
            f"query error: {PACKAGE_DIR.name}/query.py:{line}: NameError: name 'nope' is not defined; fix the code"
            " (nothing ran)"
        )
    assert not (tmp_path / "checkpoint").exists()


def test_changelog_checkpointing_may_be_toggled(spark, tmp_path):
    changes = run_checkpoint(spark, tmp_path, "rocksdb")
    toggled = deep_merge(changes, {"state_store": {"changelog_checkpointing": True}})
    path = write_settings_file(tmp_path / "toggled.yaml", toggled)
    check = run_cli("check", "--settings", str(path))
    assert check.returncode == 0, check.stderr
    assert (
        "checkpoint: changelog checkpointing is on; earlier runs wrote the state without changelog files."
        " It may be toggled between runs: RocksDB restores from snapshots and changelogs alike.\n"
    ) in check.stdout
    # And the run really goes on: a new file, read with changelog checkpointing on.
    settings = load_settings(path)
    write_sample_files(
        settings.source.files.path, files=1, events_per_file=40, keys=4, advance_per_file=timedelta(minutes=2)
    )
    apply_confs(spark, settings)
    query = run_query(spark, settings)
    assert query.exception() is None
    assert query.lastProgress["batchId"] >= 3
    assert any((tmp_path / "checkpoint" / "state").glob("*/*/*.changelog"))


# A user's edit that leaves the stateful operator out (a chain's removal is test_chains'): appended to query.py.
STATELESS = """


def stateful_query(events, query, join_events=None):  # type: ignore[no-redef]
    \"\"\"The events as they come: no state.\"\"\"
    return events.select(*EVENT_COLUMNS)
"""


@pytest.mark.operator
def test_an_operator_removed_in_the_code_is_refused_with_both_lists_and_nothing_is_touched(spark, tmp_path):
    # custom_state writes its operator metadata in the v2 layout (state/0/_metadata/v2/<n>), the
    # others in v1: each bake proves the check on its own operator's layout.
    changes = run_checkpoint(spark, tmp_path, ANY_PROVIDER)
    checkpoint = tmp_path / "checkpoint"
    if BAKED_OPERATOR == "custom_state":
        assert (checkpoint / "state" / "0" / "_metadata" / "v2").is_dir()
    before = digest(checkpoint), digest(tmp_path / "output")
    path = write_settings_file(tmp_path / "same.yaml", changes)

    for command in ("run", "check"):
        with edited_query({"def _iso(": STATELESS.lstrip("\n") + "\n\ndef _iso("}):
            run = run_cli(command, "--settings", str(path))
        assert run.returncode == 4, run.stderr
        # OPERATOR still names the starter's operator: the plan decides.
        assert run.stderr.splitlines()[-1] == (
            f"checkpoint error: the query's stateful operators changed: the checkpoint {checkpoint} holds the state"
            f" of {BAKED_OPERATOR}, and the query now runs no stateful operator ({BAKED_OPERATOR} removed)."
            " Spark keeps each operator's state by its place in the query, so the state cannot serve the new"
            f" query. Either change the query back to {BAKED_OPERATOR}, or set query.checkpoint_location to a new"
            " directory and sink.path to an empty one, and reprocess the input from the start."
        )
    assert (digest(checkpoint), digest(tmp_path / "output")) == before


def test_damaged_offsets_file_is_named(tmp_path):
    offsets = tmp_path / "checkpoint" / "offsets"
    offsets.mkdir(parents=True)
    (offsets / "0").write_text("v1\n")
    path = write_settings_file(
        tmp_path / "settings.yaml", {"query": {"checkpoint_location": str(tmp_path / "checkpoint")}}
    )
    check = run_cli("check", "--settings", str(path))
    assert check.returncode == 4
    assert check.stderr == (
        f"checkpoint error: {offsets / '0'}: not a Spark offsets file (no metadata line; half-written?); restore the"
        " checkpoint from a copy, or set query.checkpoint_location to a new directory and sink.path to an empty one,"
        " and reprocess the input from the start\n"
    )


@pytest.mark.skipif(BAKED_OPERATOR != "windowed_aggregation", reason="retypes the windowed count's event time")
def test_check_says_a_query_spark_refuses_in_the_one_line_the_start_gives(spark, tmp_path):
    """The event time retyped to a string under a checkpoint: `check` printed Spark's 39-line error
    where the start gives one line. Both now give the same line, exit 2, nothing touched."""
    changes = run_checkpoint(spark, tmp_path, ANY_PROVIDER)
    path = write_settings_file(tmp_path / "same.yaml", changes)
    before = digest(tmp_path / "checkpoint"), digest(tmp_path / "output")
    said = {}
    for command in ("check", "run"):
        with edited_query({'StructField("event_time", TimestampType())': 'StructField("event_time", StringType())'}):
            result = run_cli(command, "--settings", str(path))
        assert result.returncode == 2, result.stderr[-3000:]
        said[command] = result.stderr.strip().splitlines()[-1]
    assert said["check"] == said["run"], said
    assert said["check"].startswith("query error: Spark refuses the query of stream_job.query: ")
    assert said["check"].endswith("; change the query (no batch ran)")
    assert (digest(tmp_path / "checkpoint"), digest(tmp_path / "output")) == before


@pytest.mark.skipif(BAKED_OPERATOR != "windowed_aggregation", reason="moves the windowed count's watermark")
def test_check_refuses_the_output_mode_spark_refuses_at_the_start_in_the_same_line(tmp_path):
    """The watermark on a column derived from the event time, the window on the event time itself: Spark
    refuses the append mode at the start (an aggregation without a watermark), and `check` passed it
    (exit 0). Both now run Spark's own check first: the same line, exit 2, nothing written."""
    path = write_settings_file(tmp_path / "settings.yaml", files_job(tmp_path, "parquet", ANY_PROVIDER, files=1))
    derived = {
        '.withWatermark("event_time", query.watermark)': (
            '.withColumn("arrived", F.col("event_time")).withWatermark("arrived", query.watermark)'
        )
    }
    before = digest(tmp_path)
    said = {}
    for command in ("check", "run"):
        with edited_query(derived):
            result = run_cli(command, "--settings", str(path))
        assert result.returncode == 2, result.stderr[-3000:]
        said[command] = result.stderr.strip().splitlines()
    assert (
        said["check"]
        == said["run"]
        == [
            "query error: Spark refuses the query of stream_job.query: [STREAMING_OUTPUT_MODE.UNSUPPORTED_OPERATION]"
            " Invalid streaming output mode: append. This output mode is not supported for streaming aggregations"
            " without watermark on streaming DataFrames/DataSets. SQLSTATE: 42KDE; change the query (no batch ran)"
        ]
    )
    assert digest(tmp_path) == before


def test_a_stateful_query_on_a_stateless_checkpoint_is_refused_and_its_store_is_no_matter(spark, tmp_path):
    """A checkpoint whose query kept no state: its pinned store and partitions pin nothing, so other ones
    are no drift (check said to set them back, then called it consistent); a stateful query on it is
    refused before a batch (the start wrote its state key record, then Spark failed)."""
    changes = files_job(tmp_path, "parquet", "hdfs", files=2)
    path = write_settings_file(tmp_path / "settings.yaml", changes)
    with edited_query({"def _iso(": STATELESS.lstrip("\n") + "\n\ndef _iso("}):
        ran = run_cli("run", "--settings", str(path))
    assert ran.returncode == 0, ran.stderr[-3000:]
    checkpoint = tmp_path / "checkpoint"
    assert not (checkpoint / "state").exists()
    moved_on = deep_merge(changes, {"state_store": {"provider": "rocksdb"}, "spark": {"shuffle_partitions": 3}})
    other = write_settings_file(tmp_path / "other.yaml", moved_on)
    before = digest(checkpoint), digest(tmp_path / "output")
    for command in ("check", "run"):
        result = run_cli(command, "--settings", str(other))
        assert result.returncode == 4, result.stderr[-3000:]
        assert result.stderr.strip().splitlines()[-1] == (
            f"checkpoint error: the checkpoint {checkpoint} holds no state: its query ran no stateful operator, and"
            f" the query now runs {BAKED_OPERATOR}. Spark would find no state for them and fail at the first batch."
            " Either change the query back, or set query.checkpoint_location to a new directory and sink.path to an"
            " empty one, and reprocess the input from the start."
        )
        assert "provider" not in result.stderr and "shuffle_partitions" not in result.stderr
    assert (digest(checkpoint), digest(tmp_path / "output")) == before


@pytest.mark.skipif(BAKED_OPERATOR != "windowed_aggregation", reason="renames the windowed count's column")
def test_an_output_column_renamed_under_a_parquet_output_is_refused(spark, tmp_path):
    """A renamed output column passed without a word, and show-output then read NULL for it in every
    earlier row; a column's type changed leaves files no reader reads together. Refused by the start
    and by check, nothing touched; the way out runs."""
    changes = run_checkpoint(spark, tmp_path, ANY_PROVIDER)
    path = write_settings_file(tmp_path / "same.yaml", changes)
    output = tmp_path / "output"
    before = digest(tmp_path / "checkpoint"), digest(output)
    held = "window_start timestamp, window_end timestamp, key string, events bigint"
    renamed = {'"events",\n        )': 'F.col("events").alias("count"),\n        )'}
    retyped = {'"events",\n        )': 'F.col("events").cast("int").alias("events"),\n        )'}
    for command in ("check", "run"):
        with edited_query(renamed):
            result = run_cli(command, "--settings", str(path))
        assert result.returncode == 4, result.stderr[-3000:]
        assert result.stderr.strip().splitlines()[-1] == (
            f"output error: the query's output columns changed: sink.path {output} holds rows of {held}, and the"
            " query now writes window_start timestamp, window_end timestamp, key string, count bigint. Spark's"
            " parquet sink would write on, and a reader of the output would take one file's columns for all: the"
            " earlier rows would read NULL for the new columns, and the old ones would be gone. Either change the"
            " query back, or set query.checkpoint_location to a new directory and sink.path to an empty one, and"
            " reprocess the input from the start."
        )
    with edited_query(retyped):
        result = run_cli("run", "--settings", str(path))
    assert result.returncode == 4, result.stderr[-3000:]
    assert (
        result.stderr.strip()
        .splitlines()[-1]
        .startswith(
            f"output error: the query's output columns changed: sink.path {output} holds rows of {held}, and the query"
            " now writes window_start timestamp, window_end timestamp, key string, events int. Spark's parquet sink"
            " would write on, and a reader of the output would take one file's types for all and fail reading the"
            " files written with the others. Either change the query back, or set"
        )
    ), result.stderr[-3000:]
    assert (digest(tmp_path / "checkpoint"), digest(output)) == before
    # The way out: a new checkpoint and an empty sink.path.
    anew = {"query": {"checkpoint_location": str(tmp_path / "cp-2")}, "sink": {"path": str(tmp_path / "out-2")}}
    with edited_query(renamed):
        again = run_cli(
            "run", "--settings", str(write_settings_file(tmp_path / "anew.yaml", deep_merge(changes, anew)))
        )
    assert again.returncode == 0, again.stderr[-3000:]


PROCESSOR_IMPORT = "from pyspark.sql.streaming import StatefulProcessor"
PROCESSOR_QUERY = """


class _Counts(StatefulProcessor):
    def init(self, handle):
        self.count = handle.getValueState("count", "count long")

    def handleInputRows(self, key, rows, timerValues):
        yield from ()


def stateful_query(events, query, join_events=None):  # type: ignore[no-redef]
    \"\"\"A transformWithStateInPandas processor written into a bake of another operator.\"\"\"
    return events.groupBy("key").transformWithStateInPandas(_Counts(), "key string, count long", "Update", "None")
"""


def test_a_restart_after_a_first_batch_that_broke_runs_and_is_not_called_stateless(spark, tmp_path):
    """A processor whose init fails (a user's bug; in the report, its worker could not import protobuf)
    fails the first batch while Spark plans it: nothing committed, no state folder. The restart with the
    query fixed was refused as "holds no state: its query ran no stateful operator". It now runs."""
    path = write_settings_file(tmp_path / "settings.yaml", files_job(tmp_path, "console", "rocksdb", files=1))
    broken = PROCESSOR_QUERY.replace("    def init(self, handle):\n", "    def init(self, handle):\n        1 / 0\n")
    project = project_copy(tmp_path, {"def _iso(": PROCESSOR_IMPORT + broken + "\n\ndef _iso("})
    failed = run_python("main.py", "--settings", str(path), cwd=project, env=clean_env())
    assert failed.returncode == 1, failed.stderr[-3000:]
    checkpoint = tmp_path / "checkpoint"
    assert committed_batches(checkpoint) == [] and not (checkpoint / "state").exists()
    fixed = run_main("--settings", str(path))
    assert fixed.returncode == 0, fixed.stderr[-3000:]
    assert "holds no state" not in fixed.stderr
    assert committed_batches(checkpoint)


def test_a_processor_whose_worker_modules_are_missing_is_named_before_the_start(spark, tmp_path, monkeypatch):
    """transformWithStateInPandas needs pandas, pyarrow and protobuf in the Python workers; without one,
    the first batch died as "driver worker exited unexpectedly (crashed)", the ImportError only in
    logs/spark.log. The job names the module before the start (exit 3). The workers run this interpreter:
    protobuf is made unimportable in it the way Python's import system offers (None in sys.modules)."""
    path = write_settings_file(tmp_path / "settings.yaml", files_job(tmp_path, "console", "rocksdb", files=1))
    monkeypatch.setitem(sys.modules, "google.protobuf", None)
    edit = {"def _iso(": PROCESSOR_IMPORT + PROCESSOR_QUERY + "\n\ndef _iso("}
    with edited_query(edit):
        result = run_main("--settings", str(path))
    assert result.returncode == 3, result.stderr[-3000:]
    assert result.stderr.strip().splitlines()[-1] == (
        "package error: the query's custom_state (Spark's transformWithStateInPandasExec) runs Python that imports"
        f" google.protobuf, which {sys.executable} cannot import (import of google.protobuf halted; None in"
        " sys.modules); pip install protobuf there (and list it in pyproject.toml's dependencies); nothing was started"
    )
    assert not (tmp_path / "checkpoint").exists()


def test_the_guard_and_inspect_read_a_checkpoint_through_the_session_as_from_the_disk(spark, checkpoints):
    """What a checkpoint on a Spark Connect server's disk is read by: Spark's binaryFile reads and listings,
    here under a name with nothing on this machine's disk, so that every read goes through the session. The
    same reads, the same drift refused, the same inspection as this machine's files give; nothing changed."""
    folder, changes = checkpoints["rocksdb"]
    checkpoint = folder / "checkpoint"
    on_server = Path("/spark-connect-server")  # the folders' names for the guard: nothing there on this machine
    through_session = SessionFiles(spark, on_server / "checkpoint", f"file:{checkpoint}")
    before = digest(checkpoint)
    assert checkpoint_files(spark, str(checkpoint)) is LOCAL  # Spark Classic: a local path is this machine's

    started = time.perf_counter()
    on_disk = check_checkpoint(load_settings(write_settings_file(folder / "same.yaml", changes)))
    local_seconds = time.perf_counter() - started
    drifted = deep_merge(
        changes,
        {
            "spark": {"shuffle_partitions": 1},
            "query": {"checkpoint_location": str(on_server / "checkpoint")},
            "sink": {"path": str(on_server / "output")},
        },
    )
    started = time.perf_counter()
    server_settings = load_settings(write_settings_file(folder / "server.yaml", drifted))
    read = check_checkpoint(server_settings, through_session, output_seen=False)
    session_seconds = time.perf_counter() - started
    print(f"guard: {local_seconds:.2f} s from the disk, {session_seconds:.2f} s through the session")

    assert read.held is not None and on_disk.held is not None
    # The same checkpoint read; the output (its log beside it) from this machine's disk only.
    unnamed = {"sink_log": None, "output_columns": None}
    assert replace(read.held, checkpoint=checkpoint) == replace(on_disk.held, **unnamed)
    (drift,) = read.drifts
    assert drift.message(str(on_server / "checkpoint")).startswith(
        f"spark.shuffle_partitions is 1 in settings, but the checkpoint {on_server / 'checkpoint'} holds 2: "
    )
    assert read.refusals == on_disk.refusals == []
    assert read.notes == [
        f"sink.path {on_server / 'output'} is not compared with the checkpoint before the start: it is on the Spark"
        " Connect server's file system, and Spark reads no file of an output's log through a session",
        *changelog_notes(load_settings(folder / "same.yaml"), checkpoint),
        f"the RocksDB snapshots of {on_server / 'checkpoint'} are not checked before the start: they are on the Spark Connect"
        " server's file system, and each would be copied here whole; Spark checks each as it loads it",
    ]

    facts = checkpoint_facts(str(checkpoint))
    assert checkpoint_facts(str(on_server / "checkpoint"), files=through_session) == facts
    inspected = inspect_checkpoint(spark, str(checkpoint), facts, files=through_session).to_dict()
    for operator in inspected["operators"]:  # counted where the files are this machine's only
        assert operator.pop("disk_bytes") is operator.pop("disk_bytes_per_partition") is None
    local = inspect_checkpoint(spark, str(checkpoint), facts).to_dict()
    for operator in local["operators"]:
        del operator["disk_bytes"], operator["disk_bytes_per_partition"]
    # Where the watermark stands, read through the session as from the disk. (Spark reads the checkpoint here
    # by its path on this disk, which the session's reader does not name: inspect's own read of it is left out.)
    assert watermark_stand(on_server / "checkpoint", through_session) == watermark_stand(checkpoint) is not None
    del inspected["watermark"], local["watermark"]
    assert inspected == local
    assert digest(checkpoint) == before
