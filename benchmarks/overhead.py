"""Template overhead: the generated job against a hand-written script doing the same query.

Bakes the default project with the files source and the parquet sink into a scratch directory,
writes sample files, then runs the generated job (`python main.py`, available-now) and
benchmarks/handwritten_job.py on the same files with the same Spark confs (the job's own, from its
`config` command), alternating which goes first, each run a fresh process with a fresh checkpoint
and output. Both outputs must hold the same rows. Prints the wall times and their ratio and writes
them, with the machine, to RESULTS_DIR/overhead.json and overhead.md.

    .venv/bin/python benchmarks/overhead.py [--rounds 7] [--files 20] [--events-per-file 5000]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pyarrow.dataset
import pyspark
import yaml

REPO = Path(__file__).resolve().parents[1]
HANDWRITTEN = Path(__file__).resolve().with_name("handwritten_job.py")
PHASES = ("start", "batches", "stop")
ANSWERS = {
    "source": "files",
    "sink": "parquet",
    "stateful_operator": "windowed_aggregation",
    "state_store_provider": "hdfs",
}


def arguments() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=7, help="runs of each, alternating (default: %(default)s)")
    parser.add_argument("--files", type=int, default=20, help="landing files, one per batch (default: %(default)s)")
    parser.add_argument("--events-per-file", type=int, default=5000, help="(default: %(default)s)")
    parser.add_argument("--partitions", type=int, default=8, help="shuffle partitions (default: %(default)s)")
    parser.add_argument("--results-dir", type=Path, default=REPO / "benchmarks" / "results")
    args = parser.parse_args()
    if min(args.rounds, args.files, args.events_per_file, args.partitions) < 1:
        parser.error("--rounds, --files, --events-per-file and --partitions must be 1 or more")
    return args


def run(command: list[str], cwd: Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True)
    if done.returncode != 0:
        sys.exit(f"failed ({done.returncode}): {' '.join(command)}\n{done.stdout[-2000:]}\n{done.stderr[-3000:]}")
    return done


def bake(scratch: Path, partitions: int) -> Path:
    answers = [f"{key}={value}" for key, value in {**ANSWERS, "shuffle_partitions": partitions}.items()]
    run(
        [
            sys.executable,
            "-m",
            "cookiecutter",
            "--no-input",
            "--default-config",
            "-o",
            str(scratch),
            str(REPO),
            *answers,
        ],
        cwd=REPO,
    )
    return scratch / "stream-job"


def read_rows(output: Path) -> list[tuple]:
    table = pyarrow.dataset.dataset(output, format="parquet").to_table()  # skips _spark_metadata
    return sorted(tuple(row.values()) for row in table.to_pylist())


def machine() -> dict[str, object]:
    java = subprocess.run(["java", "-version"], capture_output=True, text=True).stderr.splitlines()
    memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    return {
        "platform": platform.platform(),
        "cpus": os.cpu_count(),
        "memory_gib": round(memory, 1),
        "python": platform.python_version(),
        "java": java[0] if java else "unknown",
        "pyspark": pyspark.__version__,
    }


def main() -> None:
    args = arguments()
    scratch = Path(tempfile.mkdtemp(prefix="overhead-"))
    try:
        project = bake(scratch, args.partitions)
        # One file per batch, so that the template's per-batch work (progress, polling) counts many times.
        env = {key: value for key, value in os.environ.items() if not key.startswith("STREAM_JOB_")}
        env.update(
            {"STREAM_JOB_QUERY__TRIGGER": "available_now", "STREAM_JOB_SOURCE__FILES__MAX_FILES_PER_TRIGGER": "1"}
        )
        python = [sys.executable]
        run([*python, "-m", "stream_job", "sample-input", "--files", str(args.files),
             "--events-per-file", str(args.events_per_file), "--keys", "100"], cwd=project, env=env)  # fmt: skip
        config = yaml.safe_load(run([*python, "-m", "stream_job", "config"], cwd=project, env=env).stdout)
        settings = config["settings"]
        confs = {**config["spark_confs"], "spark.master": settings["spark"]["master"]}
        query = {
            "watermark": settings["query"]["watermark"],
            "window": settings["query"]["window"],
            "max_files_per_trigger": settings["source"]["files"]["max_files_per_trigger"],
        }
        landing = settings["source"]["files"]["path"]

        times: dict[str, list[float]] = {"generated": [], "handwritten": []}
        phases: dict[str, list[dict[str, float]]] = {"generated": [], "handwritten": []}
        outputs: dict[str, list[tuple]] = {}
        for number in range(args.rounds):
            order = ("generated", "handwritten") if number % 2 == 0 else ("handwritten", "generated")
            for name in order:
                folder = scratch / f"run-{number}-{name}"
                output, checkpoint = folder / "output", folder / "checkpoint"
                if name == "generated":
                    command = [*python, "main.py"]
                    run_env = {
                        **env,
                        "STREAM_JOB_QUERY__CHECKPOINT_LOCATION": str(checkpoint),
                        "STREAM_JOB_SINK__PATH": str(output),
                    }
                else:
                    command = [*python, str(HANDWRITTEN), landing, str(output), str(checkpoint),
                               json.dumps(query), json.dumps(confs)]  # fmt: skip
                    run_env = env
                launched = time.time()
                run(command, cwd=project, env=run_env)
                exited = time.time()
                times[name].append(exited - launched)
                phases[name].append(run_phases(checkpoint, launched, exited))
                rows = read_rows(output)
                if outputs.setdefault(name, rows) != rows:
                    sys.exit(f"{name} wrote other rows in round {number}")
                print(f"round {number + 1}/{args.rounds}: {name} {times[name][-1]:.2f} s", flush=True)
        if outputs["generated"] != outputs["handwritten"]:
            sys.exit("the generated job and the hand-written script wrote different rows")

        ratios = [job / hand for job, hand in zip(times["generated"], times["handwritten"], strict=True)]
        result = {
            "what": "wall time of a whole run (process start to exit), generated job / hand-written script",
            "input": {"files": args.files, "events_per_file": args.events_per_file, "keys": 100},
            "query": {**query, "shuffle_partitions": args.partitions, "provider": "hdfs", "trigger": "available_now"},
            "rows_written": len(outputs["generated"]),
            "seconds": times,
            "median_seconds": {name: statistics.median(values) for name, values in times.items()},
            "ratio_of_medians": statistics.median(times["generated"]) / statistics.median(times["handwritten"]),
            "ratios_per_round": ratios,
            "median_of_ratios": statistics.median(ratios),
            "phases": phases,
            "median_phase_seconds": {
                name: {phase: statistics.median(run[phase] for run in runs) for phase in PHASES}
                for name, runs in phases.items()
            },
            "machine": machine(),
        }
        write_results(args.results_dir, result)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def run_phases(checkpoint: Path, launched: float, exited: float) -> dict[str, float]:
    """A run's wall time in three parts, told by its checkpoint's files: until the first batch's
    offsets are written (process, imports, checks, JVM, planning), the batches until the last
    commit, and the stop (Spark and the process)."""
    first = (checkpoint / "offsets" / "0").stat().st_mtime
    last = max(path.stat().st_mtime for path in (checkpoint / "commits").glob("[0-9]*"))
    return {"start": first - launched, "batches": last - first, "stop": exited - last}


def save(folder: Path, name: str, result: dict, lines: list[str]) -> None:
    """Write a benchmark's figures as NAME.json and its report as NAME.md (ending with the machine), and print it."""
    lines = [*lines, f"Machine: {result['machine']}.", ""]
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f"{name}.json").write_text(json.dumps(result, indent=2) + "\n")
    (folder / f"{name}.md").write_text("\n".join(lines))
    print("\n".join(lines))


def write_results(folder: Path, result: dict) -> None:
    medians = result["median_seconds"]
    lines = [
        "# Template overhead",
        "",
        f"{result['what']}; {len(result['ratios_per_round'])} rounds, alternating which runs first.",
        "",
        "| run | median s | all s |",
        "| --- | --- | --- |",
        *(
            f"| {name} | {medians[name]:.2f} | {', '.join(f'{value:.2f}' for value in values)} |"
            for name, values in result["seconds"].items()
        ),
        "",
        f"Median of the per-round ratios: **{result['median_of_ratios']:.3f}**; per round:"
        f" {', '.join(f'{ratio:.3f}' for ratio in result['ratios_per_round'])};"
        f" ratio of medians: {result['ratio_of_medians']:.3f}.",
        "",
        "Where the time goes (medians, s; start = launch to the first batch's offsets file, batches = to"
        " the last commit file, stop = to the process's exit):",
        "",
        "| run | start | batches | stop |",
        "| --- | --- | --- | --- |",
        *(
            f"| {name} | " + " | ".join(f"{seconds[phase]:.2f}" for phase in PHASES) + " |"
            for name, seconds in result["median_phase_seconds"].items()
        ),
        "",
        f"Input: {result['input']}. Query: {result['query']}. Rows written by each: {result['rows_written']}.",
        "",
    ]
    save(folder, "overhead", result, lines)


if __name__ == "__main__":
    main()
