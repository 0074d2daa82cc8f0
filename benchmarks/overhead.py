"""Template overhead: the generated job against a hand-written script doing the same query, batch by batch.

Bakes the default project with the files source, the parquet sink and RocksDB with changelog checkpointing
into a scratch directory, writes sample files for two workloads, then runs the generated job (`python
main.py`, available-now, one file per batch) and benchmarks/handwritten_job.py on the same files with the
same Spark confs (the job's own, from its `config` command):
- small batches: many files of a few hundred events, so that any cost a batch pays shows in its time;
- large batches: a few files of many events, for rows per second.
Each round runs both workloads, template and hand-written side by side, alternating which goes first; each
run is a fresh process with a fresh checkpoint and output, and both outputs must hold the same rows.

Per run, from its checkpoint's files: the time per batch (first batch's offsets file to the last commit,
over the batches) and rows per second over the same span; from Spark's own metrics (a CSV metrics sink
in both jobs, the driver's CodeGenerator and DAGScheduler sources): the code compilations and the Spark
jobs a batch, over the same span; and the share of the machine's cores busy (every process, /proc/stat)
meanwhile. Prints them with the template / hand-written ratios and writes RESULTS_DIR/overhead.json and .md.

    .venv/bin/python benchmarks/overhead.py [--rounds 3] [--small 60x200] [--large 12x100000] [--partitions 4]
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import pyarrow.dataset
import pyspark
import yaml

REPO = Path(__file__).resolve().parents[1]
HANDWRITTEN = Path(__file__).resolve().with_name("handwritten_job.py")
IMPLEMENTATIONS = ("template", "hand-written")
ANSWERS = {
    "source": "files",
    "sink": "parquet",
    "stateful_operator": "windowed_aggregation",
    "state_store_provider": "rocksdb",
}
KEYS = 100
# Spark's metrics, as a CSV sink writes them every second: the driver's (local mode: the only JVM) code
# compilations and jobs so far.
METRICS_PERIOD_SECONDS = 1
COMPILATIONS = "driver.CodeGenerator.compilationTime.csv"
JOBS = "driver.DAGScheduler.job.allJobs.csv"
METRICS_DIRECTORY = "spark.metrics.conf.driver.sink.csv.directory"
# Spark's event log in both jobs: each batch's progress event, with the time of each of its phases.
EVENT_LOG_DIRECTORY = "spark.eventLog.dir"
PROGRESS_EVENT = "org.apache.spark.sql.streaming.StreamingQueryListener$QueryProgressEvent"
# How often the cores' busy share is sampled during a run.
SAMPLE_SECONDS = 0.2
# Batches left out of a long run's figures: the JVM's warm-up.
WARMUP_BATCHES = 5


def arguments() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=3, help="rounds, alternating (default: %(default)s)")
    parser.add_argument("--small", type=workload, default="60x200", help="FILESxEVENTS (default: %(default)s)")
    parser.add_argument("--large", type=workload, default="12x100000", help="FILESxEVENTS (default: %(default)s)")
    parser.add_argument("--partitions", type=int, default=4, help="shuffle partitions (default: %(default)s)")
    parser.add_argument("--results-dir", type=Path, default=REPO / "benchmarks" / "results")
    parser.add_argument("--template", type=Path, default=REPO, help="the template to bake (default: this one)")
    parser.add_argument("--name", default="overhead", help="the results files' name (default: %(default)s)")
    args = parser.parse_args()
    if min(args.rounds, args.partitions) < 1:
        parser.error("--rounds and --partitions must be 1 or more")
    return args


def workload(text: str) -> tuple[int, int]:
    """FILESxEVENTS -> (files, events per file), each 1 or more."""
    try:
        files, events = (int(part) for part in text.lower().split("x"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: give FILESxEVENTS, such as 60x200") from None
    if min(files, events) < 1:
        raise argparse.ArgumentTypeError(f"{text!r}: files and events must be 1 or more")
    return files, events


def run(command: list[str], cwd: Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True)
    if done.returncode != 0:
        sys.exit(f"failed ({done.returncode}): {' '.join(command)}\n{done.stdout[-2000:]}\n{done.stderr[-3000:]}")
    return done


def bake(template: Path, scratch: Path, partitions: int, metrics: Path, events: Path) -> Path:
    answers = [f"{key}={value}" for key, value in {**ANSWERS, "shuffle_partitions": partitions}.items()]
    command = [sys.executable, "-m", "cookiecutter", "--no-input", "--default-config", "-o", str(scratch)]
    run([*command, str(template), *answers], cwd=REPO)
    project = scratch / "stream-job"
    # Spark's metrics to CSV files in both jobs: the confs go into settings.yaml's spark.conf, and from the
    # template's `config` command to the hand-written job.
    settings = project / "settings.yaml"
    confs = {
        "spark.metrics.conf.driver.sink.csv.class": "org.apache.spark.metrics.sink.CsvSink",
        "spark.metrics.conf.driver.sink.csv.period": str(METRICS_PERIOD_SECONDS),
        "spark.metrics.conf.driver.sink.csv.unit": "seconds",
        METRICS_DIRECTORY: str(metrics),
        "spark.eventLog.enabled": "true",
        "spark.eventLog.rolling.enabled": "false",  # one plain file a run
        "spark.eventLog.compress": "false",
        EVENT_LOG_DIRECTORY: f"file://{events}",
    }
    lines = "".join(f'    {key}: "{value}"\n' for key, value in confs.items())
    text = settings.read_text()
    marker = '    spark.ui.showConsoleProgress: "false"\n'
    if marker not in text:
        sys.exit(f"{settings}: its spark.conf no longer holds {marker.strip()}; update bake()")
    settings.write_text(text.replace(marker, marker + lines, 1))
    return project


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


def busy_jiffies() -> tuple[int, int]:
    """The machine's CPU time so far, busy and in all, from /proc/stat (every core)."""
    fields = [int(value) for value in Path("/proc/stat").read_text().split("\n")[0].split()[1:]]
    idle = fields[3] + fields[4]  # idle and iowait
    return sum(fields) - idle, sum(fields)


def cpu_busy_share(before: tuple[int, int], after: tuple[int, int]) -> float:
    """The share of all cores busy between two busy_jiffies readings, by every process on the machine."""
    return round((after[0] - before[0]) / max(1, after[1] - before[1]), 2)


class CpuSampler(threading.Thread):
    """busy_jiffies every SAMPLE_SECONDS while a run goes, so that a span inside it can be told."""

    def __init__(self) -> None:
        super().__init__(daemon=True)
        self.samples: list[tuple[float, tuple[int, int]]] = []
        self.done = threading.Event()

    def run(self) -> None:
        while not self.done.is_set():
            self.samples.append((time.time(), busy_jiffies()))
            self.done.wait(SAMPLE_SECONDS)

    def share(self, start: float, end: float) -> float:
        inside = [jiffies for moment, jiffies in self.samples if start <= moment <= end]
        return cpu_busy_share(inside[0], inside[-1]) if len(inside) > 1 else float("nan")


def metric_at(path: Path, moment: float) -> float:
    """A metric's count (a gauge's value) at its last report no later than moment (epoch s): 0 before the first."""
    if not path.exists():
        return 0.0
    with path.open() as lines:
        reports = [(float(row["t"]), float(row.get("count") or row.get("value") or 0)) for row in csv.DictReader(lines)]
    before = [value for at, value in reports if at <= moment]
    return before[-1] if before else 0.0


def metrics_between(folder: Path, start: float, end: float) -> dict[str, float]:
    """The compilations and jobs Spark counted between two moments, from one run's CSV metrics files."""
    found = {}
    for name, suffix in (("compilations", COMPILATIONS), ("jobs", JOBS)):
        (path,) = list(folder.glob(f"*.{suffix}")) or [folder / suffix]
        found[name] = metric_at(path, end) - metric_at(path, start)
    return found


def phase_medians(events_folder: Path, skipped: int) -> dict[str, float]:
    """Each phase of a batch (Spark's progress durationMs: planning, the batch itself, the commits...), its
    median over the batches measured, from the run's event log."""
    (log,) = [path for path in events_folder.iterdir() if not path.name.endswith(".inprogress")] or [None]
    if log is None:
        return {}
    durations: list[dict[str, float]] = []
    for line in log.read_text().splitlines():
        event = json.loads(line)
        if event.get("Event") == PROGRESS_EVENT:
            durations.append(event["progress"]["durationMs"])
    measured = durations[skipped:]
    phases = sorted({phase for duration in measured for phase in duration})
    return {phase: statistics.median(duration.get(phase, 0) for duration in measured) for phase in phases}


def batch_span(checkpoint: Path) -> tuple[int, int, float, float]:
    """The batches a run committed, those measured (the first WARMUP_BATCHES left out of a long run: the JVM
    compiles its hot code then), and the moments the first measured batch's offsets and the last commit
    were written."""
    commits = [path for path in (checkpoint / "commits").glob("[0-9]*")]
    skipped = WARMUP_BATCHES if len(commits) > 2 * WARMUP_BATCHES else 0
    first = (checkpoint / "offsets" / str(skipped)).stat().st_mtime
    return len(commits), len(commits) - skipped, first, max(path.stat().st_mtime for path in commits)


def run_one(
    name: str, project: Path, env: dict, query: dict, confs: dict, folder: Path, landing: str, events: int
) -> dict:
    """One run of the template or the hand-written job on a landing folder of `events` events, and its figures."""
    output, checkpoint, metrics = folder / "output", folder / "checkpoint", Path(confs[METRICS_DIRECTORY])
    events_folder = Path(confs[EVENT_LOG_DIRECTORY].removeprefix("file://"))
    for emptied in (metrics, events_folder):
        shutil.rmtree(emptied, ignore_errors=True)
        emptied.mkdir(parents=True)
    if name == "template":
        command = [sys.executable, "main.py"]
        run_env = {
            **env,
            "STREAM_JOB_SOURCE__FILES__PATH": landing,
            "STREAM_JOB_QUERY__CHECKPOINT_LOCATION": str(checkpoint),
            "STREAM_JOB_SINK__PATH": str(output),
        }
    else:
        command = [sys.executable, str(HANDWRITTEN), landing, str(output), str(checkpoint)]
        command += [json.dumps(query), json.dumps(confs)]
        run_env = env
    sampler = CpuSampler()
    sampler.start()
    launched = time.time()
    run(command, cwd=project, env=run_env)
    exited = time.time()
    sampler.done.set()
    sampler.join()
    batches, measured, first, last = batch_span(checkpoint)
    # The measured batches' span: the first one's offsets file is written as it starts.
    counted = metrics_between(metrics, first, last + METRICS_PERIOD_SECONDS)
    return {
        "wall_seconds": exited - launched,
        "batches": batches,
        "measured_batches": measured,
        "seconds_a_batch": (last - first) / measured,
        "rows_per_second": events * measured / batches / (last - first),
        "compilations_a_batch": counted["compilations"] / measured,
        "jobs_a_batch": counted["jobs"] / measured,
        "phase_ms": phase_medians(events_folder, batches - measured),
        "cpu_busy": sampler.share(first, last),
        "rows": read_rows(output),
    }


def main() -> None:
    args = arguments()
    scratch = Path(tempfile.mkdtemp(prefix="overhead-"))
    try:
        project = bake(args.template, scratch, args.partitions, scratch / "metrics", scratch / "events")
        env = {key: value for key, value in os.environ.items() if not key.startswith("STREAM_JOB_")}
        env.update(
            {"STREAM_JOB_QUERY__TRIGGER": "available_now", "STREAM_JOB_SOURCE__FILES__MAX_FILES_PER_TRIGGER": "1"}
        )
        config = yaml.safe_load(run([sys.executable, "-m", "stream_job", "config"], cwd=project, env=env).stdout)
        settings = config["settings"]
        confs = {**config["spark_confs"], "spark.master": settings["spark"]["master"]}
        query = {
            "watermark": settings["query"]["watermark"],
            "window": settings["query"]["window"],
            "max_files_per_trigger": settings["source"]["files"]["max_files_per_trigger"],
        }
        workloads = dict(zip(HEADLINE, (args.small, args.large), strict=True))
        landings = {}
        for label, (files, events) in workloads.items():
            landing = scratch / f"landing-{label.split()[0]}"
            landing.mkdir()
            landings[label] = str(landing)
            sample = ["sample-input", "--files", str(files), "--events-per-file", str(events), "--keys", str(KEYS)]
            run([sys.executable, "-m", "stream_job", *sample], cwd=project,
                env={**env, "STREAM_JOB_SOURCE__FILES__PATH": str(landing)})  # fmt: skip

        runs: dict[str, dict[str, list[dict]]] = {label: {name: [] for name in IMPLEMENTATIONS} for label in workloads}
        written: dict[str, list[tuple]] = {}
        for number in range(args.rounds):
            order = IMPLEMENTATIONS if number % 2 == 0 else IMPLEMENTATIONS[::-1]
            for label in workloads:
                for name in order:
                    folder = scratch / f"run-{number}-{label.split()[0]}-{name}"
                    files, events = workloads[label]
                    figures = run_one(name, project, env, query, confs, folder, landings[label], files * events)
                    rows = figures.pop("rows")
                    if written.setdefault(label, rows) != rows:
                        sys.exit(f"{name} wrote other rows than the first run of {label} in round {number + 1}")
                    figures["rows_written"] = len(rows)
                    runs[label][name].append(figures)
                    print(
                        f"round {number + 1}/{args.rounds} {label}: {name} {figures['batches']} batches,"
                        f" {figures['seconds_a_batch'] * 1000:.0f} ms a batch,"
                        f" {figures['compilations_a_batch']:.2f} compilations a batch, cores {figures['cpu_busy']:.0%} busy",
                        flush=True,
                    )
        result = summary(runs, workloads, args, query)
        write_results(args.results_dir, args.name, result)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def summary(runs: dict, workloads: dict, args: argparse.Namespace, query: dict) -> dict:
    """Each workload's figures per implementation (medians over the rounds), the per-round ratios and their median."""
    result: dict = {"workloads": {}, "machine": machine()}
    for label, (files, events) in workloads.items():
        by_name = {name: runs[label][name] for name in IMPLEMENTATIONS}
        entry: dict = {
            "files": files,
            "events_per_file": events,
            "rows_written": by_name["template"][0]["rows_written"],
        }
        for name, done in by_name.items():
            entry[name] = {
                "runs": done,
                "median": {key: statistics.median(run[key] for run in done) for key in FIGURES},
            }
        for key, higher_is_better in RATIOS.items():
            ratios = [
                (hand[key] / mine[key]) if higher_is_better else (mine[key] / hand[key])
                for mine, hand in zip(by_name["template"], by_name["hand-written"], strict=True)
            ]
            entry[f"ratio_{key}"] = {"per_round": ratios, "median": statistics.median(ratios)}
        result["workloads"][label] = entry
    result["query"] = {**query, "shuffle_partitions": args.partitions, "provider": "rocksdb, changelog checkpointing"}
    result["rounds"] = args.rounds
    return result


# The figures a run gives, and the ratios told: above 1 is the template's cost either way (its time over the
# hand-written job's; the hand-written job's rate over its).
FIGURES = (
    "wall_seconds", "seconds_a_batch", "rows_per_second", "compilations_a_batch", "jobs_a_batch", "cpu_busy",
)  # fmt: skip
RATIOS = {"seconds_a_batch": False, "rows_per_second": True}
# What each workload is for: many small batches for a batch's cost, large ones for throughput.
HEADLINE = {"small batches": "seconds_a_batch", "large batches": "rows_per_second"}


def save(folder: Path, name: str, result: dict, lines: list[str]) -> None:
    """Write a benchmark's figures as NAME.json and its report as NAME.md (ending with the machine), and print it."""
    lines = [*lines, f"Machine: {result['machine']}.", ""]
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f"{name}.json").write_text(json.dumps(result, indent=2) + "\n")
    (folder / f"{name}.md").write_text("\n".join(lines))
    print("\n".join(lines))


def write_results(folder: Path, results_name: str, result: dict) -> None:
    lines = [
        "# Template overhead",
        "",
        f"The generated job against the same query hand-written, {result['rounds']} rounds, alternating which runs"
        " first; medians over the rounds. A batch's time and rows per second span the last commit from the start"
        f" of the first batch measured (the first {WARMUP_BATCHES} batches of a run of more than {2 * WARMUP_BATCHES}"
        " are left out: the JVM's warm-up); compilations and Spark jobs a batch come from Spark's metrics over that"
        " span.",
        "",
        "| workload | run | batches | ms a batch | rows/s | compilations a batch | jobs a batch | cores busy |",
        "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for label, entry in result["workloads"].items():
        for name in IMPLEMENTATIONS:
            median = entry[name]["median"]
            batches = entry[name]["runs"][0]["batches"]
            lines.append(
                f"| {label} ({entry['files']} files x {entry['events_per_file']:,} events) | {name} | {batches}"
                f" | {median['seconds_a_batch'] * 1000:.0f} | {median['rows_per_second']:,.0f}"
                f" | {median['compilations_a_batch']:.2f} | {median['jobs_a_batch']:.2f} | {median['cpu_busy']:.0%} |"
            )
    lines += ["", "The template's cost, per round (above 1: the template slower; its time a batch over the hand-written"
              " job's, the hand-written job's rows per second over its):", ""]  # fmt: skip
    for label, entry in result["workloads"].items():
        key = HEADLINE[label]
        ratios = entry[f"ratio_{key}"]
        rounds = ", ".join(f"{ratio:.3f}" for ratio in ratios["per_round"])
        lines.append(f"- {label}, {key.replace('_', ' ')}: median **{ratios['median']:.3f}** ({rounds})")
    lines += [
        "",
        "Where a batch's time goes (Spark's progress durationMs in ms: each run's median batch, the median over the rounds):",
        "",
    ]
    phases = sorted(
        {phase for entry in result["workloads"].values() for phase in entry["template"]["runs"][0]["phase_ms"]}
    )
    lines += ["| workload | run | " + " | ".join(phases) + " |", "| --- | --- |" + " ---: |" * len(phases)]
    for label, entry in result["workloads"].items():
        for name in IMPLEMENTATIONS:
            runs = entry[name]["runs"]
            medians = {phase: statistics.median(run["phase_ms"].get(phase, 0) for run in runs) for phase in phases}
            lines.append(f"| {label} | {name} | " + " | ".join(f"{medians[phase]:.0f}" for phase in phases) + " |")
    first = next(iter(result["workloads"].values()))
    lines += ["", f"Query: {result['query']}. Rows written by each: {first['rows_written']} (small batches).", ""]
    save(folder, results_name, result, lines)


if __name__ == "__main__":
    main()
