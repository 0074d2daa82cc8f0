"""`inspect` on real checkpoints: its counts against Spark's own reader, the progress and the input."""

from __future__ import annotations

import json
import shutil
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pyspark
import pytest
from stream_job.machinery.core.durations import parse_duration
from stream_job.machinery.core.operators import OPERATORS
from stream_job.machinery.core.settings import Settings, load_settings
from stream_job.machinery.job.run.runner import run_query
from stream_job.machinery.job.spark.session import apply_confs
from stream_job.machinery.operations.change_counts import count_changes
from stream_job.machinery.operations.change_feed import NO_CHANGE_FILES, TIMERS_WITHOUT_FEED
from stream_job.machinery.operations.inspection import (
    InspectError,
    checkpoint_facts,
    inspect_checkpoint,
    state_metadata,
)
from stream_job.machinery.operations.key_lookup import find_key, render
from stream_job.machinery.operations.state_reader import TIMERS, stores_of

from .conftest import BAKED_OPERATOR, digest, files_job, run_cli, run_cli_process, write_settings_file

pytestmark = pytest.mark.streaming


def state_rows_from_input(settings: Settings) -> int:
    """The state rows an available-now run over the files_job input leaves, counted from the files.

    W is the final watermark (the newest event less the delay, on the input furthest behind). A
    window is kept while its end is after W; a deduplicated event while its time plus the delay
    is after W; an order while a payment after W could still match it (time plus range at or
    after W), a payment while an order after W could (time at or after W); a session while its
    last event plus the timeout is after W.
    """
    inputs = {section: _events(source.files.path) for section, source in settings.inputs.items()}
    delay = timedelta(seconds=parse_duration(settings.query.watermark))
    w = min(max(time for time, _ in events) for events in inputs.values()) - delay
    events = inputs["source"]
    operator = settings.query.operator
    if operator == "windowed_aggregation":
        window = timedelta(seconds=parse_duration(settings.query.window))
        windows = {(key, datetime.min + (time - datetime.min) // window * window) for time, key in events}
        return sum(1 for _, start in windows if start + window > w)
    if operator == "deduplication":
        return sum(1 for time, _ in events if time + delay > w)
    if operator == "stream_stream_join":
        join_range = timedelta(seconds=parse_duration(settings.query.join.range))
        payments = inputs["join_source"]
        return sum(1 for time, _ in events if time + join_range >= w) + sum(1 for time, _ in payments if time >= w)
    timeout = timedelta(seconds=parse_duration(settings.query.custom_state.session_timeout))
    last_seen: dict[str, datetime] = {}
    for time, key in events:
        last_seen[key] = max(time, last_seen.get(key, time))
    return sum(1 for time in last_seen.values() if time + timeout > w)


def _events(folder: str) -> list[tuple[datetime, str]]:
    rows = [json.loads(line) for path in sorted(Path(folder).glob("events-*.json")) for line in path.open()]
    return [(datetime.fromisoformat(row["event_time"]).replace(tzinfo=None), row["key"]) for row in rows]


# The bake's operator on each provider it runs on (every operator's bake runs these).
PROVIDERS = ["rocksdb"] if OPERATORS[BAKED_OPERATOR].rocksdb_only else ["hdfs", "rocksdb"]
CASES = [(BAKED_OPERATOR, provider) for provider in PROVIDERS]


@pytest.fixture(scope="module")
def runs(spark, tmp_path_factory) -> dict[tuple[str, str], tuple[Path, list[dict]]]:
    """A checkpoint per case (3 landing files, 2 partitions), with its settings file and progress reports."""
    made = {}
    for operator, provider in CASES:
        folder = tmp_path_factory.mktemp(f"inspect-{operator}-{provider}")
        changes = files_job(folder, "parquet", provider, files=3, operator=operator)
        path = write_settings_file(folder / "settings.yaml", changes)
        settings = load_settings(path)
        apply_confs(spark, settings)
        query = run_query(spark, settings)
        assert query.exception() is None
        made[operator, provider] = (path, query.recentProgress)
    return made


def inspect_command(*args: str):
    """inspect in-process on the shared session; in a process of its own in the custom_state bake: Spark
    4.2.1 fails the timers' change feed in a session that has run the query (operations/change_feed.py)."""
    return (run_cli_process if BAKED_OPERATOR == "custom_state" else run_cli)(*args)


def inspect_json(*args: str) -> dict:
    result = inspect_command("inspect", *args, "--json")
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def statestore_rows(spark, checkpoint: str, batch_id: int, operator: str, store: str) -> list[int]:
    """Rows per partition of one store, by Spark's own reader."""
    options = {"operatorId": "0", "batchId": str(batch_id)}
    if operator == "custom_state":
        options.update({"readRegisteredTimers": "true"} if store == TIMERS else {"stateVarName": store})
    else:
        options["storeName"] = store
    rows = spark.read.format("statestore").options(**options).load(checkpoint)
    by_partition = {row.partition_id: row["count"] for row in rows.groupBy("partition_id").count().collect()}
    return [by_partition.get(p, 0) for p in range(2)]


@pytest.mark.operator
@pytest.mark.parametrize(("operator", "provider"), CASES)
def test_inspect_counts_match_spark_reader_progress_and_input(spark, runs, operator, provider):
    path, progress = runs[operator, provider]
    settings = load_settings(path)
    checkpoint = settings.query.checkpoint_location
    last = progress[-1]

    inspection = inspect_checkpoint(spark, checkpoint, checkpoint_facts(checkpoint))

    assert (inspection.provider, inspection.batch_id) == (provider, last["batchId"])
    (state,) = inspection.operators
    assert (state.operator, state.partitions, state.max_batch_id) == (operator, 2, last["batchId"])
    assert [store.store for store in state.stores] == EXPECTED_STORES[operator]
    for store in state.stores:
        assert store.rows_per_partition == statestore_rows(spark, checkpoint, last["batchId"], operator, store.store)
    # The state rows against the progress, and against the input itself.
    assert inspection.state_rows == last["stateOperators"][0]["numRowsTotal"]
    assert inspection.state_rows == state_rows_from_input(settings) > 0
    assert state.disk_bytes == sum(state.disk_bytes_per_partition) > 0


EXPECTED_STORES = {
    "windowed_aggregation": ["default"],
    "deduplication": ["default"],
    "stream_stream_join": [
        "left-keyToNumValues",
        "left-keyWithIndexToValue",
        "right-keyToNumValues",
        "right-keyWithIndexToValue",
    ],
    "custom_state": ["session", TIMERS],
}


# On RocksDB in the default and custom_state bakes (transformWithState's column families); on HDFS,
# and in the deduplication and join bakes, secondary: the coordinator a fresh session lacks is the
# same for every provider and operator, whose state the in-process tests here read in every bake.
FRESH_IN_CI = ("windowed_aggregation", "custom_state")
IN_CI = BAKED_OPERATOR in FRESH_IN_CI
ROCKSDB_MARKS = [pytest.mark.operator] if IN_CI else [pytest.mark.operator, pytest.mark.secondary]
FRESH = [
    pytest.param(provider, marks=ROCKSDB_MARKS if provider == "rocksdb" else [pytest.mark.secondary])
    for provider in PROVIDERS
]


@pytest.mark.parametrize("provider", FRESH)
def test_inspect_command_in_a_fresh_process(runs, provider):
    """The command's own Spark session has run no query: the case of the StateStoreCoordinator bug."""
    operator = BAKED_OPERATOR
    path, progress = runs[operator, provider]
    settings = load_settings(path)
    checkpoint = Path(settings.query.checkpoint_location)
    before = digest(checkpoint)

    result = run_cli_process("inspect", "--settings", str(path), "--json")  # the fresh JVM is the proof
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)

    assert (report["provider"], report["batch_id"]) == (provider, progress[-1]["batchId"])
    assert report["state_rows"] == progress[-1]["stateOperators"][0]["numRowsTotal"]
    (operator_report,) = report["operators"]
    assert operator_report["operator"] == operator
    assert sum(store["rows"] for store in operator_report["stores"] if store["counted"]) == report["state_rows"]
    estimate = settings.sizing()
    assert report["estimate"]["state_rows"] == estimate.rows
    assert report["estimate"]["measured_share"] == round(report["state_rows"] / estimate.rows, 4)
    # Reading state changes nothing in the checkpoint.
    assert digest(checkpoint) == before


def test_inspect_an_earlier_batch_and_the_human_report(runs):
    provider = "rocksdb"
    path, progress = runs[BAKED_OPERATOR, provider]
    checkpoint = load_settings(path).query.checkpoint_location
    first = progress[0]
    report = inspect_json("--checkpoint", checkpoint, "--batch-id", str(first["batchId"]))
    assert report["batch_id"] == first["batchId"]
    assert report["state_rows"] == first["stateOperators"][0]["numRowsTotal"]
    assert report["estimate"] is None  # a bare checkpoint has no settings to estimate from

    human = inspect_command("inspect", "--settings", str(path))
    assert human.returncode == 0, human.stderr
    spark_name = OPERATORS[BAKED_OPERATOR].spark_name
    assert f"operator 0: {BAKED_OPERATOR} ({spark_name}), 2 partitions" in human.stdout
    assert f"provider {provider}, state as of batch {progress[-1]['batchId']}" in human.stdout
    assert f"state rows: {progress[-1]['stateOperators'][0]['numRowsTotal']:,}" in human.stdout
    assert "skew" in human.stdout and "estimate (" in human.stdout


def test_inspect_refuses_what_it_cannot_read(runs, tmp_path):
    path, progress = runs[BAKED_OPERATOR, "rocksdb"]
    checkpoint = load_settings(path).query.checkpoint_location
    last = progress[-1]["batchId"]

    missing = inspect_command("inspect", "--checkpoint", str(tmp_path / "nothing"))
    assert missing.returncode == 2
    assert f"inspect error: no checkpoint at {tmp_path / 'nothing'} (no offsets folder)" in missing.stderr

    future = inspect_command("inspect", "--checkpoint", checkpoint, "--batch-id", str(last + 1))
    assert future.returncode == 2
    assert f"inspect error: --batch-id {last + 1}: the last committed batch of {checkpoint} is {last}" in future.stderr

    negative = inspect_command("inspect", "--checkpoint", checkpoint, "--batch-id", "-1")
    assert negative.returncode == 2 and "--batch-id: '-1' must be 0 or more" in negative.stderr

    both = inspect_command("inspect", "--checkpoint", checkpoint, "--settings", str(path))
    assert both.returncode == 2 and "not allowed with argument" in both.stderr

    uncommitted = tmp_path / "uncommitted"
    (uncommitted / "offsets").mkdir(parents=True)
    none_yet = inspect_command("inspect", "--checkpoint", str(uncommitted))
    assert none_yet.returncode == 2 and "has no committed batch yet" in none_yet.stderr


@pytest.mark.skipif(BAKED_OPERATOR == "custom_state", reason="damages an HDFS-store checkpoint")
def test_inspect_a_damaged_checkpoint_exits_4_naming_the_state(runs, tmp_path):
    path, _ = runs[BAKED_OPERATOR, "hdfs"]
    damaged = tmp_path / "damaged"
    shutil.copytree(load_settings(path).query.checkpoint_location, damaged)
    newest = max((damaged / "state" / "0" / "0").glob("*.delta"), key=lambda file: int(file.stem))
    newest.write_bytes(b"")  # the newest state file, truncated

    result = inspect_command("inspect", "--checkpoint", str(damaged))

    assert result.returncode == 4
    last_line = result.stderr.strip().splitlines()[-1]
    assert last_line.startswith(
        f"checkpoint error: {damaged}: Spark cannot read the state of operator 0, store default"
    )
    assert "CANNOT_LOAD_STATE_STORE" in last_line and "java.io.EOFException" in last_line
    assert last_line.endswith(
        "the checkpoint may be damaged: restore the checkpoint from a copy, or set"
        " query.checkpoint_location to a new directory and sink.path to an empty one, and reprocess the input from"
        " the start"
    )


def newest_and_oldest_keys(settings: Settings) -> tuple[str, str]:
    """The state key of the newest and of the oldest event of the input: the event id for deduplication,
    the key column for the others."""
    column = "event_id" if settings.query.operator == "deduplication" else "key"
    rows = [
        json.loads(line)
        for path in sorted(Path(settings.source.files.path).glob("events-*.json"))
        for line in path.open()
    ]
    rows.sort(key=lambda row: row["event_time"])
    return rows[-1][column], rows[0][column]


# Keys that leave the state for good by the end of the run: each event id, each order. An
# aggregation's or a session's key comes back in later windows and sessions.
GONE_BY_THE_END = {"deduplication", "stream_stream_join"}


@pytest.mark.operator
def test_inspect_one_key_says_where_it_is_and_why(spark, runs):
    """The seed question, "why did this order not join?", as one command in a fresh process."""
    path, progress = runs[BAKED_OPERATOR, "rocksdb"]
    settings = load_settings(path)
    checkpoint = Path(settings.query.checkpoint_location)
    before = digest(checkpoint)
    last = progress[-1]["batchId"]
    newest, oldest = newest_and_oldest_keys(settings)

    held = inspect_json("--settings", str(path), "--key", newest)
    assert (held["held"], held["batch_id"], held["key"]) == (True, last, newest)
    assert held["watermark"] is not None and held["why"].startswith(f"held at batch {last} in ")
    assert all(newest in json.dumps(row["key"]) for row in held["rows"])
    assert OPERATORS[BAKED_OPERATOR].held_until in held["why"]
    # RocksDB without changelog checkpointing keeps no change feed: no history, and --changes refuses.
    assert (held["read"], held["history"]) == (f"one read per kept batch: {NO_CHANGE_FILES}", None)
    metadata, _ = state_metadata(spark, str(checkpoint), checkpoint_facts(str(checkpoint)))
    with pytest.raises(InspectError, match=r"^--changes: .*: this store keeps no change feed \(RocksDB writes"):
        count_changes(spark, str(checkpoint), metadata, last)
    if BAKED_OPERATOR == "stream_stream_join":
        # The newest order is number 119, every fifth unpaid: it waits, unmatched, for its payment.
        (order,) = [row for row in held["rows"] if row["store"] == "left-keyWithIndexToValue"]
        assert order["value"]["matched"] is False
    latest_time = max(time for row in held["rows"] for time in row["times"])
    assert f"the latest time it carries is {latest_time}" in held["why"]

    if BAKED_OPERATOR in GONE_BY_THE_END:
        gone = inspect_json("--settings", str(path), "--key", oldest)
        assert gone["held"] is False and gone["rows"] == []
        held_at = gone["last_held_batch"]
        assert held_at is not None and held_at < last
        assert gone["why"].startswith(f"gone: held until batch {held_at} (watermark ")
        assert f"dropped by batch {held_at + 1} (watermark " in gone["why"]
        # Spark's own reader agrees: there at that batch, not at the next.
        store = "left-keyWithIndexToValue" if BAKED_OPERATOR == "stream_stream_join" else "default"
        options = {"operatorId": "0", "storeName": store}

        def holds(batch: int) -> bool:
            rows = spark.read.format("statestore").options(**options, batchId=str(batch)).load(str(checkpoint))
            return oldest in {str(value) for row in rows.select("key.*").collect() for value in row}

        assert holds(held_at) and not holds(held_at + 1)

    human = inspect_command("inspect", "--settings", str(path), "--key", "no-such-key")
    assert human.returncode == 0, human.stderr
    assert f"key 'no-such-key' at batch {last} (watermark " in human.stdout
    assert f"not in the state at batch {last}, nor in the kept batches 0..{last - 1}" in human.stdout
    assert digest(checkpoint) == before  # only reads


@pytest.fixture(scope="module")
def feed_run(spark, runs, tmp_path_factory) -> tuple[Path, list[dict]]:
    """A checkpoint whose stores keep a change feed: the HDFS-backed one of `runs`, or, for an operator
    that runs on RocksDB only, one more run with changelog checkpointing."""
    if "hdfs" in PROVIDERS:
        return runs[BAKED_OPERATOR, "hdfs"]
    folder = tmp_path_factory.mktemp(f"inspect-{BAKED_OPERATOR}-changelog")
    path = write_settings_file(
        folder / "settings.yaml", files_job(folder, "parquet", "rocksdb", changelog=True, files=3)
    )
    settings = load_settings(path)
    apply_confs(spark, settings)
    query = run_query(spark, settings)
    assert query.exception() is None
    return path, query.recentProgress


SPARK_4_3 = tuple(int(part) for part in pyspark.__version__.split(".")[:2]) >= (4, 3)


def progress_counts(store_changes: list[dict], operator: str) -> tuple[int, int]:
    """The progress' numRowsUpdated and numRowsRemoved of one batch, from its stores' puts and deletes.

    A join counts a row it adds once, as one put into its side's keyToNumValues (exact while no key
    loses some of its rows in a batch and keeps others: that puts the count again; the input here has a
    key per order), and its removed rows as deletes of keyWithIndexToValue: of the right side only, for
    a left outer join on Spark 4.2 (the left rows it emits with nulls as they leave are not counted),
    of both sides on Spark 4.3, and of both sides of an inner join.
    transformWithState counts its state variables' puts and deletes (not its timers); the others their
    one store's."""
    if operator != "stream_stream_join":
        return sum(store["puts"] for store in store_changes), sum(store["deletes"] for store in store_changes)
    by_store = {store["store"]: store for store in store_changes}
    updated = by_store["left-keyToNumValues"]["puts"] + by_store["right-keyToNumValues"]["puts"]
    sides = ("left", "right") if SPARK_4_3 else ("right",)  # files_job's join is left_outer
    return updated, sum(by_store[f"{side}-keyWithIndexToValue"]["deletes"] for side in sides)


@pytest.mark.operator
def test_inspect_changes_match_the_progress_and_a_key_history_replays_the_state(spark, feed_run):
    """The change feed read once over the kept batches: per batch, its puts and deletes against the
    progress' updated and removed rows; one key's history, replayed from the first batch, holds at every
    batch exactly the rows Spark's reader holds for that key then."""
    path, progress = feed_run
    settings = load_settings(path)
    apply_confs(spark, settings)  # this session reads the checkpoint as its run wrote it (the format version)
    checkpoint = settings.query.checkpoint_location
    before = digest(Path(checkpoint))
    last = progress[-1]["batchId"]

    changes = inspect_json("--settings", str(path), "--changes")
    assert changes["read"] == f"from the change feed, batches 0..{last}"
    assert [batch["batch_id"] for batch in changes["batches"]] == list(range(last + 1))
    for report, batch in zip(progress, changes["batches"], strict=True):
        operator = report["stateOperators"][0]
        assert progress_counts(batch["stores"], BAKED_OPERATOR) == (
            operator["numRowsUpdated"],
            operator["numRowsRemoved"],
        ), batch["batch_id"]
    assert sum(store["puts"] for batch in changes["batches"] for store in batch["stores"]) > 0

    # The oldest event's key: its rows are put, and deleted once the watermark passes them.
    _, key = newest_and_oldest_keys(settings)
    metadata, batch = state_metadata(spark, checkpoint, checkpoint_facts(checkpoint))
    lookup = find_key(spark, checkpoint, metadata, batch, key)
    assert lookup.read == f"from the change feed, batches 0..{last}" + (
        f" (timers at batch {last} only: {TIMERS_WITHOUT_FEED})" if BAKED_OPERATOR == "custom_state" else ""
    )
    # A session's key comes back in every file here: its state is put again, never cleared.
    expected = {"put"} if BAKED_OPERATOR == "custom_state" else {"put", "delete"}
    assert lookup.history and {change.change for change in lookup.history} == expected
    replayed: dict[str, tuple[str, str]] = {}  # row -> (store, value), after each batch
    held_after = []
    for batch_id in range(last + 1):
        for change in (change for change in lookup.history if change.batch_id == batch_id):
            row = json.dumps([change.store, change.partition, change.key], default=str, sort_keys=True)
            if change.change == "put":
                replayed[row] = json.dumps(change.value, default=str, sort_keys=True)
            else:
                assert replayed.pop(row, None) is not None, f"batch {batch_id} deletes a row it never put: {row}"
        assert replayed == key_rows_by_spark(spark, checkpoint, metadata, batch_id, key), batch_id
        held_after.append(bool(replayed))
    assert held_after[-1] == lookup.held
    if not lookup.held:
        assert lookup.last_held_batch == max(b for b, held in enumerate(held_after) if held)
    assert f"read: from the change feed, batches 0..{last}" in render(lookup)
    assert "\n  history:\n    batch 0: " in render(lookup)
    if BAKED_OPERATOR == "windowed_aggregation":
        assert sorted(aggregation_history(lookup.history)) == sorted(expected_aggregation_history(settings, key, last))
    assert digest(Path(checkpoint)) == before  # only reads


def key_rows_by_spark(spark, checkpoint: str, metadata, batch: int, key: str) -> dict[str, str]:
    """The rows holding `key` in every store with a change feed as of `batch`, by Spark's own reader."""
    found = {}
    for options in stores_of(metadata):
        if "readRegisteredTimers" in options:
            continue
        store = options.get("storeName") or options["stateVarName"]
        rows = spark.read.format("statestore").options(**options, batchId=str(batch)).load(checkpoint).collect()
        for row in rows:
            columns = row.asDict(recursive=True)
            if key in leaves(columns["key"]):
                name = json.dumps([store, columns["partition_id"], columns["key"]], default=str, sort_keys=True)
                found[name] = json.dumps(columns["value"], default=str, sort_keys=True)
    return found


def leaves(columns: dict) -> set[str]:
    """Every value of a (nested) key as text: the key matches one of them whole."""
    return {text for value in columns.values() for text in (leaves(value) if isinstance(value, dict) else {str(value)})}


def aggregation_history(history) -> list[tuple[int, str, str, int | None]]:
    """(batch, put or delete, window start, count) per change."""
    return [
        (change.batch_id, change.change, str(change.key["window"]["start"]), change.value and change.value["count"])
        for change in history
    ]


def expected_aggregation_history(settings: Settings, key: str, last: int) -> list[tuple[int, str, str, int | None]]:
    """The key's changes from the input: batch b (file b) puts each window the key's events in file b
    fall into with its count so far, then deletes the windows that end at or before the watermark batch
    b ran with (its offsets file's)."""
    files = sorted(Path(settings.source.files.path).glob("events-*.json"))
    window = timedelta(seconds=parse_duration(settings.query.window))
    counts: dict[datetime, int] = {}
    expected = []
    for batch in range(last + 1):
        events = [json.loads(line) for line in files[batch].open()] if batch < len(files) else []
        touched = []
        for event in events:
            if event["key"] == key:
                time = datetime.fromisoformat(event["event_time"]).replace(tzinfo=None)
                start = datetime.min + (time - datetime.min) // window * window
                counts[start] = counts.get(start, 0) + 1
                touched += [start] if start not in touched else []
        expected += [(batch, "put", str(start), counts[start]) for start in touched]
        offsets = (Path(settings.query.checkpoint_location) / "offsets" / str(batch)).read_text().splitlines()
        watermark = datetime.fromtimestamp(json.loads(offsets[1])["batchWatermarkMs"] / 1000, UTC).replace(tzinfo=None)
        for start in sorted(start for start in counts if start + window <= watermark):
            expected.append((batch, "delete", str(start), None))
            del counts[start]
    return expected
