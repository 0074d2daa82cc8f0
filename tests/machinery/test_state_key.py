"""The state key check: a restart whose query keys its state by other columns is refused."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from stream_job.machinery.core.checkpoint.files import CheckpointUnreadable
from stream_job.machinery.core.settings import load_settings
from stream_job.machinery.job.runner import build_result, run_query
from stream_job.machinery.job.session import apply_confs
from stream_job.machinery.job.state_fit import StateKeyChanged, check_state_key, state_keys

from .conftest import BAKED_OPERATOR, digest, edited_query, files_job, run_main, write_settings_file

pytestmark = pytest.mark.streaming

WINDOW = "window struct<start:timestamp,end:timestamp>"
STATE_KEYS = {
    "windowed_aggregation": f"aggregation by {WINDOW}, key string",
    "deduplication": "deduplication by event_id string",
    "stream_stream_join": "join on key string = join_key string",
    "custom_state": "TransformWithStateInPySpark by key string",
}


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
    record = json.loads((folder / "checkpoint" / "state_key.json").read_text())
    assert record == {"state_keys": [STATE_KEYS[operator]]}
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
        f"checkpoint error: the state key changed: the state in this checkpoint was written keyed by aggregation by"
        f" {WINDOW}, key string, and this query keys it by aggregation by {WINDOW}, event_id string (recorded in"
        f" {tmp_path / 'checkpoint' / 'state_key.json'}). Spark would read the old state under the new key without"
        " an error and give wrong results. Either change the query back, or set query.checkpoint_location to a new"
        " directory and reprocess the input from the start."
    )
    assert "query stream_job started" not in run.stdout
    assert (digest(tmp_path / "checkpoint"), digest(tmp_path / "output")) == before


@pytest.mark.operator
@pytest.mark.skipif(BAKED_OPERATOR != "deduplication", reason="a deduplication bake's own key")
def test_a_changed_deduplication_key_is_refused(spark, tmp_path):
    settings = load_settings(finished_checkpoint(spark, tmp_path, "deduplication"))
    events = spark.readStream.schema("event_id string, key string, event_time timestamp").json(str(tmp_path))
    by_id_and_key = events.withWatermark("event_time", "1 minute").dropDuplicatesWithinWatermark(["event_id", "key"])
    with pytest.raises(StateKeyChanged, match="this query keys it by deduplication by event_id string, key string "):
        check_state_key(spark, by_id_and_key, settings.query.checkpoint_location)
    # The query as it was passes, and leaves the record as it was.
    before = digest(tmp_path / "checkpoint")
    assert check_state_key(spark, build_result(spark, settings), settings.query.checkpoint_location) is None
    assert digest(tmp_path / "checkpoint") == before


def test_a_missing_record_is_made_again_and_said_and_a_damaged_one_is_named(spark, tmp_path):
    settings = load_settings(finished_checkpoint(spark, tmp_path, BAKED_OPERATOR))
    record = tmp_path / "checkpoint" / "state_key.json"
    record.unlink()
    (tmp_path / "checkpoint" / ".state_key.json.crc").unlink()
    result = build_result(spark, settings)
    note = check_state_key(spark, result, settings.query.checkpoint_location)
    assert note == f"{record} was missing (a checkpoint older than this check): recorded {STATE_KEYS[BAKED_OPERATOR]}"
    assert json.loads(record.read_text()) == {"state_keys": [STATE_KEYS[BAKED_OPERATOR]]}

    record.write_text('{"state_keys": "half')  # its checksum file no longer matches: Hadoop refuses it first
    with pytest.raises(CheckpointUnreadable, match=f"^{record}: not a state key record \\(damaged\\?\\); remove it"):
        check_state_key(spark, result, settings.query.checkpoint_location)


def test_a_query_without_commits_records_its_own_key(spark, tmp_path):
    """A first run that committed nothing kept no state, so the next start may key it otherwise."""
    checkpoint = tmp_path / "checkpoint"
    checkpoint.mkdir()
    (checkpoint / "state_key.json").write_text(json.dumps({"state_keys": ["aggregation by old string"]}))
    events = spark.readStream.schema("event_id string, key string, event_time timestamp").json(str(tmp_path))
    deduplicated = events.withWatermark("event_time", "1 minute").dropDuplicatesWithinWatermark(["event_id"])
    assert check_state_key(spark, deduplicated, str(checkpoint)) is None
    assert json.loads((checkpoint / "state_key.json").read_text()) == {"state_keys": [STATE_KEYS["deduplication"]]}
