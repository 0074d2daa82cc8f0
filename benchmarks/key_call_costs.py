"""What a custom_state batch costs per key it calls Python for, and per row, on one pinned core.

custom_state (transformWithStateInPandas) calls the user's Python once per key a batch holds, with
that key's rows, and once more for each key whose session timer fires. So a batch's time is a fixed
part, a part per key called and a part per row:
    seconds = fixed + per_key x (keys in the batch + keys expiring) + per_row x rows in the batch.
The session timeout (20 s) and watermark (10 s) are short, so that sessions of keys seen once
expire within the run and the batches measured are at steady state: as many keys expire as start.
Bakes the custom_state starter and runs its `python main.py` on the rate source (10 s of event
time a batch, batches back to back), the whole job kept to one CPU (taskset) on local[1] with 2
shuffle partitions, as core_rates.py's per-core figures were measured, for several (rows, keys)
pairs; the median of the settled batches of each is fitted by least squares to the three parts.
Writes RESULTS_DIR/key_call_costs.json and .md, and prints them. Run nothing else beside it.

    .venv/bin/python benchmarks/key_call_costs.py [--batches 14]
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
from pathlib import Path

from overhead import machine, run, save

REPO = Path(__file__).resolve().parents[1]
RESULTS_DIR = REPO / "benchmarks" / "results"
UNIQUE_KEYS = 10**15
# (rows a batch, distinct keys): keys vary at fixed rows, and rows at fixed keys.
POINTS = [(2_000, UNIQUE_KEYS), (2_000, 500), (2_000, 100), (500, UNIQUE_KEYS), (500, 100)]
WARMUP = 6  # the first expiries come some 3 batches in


def arguments() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--batches", type=int, default=16, help="batches per run (default: %(default)s)")
    parser.add_argument("--refit", action="store_true", help="fit the points of the last run again, without running")
    return parser.parse_args()


def batch_seconds(project: Path, folder: Path, rows: int, keys: int, batches: int) -> list[float]:
    env = {key: value for key, value in os.environ.items() if not key.startswith("CS_")}
    env.update(
        {
            "CS_QUERY__CHECKPOINT_LOCATION": str(folder / "checkpoint"),
            "CS_SINK__PATH": str(folder / "output"),
            "CS_SOURCE__TYPE": "rate",
            "CS_SOURCE__RATE__ROWS_PER_BATCH": str(rows),
            "CS_SOURCE__RATE__ADVANCE_PER_BATCH": "10 seconds",
            "CS_SOURCE__RATE__KEYS": str(keys),
            "CS_QUERY__TRIGGER": "100 milliseconds",
            "CS_SPARK__MASTER": "local[1]",
            "CS_SPARK__SHUFFLE_PARTITIONS": "2",
            "CS_MONITORING__PROGRESS_FORMAT": "json",
            "CS_QUERY__WATERMARK": "10 seconds",
            "CS_QUERY__CUSTOM_STATE__SESSION_TIMEOUT": "20 seconds",
        }
    )
    command = ["taskset", "-c", "0", sys.executable, "main.py", "--max-batches", str(batches)]
    done = subprocess.run(command, cwd=project, env=env, capture_output=True, text=True)
    if done.returncode != 0:
        sys.exit(f"run failed ({done.returncode}): {done.stderr[-2000:]}")
    events = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    return [event["batch_duration_ms"] / 1000 for event in events if event.get("event") == "batch"]


def fit_calls(points: list[tuple[int, int, float]]) -> tuple[float, float]:
    """Least squares of seconds = fixed + per_key x keys called, the rows' own part left out."""
    mean_calls = statistics.mean(calls for _, calls, _ in points)
    mean_seconds = statistics.mean(seconds for _, _, seconds in points)
    spread = sum((calls - mean_calls) ** 2 for _, calls, _ in points)
    per_key = sum((calls - mean_calls) * (seconds - mean_seconds) for _, calls, seconds in points) / spread
    return mean_seconds - per_key * mean_calls, per_key


def fit(points: list[tuple[int, int, float]]) -> tuple[float, float, float]:
    """Least squares of seconds = fixed + per_key x keys + per_row x rows (normal equations, 3 x 3)."""
    columns = [[1.0, float(keys), float(rows)] for rows, keys, _ in points]
    matrix = [[sum(c[i] * c[j] for c in columns) for j in range(3)] for i in range(3)]
    vector = [sum(c[i] * seconds for c, (_, _, seconds) in zip(columns, points, strict=True)) for i in range(3)]
    for pivot in range(3):  # Gauss-Jordan
        top = matrix[pivot][pivot]
        matrix[pivot] = [value / top for value in matrix[pivot]]
        vector[pivot] /= top
        for row in range(3):
            if row != pivot:
                factor = matrix[row][pivot]
                matrix[row] = [a - factor * b for a, b in zip(matrix[row], matrix[pivot], strict=True)]
                vector[row] -= factor * vector[pivot]
    fixed, per_key, per_row = vector
    return fixed, per_key, per_row


def main() -> None:
    args = arguments()
    if args.refit:  # the points of the last run, fitted again
        points = json.loads((RESULTS_DIR / "key_call_costs.json").read_text())["points"]
        write([(p["rows"], p["keys"], p["median_batch_seconds"]) for p in points])
        return
    scratch = Path(tempfile.mkdtemp(prefix="key-calls-"))
    try:
        cookiecutter = str(Path(sys.executable).parent / "cookiecutter")
        run(
            [
                cookiecutter,
                "--no-input",
                "-o",
                str(scratch),
                str(REPO),
                "stateful_operator=custom_state",
                "project_slug=cs",
                "package_name=cs",
            ],
            REPO,
        )
        project = scratch / "cs"
        measured = []
        for number, (rows, keys) in enumerate(POINTS):
            print(f"rows {rows}, keys {keys} ...", flush=True)
            durations = batch_seconds(project, scratch / f"run-{number}", rows, keys, args.batches)
            # Keys seen once expire a few batches later, as many a batch as start; repeating keys never do.
            calls = min(rows, keys) * (2 if keys >= rows else 1)
            measured.append((rows, calls, statistics.median(durations[WARMUP:])))
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    write(measured)


def write(measured: list[tuple[int, int, float]]) -> None:
    fixed, per_key, per_row = fit(measured)
    calls_fixed, calls_per_key = fit_calls(measured)
    result = {
        "what": "custom_state's batch time on one pinned core (local[1], 2 partitions), 10 s of event time a batch",
        "points": [{"rows": r, "keys": k, "median_batch_seconds": round(s, 3)} for r, k, s in measured],
        "fixed_seconds_per_batch": round(fixed, 4),
        "seconds_per_key_call": per_key,
        "seconds_per_row": per_row,
        # The rows' part fits below zero, lost in the calls' spread: the two-part fit is the one used.
        "calls_only": {"fixed_seconds_per_batch": round(calls_fixed, 4), "seconds_per_key_call": calls_per_key},
        "machine": machine(),
    }
    lines = [
        "# custom_state: the cost per key called and per row",
        "",
        f"{result['what']}; medians of the batches after the first {WARMUP}.",
        "",
        "| rows a batch | keys called a batch (with events + expiring) | median batch s |",
        "| --- | --- | --- |",
        *(f"| {r:,} | {k:,} | {s:.3f} |" for r, k, s in measured),
        "",
        f"Fitted: {fixed:.3f} s a batch + {per_key * 1e3:.3f} ms per key called + {per_row * 1e3:.3f} ms per row.",
        "",
        f"Without a part per row: {calls_fixed:.3f} s a batch + {calls_per_key * 1e3:.3f} ms per key called"
        " (the figures machinery/core/sizing/core_rates.py uses). Each point against it:",
        "",
        *(
            f"- {r:,} rows, {k:,} calls: {s:.3f} s measured, {calls_fixed + calls_per_key * k:.3f} s fitted"
            for r, k, s in measured
        ),
        "",
    ]
    save(RESULTS_DIR, "key_call_costs", result, lines)


if __name__ == "__main__":
    main()
