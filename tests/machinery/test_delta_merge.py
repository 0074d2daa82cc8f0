"""Update mode into Delta: each batch MERGEd into the table by the result's key, exactly once across SIGKILLs.

The kill comes at the moment exactly-once rests on: the table holds batch N, Spark has not committed it (the
job is frozen with SIGSTOP as soon as the table's log shows the batch, the checkpoint's commits checked, then
SIGKILLed). The restart runs batch N again, and the table must not count it twice. Then every version of the
table, each one batch's commit, is held against the same query run as a batch job on the input of the
batches up to it: at every batch boundary the table holds every key's current result, open windows too.
Three queries on both writers: the starter's windowed count, a count per key without a window, and a sliding
window's count (Spark runs session windows in append mode only: a sliding window is the time window nearest
to them it runs in update mode).
"""

from __future__ import annotations

import json
import os
import signal
import time
from datetime import timedelta
from pathlib import Path

import pyarrow as pa
import pytest
from deltalake import DeltaTable
from pyspark.testing import assertDataFrameEqual
from stream_job.machinery.core.delta_merge import TARGET_FILE_BYTES, DeltaSinkRefused, MergeKey
from stream_job.machinery.core.settings import SettingsError, load_settings
from stream_job.machinery.job.endpoints import sinks
from stream_job.machinery.job.endpoints.delta import TXN_APP_ID, DeltaLakeBatchWriter
from stream_job.machinery.job.endpoints.sample_input import write_sample_files
from stream_job.machinery.job.guard.state_fit import KeyRecord
from stream_job.machinery.job.plan.merge_key import FROM_PLAN, FROM_SETTINGS, merge_key
from stream_job.machinery.testing import run_batch

from .conftest import (
    BAKED_OPERATOR,
    DEFAULT_OPERATOR,
    batch_expectation,
    clean_env,
    committed_batches,
    deep_merge,
    digest,
    edited_query,
    files_job,
    project_copy,
    read_events_batch,
    run_cli,
    run_main,
    run_python,
    start_job,
)

pytestmark = [
    pytest.mark.streaming,
    pytest.mark.delta_merge,
    pytest.mark.skipif(BAKED_OPERATOR != DEFAULT_OPERATOR, reason="its query"),
]

FILES = 3
STARTER_WINDOW = 'F.window("event_time", query.window).alias("window"), "key")'
STARTER_SELECT = """        .select(
            F.col("window.start").alias("window_start"),
            F.col("window.end").alias("window_end"),
            "key",
            "events",
        )"""
QUERIES = {
    "windowed": {},
    "per-key": {STARTER_WINDOW: '"key")', STARTER_SELECT: '        .select("key", "events")'},
    # Windows of 2 minutes every minute: each event counted in two windows.
    "sliding": {STARTER_WINDOW: 'F.window("event_time", "2 minutes", query.window).alias("window"), "key")'},
}
KEYS = {
    "windowed": ("window_start", "window_end", "key"),
    "per-key": ("key",),
    "sliding": ("window_start", "window_end", "key"),
}
WRITERS = ["deltalake", "delta-spark"]


def update_job(tmp_path: Path, writer: str, files: int = FILES, **delta) -> dict:
    """files_job's input and settings, in update mode into a Delta table by `writer`."""
    changes = files_job(tmp_path, "delta-spark" if writer == "delta-spark" else "delta", "rocksdb", True, files)
    changes["sink"]["output_mode"] = "update"
    changes["sink"]["delta"].update(delta)
    return changes


def table_log(table: Path) -> dict[int, int]:
    """Each commit of the table's log that records a batch: Delta version -> batch id (its txn version)."""
    found = {}
    log = table / "_delta_log"
    for commit in sorted(log.glob("[0-9]*.json")) if log.is_dir() else []:
        for line in commit.read_text().splitlines():
            txn = json.loads(line).get("txn")
            if txn:
                found[int(commit.name.split(".")[0])] = txn["version"]
    return found


def freeze_between_commits(process, table: Path, checkpoint: Path, deadline: float = 240) -> int:
    """SIGKILL the job once the table holds a batch that Spark has not committed: the job is frozen (SIGSTOP)
    the moment the table's log shows a new batch, the checkpoint's commits read, and it is killed when that
    batch is not among them (else it goes on, to the next). Returns the batch."""
    until, seen = time.monotonic() + deadline, -1
    while time.monotonic() < until:
        if process.poll() is not None:
            pytest.fail(f"the job ended (exit {process.returncode}) before it could be killed between commits")
        batches = table_log(table).values()
        newest = max(batches, default=-1)
        if newest > seen and newest >= 1:
            os.killpg(process.pid, signal.SIGSTOP)
            if newest not in committed_batches(checkpoint):
                os.killpg(process.pid, signal.SIGKILL)
                process.wait(timeout=60)
                return newest
            os.killpg(process.pid, signal.SIGCONT)
            seen = newest
        time.sleep(0.002)
    process.kill()
    pytest.fail("the job never stood between the table's commit and Spark's")


def new_checkpoint_is_refused(write_settings, changes: dict, table: Path, checkpoint: Path, fresh: Path) -> None:
    """A new checkpoint against the table: refused, nothing written, as in append mode."""
    kept = digest(table)
    query = json.loads((checkpoint / "metadata").read_text())["id"]
    elsewhere = write_settings(
        {**changes, "query": {**changes["query"], "checkpoint_location": str(fresh)}}, "new.yaml"
    )
    result = run_main("--settings", str(elsewhere))
    assert result.returncode == 4, result.stderr[-3000:]
    assert result.stderr.strip().startswith(f"checkpoint error: sink.path {table} holds the output of query {query}")
    assert result.stderr.strip().endswith(
        f"and the checkpoint {fresh} has logged no batch yet: its query would MERGE its results over those rows, each"
        " key's result replaced by one counted from the input this checkpoint reads alone. Nothing was started; set"
        " sink.path to an empty directory too, or set query.checkpoint_location back to the checkpoint that wrote"
        " that output"
    )
    assert not fresh.exists() and digest(table) == kept


def run_to_end(writer: str, settings_path: Path, cwd: Path, edits: dict):
    if writer == "delta-spark":  # its session extensions cannot join the shared session: a process
        return run_python("main.py", "--settings", str(settings_path), env=clean_env(), cwd=cwd)
    with edited_query(edits):
        return run_main("--settings", str(settings_path))


def expected_after(spark, landing: Path, batch: int, query_settings):
    """The query as a batch job on the files the batches up to `batch` read (one a batch)."""
    files = sorted(str(path) for path in landing.iterdir())[: batch + 1]
    return run_batch(spark, read_events_batch(spark, files), None, query=query_settings)


# delta-spark runs the windowed count in CI, its other queries are secondary (make test-all): the MERGE, its
# transaction and its skip do not depend on the query, and deltalake runs all three (the key and the oracle).
KILLED = [
    pytest.param(
        query,
        writer,
        marks=[pytest.mark.delta_spark] * (writer == "delta-spark")
        + [pytest.mark.secondary] * (writer == "delta-spark" and query != "windowed"),
        id=f"{query}-{writer}",
    )
    for query in QUERIES
    for writer in WRITERS
]


@pytest.mark.faults
@pytest.mark.parametrize(("query", "writer"), KILLED)
def test_killed_between_the_tables_commit_and_sparks_the_table_holds_each_keys_result_once(
    spark, write_settings, tmp_path, writer, query
):
    edits = QUERIES[query]
    changes = update_job(tmp_path, writer)
    path = write_settings(changes)
    settings = load_settings(path)
    table, checkpoint = Path(settings.sink.path), Path(settings.query.checkpoint_location)
    project = project_copy(tmp_path, edits)
    with open(tmp_path / "first-run.log", "w") as log:
        killed = freeze_between_commits(start_job(path, log, cwd=project), table, checkpoint)

    if query == "windowed" and writer == "deltalake":
        new_checkpoint_is_refused(write_settings, changes, table, checkpoint, tmp_path / "checkpoint-new")
    restart = run_to_end(writer, path, project, edits)  # the way out: the checkpoint that wrote the table
    assert restart.returncode == 0, restart.stderr[-3000:]
    assert committed_batches(checkpoint) == list(range(FILES + 1))  # the files, then the closing batch
    if writer == "deltalake":  # the rewrite's file size capped (core/delta_merge.py says why)
        assert DeltaTable(str(table)).metadata().configuration == {"delta.targetFileSize": str(TARGET_FILE_BYTES)}
    versions = table_log(table)
    assert sorted(versions.values()) == sorted(set(versions.values())), versions  # no batch recorded twice
    assert killed in versions.values()
    with edited_query(edits):
        assert merge_key_of(spark, settings).columns == KEYS[query]
        for version, batch in sorted(versions.items()):
            held = spark.createDataFrame(DeltaTable(str(table), version=version).to_pyarrow_table())
            expected = expected_after(spark, Path(settings.source.files.path), min(batch, FILES - 1), settings.query)
            assertDataFrameEqual(held, expected.select(*held.columns))


def merge_key_of(spark, settings) -> MergeKey:
    from stream_job.machinery.job.run.runner import build_result

    return merge_key(build_result(spark, settings), settings.sink)


@pytest.mark.parametrize("query", list(QUERIES))
def test_the_key_is_the_aggregations_grouping_as_the_output_carries_it(spark, make_settings, tmp_path, query):
    with edited_query(QUERIES[query]):
        key = merge_key_of(spark, make_settings(update_job(tmp_path, "deltalake")))
    assert key == MergeKey(KEYS[query], FROM_PLAN, None if query == "per-key" else "window_start")


DEDUPLICATION = {
    """        .groupBy(F.window("event_time", query.window).alias("window"), "key")
        .agg(F.count(F.lit(1)).alias("events"))
"""
    + STARTER_SELECT: '        .dropDuplicates(["event_id", "event_time"])'
}
NO_KEY_COLUMN = {STARTER_SELECT: '        .select(F.col("window.start").alias("window_start"), "events")'}


def test_where_the_plan_gives_no_key_the_settings_name_it_checked_against_the_output(spark, make_settings, tmp_path):
    settings = make_settings(update_job(tmp_path, "deltalake"))
    named = make_settings(update_job(tmp_path, "deltalake", key_columns=["event_id"]))
    with edited_query(DEDUPLICATION):
        with pytest.raises(SettingsError) as refused:
            merge_key_of(spark, settings)
        assert merge_key_of(spark, named) == MergeKey(("event_id",), FROM_SETTINGS, None)
    assert refused.value.lines == [
        "sink.output_mode is update into a Delta table, which MERGEs each batch by the result's key, but the query's"
        " output comes from a Deduplicate, not straight from an aggregation, so its plan gives no key; set"
        " sink.delta.key_columns to the output columns that identify a result row (of event_id, key, event_time)"
    ]
    with edited_query(NO_KEY_COLUMN), pytest.raises(SettingsError) as refused:
        merge_key_of(spark, settings)
    assert "but the output leaves out the aggregation's grouping column key; set sink.delta" in refused.value.lines[0]


def test_key_columns_not_in_the_output_are_one_line_and_start_nothing(write_settings, tmp_path):
    path = write_settings(update_job(tmp_path, "deltalake", key_columns=["window_start", "nope"]))
    line = (
        "settings error: sink.delta.key_columns ['window_start', 'nope']: nope not among the query's output columns"
        " (window_start, window_end, key, events); name the columns that identify a result row"
    )
    for command in ("run", "check"):  # check refuses what a start would
        result = run_cli(command, "--settings", str(path))
        assert (result.returncode, result.stderr.splitlines()) == (2, [line])
    assert not (tmp_path / "checkpoint").exists() and not (tmp_path / "output").exists()


def test_a_table_of_other_columns_is_one_line_and_left_as_it_was(write_settings, tmp_path):
    from deltalake import write_deltalake

    table = tmp_path / "output"
    write_deltalake(str(table), pa.table({"key": ["a"], "n": pa.array([1], pa.int64())}))
    before = digest(table)
    result = run_main("--settings", str(write_settings(update_job(tmp_path, "deltalake"))))
    assert result.returncode == 2
    assert result.stderr.splitlines() == [
        f"settings error: sink.path {table} is a Delta table of columns (key string, n bigint) but the query's"
        " output is (window_start timestamp, window_end timestamp, key string, events bigint): a MERGE writes each"
        " row whole, by name; set sink.path to a new directory, or change the table to the output's columns (ALTER"
        " TABLE) or the query to the table's. Nothing was started"
    ]
    assert digest(table) == before and not (tmp_path / "checkpoint").exists()


def test_a_batch_holding_a_key_twice_is_refused_unwritten_and_the_next_start_is_exact(spark, write_settings, tmp_path):
    changes = update_job(tmp_path, "deltalake", files=2, key_columns=["key"])  # each key in several windows
    path = write_settings(changes)
    result = run_main("--settings", str(path))
    assert result.returncode == 1
    assert result.stderr.splitlines() == [
        f"delta sink: sink.path {tmp_path / 'output'}: batch 0 holds 2 rows of one key (key, sink.delta.key_columns),"
        " and a MERGE by key takes one row per key; nothing of the batch was written. Set sink.delta.key_columns to"
        " the output columns that identify a result row (or make the query emit one row per key), then start again:"
        " the batch runs again"
    ]
    assert committed_batches(tmp_path / "checkpoint") == [] and not (tmp_path / "output").exists()

    changes["sink"]["delta"]["key_columns"] = []  # the way on: the plan's key
    restart = run_main("--settings", str(write_settings(changes)))
    assert restart.returncode == 0, restart.stderr[-3000:]
    settings = load_settings(path)
    expected = expected_after(spark, Path(settings.source.files.path), 1, settings.query)
    assertDataFrameEqual(spark.createDataFrame(DeltaTable(str(tmp_path / "output")).to_pyarrow_table()), expected)


class CommittedMeanwhile(DeltaLakeBatchWriter):
    """The writer, with another writer's commit landing between its read of the table and its own commit."""

    def table(self):
        read = super().table()
        DeltaTable(self.path).update(updates={"events": "events + 100"}, predicate="key = 'key-0'")
        return read


def test_another_writers_commit_in_between_is_one_line_and_the_batch_unwritten(spark, tmp_path):
    from .test_delta_writer import rows, table_rows, writer_of

    table = str(tmp_path / "table")
    writer_of(tmp_path, table, "query-1")(rows(spark, (0, "key-0", 3), (0, "key-1", 1)), 0)
    conflicted = CommittedMeanwhile(
        table, str(tmp_path / "checkpoint-query-1"), MergeKey(("window_start", "key"), FROM_PLAN, "window_start")
    )
    with pytest.raises(DeltaSinkRefused) as refused:
        conflicted(rows(spark, (0, "key-0", 4)), 1)
    assert refused.value.line.startswith(
        f"sink.path {table}: another writer committed to the Delta table while batch 1 merged into it"
        " (CommitFailedError: Failed to commit transaction: Commit failed: a concurrent transactions added new data."
    )
    assert refused.value.line.endswith("then start again: the batch runs again")
    assert "\n" not in refused.value.line  # delta-rs's message runs on over a second line
    assert DeltaTable(table).transaction_version("query-1") == 0  # batch 1 not recorded: it runs again
    assertDataFrameEqual(table_rows(spark, table), rows(spark, (0, "key-0", 103), (0, "key-1", 1)))


class CompactedMeanwhile(DeltaLakeBatchWriter):
    """The writer, with a compaction (deltalake's optimize.compact) of the files it merges into landing between
    its first read of the table and its commit."""

    compactions = 0

    def table(self):
        read = super().table()
        if not self.compactions:
            self.compactions = DeltaTable(self.path).optimize.compact()["numFilesRemoved"]
        return read


def test_a_merge_that_loses_to_a_compaction_runs_again_on_the_compacted_table(spark, tmp_path):
    """OPTIMIZE beside a running job: a MERGE whose files a compaction rewrote between its read and its commit
    loses (delta-rs's CommitFailedError; delta-spark's ConcurrentAppendException, naming the OPTIMIZE, seen by
    hand), and the job stopped. A compaction changes no row: the batch now merges again, into the compacted
    table, which holds each key's result once. (Another writer's data still stops it: the test above.)"""
    from .test_delta_writer import rows, table_rows, writer_of

    table = str(tmp_path / "table")
    writer = writer_of(tmp_path, table, "query-1")
    for batch_id, key in enumerate(("key-0", "key-1", "key-2")):  # three files of window 0
        writer(rows(spark, (0, key, 1)), batch_id)
    compacted = CompactedMeanwhile(
        table, str(tmp_path / "checkpoint-query-1"), MergeKey(("window_start", "key"), FROM_PLAN, "window_start")
    )
    compacted(rows(spark, (0, "key-0", 4), (0, "key-2", 6), (0, "key-3", 1)), 3)
    assert compacted.compactions == 3
    assert [entry["operation"] for entry in DeltaTable(table).history()][:2] == ["MERGE", "OPTIMIZE"]
    assert DeltaTable(table).transaction_version("query-1") == 3
    assertDataFrameEqual(
        table_rows(spark, table), rows(spark, (0, "key-0", 4), (0, "key-1", 1), (0, "key-2", 6), (0, "key-3", 1))
    )


class VacuumedMeanwhile(DeltaLakeBatchWriter):
    """The writer, beside a VACUUM with a retention of 0 and its check off (every file its snapshot does not
    list, as deltalake's vacuum(full=True) and Spark's VACUUM delete) that read the table before the last
    batch's commit, and so deletes the files that commit wrote: the race of such a VACUUM with a running job."""

    def table(self):
        read = super().table()
        before = getattr(self, "before", None)
        if before is not None and read is not None and read.version() > before.version():
            before.vacuum(retention_hours=0, enforce_retention_duration=False, dry_run=False, full=True)
        # The table as a VACUUM starting now reads it (an object of its own: the MERGE moves the writer's on).
        self.before = None if read is None else DeltaTable(self.path, version=read.version())
        return read


def test_a_batchs_files_a_vacuum_deletes_before_its_commit_stop_the_next_batch_in_one_line(
    write_settings, tmp_path, monkeypatch
):
    """The table then lists files that are gone, and their rows are lost: the job went on, exit 0, and only a
    read of the table failed. Now the next batch refuses it before it writes, naming the files, and so does the
    next start (the lost-output check)."""
    path = write_settings(update_job(tmp_path, "deltalake", files=2))
    table = tmp_path / "output"
    with monkeypatch.context() as meanwhile:
        meanwhile.setattr(sinks, "DeltaLakeBatchWriter", VacuumedMeanwhile)
        result = run_main("--settings", str(path))
    assert result.returncode == 1, result.stdout[-2000:] + result.stderr[-3000:]
    gone = [uri for uri in DeltaTable(str(table)).file_uris() if not Path(uri).exists()]
    assert len(gone) == 1
    assert result.stderr.splitlines() == [
        f"delta sink: sink.path {table}: the Delta table lost data files while the job ran: 1 of the files its log"
        f" lists as committed are gone ({gone[0]}), and their rows with them (a VACUUM with its retention check off"
        " and a retention shorter than a batch deletes the files a batch wrote before it commits); nothing of batch"
        " 2 was written. Put the files back (a backup), or set query.checkpoint_location to a new directory and"
        " sink.path to an empty one, and reprocess the input from the start; while the job runs, VACUUM with"
        " Delta's retention check on"
    ]
    restart = run_main("--settings", str(path))
    assert (
        restart.returncode == 4 and f"1 of the files its log lists as committed are gone ({gone[0]})" in restart.stderr
    )


class ColumnAddedMeanwhile(DeltaLakeBatchWriter):
    """The writer, with another tool adding a column to the table once the job has written a batch to it."""

    def table(self):
        read = super().table()
        if read is not None and "note" not in read.schema().to_arrow().names:
            from deltalake import Field

            read.alter.add_columns([Field("note", "string", nullable=True)])
            return super().table()
        return read


def test_a_column_another_tool_adds_while_the_job_runs_stops_the_next_batch_unwritten_in_one_line(
    spark, write_settings, tmp_path, monkeypatch
):
    """The start refuses a table of other columns (above); one that gains a column while the job runs is refused
    by the next batch, before it writes anything (delta-rs's MERGE failed with a 40-line SchemaMismatchError).
    The way out the line gives, the table restored to its version before the change, ends with every key's
    result."""
    changes = update_job(tmp_path, "deltalake", files=2)
    path = write_settings(changes)
    table, checkpoint = tmp_path / "output", tmp_path / "checkpoint"
    with monkeypatch.context() as meanwhile:
        meanwhile.setattr(sinks, "DeltaLakeBatchWriter", ColumnAddedMeanwhile)
        result = run_main("--settings", str(path))
    assert result.returncode == 1, result.stderr[-3000:]
    assert result.stderr.splitlines() == [
        f"delta sink: sink.path {table}: the Delta table's columns changed while the job ran (another tool's ALTER"
        " TABLE or write): it holds note string, which the query's output lacks; a MERGE writes each row whole, by"
        " name, so nothing of batch 1 was written. Restore the table to its version before the change (RESTORE TABLE"
        " ... TO VERSION AS OF, deltalake's DeltaTable.restore) or change the query to the table's columns, then"
        " start again: the batch runs again; or set query.checkpoint_location to a new directory and sink.path to an"
        " empty one, and reprocess the input from the start"
    ]
    written = DeltaTable(str(table))
    assert committed_batches(checkpoint) == [0] and (written.version(), table_log(table)) == (1, {0: 0})

    written.restore(0)
    restart = run_main("--settings", str(path))
    assert restart.returncode == 0, restart.stderr[-3000:]
    settings = load_settings(path)
    expected = expected_after(spark, Path(settings.source.files.path), 1, settings.query)
    assertDataFrameEqual(spark.createDataFrame(DeltaTable(str(table)).to_pyarrow_table()), expected)


def test_the_txn_confs_set_on_a_batchs_session_stay_in_that_querys_session(spark, tmp_path):
    """delta-spark's MERGE takes its transaction from session confs: the batch's session is the query's own
    clone of the job's, so what one query sets is not seen by another query or by the job's session."""
    seen = []

    def batch_function(batch, batch_id):
        seen.append(batch.sparkSession.conf.get(TXN_APP_ID, None))
        batch.sparkSession.conf.set(TXN_APP_ID, f"query-{len(seen)}")

    stream = spark.readStream.format("rate-micro-batch").option("rowsPerBatch", 1).load()
    for name in ("first", "second"):
        writer = stream.writeStream.foreachBatch(batch_function).trigger(once=True)
        writer.option("checkpointLocation", str(tmp_path / name)).start().awaitTermination()
    assert seen == [None, None]
    assert spark.conf.get(TXN_APP_ID, None) is None


# Steps after the count that drop or change a row an earlier batch wrote (a HAVING is the same Filter).
AFTER_THE_COUNT = {
    "filter": (".where(F.col('events') < 40)", "Filter `(events < cast(40 as bigint))`"),
    "explode": (
        ".withColumn('copy', F.explode(F.array(F.lit(1), F.lit(2))))",
        "Generate `explode(array(1, 2)), false, [copy]`",
    ),
}


def after_the_count(step: str) -> dict[str, str]:
    return {STARTER_SELECT: f"{STARTER_SELECT}\n        {step}"}


@pytest.mark.parametrize("step", list(AFTER_THE_COUNT))
def test_a_step_after_the_count_that_drops_or_changes_rows_is_refused_in_update_mode(write_settings, tmp_path, step):
    """A window that passed the filter once and fails it later would keep its old row in the table for ever
    (update mode writes a result again only when it changes): refused before anything starts, into Delta (by
    the plan's key or by key_columns) and into Kafka; the starter's projection, and another one, pass."""
    code, shown = AFTER_THE_COUNT[step]
    refusal = (
        f"settings error: sink.output_mode is update, but the query passes the results of its last aggregation"
        f" through a {shown}: update mode writes a result again only when it changes, so one that passed once and is"
        " dropped or changed later keeps its earlier {kept} for ever. Filter where {read} is read, or before the"
        " aggregation, or set sink.output_mode to append"
    )
    into_delta = write_settings(update_job(tmp_path, "deltalake"))
    named_key = write_settings(update_job(tmp_path, "deltalake", key_columns=["window_start", "key"]), "named.yaml")
    into_kafka = write_settings(
        deep_merge(files_job(tmp_path, "kafka", "hdfs"), {"sink": {"output_mode": "update"}}), "k.yaml"
    )
    delta_line = refusal.format(kept="row in the Delta table", read="the table")
    with edited_query(after_the_count(code)):
        for command, path, line in [
            ("run", into_delta, delta_line),
            ("check", into_delta, delta_line),
            ("run", named_key, delta_line),
            ("check", into_kafka, refusal.format(kept="record in the topic", read="the topic")),
        ]:
            result = run_cli(command, "--settings", str(path))
            assert (result.returncode, result.stderr.splitlines()) == (2, [line]), result.stderr[-3000:]
    assert not (tmp_path / "checkpoint").exists() and not (tmp_path / "output").exists()
    with edited_query(after_the_count(".withColumn('twice', F.col('events') * 2)")):
        assert run_cli("check", "--settings", str(into_delta)).returncode == 0


# What a switch of sink.output_mode does to the windows a checkpoint holds open (job/guard/checkpoint.py's lines).
SWITCHED_TO = {
    "update": "its state holds results not written yet (windows still open), which append mode writes once final;"
    " update mode writes a result only in a batch that changes it, so those the watermark closes without a new"
    " event would never be written.",
    "append": "update mode has written the results still open in its state (a window's count so far); append mode"
    " would write each again once final, beside the first.",
}


def mode_switch_line(checkpoint: Path, written: str, switched: str, origin: str) -> str:
    return (
        f"checkpoint error: sink.output_mode is {switched} in settings, but the checkpoint {checkpoint} holds"
        f" {written}: the output mode its results were written in ({origin}); {SWITCHED_TO[switched]} Either set"
        f" sink.output_mode back to {written}, or set query.checkpoint_location to a new directory and sink.path to"
        " an empty one, and reprocess the input from the start (the existing state cannot be converted)."
    )


def without_recorded_mode(checkpoint: Path) -> None:
    """The state key record as a checkpoint of an earlier version holds it: no output mode."""
    for part in (checkpoint / "state_key").glob("part-*"):
        records = [json.loads(line) for line in part.read_text().splitlines()]
        part.write_text("".join(json.dumps({k: v for k, v in r.items() if k != "output_mode"}) + "\n" for r in records))


@pytest.mark.parametrize(("written", "switched"), [("append", "update"), ("update", "append")])
def test_an_output_mode_switch_on_open_windows_is_refused_and_set_back_nothing_is_lost_or_repeated(
    spark, write_settings, tmp_path, written, switched
):
    """Spark records no output mode. Append -> update on a checkpoint holding open windows: those the
    watermark then closed without a new event were never written; update -> append: a window MERGEd while
    open was appended again once closed. Both refused before anything starts, by the mode recorded in the
    checkpoint or, for a checkpoint of an earlier version, read from the table's log; the checkpoint and the
    table byte for byte as they were. Set back, the job goes on, and the table holds what the query run as a
    batch job on the input gives."""
    changes = update_job(tmp_path, "deltalake", files=2)
    changes["sink"]["output_mode"] = written
    first = run_main("--settings", str(write_settings(changes)))
    assert first.returncode == 0, first.stderr[-3000:]
    checkpoint, table = tmp_path / "checkpoint", tmp_path / "output"
    # Four minutes of events, 4 keys, the watermark a minute behind: two windows closed, two open; append mode
    # wrote the closed ones, update mode all four, the open ones as counted so far.
    assert DeltaTable(str(table)).to_pyarrow_table().num_rows == {"append": 8, "update": 16}[written]
    before = digest(checkpoint), digest(table)

    changes["sink"]["output_mode"] = switched
    path = write_settings(changes, "switched.yaml")
    recorded = mode_switch_line(checkpoint, written, switched, f"recorded in {checkpoint}/state_key")
    for command in ("run", "check"):
        result = run_cli(command, "--settings", str(path))
        assert (result.returncode, result.stderr.splitlines()) == (4, [recorded]), result.stderr[-3000:]
    assert (digest(checkpoint), digest(table)) == before
    without_recorded_mode(checkpoint)
    result = run_cli("check", "--settings", str(path))
    read = mode_switch_line(checkpoint, written, switched, f"read from the Delta log of {table}")
    assert (result.returncode, result.stderr.splitlines()) == (4, [read])
    console = write_settings(deep_merge(changes, {"sink": {"type": "console"}}), "console.yaml")  # cannot tell
    result = run_cli("check", "--settings", str(console))
    assert result.returncode == 0, result.stderr[-3000:]
    assert f"checkpoint: {checkpoint} holds no record of the output mode its results were written in" in result.stdout

    changes["sink"]["output_mode"] = written  # the way on: set back, one file more closes the open windows
    write_sample_files(tmp_path / "landing", 1, 40, 4, timedelta(minutes=2))
    again = run_main("--settings", str(write_settings(changes)))
    assert again.returncode == 0, again.stderr[-3000:]
    assert KeyRecord(spark, str(checkpoint)).output_mode() == written  # recorded again
    held = spark.createDataFrame(DeltaTable(str(table)).to_pyarrow_table())
    settings = load_settings(write_settings(changes))
    if written == "append":  # every window the watermark closed, once
        expected = batch_expectation(spark, settings)
    else:  # every window's current count, open ones too
        expected = expected_after(spark, Path(settings.source.files.path), 2, settings.query)
    assertDataFrameEqual(held, expected.select(*held.columns))
