"""bench: this project's query on synthetic input, once per state store configuration and state size.

Each run is `python -m <package> run` in a fresh process with a fresh checkpoint, its settings
overridden through the environment: the rate-micro-batch source (one second of event time per
batch), a 1-hour watermark (and window, and session timeout) so that nothing is evicted during the
run, JSON progress lines, and Spark's event log. What "N keys" means follows the operator
(see `input_plan`): the state rows the query holds at the last counted batch.

The first batches warm up and are not counted. From each counted batch: its duration, the state
commit time, rows per second, state rows and memory (Spark's query progress); the JVM GC time of
its tasks (Spark's task metrics, from the event log once the run has ended); the checkpoint bytes
it wrote (files by modification time). After the last counted batch the run is stopped by SIGTERM,
which the job handles as a graceful stop.
"""

from __future__ import annotations

import contextlib
import csv
import json
import math
import os
import platform
import re
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import pyspark

from ..core.contract import PACKAGE
from ..core.figures import human_bytes
from ..core.operators import OPERATORS
from ..core.plan_operators import PlanOperator, chain, flow_order
from ..core.settings import ENV_PREFIX, Settings, StateStoreSettings
from ..job.endpoints.sample_input import UNIQUE_KEYS
from .inspection import counted_state_rows


@dataclass(frozen=True)
class StoreConfiguration:
    """A state store set up one way for a scratch run (bench, sustain)."""

    provider: str
    changelog: bool
    # false: Spark skips the read before each write that keeps numRowsTotal, and reports no row count;
    # the run's rows are counted from the state files instead (the state reader, as inspect does).
    track_rows: bool = True


CONFIGURATIONS = {
    "hdfs": StoreConfiguration("hdfs", False),
    "rocksdb": StoreConfiguration("rocksdb", False),
    "rocksdb+changelog": StoreConfiguration("rocksdb", True),
    # The profile for the most rows per core (docs/state.md, "The tuned RocksDB profile").
    "rocksdb+tuned": StoreConfiguration("rocksdb", True, track_rows=False),
}
# A bound in case the SIGTERM never comes (this process killed): batches past the counted ones.
SPARE_BATCHES = 5
# Event time starts on a whole hour (2023-11-14 22:00 UTC) and advances 1 s per batch, so that a run
# stays in one 1-hour window; time 0 would not do: Spark drops rows at the initial watermark, 0, as late.
START_TIMESTAMP_MS = 1_699_999_200_000
MAX_RUN_BATCHES = 3600 - SPARE_BATCHES


class BenchError(Exception):
    """A request that cannot be benchmarked; the message names it."""


class BenchRunFailed(Exception):
    """A benchmark run that failed; the message names its log."""


@dataclass(frozen=True)
class InputPlan:
    """The synthetic input for one state size: settings overrides and what the state will hold."""

    rows_per_batch: int  # per input (each side of a join)
    overrides: dict[str, str]
    state: str  # how the state rows follow from the input


@dataclass
class Result:
    configuration: str
    keys: int
    batches: int
    input_rows_per_batch: int
    batch_ms_p50: float
    batch_ms_p95: float
    batch_ms_max: float
    commit_ms_p50: float
    rows_per_second: float
    state_rows: int
    state_memory_bytes: int
    checkpoint_bytes_per_batch: int
    gc_ms_per_batch: float | None


def rate_overrides(section: str, rows_per_batch: int, keys: int, advance: str = "1 second") -> dict[str, str]:
    return {
        f"{section}__TYPE": "rate",
        f"{section}__RATE__ROWS_PER_BATCH": str(rows_per_batch),
        f"{section}__RATE__KEYS": str(keys),
        f"{section}__RATE__ADVANCE_PER_BATCH": advance,
        f"{section}__RATE__START_TIMESTAMP_MS": str(START_TIMESTAMP_MS),
    }


def input_plan(operator: str, keys: int, batches_to_last_count: int) -> InputPlan:
    """How to make the query hold `keys` state rows at the last counted batch.

    An aggregation and sessions keep one state row per key, so every batch carries each key once
    and the state stays at `keys` from the first batch on. A deduplication or a join keeps every
    event until the watermark passes it, so their state grows batch by batch and reaches `keys`
    (rounded up) at the last counted batch.
    """
    op = OPERATORS[operator]
    if op.state_per_key:
        # The state's own span (window, session timeout) outlasts the run, so nothing is evicted.
        span = {f"QUERY__{op.lifetime_setting.upper().replace('.', '__')}": "1 hour"} if op.lifetime_setting else {}
        return InputPlan(keys, {**rate_overrides("SOURCE", keys, keys), **span}, "one row per key, every batch")
    if not op.two_inputs:
        growing = math.ceil(keys / batches_to_last_count)
        return InputPlan(
            growing, rate_overrides("SOURCE", growing, UNIQUE_KEYS), "one row per event; grows every batch"
        )
    # Half the rows on each side; each left event meets the right one with its value.
    per_side = math.ceil(keys / (2 * batches_to_last_count))
    return InputPlan(
        per_side,
        {**rate_overrides("SOURCE", per_side, UNIQUE_KEYS), **rate_overrides("JOIN_SOURCE", per_side, UNIQUE_KEYS)},
        "one row per event, half of them on each side; grows every batch",
    )


def configuration_of(store: StateStoreSettings) -> str:
    """The name of the configuration the settings' state store is set up as."""
    if store.provider == "hdfs":
        return "hdfs"
    if not store.changelog_checkpointing:
        return "rocksdb"
    return "rocksdb+changelog" if store.rocksdb.track_total_number_of_rows else "rocksdb+tuned"


def run_state_rows(configuration: str, last_counted: dict[str, Any], checkpoint: Path) -> int:
    """The state rows at a run's end: Spark's count in its last counted batch, or, where the store does
    not track rows, the state files' count (the checkpoint's last committed batch)."""
    if CONFIGURATIONS[configuration].track_rows:
        return int(last_counted["state_rows"])
    return counted_state_rows(str(checkpoint))


def unsupported(operators: Sequence[str], configuration: str) -> str | None:
    """Why the query's operators cannot run on this configuration, or None."""
    if CONFIGURATIONS[configuration].provider == "hdfs":
        return next((OPERATORS[name].rocksdb_only for name in operators if OPERATORS[name].rocksdb_only), None)
    return None


def percentile(values: list[float], share: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(share * (len(ordered) - 1)))]


def batch_of(description: str | None) -> int | None:
    """The micro-batch a Spark job ran for: a streaming job's description ends with 'batch = N'."""
    match = re.search(r"\bbatch = (\d+)\s*$", description or "")
    return int(match.group(1)) if match else None


def gc_ms_of_batches(event_log: Path, batches: range) -> int | None:
    """JVM GC time of the tasks of these batches: the "JVM GC Time" task metric of the stages of the
    jobs whose description names one of the batches, from the run's event log. Read after the run
    has ended, so every task is in it (the live status store lags the progress events under load).
    None when the log has no job of some batch."""
    logs = [path for path in event_log.glob("*") if path.is_file()] if event_log.is_dir() else []
    if len(logs) != 1:
        return None
    stages_of_batch: dict[int, set[int]] = {}
    gc_of_stage: dict[int, int] = {}
    with open(logs[0]) as lines:
        for line in lines:
            try:
                event = json.loads(line)
            except ValueError:  # the last line of a log cut short
                continue
            kind = event.get("Event")
            if kind == "SparkListenerJobStart":
                batch = batch_of((event.get("Properties") or {}).get("spark.job.description"))
                if batch is not None and batch in batches:
                    stages_of_batch.setdefault(batch, set()).update(event["Stage IDs"])
            elif kind == "SparkListenerTaskEnd":
                gc = (event.get("Task Metrics") or {}).get("JVM GC Time", 0)
                gc_of_stage[event["Stage ID"]] = gc_of_stage.get(event["Stage ID"], 0) + gc
    if set(stages_of_batch) != set(batches):
        return None
    return sum(gc_of_stage.get(stage, 0) for stages in stages_of_batch.values() for stage in stages)


def checkpoint_bytes_of_batches(checkpoint: Path, first: int, last: int) -> int:
    """Bytes of the checkpoint files written after batch `first - 1` ended, up to the end of batch
    `last`: by modification time, against the commit files that end each batch."""
    since = (checkpoint / "commits" / str(first - 1)).stat().st_mtime_ns
    until = (checkpoint / "commits" / str(last)).stat().st_mtime_ns
    total = 0
    for path in checkpoint.rglob("*"):
        with contextlib.suppress(FileNotFoundError):  # a temporary file renamed while we walk
            status = path.stat()
            if path.is_file() and since < status.st_mtime_ns <= until:
                total += status.st_size
    return total


def run_environment(settings: Settings, folder: Path, configuration: str, plan: InputPlan) -> dict[str, str]:
    conf = {key: str(value) for key, value in settings.spark.conf.items()}
    # The event log gives the GC time per batch, read once the run has ended (the caller makes its folder).
    conf.update(
        {
            "spark.eventLog.enabled": "true",
            "spark.eventLog.dir": (folder / "event-log").as_uri(),
            # One plain JSON-lines file (Spark 4 rolls and compresses by default).
            "spark.eventLog.rolling.enabled": "false",
            "spark.eventLog.compress": "false",
        }
    )
    return scratch_environment(
        folder, configuration, "100 milliseconds", conf, plan.overrides | {"QUERY__WATERMARK": "1 hour"}
    )


def scratch_environment(
    folder: Path, configuration: str, trigger: str, conf: dict[str, str], overrides: dict[str, str]
) -> dict[str, str]:
    """The environment of a scratch run of the user's job (bench, sustain): its checkpoint and parquet
    output in folder, the store configuration, JSON progress to read the batches from, and overrides."""
    store = CONFIGURATIONS[configuration]
    # The driver's heap is a setting of its own (spark.driver_memory), not a spark.conf entry.
    conf = dict(conf)
    heap = {"SPARK__DRIVER_MEMORY": conf.pop("spark.driver.memory")} if "spark.driver.memory" in conf else {}
    scratch = {
        **overrides,
        **heap,
        "STATE_STORE__PROVIDER": store.provider,
        "STATE_STORE__CHANGELOG_CHECKPOINTING": str(store.changelog).lower(),
        **({} if store.track_rows else {"STATE_STORE__ROCKSDB__TRACK_TOTAL_NUMBER_OF_ROWS": "false"}),
        "QUERY__TRIGGER": trigger,
        "QUERY__CHECKPOINT_LOCATION": str(folder / "checkpoint"),
        "SINK__TYPE": "parquet",
        "SINK__PATH": str(folder / "output"),
        "MONITORING__PROGRESS_FORMAT": "json",
        "SPARK__CONF": json.dumps(conf),
    }
    # The user's own overrides stay (the settings were read with them); these win.
    return {**os.environ, **{ENV_PREFIX + name: value for name, value in scratch.items()}}


def batch_events(lines: Iterable[str]) -> Iterator[dict[str, Any]]:
    for line in lines:
        try:
            event = json.loads(line)
        except ValueError:  # not an event: a Python worker's print
            continue
        if isinstance(event, dict) and event.get("event") == "batch":
            yield event


def follow_run(
    command: list[str],
    env: dict[str, str],
    log_path: Path,
    stop: Callable[[list[dict[str, Any]]], str | None],
    cpus: set[int] | None = None,
) -> tuple[int, list[dict[str, Any]]]:
    """The job run as a process of its own (on `cpus` when given), stderr into log_path, its batches'
    progress events read as they come: after each, stop(events so far) may answer "after" (SIGTERM: the
    job stops at the batch boundary, its last events still read) or "now" (SIGTERM, nothing more read).
    Its exit code and the events read."""
    events: list[dict[str, Any]] = []
    with open(log_path, "w") as log:
        process = subprocess.Popen(
            command,
            env=env,
            stdout=subprocess.PIPE,
            stderr=log,
            text=True,
            preexec_fn=None if cpus is None else lambda: os.sched_setaffinity(0, cpus),
        )
        try:
            assert process.stdout is not None  # stdout=PIPE
            for event in batch_events(process.stdout):
                events.append(event)
                decision = stop(events)
                if decision is not None:
                    process.send_signal(signal.SIGTERM)
                    if decision == "now":
                        break
            process.wait()
        finally:
            if process.poll() is None:
                process.kill()
                process.wait()
    return process.returncode, events


def run_one(
    settings_path: Path,
    settings: Settings,
    lead: str,
    folder: Path,
    configuration: str,
    keys: int,
    warmup: int,
    batches: int,
) -> Result:
    """One run; the input is shaped for `lead`, the operator the events reach first."""
    plan = input_plan(lead, keys, warmup + batches)
    (folder / "event-log").mkdir(exist_ok=True)
    env = run_environment(settings, folder, configuration, plan)
    command = [sys.executable, "-m", PACKAGE, "run", "--settings", str(settings_path.resolve())]
    command += ["--max-batches", str(warmup + batches + SPARE_BATCHES)]
    last = warmup + batches - 1

    def stop(events: list[dict[str, Any]]) -> str | None:
        batch = events[-1]["batch_id"]
        stage = "warm-up" if batch < warmup else f"{batch - warmup + 1}/{batches}" if batch <= last else "extra"
        print(
            f"  {configuration}, {keys:,} keys, batch {stage}: {events[-1]['batch_duration_ms']:,} ms,"
            f" {events[-1]['state_rows']:,} state rows",
            file=sys.stderr,
            flush=True,
        )
        return "after" if batch == last else None

    returncode, events = follow_run(command, env, folder / "job.log", stop)
    if returncode != 0:
        raise BenchRunFailed(f"{configuration} with {keys:,} keys failed (exit {returncode}); see {folder / 'job.log'}")
    counted = [event for event in events if warmup <= event["batch_id"] <= last]
    if len(counted) < batches:
        raise BenchRunFailed(
            f"{configuration} with {keys:,} keys committed {len(counted)} of {batches} counted batches;"
            f" see {folder / 'job.log'}"
        )
    gc_ms = gc_ms_of_batches(folder / "event-log", range(warmup, last + 1))
    durations = [event["batch_duration_ms"] for event in counted]
    commits = [sum(op["commit_time_ms"] or 0 for op in event["state_operators"]) for event in counted]
    return Result(
        configuration=configuration,
        keys=keys,
        batches=len(counted),
        input_rows_per_batch=plan.rows_per_batch,
        batch_ms_p50=percentile(durations, 0.5),
        batch_ms_p95=percentile(durations, 0.95),
        batch_ms_max=max(durations),
        commit_ms_p50=percentile(commits, 0.5),
        rows_per_second=sum(event["input_rows"] for event in counted) / (sum(durations) / 1000),
        state_rows=run_state_rows(configuration, counted[-1], folder / "checkpoint"),
        state_memory_bytes=counted[-1]["state_memory_bytes"],
        checkpoint_bytes_per_batch=checkpoint_bytes_of_batches(folder / "checkpoint", warmup, last) // batches,
        gc_ms_per_batch=None if gc_ms is None else gc_ms / batches,
    )


def runnable_configurations(
    operators: Sequence[str], configurations: list[str], warmup: int, batches: int
) -> list[str]:
    """The configurations to run; a BenchError for a request that cannot be run."""
    if warmup + batches > MAX_RUN_BATCHES:
        raise BenchError(
            f"--warmup {warmup} + --batches {batches} = {warmup + batches} batches: more than {MAX_RUN_BATCHES},"
            " which would carry the run's event time out of its 1-hour window; use fewer"
        )
    if not configurations:
        raise BenchError(f"--providers is empty; choose from {', '.join(CONFIGURATIONS)}")
    unknown = [name for name in configurations if name not in CONFIGURATIONS]
    if unknown:
        raise BenchError(
            f"--providers {','.join(unknown)}: not a configuration; choose from {', '.join(CONFIGURATIONS)}"
        )
    runnable = [name for name in configurations if unsupported(operators, name) is None]
    if not runnable:
        reasons = "; ".join(f"{name}: {unsupported(operators, name)}" for name in configurations)
        raise BenchError(f"--providers {','.join(configurations)}: nothing to run for this query ({reasons})")
    return runnable


def run_bench(
    settings_path: Path,
    settings: Settings,
    plan: Sequence[PlanOperator],
    keys: list[int],
    configurations: list[str],
    warmup: int,
    batches: int,
    out: Path,
) -> list[Result]:
    """Every configuration at every state size, each in a fresh process and checkpoint; then the files."""
    operators = [operator.kind for operator in flow_order(plan) if operator.known]
    if not operators:
        raise BenchError(
            f"the query's plan holds no operator bench can shape input for ({chain([o.kind for o in plan])})"
        )
    runnable = runnable_configurations(operators, configurations, warmup, batches)
    skipped = {name: unsupported(operators, name) for name in configurations if name not in runnable}
    for name, reason in skipped.items():
        print(f"bench: {name} not run: {reason}", file=sys.stderr)
    out.mkdir(parents=True, exist_ok=True)
    results: list[Result] = []
    try:
        for size in dict.fromkeys(keys):  # each size once, in the order given
            for configuration in runnable:
                # Each run's log stays in its folder; its checkpoint, output and event log go once measured.
                folder = out / "runs" / f"{configuration}-{size}"
                shutil.rmtree(folder, ignore_errors=True)
                folder.mkdir(parents=True)
                started = time.monotonic()
                results.append(
                    run_one(settings_path, settings, operators[0], folder, configuration, size, warmup, batches)
                )
                for scratch in ("checkpoint", "output", "event-log"):
                    shutil.rmtree(folder / scratch, ignore_errors=True)
                elapsed = time.monotonic() - started
                print(f"{configuration}, {size:,} keys: done in {elapsed:.0f} s", file=sys.stderr)
    finally:
        if results:  # a failed or interrupted run keeps what was measured before it
            write_results(out, settings, plan, results, warmup, skipped)
    return results


def machine() -> dict[str, Any]:
    java = subprocess.run(["java", "-version"], capture_output=True, text=True).stderr.splitlines()
    cpu = platform.processor() or "unknown"
    with contextlib.suppress(OSError):
        models = [
            line.split(":", 1)[1] for line in Path("/proc/cpuinfo").read_text().splitlines() if "model name" in line
        ]
        cpu = models[0].strip() if models else cpu
    return {
        "platform": platform.platform(),
        "cpu": cpu,
        "cpus": os.cpu_count(),
        "memory_gib": round(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30, 1),
        "python": platform.python_version(),
        "java": java[0] if java else "unknown",
        "pyspark": pyspark.__version__,
    }


def recommendation(settings: Settings, plan: Sequence[PlanOperator], results: list[Result]) -> list[str]:
    """The fastest configuration at the largest size measured, beside the napkin-math one."""
    largest = max(result.keys for result in results)
    at_largest = sorted((result for result in results if result.keys == largest), key=lambda r: r.batch_ms_p50)
    best = at_largest[0]
    sizing = settings.sizing(plan)
    return [
        f"Measured: at {largest:,} keys ({best.state_rows:,} state rows) the fastest configuration by median batch"
        f" time is {best.configuration} ({best.batch_ms_p50:,.0f} ms)"
        + "".join(f"; {other.configuration} {other.batch_ms_p50:,.0f} ms" for other in at_largest[1:])
        + ".",
        f"Napkin math (settings.yaml, `estimate`): {sizing.recommended_provider}, for {sizing.rows:,} state rows"
        " at the capacity the settings state.",
        "The measured sizes are those a short run on the cores above reaches; the napkin figure is about the"
        " production state size, where the HDFS-backed store's heap, not its speed, decides.",
    ]


def write_results(
    out: Path,
    settings: Settings,
    plan: Sequence[PlanOperator],
    results: list[Result],
    warmup: int,
    skipped: dict[str, str | None],
) -> None:
    rows = [asdict(result) for result in results]
    operators = [operator.kind for operator in flow_order(plan) if operator.known]
    operator = chain(operators)
    state = input_plan(operators[0], 1, 1).state
    about: dict[str, Any] = {
        "operator": operator,
        "state": state,
        "warmup_batches": warmup,
        "not_run": skipped,
        "machine": machine(),
        "sources": {
            "batch_ms, state_rows, state_memory_bytes, commit_ms": "Spark's query progress (StreamingQueryProgress;"
            " commit_ms is the stateOperators' commitTimeMs, summed over tasks)",
            "gc_ms_per_batch": "Spark's task metrics: jvmGcTime of the stages of the counted batches' jobs"
            " (event log), summed over tasks, / batches",
            "checkpoint_bytes_per_batch": "bytes of the checkpoint files written during the counted batches"
            " (by modification time) / batches",
        },
    }
    (out / "results.json").write_text(json.dumps({**about, "results": rows}, indent=2) + "\n")
    with open(out / "results.csv", "w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    chart = write_chart(out / "chart.png", f"{operator}, {settings.spark.shuffle_partitions} partitions", results)
    lines = [
        f"# bench: {operator}",
        "",
        f"State: {state}. Each configuration and size ran in a fresh process and checkpoint; {warmup} warm-up"
        " batches are not counted; state rows and memory are those at the last counted batch.",
        "",
        "Machine: " + ", ".join(f"{key} {value}" for key, value in about["machine"].items()) + ".",
        *(f"\nNot run: {name}: {reason}." for name, reason in skipped.items()),
        "",
        "| configuration | keys | input rows/batch | state rows | batch p50 / p95 / max ms | state commit p50 ms (tasks)"
        " | rows/s | state memory | checkpoint bytes/batch | GC ms/batch (tasks) |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
        *(
            f"| {r.configuration} | {r.keys:,} | {r.input_rows_per_batch:,} | {r.state_rows:,} |"
            f" {r.batch_ms_p50:,.0f} / {r.batch_ms_p95:,.0f} / {r.batch_ms_max:,.0f} | {r.commit_ms_p50:,.0f} |"
            f" {r.rows_per_second:,.0f} | {human_bytes(r.state_memory_bytes)} |"
            f" {human_bytes(r.checkpoint_bytes_per_batch)} | {'n/a' if r.gc_ms_per_batch is None else f'{r.gc_ms_per_batch:,.0f}'} |"
            for r in results
        ),
        "",
        "The state commit and GC times are sums over the tasks of every partition, as Spark reports them: on"
        " several cores they can exceed the batch's wall time.",
        "",
        *recommendation(settings, plan, results),
        "",
        "Sources: " + "; ".join(f"{key}: {value}" for key, value in about["sources"].items()) + ".",
        "",
        chart,
        "",
    ]
    (out / "summary.md").write_text("\n".join(lines))


def write_chart(path: Path, title: str, results: list[Result]) -> str:
    try:
        import matplotlib

        matplotlib.use("Agg")
        from matplotlib import pyplot
    except ImportError:
        return "No chart: matplotlib is not installed (pip install matplotlib)."
    figure, axes = pyplot.subplots(figsize=(7, 4.5))
    for configuration in dict.fromkeys(result.configuration for result in results):
        mine = sorted((r for r in results if r.configuration == configuration), key=lambda r: r.state_rows)
        axes.plot([r.state_rows for r in mine], [r.batch_ms_p50 for r in mine], marker="o", label=configuration)
    axes.set_xscale("log")
    axes.set_xlabel("state rows at the last counted batch")
    axes.set_ylabel("median batch duration (ms)")
    axes.set_ylim(bottom=0)
    axes.set_title(f"{title}: batch duration against state size")
    axes.grid(True, which="both", alpha=0.3)
    axes.legend()
    figure.tight_layout()
    figure.savefig(path, dpi=100)
    pyplot.close(figure)
    return f"![batch duration against state size]({path.name})"
