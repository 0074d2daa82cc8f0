"""A restart's time against the state's size: from a start of the generated job to its first committed batch.

Bakes the default project (rate source, windowed count, parquet sink) once per state store: RocksDB with
changelog checkpointing, RocksDB without, the HDFS-backed store. For each, one checkpoint grows through the
sizes asked (1,000 rows first: the start's fixed cost), each grown by the job itself (`run --max-batches`,
the rate-micro-batch source, at most --batch-rows rows a batch, each batch a new window of distinct keys, a
watermark no batch passes: every row stays), and after each size the job is started again for one batch of
1,000 rows and timed: from the process's start to the commit file of that batch. The checkpoint at that
moment says what the start had to load: the last snapshot of partition 0 of the state and the changes
after it (changelogs, or the HDFS-backed store's deltas), and each batch's input rows say how many rows
those changes hold. The restart's first progress event (Spark's event log) splits the time: the JVM and
the job's checks before the query starts, the batch itself (its state load in addBatch).

Prints the figures beside the restart time the bake's own estimate states for that state (its
core/sizing/restart.py, given the rows the start loaded and replayed, the partitions and this machine's
cores) and the ratio; writes RESULTS_DIR/restart_time.json and .md.

    .venv/bin/python benchmarks/restart_time.py [--sizes 1e5,1e6,1e7] [--partitions 4] [--stores ...]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from overhead import PROGRESS_EVENT, machine, run, save

REPO = Path(__file__).resolve().parents[1]
STORES = {
    "rocksdb+changelog": {"state_store_provider": "rocksdb", "changelog_checkpointing": "true"},
    "rocksdb": {"state_store_provider": "rocksdb", "changelog_checkpointing": "false"},
    "hdfs": {"state_store_provider": "hdfs"},
}
BASELINE_ROWS = 1_000
RESTART_ROWS = 1_000
PREFIX = "STREAM_JOB_"
# The state files of one store instance: a full copy of the state and the changes of one batch.
SNAPSHOT = re.compile(r"^(\d+)(?:_[0-9a-f-]+)?\.(zip|snapshot)$")
CHANGES = re.compile(r"^(\d+)(?:_[0-9a-f-]+)?\.(changelog|delta)$")
START_EVENT = "org.apache.spark.sql.streaming.StreamingQueryListener$QueryStartedEvent"


def arguments() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", default="1e5,1e6,1e7", help="state rows, ascending (default: %(default)s)")
    parser.add_argument("--stores", default=",".join(STORES), help="of %(default)s")
    parser.add_argument("--partitions", type=int, default=4, help="shuffle partitions (default: %(default)s)")
    parser.add_argument("--batch-rows", type=int, default=1_000_000, help="most rows a growing batch adds")
    parser.add_argument("--driver-memory", default="12g", help="the job's heap, every store (default: %(default)s)")
    parser.add_argument("--results-dir", type=Path, default=REPO / "benchmarks" / "results")
    parser.add_argument("--scratch", type=Path, help="bake and keep the checkpoints here (default: a temporary folder)")
    parser.add_argument(
        "--rescore", type=Path, help="no runs: this results JSON again, against the current estimate (after a refit)"
    )
    parser.add_argument("--name", default="restart_time", help="the results files' name (default: %(default)s)")
    args = parser.parse_args()
    args.sizes = [int(float(size)) for size in args.sizes.split(",")]
    args.stores = args.stores.split(",")
    unknown = [store for store in args.stores if store not in STORES]
    if unknown or args.sizes != sorted(args.sizes) or args.sizes[0] <= BASELINE_ROWS:
        parser.error(f"--stores of {', '.join(STORES)}; --sizes ascending, above {BASELINE_ROWS:,}")
    return args


def bake(scratch: Path, store: str, partitions: int) -> Path:
    answers = {"shuffle_partitions": partitions, **STORES[store]}
    command = [sys.executable, "-m", "cookiecutter", "--no-input", "--default-config", "-o", str(scratch)]
    run([*command, str(REPO), *(f"{key}={value}" for key, value in answers.items())], cwd=REPO)
    return scratch / "stream-job"


def job_env(project: Path, events: Path, driver_memory: str, rows_per_batch: int) -> dict[str, str]:
    """The job's settings for these runs, as environment overrides: a batch of rows_per_batch distinct keys in a
    window of its own, a watermark that no batch passes, and the event log for the progress."""
    conf = {
        "spark.eventLog.enabled": "true",
        "spark.eventLog.rolling.enabled": "false",
        "spark.eventLog.compress": "false",
        "spark.eventLog.dir": f"file://{events}",
        "spark.ui.showConsoleProgress": "false",
    }
    return {
        **os.environ,
        f"{PREFIX}SPARK__DRIVER_MEMORY": driver_memory,
        f"{PREFIX}SPARK__CONF": json.dumps(conf),
        f"{PREFIX}SOURCE__RATE__ROWS_PER_BATCH": str(rows_per_batch),
        f"{PREFIX}SOURCE__RATE__ADVANCE_PER_BATCH": "1 minute",
        f"{PREFIX}SOURCE__RATE__KEYS": "1000000",
        f"{PREFIX}QUERY__WATERMARK": "7 days",
        f"{PREFIX}QUERY__TRIGGER": "1 second",
        f"{PREFIX}QUERY__CHECKPOINT_LOCATION": str(project / "checkpoint"),
    }


def committed(checkpoint: Path) -> int:
    """The last committed batch, -1 for none."""
    commits = [int(name.name) for name in (checkpoint / "commits").glob("[0-9]*") if name.name.isdigit()]
    return max(commits, default=-1)


def grow(project: Path, env: dict[str, str], rows: int) -> float:
    """Run the job for the batches that add `rows`; the seconds the process took."""
    batches = -(-rows // int(env[f"{PREFIX}SOURCE__RATE__ROWS_PER_BATCH"]))
    started = time.monotonic()
    run([sys.executable, "main.py", "--max-batches", str(batches)], cwd=project, env=env)
    return time.monotonic() - started


def restart(project: Path, env: dict[str, str], checkpoint: Path) -> dict[str, float]:
    """Start the job for one batch; the seconds from the process's start to that batch's commit file."""
    batch = committed(checkpoint) + 1
    started = time.monotonic()
    process = subprocess.Popen(
        [sys.executable, "main.py", "--max-batches", "1"],
        cwd=project,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    commit = checkpoint / "commits" / str(batch)
    while not commit.exists() and process.poll() is None:
        time.sleep(0.02)
    seconds = time.monotonic() - started
    output, _ = process.communicate()
    if process.returncode != 0 or not commit.exists():
        sys.exit(f"the restart failed ({process.returncode}):\n{output[-3000:]}")
    return {"batch": batch, "start_to_commit_s": round(seconds, 2), "process_s": round(time.monotonic() - started, 2)}


def state_files(checkpoint: Path, up_to: int) -> dict[str, int | None]:
    """Partition 0's last snapshot at or below batch `up_to` and the changes after it that a start replays."""
    folder = checkpoint / "state" / "0" / "0"
    snapshots, changes = [], []
    for path in folder.rglob("*"):
        if (found := SNAPSHOT.match(path.name)) and int(found[1]) <= up_to + 1:
            snapshots.append(int(found[1]))
        elif (found := CHANGES.match(path.name)) and int(found[1]) <= up_to + 1:
            changes.append(int(found[1]))
    # Versions count from 1: the state after batch N is version N + 1.
    last = max(snapshots, default=0)
    return {"snapshot_version": last or None, "versions_replayed": sum(1 for v in changes if v > last)}


def progress_of(events: Path, batch: int) -> dict[str, object]:
    """The restart's query start and its batch's progress, from the newest event log."""
    log = max(events.iterdir(), key=lambda path: path.stat().st_mtime)
    started, progress, app_start = None, None, None
    for line in log.read_text().splitlines():
        event = json.loads(line)
        kind = event.get("Event")
        if kind == "SparkListenerApplicationStart":
            app_start = event["Timestamp"] / 1000
        elif kind == START_EVENT:
            started = event.get("timestamp")
        elif kind == PROGRESS_EVENT and event["progress"]["batchId"] == batch:
            progress = event["progress"]
    if progress is None:
        sys.exit(f"{log}: no progress event of batch {batch}")
    operator = progress["stateOperators"][0]
    return {
        "app_start_epoch": app_start,
        "query_started": started,
        "input_rows": sum(source["numInputRows"] for source in progress["sources"]),
        "state_rows": operator["numRowsTotal"],
        "durations_ms": progress["durationMs"],
        "custom_metrics": operator.get("customMetrics", {}),
    }


def estimated(project: Path, store: str, point: dict, partitions: int) -> float:
    """The bake's own estimate of this start: its snapshot's rows loaded, the changes after it replayed."""
    if str(project) not in sys.path:  # once a bake: every bake's machinery is the same
        sys.path.insert(0, str(project))
    from stream_job.machinery.core.sizing import restart as model

    replayed = int(point["rows_replayed"])
    loaded = int(point["state_rows"]) - RESTART_ROWS - replayed if point["snapshot_version"] else 0
    provider, changelog = STORES[store]["state_store_provider"], STORES[store].get("changelog_checkpointing") == "true"
    cores = os.cpu_count() or 1
    start = model.restart(provider, changelog, loaded, replayed, 1 if replayed else 0, partitions, cores, partitions)
    return start.seconds


def measure(store: str, args: argparse.Namespace, scratch: Path) -> list[dict[str, object]]:
    project = bake(scratch / store, store, args.partitions)
    events = project / "events"
    events.mkdir()
    checkpoint = project / "checkpoint"
    inputs: dict[int, int] = {}  # batch -> its input rows, each a new state row
    points = []
    for target in [BASELINE_ROWS, *args.sizes]:
        grown_s = 0.0
        missing = target - sum(inputs.values())
        if missing > 0:  # a stop lets the batch in flight commit: a size may be passed already
            per_batch = min(args.batch_rows, missing)
            first = committed(checkpoint) + 1
            grown_s = grow(project, job_env(project, events, args.driver_memory, per_batch), missing)
            inputs.update(dict.fromkeys(range(first, committed(checkpoint) + 1), per_batch))
        restart_env = job_env(project, events, args.driver_memory, RESTART_ROWS)
        files = state_files(checkpoint, committed(checkpoint))
        replayed_batches = range(committed(checkpoint) + 1 - files["versions_replayed"], committed(checkpoint) + 1)
        timing = restart(project, restart_env, checkpoint)
        inputs.update(dict.fromkeys(range(timing["batch"], committed(checkpoint) + 1), RESTART_ROWS))
        progress = progress_of(events, timing["batch"])
        point = {
            "store": store,
            "target_rows": target,
            "grown_s": round(grown_s, 1),
            **files,
            "rows_replayed": sum(inputs.get(batch, 0) for batch in replayed_batches),
            **timing,
            **progress,
        }
        point["estimated_s"] = round(estimated(project, store, point, args.partitions), 2)
        points.append(point)
        print(json.dumps({k: v for k, v in point.items() if k not in ("custom_metrics",)}), flush=True)
    return points


def main() -> None:
    args = arguments()
    with tempfile.TemporaryDirectory(prefix="restart-time-") as temporary:
        scratch = args.scratch or Path(temporary)
        if args.rescore:
            result = json.loads(args.rescore.read_text())
            project = bake(scratch / "rescore", args.stores[0], args.partitions)
            for point in result["points"]:
                point["estimated_s"] = round(estimated(project, point["store"], point, result["partitions"]), 2)
            return report(args, result)
        points = [point for store in args.stores for point in measure(store, args, scratch)]
    report(args, {"machine": machine(), "partitions": args.partitions, "points": points})


def report(args: argparse.Namespace, result: dict) -> None:
    points = result["points"]
    lines = [
        "# A restart's time against the state's size",
        "",
        f"`benchmarks/restart_time.py`: the default bake (rate source, windowed count, parquet sink),"
        f" {result['partitions']} shuffle partitions, `spark.driver_memory` {args.driver_memory}; each start runs"
        f" one batch of {RESTART_ROWS:,} rows. Start to commit: from the process's start to that batch's commit"
        " file. Estimated: the bake's core/sizing/restart.py for the rows that start loaded and replayed.",
        "",
        "| store | state rows | snapshot (version) | changes replayed (versions, rows) | start to commit s |"
        " batch ms | addBatch ms | estimated s | measured / estimated |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for p in points:
        durations = p["durations_ms"]
        lines.append(
            f"| {p['store']} | {p['state_rows']:,} | {p['snapshot_version'] or '-'} |"
            f" {p['versions_replayed']}, {p['rows_replayed']:,} | {p['start_to_commit_s']:.1f} |"
            f" {durations.get('triggerExecution', 0):,} | {durations.get('addBatch', 0):,} |"
            f" {p['estimated_s']:.1f} | {p['start_to_commit_s'] / p['estimated_s']:.2f} |"
        )
    save(args.results_dir, args.name, result, lines)


if __name__ == "__main__":
    main()
