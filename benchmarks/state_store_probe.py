"""Runs inside a baked project (benchmarks/store_costs.py copies it there): the project's query on sample
files in a scratch folder, on one store configuration and partition count, and prints one JSON line
per batch with Spark's own state figures, then the bytes of the state rows' key and value columns.

    python state_store_probe.py --provider rocksdb [--changelog] --partitions 2 --files 8 --events-per-file 4000
"""

from __future__ import annotations

import argparse
import io
import json
import statistics
import tempfile
from pathlib import Path

from stream_job.machinery.core.settings import Settings, load_settings
from stream_job.machinery.job.endpoints.sample_input import UNIQUE_KEYS, write_for_settings
from stream_job.machinery.job.run.runner import run_query
from stream_job.machinery.job.spark.session import apply_confs, local_session
from stream_job.machinery.operations.calibration import state_lifetime_seconds, trial_settings

TIMESTAMP = LONG = 8
WINDOW = 2 * TIMESTAMP  # start and end


def column_bytes(settings: Settings, events: list[dict], run_length: int) -> float:
    """The bytes of the key and value columns of one state row, as a user would count them for this
    query (a string its UTF-8 length, a long or a timestamp 8): what state_bytes_per_row asks for."""
    size = {name: statistics.mean(len(event[name].encode()) for event in events) for name in ("key", "event_id")}
    operator = settings.query.operator
    if operator == "windowed_aggregation":  # key: window and key; value: the count
        return WINDOW + size["key"] + LONG
    if operator == "deduplication":  # key: the event id; value: when it expires
        return size["event_id"] + TIMESTAMP
    if operator == "stream_stream_join":  # key: the join key; value: the row (event_id, key, event_time)
        return size["key"] + size["event_id"] + size["key"] + TIMESTAMP
    # custom_state: key; value: session start and end, visits, the recent event ids
    recent = min(run_length, settings.query.custom_state.recent_events)
    return size["key"] + 2 * TIMESTAMP + LONG + recent * size["event_id"]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--provider", choices=("hdfs", "rocksdb"), required=True)
    parser.add_argument("--changelog", action="store_true", help="RocksDB's changelog checkpointing on")
    parser.add_argument("--steady", action="store_true", help="rows evicted as fast as they come")
    parser.add_argument("--partitions", type=int, required=True)
    parser.add_argument("--files", type=int, required=True)
    parser.add_argument("--events-per-file", type=int, required=True)
    args = parser.parse_args()
    settings = load_settings("settings.yaml")
    with tempfile.TemporaryDirectory(prefix="probe-") as scratch:
        data = trial_settings(settings, Path(scratch)).model_dump()
        data["state_store"].update(provider=args.provider, changelog_checkpointing=args.changelog)
        data["spark"]["shuffle_partitions"] = args.partitions
        trial = Settings(**data)
        # Steady: each file moves event time on by half a state lifetime, so that after a few files
        # rows leave the state as fast as they come, as in a running job. Otherwise every file is
        # within one lifetime: each row stays live to the end and the state grows file by file.
        share = 0.5 if args.steady else 1 / (args.files + 1)
        advance = f"{state_lifetime_seconds(settings) * share} seconds"
        shape = write_for_settings(trial, args.files, args.events_per_file, keys=UNIQUE_KEYS, advance=advance)
        spark = local_session("state-store-probe", {})
        try:
            apply_confs(spark, trial)
            query = run_query(spark, trial, progress_to=io.StringIO())
            for progress in query.recentProgress:
                operators = progress.get("stateOperators") or []
                print(
                    json.dumps(
                        {
                            "batch": progress["batchId"],
                            "rows": sum(op["numRowsTotal"] for op in operators),
                            "memory_bytes": sum(op["memoryUsedBytes"] for op in operators),
                            "sst_bytes": sum(
                                int((op.get("customMetrics") or {}).get("rocksdbSstFileSize", 0)) for op in operators
                            ),
                            "instances": sum(op.get("numStateStoreInstances", 0) for op in operators),
                            # Rows the batch wrote or deleted: what its flush to an SST file holds.
                            "changes": sum(op["numRowsUpdated"] + op.get("numRowsRemoved", 0) for op in operators),
                        }
                    )
                )
        finally:
            spark.stop()
        landing = Path(trial.source.files.path)
        events = [json.loads(line) for path in sorted(landing.glob("events-*.json")) for line in path.open()]
        print(json.dumps({"column_bytes": column_bytes(trial, events, shape.run_length)}))


if __name__ == "__main__":
    main()
