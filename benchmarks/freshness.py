"""Freshness of a Delta table: the time from an event's arrival to its count in the table, update mode (each
batch MERGEd by the result's key) against append mode (a window written once the watermark closes it).

Bakes the default project (windowed count) with `sink=delta` and starts two jobs at once, `python main.py`
with STREAM_JOB_* overrides: the files source on one shared landing folder, a processing-time trigger,
`--window` windows, `--watermark`, the same Delta writer (`--writer`), each its own checkpoint and table,
one in update mode and one in append mode. Once both run, a feeder writes a small JSON file of events
(event_id, key, event_time = now; `--keys` keys in turn) every `--every` seconds, written hidden and
renamed: the rename is the events' arrival. A poller reads each table every `--poll` seconds (deltalake:
DeltaTable.update_incremental() then to_pyarrow_table) and records when each count first shows: for a (window, key)
whose events e1..en arrived in that order, e_i is visible once the table's count for it is >= i.
Events of the first `--warmup` seconds of feeding are left out, and so are those fed in the last
`--drain` seconds, which only let the watermark close the measured windows (append mode emits a window
only when a later event moves the watermark past it). Prints p50, p95 and p99 per mode (and each job's
batches and median batch duration, from its progress lines) and writes
RESULTS_DIR/freshness[_<writer>].json and .md.

    .venv/bin/python benchmarks/freshness.py [--writer deltalake] [--seconds 120] [--warmup 20] [--every 0.5] [--keep]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from importlib.metadata import version
from pathlib import Path

from deltalake import DeltaTable
from deltalake.exceptions import TableNotFoundError
from overhead import machine, run, save

REPO = Path(__file__).resolve().parents[1]
MODES = ("update", "append")


def arguments() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--writer", choices=("deltalake", "delta-spark"), default="deltalake")
    parser.add_argument("--seconds", type=float, default=120, help="seconds of measured feeding (default: %(default)s)")
    parser.add_argument("--warmup", type=float, default=20, help="first seconds left out (default: %(default)s)")
    parser.add_argument("--drain", type=float, default=25, help="feeding after, not measured (default: %(default)s)")
    parser.add_argument("--every", type=float, default=0.5, help="seconds between files (default: %(default)s)")
    parser.add_argument("--events", type=int, default=10, help="events per file (default: %(default)s)")
    parser.add_argument("--keys", type=int, default=5, help="(default: %(default)s)")
    parser.add_argument("--poll", type=float, default=0.15, help="seconds between table reads (default: %(default)s)")
    parser.add_argument("--trigger", default="1 second", help="(default: %(default)s)")
    parser.add_argument("--window", default="10 seconds", help="(default: %(default)s)")
    parser.add_argument("--watermark", default="5 seconds", help="(default: %(default)s)")
    parser.add_argument("--keep", action="store_true", help="keep the scratch folder (bake, job logs, tables)")
    parser.add_argument("--results-dir", type=Path, default=REPO / "benchmarks" / "results")
    return parser.parse_args()


def job_environment(scratch: Path, landing: Path, mode: str, args) -> dict[str, str]:
    env = {key: value for key, value in os.environ.items() if not key.startswith("STREAM_JOB_")}
    overrides = {
        "SOURCE__TYPE": "files",
        "SOURCE__FILES__PATH": str(landing),
        "SINK__TYPE": "delta",
        "SINK__OUTPUT_MODE": mode,
        "SINK__DELTA__WRITER": args.writer,
        "SINK__PATH": str(scratch / f"table-{mode}"),
        "QUERY__CHECKPOINT_LOCATION": str(scratch / f"checkpoint-{mode}"),
        "QUERY__TRIGGER": args.trigger,
        "QUERY__WINDOW": args.window,
        "QUERY__WATERMARK": args.watermark,
    }
    return {**env, **{f"STREAM_JOB_{key}": value for key, value in overrides.items()}}


def start_jobs(project: Path, scratch: Path, landing: Path, args) -> dict[str, subprocess.Popen]:
    jobs = {}
    for mode in MODES:
        log = (scratch / f"job-{mode}.log").open("w")
        jobs[mode] = subprocess.Popen(
            [sys.executable, "main.py"],
            cwd=project,
            env=job_environment(scratch, landing, mode, args),
            stdout=log,
            stderr=log,
            start_new_session=True,
        )
    return jobs


def wait_until_running(scratch: Path, jobs: dict[str, subprocess.Popen], limit: float = 300) -> None:
    """Until each job's query has started (Spark wrote its checkpoint's metadata)."""
    deadline = time.time() + limit
    while not all((scratch / f"checkpoint-{mode}" / "metadata").exists() for mode in MODES):
        failed = [mode for mode, job in jobs.items() if job.poll() is not None]
        if failed or time.time() > deadline:
            logs = "\n".join((scratch / f"job-{mode}.log").read_text()[-3000:] for mode in MODES)
            sys.exit(f"the {failed or 'jobs'} did not start:\n{logs}")
        time.sleep(0.5)


class Poller:
    """Each table's counts, read in turn, and when each (window, key)'s count first reached each value."""

    def __init__(self, scratch: Path):
        self.paths = {mode: str(scratch / f"table-{mode}") for mode in MODES}
        self.tables: dict[str, DeltaTable] = {}
        self.seen: dict[str, dict[tuple[int, str], list[float]]] = {mode: {} for mode in MODES}

    def poll(self) -> None:
        for mode, path in self.paths.items():
            table = self.tables.get(mode)
            try:
                if table is None:
                    table = self.tables[mode] = DeltaTable(path)
                else:
                    table.update_incremental()  # the newest version (update() is an UPDATE)
            except TableNotFoundError:
                continue
            rows = table.to_pyarrow_table(columns=["window_start", "key", "events"]).to_pylist()
            now = time.time()
            for row in rows:
                moments = self.seen[mode].setdefault((_micros(row["window_start"]), row["key"]), [])
                moments.extend([now] * (row["events"] - len(moments)))  # the i-th count first seen now


def _micros(moment: datetime) -> int:
    return round(moment.replace(tzinfo=moment.tzinfo or UTC).timestamp() * 1_000_000)


def feed(landing: Path, number: int, args) -> list[tuple[int, str, float, datetime]]:
    """One file of events stamped now, its arrival its rename: (number, key, arrival, event time) of each."""
    now = datetime.now(UTC)
    events = [(number + j, f"key-{(number + j) % args.keys}") for j in range(args.events)]
    lines = [json.dumps({"event_id": f"evt-{n}", "key": key, "event_time": now.isoformat()}) for n, key in events]
    hidden = landing / f".events-{number:08d}.json.tmp"
    hidden.write_text("\n".join(lines) + "\n")
    hidden.rename(landing / f"events-{number:08d}.json")
    arrived = time.time()
    return [(n, key, arrived, now) for n, key in events]


def window_of(moment: datetime, window_seconds: float) -> int:
    micros = _micros(moment)
    return micros - micros % round(window_seconds * 1_000_000)


def latencies(fed: list, seen: dict, window_seconds: float, measured: tuple[float, float]) -> list[float]:
    """Per measured event: when its (window, key)'s count first reached its place, less its arrival."""
    order: dict[tuple[int, str], int] = {}
    found = []
    for _, key, arrived, stamped in fed:  # in arrival order
        cell = (window_of(stamped, window_seconds), key)
        order[cell] = order.get(cell, 0) + 1
        if measured[0] <= arrived < measured[1]:
            moments = seen.get(cell, [])
            found.append(moments[order[cell] - 1] - arrived if len(moments) >= order[cell] else None)
    return found


def percentile(values: list[float], share: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(share * (len(ordered) - 1)))]


def seconds(duration: str) -> float:
    amount, unit = duration.split()
    return float(amount) * {"second": 1, "minute": 60}[unit.rstrip("s")]


def main() -> None:
    args = arguments()
    scratch = Path(tempfile.mkdtemp(prefix="freshness-"))
    landing = scratch / "landing"
    landing.mkdir()
    run([sys.executable, "-m", "cookiecutter", "--no-input", "-o", str(scratch), str(REPO), "sink=delta"], REPO)
    jobs = start_jobs(scratch / "stream-job", scratch, landing, args)
    try:
        wait_until_running(scratch, jobs)
        poller, fed, number = Poller(scratch), [], 0
        began = time.time()
        measured = (began + args.warmup, began + args.warmup + args.seconds)
        next_file = began
        while time.time() < measured[1] + args.drain:
            if time.time() >= next_file:
                fed += feed(landing, number, args)
                number += args.events
                next_file += args.every
            poller.poll()
            time.sleep(max(0.0, min(args.poll, next_file - time.time())))
        for _ in range(int(10 / args.poll)):  # the last batches' commits
            poller.poll()
            time.sleep(args.poll)
    finally:
        for job in jobs.values():
            os.killpg(job.pid, signal.SIGTERM)
        for job in jobs.values():
            job.wait(timeout=180)
    window = seconds(args.window)
    found = {mode: latencies(fed, poller.seen[mode], window, measured) for mode in MODES}
    write_results(args, found, {mode: batch_seconds(scratch / f"job-{mode}.log") for mode in MODES}, scratch)


def batch_seconds(log: Path) -> list[float]:
    """Each batch's duration, from the job's progress lines ('batch N: ..., took 0.90 s')."""
    return [float(line.rsplit("took ", 1)[1].split()[0]) for line in log.read_text().splitlines() if " took " in line]


def write_results(args, found: dict[str, list], batches: dict[str, list[float]], scratch: Path) -> None:
    figures = {}
    for mode, values in found.items():
        shown = [value for value in values if value is not None]
        figures[mode] = {
            "events": len(values),
            "never_visible": len(values) - len(shown),
            **{f"p{share}_s": round(percentile(shown, share / 100), 3) for share in (50, 95, 99)},
            "max_s": round(max(shown), 3),
            "batches": len(batches[mode]),
            "median_batch_s": round(statistics.median(batches[mode]), 2) if batches[mode] else None,
        }
    settings = {key: value for key, value in vars(args).items() if key != "results_dir"}
    result = {
        "what": "seconds from an event's arrival (its file's rename into the landing folder) to the first read"
        " of the Delta table whose count for its (window, key) includes it",
        "settings": {**settings, "source": "files, one landing folder shared by both jobs", "jobs": "at once"},
        "modes": figures,
        "versions": {"deltalake": version("deltalake"), "delta-spark": "4.4.0 (the bake's sink.delta.version)"},
        "machine": machine(),
    }
    name = "freshness" if args.writer == "deltalake" else f"freshness_{args.writer.replace('-', '_')}"
    lines = [
        f"# Freshness of a Delta table: update mode (MERGE) against append mode ({args.writer} writer)",
        "",
        f"{result['what']}; both jobs at once on one landing folder. Trigger {args.trigger}, window {args.window},"
        f" watermark {args.watermark}; a file of {args.events} events ({args.keys} keys) every {args.every} s for"
        f" {args.seconds:.0f} s measured after a {args.warmup:.0f} s warm-up; tables read every {args.poll} s.",
        "",
        "| mode | events | never visible | p50 s | p95 s | p99 s | max s | batches | median batch s |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- |",
        *(
            f"| {mode} | {f['events']} | {f['never_visible']} | {f['p50_s']:.2f} | {f['p95_s']:.2f} |"
            f" {f['p99_s']:.2f} | {f['max_s']:.2f} | {f['batches']} | {f['median_batch_s']} |"
            for mode, f in figures.items()
        ),
        "",
        f"Versions: {result['versions']}.",
        "",
    ]
    save(args.results_dir, name, result, lines)
    if args.keep:
        print(f"scratch (job logs, tables): {scratch}")
    else:
        shutil.rmtree(scratch, ignore_errors=True)


if __name__ == "__main__":
    main()
