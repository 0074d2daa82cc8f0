"""`make demo` with the advised shuffle partitions against Spark's default 200, side by side.

Bakes the default project into a scratch directory and runs its `make demo` (the rate source,
10,000 rows per micro-batch, 6 batches) with DEMO_PARTITIONS=local (the count advised for the
cores of spark.master: 2 per core) and DEMO_PARTITIONS=200, alternating which runs first, each
from a fresh demo checkpoint. Reads the job's own batch lines: rows per second is the input rows
of all batches over the seconds they took; the wall time is the whole `make demo`, JVM start and
output included. Both must write the same rows. Prints the figures and writes them, with the
machine, to RESULTS_DIR/demo_partitions.json and demo_partitions.md.

    .venv/bin/python benchmarks/demo_partitions.py [--rounds 3]
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

import pyarrow.parquet
from overhead import REPO, machine, run, save

BATCH_LINE = re.compile(r"^batch (\d+): ([\d,]+) input rows, .* took ([\d.]+) s$", re.M)
PARTITIONS_LINE = re.compile(r"^partitions: (\d+) shuffle partitions", re.M)
CASES = ("local", "200")


def arguments() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=3, help="runs of each, alternating (default: %(default)s)")
    parser.add_argument("--results-dir", type=Path, default=REPO / "benchmarks" / "results")
    args = parser.parse_args()
    if args.rounds < 1:
        parser.error("--rounds must be 1 or more")
    return args


def demo(project: Path, partitions: str) -> dict[str, object]:
    """One `make demo` from a fresh demo checkpoint: its batches, rows per second and wall time."""
    shutil.rmtree(project / "demo", ignore_errors=True)
    venv = Path(sys.executable).parent.parent
    started = time.perf_counter()
    done = run(["make", "demo", f"VENV={venv}", f"DEMO_PARTITIONS={partitions}"], cwd=project)
    wall = time.perf_counter() - started
    batches = [(int(rows.replace(",", "")), float(took)) for _, rows, took in BATCH_LINE.findall(done.stdout)]
    if not batches:
        sys.exit(f"no batch lines in make demo's output:\n{done.stdout[-2000:]}")
    used = PARTITIONS_LINE.search(done.stdout)
    rows = sum(count for count, _ in batches)
    seconds = sum(took for _, took in batches)
    return {
        "partitions": int(used.group(1)) if used else int(partitions),
        "batches": len(batches),
        "input_rows": rows,
        "batch_seconds": round(seconds, 2),
        "rows_per_second": round(rows / seconds),
        "wall_seconds": round(wall, 2),
        "output": committed_rows(project / "demo" / "output" / "stream_job"),
    }


def committed_rows(output: Path) -> list[tuple]:
    """The rows of the files the sink's log committed: --max-batches may leave the files of a batch
    it abandoned, which Spark does not read and neither does this."""
    paths = []
    for entry in sorted((output / "_spark_metadata").glob("[0-9]*")):  # not the .crc files
        for line in entry.read_text().splitlines()[1:]:  # the first line is the log's version
            record = json.loads(line)
            if record["action"] == "add":
                paths.append(record["path"].removeprefix("file://").removeprefix("file:"))
    rows = [tuple(row.values()) for path in paths for row in pyarrow.parquet.read_table(path).to_pylist()]
    return sorted(rows)


def main() -> None:
    args = arguments()
    scratch = Path(tempfile.mkdtemp(prefix="demo-partitions-"))
    try:
        run([sys.executable, "-m", "cookiecutter", "--no-input", "--default-config", "-o", str(scratch), str(REPO)],
            cwd=REPO)  # fmt: skip
        project = scratch / "stream-job"
        runs: dict[str, list[dict[str, object]]] = {case: [] for case in CASES}
        for number in range(args.rounds):
            for case in CASES if number % 2 == 0 else CASES[::-1]:
                result = demo(project, case)
                runs[case].append(result)
                print(
                    f"round {number + 1}/{args.rounds}: {result['partitions']} partitions,"
                    f" {result['rows_per_second']:,} rows/s, make demo {result['wall_seconds']} s",
                    flush=True,
                )
        outputs = {tuple(map(tuple, run.pop("output"))) for case in CASES for run in runs[case]}  # type: ignore[arg-type]
        if len(outputs) != 1:
            sys.exit("the demo wrote different rows with different partition counts")
        speed = [
            local["rows_per_second"] / default["rows_per_second"]  # type: ignore[operator]
            for local, default in zip(runs["local"], runs["200"], strict=True)
        ]
        wall = [
            default["wall_seconds"] / local["wall_seconds"]  # type: ignore[operator]
            for local, default in zip(runs["local"], runs["200"], strict=True)
        ]
        result = {
            "what": "make demo of the default bake: advised partitions (DEMO_PARTITIONS=local) against 200",
            "runs": runs,
            "rows_written": len(next(iter(outputs))),
            "median_rows_per_second": {
                case: statistics.median(r["rows_per_second"] for r in runs[case])
                for case in CASES  # type: ignore[misc]
            },
            "median_wall_seconds": {
                case: statistics.median(r["wall_seconds"] for r in runs[case])
                for case in CASES  # type: ignore[misc]
            },
            "rows_per_second_ratio_per_round": [round(ratio, 2) for ratio in speed],
            "wall_ratio_per_round": [round(ratio, 2) for ratio in wall],
            "machine": machine(),
        }
        write_results(args.results_dir, result)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def write_results(folder: Path, result: dict) -> None:
    rows = []
    for case, runs in result["runs"].items():
        partitions = runs[0]["partitions"]
        speeds = ", ".join(f"{r['rows_per_second']:,}" for r in runs)
        walls = ", ".join(f"{r['wall_seconds']:.1f}" for r in runs)
        rows.append(
            f"| {case} ({partitions} partitions) | {result['median_rows_per_second'][case]:,} | {speeds} |"
            f" {result['median_wall_seconds'][case]:.1f} | {walls} |"
        )
    lines = [
        "# make demo: advised partitions against 200",
        "",
        f"{result['what']}; {len(result['wall_ratio_per_round'])} rounds, alternating which runs first;"
        " rows/s = input rows of all batches / the seconds the batches took.",
        "",
        "| DEMO_PARTITIONS | median rows/s | all rows/s | median make demo s | all s |",
        "| --- | --- | --- | --- | --- |",
        *rows,
        "",
        f"Rows per second, advised / 200, per round: **{', '.join(map(str, result['rows_per_second_ratio_per_round']))}**;"
        f" make demo's wall time, 200 / advised: {', '.join(map(str, result['wall_ratio_per_round']))}.",
        f"Both wrote the same {result['rows_written']:,} rows.",
        "",
    ]
    save(folder, "demo_partitions", result, lines)


if __name__ == "__main__":
    main()
