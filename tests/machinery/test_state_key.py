"""The state key check: a restart whose query keys its state by other columns is refused."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from stream_job.machinery.core.checkpoint.files import CheckpointUnreadable
from stream_job.machinery.core.settings import load_settings
from stream_job.machinery.job.guard.state_fit import KeyRecord, StateKeyChanged, check_state_key, state_keys
from stream_job.machinery.job.run.runner import build_result, run_query
from stream_job.machinery.job.spark.session import apply_confs
from stream_job.machinery.job.spark.session_files import SessionFiles

from .conftest import (
    BAKED_OPERATOR,
    committed_batches,
    digest,
    edited_query,
    files_job,
    run_main,
    write_settings_file,
)
from .conftest import (
    state_key_records as records,
)

pytestmark = pytest.mark.streaming

# Each operator's key columns by name, as the printed plan has them (Spark checks their types).
STATE_KEYS = {
    "windowed_aggregation": "aggregation by window, key",
    "deduplication": "deduplication by event_id",
    "stream_stream_join": "join on key = join_key",
    "custom_state": "TransformWithStateInPySpark by key",
}
# The windowed count's key as records written before the names alone held it: with the columns' types.
TYPED_KEY = "aggregation by window struct<start:timestamp,end:timestamp>, key string"
# The window each operator's state holds, recorded beside its key (files_job's window is 1 minute).
STATE_WINDOWS = {"windowed_aggregation": "1 minute"}


@pytest.mark.operator
@pytest.mark.parametrize("operator", [BAKED_OPERATOR])
def test_the_state_key_of_each_operator_is_read_from_the_plan(spark, tmp_path, operator):
    settings = load_settings(
        write_settings_file(tmp_path / "settings.yaml", files_job(tmp_path, "parquet", "rocksdb", operator=operator))
    )
    assert state_keys(build_result(spark, settings)) == [STATE_KEYS[operator]]


def finished_checkpoint(spark, folder: Path, operator: str) -> Path:
    """Settings of a real run of `operator` over two landing files, which recorded its state key."""
    path = write_settings_file(
        folder / "settings.yaml", files_job(folder, "parquet", "hdfs", files=2, operator=operator)
    )
    settings = load_settings(path)
    apply_confs(spark, settings)
    assert run_query(spark, settings).exception() is None
    record = {
        "version": 1,
        "state_keys": [STATE_KEYS[operator]],
        "windows": [STATE_WINDOWS.get(operator)],
        "key_form": "names",
        "output_mode": "append",
        "spark_version": spark.version,  # the Spark of the start that wrote it, and its first batch
        "from_batch": 0,
    }
    assert records(folder / "checkpoint") == [record]
    return path


@pytest.mark.skipif(BAKED_OPERATOR != "windowed_aggregation", reason="edits the aggregation's groupBy")
def test_a_grouping_key_changed_in_the_code_is_refused_and_nothing_is_touched(spark, tmp_path):
    settings_path = finished_checkpoint(spark, tmp_path, "windowed_aggregation")
    # The project, copied, with the aggregation grouped by event_id named key. Both are strings, so
    # Spark's own schema check lets this through and reads the old counts under the new key.
    original = '.groupBy(F.window("event_time", query.window).alias("window"), "key")'
    before = digest(tmp_path / "checkpoint"), digest(tmp_path / "output")

    with edited_query({original: original.replace('"key")', 'F.col("event_id").alias("key"))')}):
        run = run_main("--settings", str(settings_path))
    assert run.returncode == 4, run.stderr
    assert run.stderr.splitlines()[-1] == (
        "checkpoint error: the state key changed: the state in this checkpoint was written keyed by aggregation by"
        " window, key, and this query keys it by aggregation by window, event_id (recorded in"
        f" {tmp_path / 'checkpoint' / 'state_key'}). Spark would read the old state under the new key without"
        " an error and give wrong results. Either change the query back, or set query.checkpoint_location to a new"
        " directory and sink.path to an empty one, and reprocess the input from the start."
    )
    assert "query stream_job started" not in run.stdout
    assert (digest(tmp_path / "checkpoint"), digest(tmp_path / "output")) == before


@pytest.mark.operator
@pytest.mark.skipif(BAKED_OPERATOR != "deduplication", reason="a deduplication bake's own key")
def test_a_changed_deduplication_key_is_refused(spark, tmp_path):
    settings = load_settings(finished_checkpoint(spark, tmp_path, "deduplication"))
    events = spark.readStream.schema("event_id string, key string, event_time timestamp").json(str(tmp_path))
    by_id_and_key = events.withWatermark("event_time", "1 minute").dropDuplicatesWithinWatermark(["event_id", "key"])
    with pytest.raises(StateKeyChanged, match="this query keys it by deduplication by event_id, key "):
        check_state_key(spark, by_id_and_key, settings.query.checkpoint_location, "append")
    # The query as it was passes, and leaves the record as it was.
    before = digest(tmp_path / "checkpoint")
    assert check_state_key(spark, build_result(spark, settings), settings.query.checkpoint_location, "append") is None
    assert digest(tmp_path / "checkpoint") == before


def test_a_missing_record_is_made_again_and_said_and_a_damaged_one_is_named(spark, tmp_path):
    settings = load_settings(finished_checkpoint(spark, tmp_path, BAKED_OPERATOR))
    checkpoint, location = tmp_path / "checkpoint", settings.query.checkpoint_location
    folder = checkpoint / "state_key"
    shutil.rmtree(folder)
    result = build_result(spark, settings)
    note = check_state_key(spark, result, location, "append")
    assert note == f"{folder} was missing (a checkpoint older than this check): recorded {STATE_KEYS[BAKED_OPERATOR]}"
    assert records(checkpoint) == [
        {
            "version": 1,
            "state_keys": [STATE_KEYS[BAKED_OPERATOR]],
            "windows": [STATE_WINDOWS.get(BAKED_OPERATOR)],
            "key_form": "names",
            "output_mode": "append",
            "spark_version": spark.version,
            "from_batch": committed_batches(checkpoint)[-1] + 1,
        }
    ]

    (part,) = folder.glob("part-*")
    part.write_text('{"state_keys": "half')
    with pytest.raises(CheckpointUnreadable, match=f"^{part}: not a state key record \\(damaged\\?\\); remove it"):
        check_state_key(spark, result, location, "append")
    part.unlink()  # as the line says (its checksum file left where it is): recorded again
    assert check_state_key(spark, result, location, "append").startswith(f"{folder} was missing")
    assert records(checkpoint)[-1]["state_keys"] == [STATE_KEYS[BAKED_OPERATOR]]


def test_the_record_reads_and_writes_through_the_session_and_an_older_templates_file_is_read(spark, tmp_path):
    """The record through the session's files (what a Spark Connect server's checkpoint is read by); the
    state_key.json of an older template still read."""
    checkpoint = tmp_path / "checkpoint"
    (checkpoint / "commits").mkdir(parents=True)
    (checkpoint / "commits" / "0").write_text("v1\n{}\n")
    through_session = SessionFiles(spark, checkpoint, str(checkpoint))
    older = {"state_keys": ["aggregation by key string"], "windows": ["1 minute"]}
    (checkpoint / "state_key.json").write_text(json.dumps(older))
    record = KeyRecord(spark, str(checkpoint), through_session)
    assert (record.read(), record.location, record.has_commits()) == (
        (["aggregation by key"], older["windows"]),  # its key by names, as the plan's are read
        f"{checkpoint}/state_key.json",
        True,
    )
    record.write(["deduplication by event_id"], [None], "update", "4.2.1")
    again = KeyRecord(spark, str(checkpoint), SessionFiles(spark, checkpoint, str(checkpoint)))
    assert (again.read(), again.location) == ((["deduplication by event_id"], [None]), f"{checkpoint}/state_key")
    assert again.output_mode() == "update" and record.output_mode() is None  # an older template's: none
    assert records(checkpoint) == [
        {
            "version": 1,
            "state_keys": ["deduplication by event_id"],
            "windows": [None],
            "key_form": "names",
            "output_mode": "update",
            "spark_version": "4.2.1",
            "from_batch": 1,  # after the one commit
        }
    ]


def test_a_query_without_commits_records_its_own_key(spark, tmp_path):
    """A first run that committed nothing kept no state, so the next start may key it otherwise."""
    checkpoint = tmp_path / "checkpoint"
    checkpoint.mkdir()
    (checkpoint / "state_key.json").write_text(json.dumps({"state_keys": ["aggregation by old string"]}))
    events = spark.readStream.schema("event_id string, key string, event_time timestamp").json(str(tmp_path))
    deduplicated = events.withWatermark("event_time", "1 minute").dropDuplicatesWithinWatermark(["event_id"])
    assert check_state_key(spark, deduplicated, str(checkpoint), "append") is None
    assert records(checkpoint) == [
        {
            "version": 1,
            "state_keys": [STATE_KEYS["deduplication"]],
            "windows": [None],
            "key_form": "names",
            "output_mode": "append",
            "spark_version": spark.version,
            "from_batch": 0,
        }
    ]


def test_a_key_of_more_columns_than_spark_prints_is_read_whole(spark, tmp_path):
    """Spark shortens a printed list past spark.sql.debug.maxToStringFields (25 columns): the plan is
    printed with it raised, and the session's value put back."""
    names = [f"c{number}" for number in range(30)]
    schema = ", ".join(f"{name} string" for name in names) + ", event_time timestamp"
    events = spark.readStream.schema(schema).json(str(tmp_path))
    deduplicated = events.withWatermark("event_time", "1 minute").dropDuplicates(names)
    before = spark.conf.get("spark.sql.debug.maxToStringFields")
    (line,) = state_keys(deduplicated)
    lead, _, keys = line.partition(" by ")
    assert (lead, sorted(keys.split(", "))) == ("deduplication", sorted(names))  # in Spark's order: a set's
    assert spark.conf.get("spark.sql.debug.maxToStringFields") == before


@pytest.mark.skipif(BAKED_OPERATOR != "windowed_aggregation", reason="the windowed count's query.window")
def test_a_changed_window_is_refused_and_setting_it_back_loses_nothing(spark, tmp_path):
    """query.window from 1 to 2 minutes on a running count: Spark accepts the state (the same key
    columns) and writes overlapping windows, one key's events split between them. Refused before a
    batch runs, the checkpoint and output unchanged; an older record without windows gets them."""
    settings_path = finished_checkpoint(spark, tmp_path, "windowed_aggregation")
    record = tmp_path / "checkpoint" / "state_key"
    before = digest(tmp_path / "checkpoint"), digest(tmp_path / "output")
    wider = tmp_path / "wider.yaml"
    wider.write_text(settings_path.read_text().replace("window: 1 minute", "window: 2 minutes"))
    assert "window: 2 minutes" in wider.read_text()

    run = run_main("--settings", str(wider))
    assert run.returncode == 4, run.stderr[-3000:]
    assert run.stderr.strip() == (
        "checkpoint error: the window changed: operator 0 (windowed_aggregation) holds windows of 1 minute, and this"
        f" query makes windows of 2 minutes (recorded in {record}). Spark would go on adding to the windows the"
        " state holds beside the new ones: the output would hold overlapping windows, with one key's events split"
        " between them. Either set the window back to 1 minute (query.window, where the query takes it from"
        " there), or set query.checkpoint_location to a new directory and sink.path to an empty one, and reprocess"
        " the input from the start."
    )
    assert (digest(tmp_path / "checkpoint"), digest(tmp_path / "output")) == before

    # An older template's record, from before windows were kept, its key with the columns' types: the next
    # start reads the key by its names, adds the windows, then refuses a change.
    shutil.rmtree(record)
    (tmp_path / "checkpoint" / "state_key.json").write_text(json.dumps({"state_keys": [TYPED_KEY]}))
    assert (
        check_state_key(
            spark, build_result(spark, load_settings(settings_path)), str(tmp_path / "checkpoint"), "append"
        )
        is None
    )
    assert records(tmp_path / "checkpoint")[-1]["windows"] == ["1 minute"]
    assert run_main("--settings", str(wider)).returncode == 4
