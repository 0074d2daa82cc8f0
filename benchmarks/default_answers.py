"""The default bake at its own answers, run as a user runs it: batch times, heap and state rows to steady state.

Bakes the template with the default answers (10,000 rows/s, key cardinality unknown, watermark 10
minutes, windows of 1 minute) and runs `python main.py` in it on the rate source at that rate, every
event its own key: 100,000 events a batch, each batch 10 s of event time (the settings' 10 s
trigger). Batches run back to back, so the state reaches its steady state (11 windows of 600,000
keys) within minutes; a batch holds the rate when it takes less than the 10 s of events it brings.

Two configurations, each in its own process on the same machine:
- baked: settings.yaml as the bake wrote it (the sizing's provider, partitions and driver heap);
- before: what the sizing chose before it counted the executor's heap (the HDFS-backed store on 3
  partitions, each below the 1 GiB threshold, in Spark's default 1 GiB heap).

Per batch: its duration, Spark's numRowsTotal, the driver JVM's live heap after its last GC (the
progress events' heap_live_bytes) and the JVM's resident memory (heap and native: RocksDB's), sampled
from /proc. Writes RESULTS_DIR/default_answers.json and .md, and prints them. Run nothing else beside it.

    .venv/bin/python benchmarks/default_answers.py [--batches 90]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from overhead import machine, run, save

REPO = Path(__file__).resolve().parents[1]
RESULTS_DIR = REPO / "benchmarks" / "results"
EVENTS_PER_BATCH = 100_000  # 10,000 rows/s x the 10 s trigger
UNIQUE_KEYS = 10**15  # every event its own key: the key cardinality answered as unknown
SETTLED = 20  # the last batches, at steady state
CONFIGURATIONS = {
    "baked": {},
    "before": {
        "STREAM_JOB_STATE_STORE__PROVIDER": "hdfs",
        "STREAM_JOB_STATE_STORE__CHANGELOG_CHECKPOINTING": "false",
        "STREAM_JOB_SPARK__SHUFFLE_PARTITIONS": "3",
        "STREAM_JOB_SPARK__DRIVER_MEMORY": "1g",
    },
}


def arguments() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--batches", type=int, default=90, help="batches per run (default: %(default)s)")
    return parser.parse_args()


def resident_bytes(pid: int) -> int:
    """The resident memory of a process and its children (the driver JVM is a child of main.py's Python)."""
    total = 0
    for task in [pid, *children(pid)]:
        try:
            status = Path(f"/proc/{task}/status").read_text()
        except OSError:
            continue
        line = next((line for line in status.splitlines() if line.startswith("VmRSS:")), "VmRSS: 0 kB")
        total += int(line.split()[1]) * 1024
    return total


def children(pid: int) -> list[int]:
    found = []
    for path in Path(f"/proc/{pid}/task").glob("*/children"):
        for child in path.read_text().split():
            found += [int(child), *children(int(child))]
    return found


def run_job(project: Path, folder: Path, changes: dict[str, str], batches: int) -> dict:
    env = {key: value for key, value in os.environ.items() if not key.startswith("STREAM_JOB_")}
    env.update(
        {
            "STREAM_JOB_QUERY__CHECKPOINT_LOCATION": str(folder / "checkpoint"),
            "STREAM_JOB_SINK__PATH": str(folder / "output"),
            "STREAM_JOB_SOURCE__TYPE": "rate",
            "STREAM_JOB_SOURCE__RATE__ROWS_PER_BATCH": str(EVENTS_PER_BATCH),
            "STREAM_JOB_SOURCE__RATE__ADVANCE_PER_BATCH": "10 seconds",
            "STREAM_JOB_SOURCE__RATE__KEYS": str(UNIQUE_KEYS),
            "STREAM_JOB_QUERY__TRIGGER": "100 milliseconds",  # back to back
            "STREAM_JOB_MONITORING__PROGRESS_FORMAT": "json",
            **changes,
        }
    )
    command = [sys.executable, "main.py", "--max-batches", str(batches)]
    started = time.monotonic()
    process = subprocess.Popen(command, cwd=project, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    peak = [0]

    def sample() -> None:
        while process.poll() is None:
            peak[0] = max(peak[0], resident_bytes(process.pid))
            time.sleep(1)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    out, err = process.communicate()
    sampler.join()
    events = [json.loads(line) for line in out.splitlines() if line.startswith("{")]
    batches = [event for event in events if event.get("event") == "batch"]
    # The batch in flight at --max-batches runs alone in a query of its own (a restart): not steady state.
    rows = [event for event in batches if event["run_id"] == batches[0]["run_id"]] if batches else []
    settled = rows[-SETTLED:]
    return {
        "exit_code": process.returncode,
        "seconds": round(time.monotonic() - started, 1),
        "batches": len(rows),
        "last_stderr_line": next((line for line in reversed(err.splitlines()) if line.strip()), ""),
        "batch_seconds": [round(row["batch_duration_ms"] / 1000, 2) for row in rows],
        "state_rows": [row["state_rows"] for row in rows],
        "heap_live_bytes": [row.get("heap_live_bytes") for row in rows],
        "heap_max_bytes": rows[-1].get("heap_max_bytes") if rows else None,
        "settled_median_batch_seconds": statistics.median(r["batch_duration_ms"] / 1000 for r in settled)
        if settled
        else None,
        "settled_max_batch_seconds": max(r["batch_duration_ms"] / 1000 for r in settled) if settled else None,
        "settled_state_rows": statistics.median(r["state_rows"] for r in settled) if settled else None,
        "peak_heap_live_bytes": max((row.get("heap_live_bytes") or 0 for row in rows), default=0),
        "peak_resident_bytes": peak[0],
    }


def main() -> None:
    args = arguments()
    scratch = Path(tempfile.mkdtemp(prefix="default-answers-"))
    try:
        run([str(Path(sys.executable).parent / "cookiecutter"), "--no-input", "-o", str(scratch), str(REPO)], REPO)
        project = scratch / "stream-job"
        baked = (project / "settings.yaml").read_text()
        runs = {}
        for name, changes in CONFIGURATIONS.items():
            print(f"running {name} ...", flush=True)
            runs[name] = run_job(project, scratch / name, changes, args.batches)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    result = {
        "what": (
            f"the default bake's python main.py at its answers: {EVENTS_PER_BATCH:,} events a batch, 10 s of event"
            " time each, every event its own key, batches back to back"
        ),
        "baked_provider": next(
            line.split(":")[1].strip() for line in baked.splitlines() if line.startswith("  provider:")
        ),
        "runs": runs,
        "machine": machine(),
    }
    save(RESULTS_DIR, "default_answers", result, report(result))


def report(result: dict) -> list[str]:
    mib = 2**20
    lines = [
        "# The default bake at its own answers",
        "",
        f"{result['what']}. A batch holds the rate when it takes less than 10 s.",
        "",
        "| run | exit | batches | median / max batch s (last 20) | state rows (last 20) | peak live heap MiB | heap max MiB | peak resident MiB |",
        "| --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for name, r in result["runs"].items():
        settled = (
            f"{r['settled_median_batch_seconds']:.2f} / {r['settled_max_batch_seconds']:.2f}"
            if r["settled_median_batch_seconds"] is not None
            else "-"
        )
        rows = f"{r['settled_state_rows']:,.0f}" if r["settled_state_rows"] is not None else "-"
        lines.append(
            f"| {name} | {r['exit_code']} | {r['batches']} | {settled} | {rows} | {r['peak_heap_live_bytes'] / mib:,.0f}"
            f" | {(r['heap_max_bytes'] or 0) / mib:,.0f} | {r['peak_resident_bytes'] / mib:,.0f} |"
        )
    lines += ["", "Batch seconds and state rows every 10 batches:", ""]
    for name, r in result["runs"].items():
        points = ", ".join(
            f"{index}: {seconds:.1f} s / {rows / 1e6:.1f}M"
            for index, (seconds, rows) in enumerate(zip(r["batch_seconds"], r["state_rows"], strict=True))
            if index % 10 == 0
        )
        lines.append(f"- {name}: {points}; ended: {r['last_stderr_line'][:300]}")
    lines.append("")
    return lines


if __name__ == "__main__":
    main()
