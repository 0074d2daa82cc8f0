"""One bench run: the synthetic input that makes the query hold N keys of state, the run in a fresh
process, and what its counted batches measured.

The first batches warm up and are not counted. From each counted batch: its duration, the state
commit time, rows per second, state rows and memory (Spark's query progress); the JVM GC time of
its tasks (Spark's task metrics, from the event log once the run has ended); the checkpoint bytes
it wrote (files by modification time). After the last counted batch the run is stopped by SIGTERM,
which the job handles as a graceful stop.
"""

from __future__ import annotations

import contextlib
import json
import math
import re
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..core.contract import PACKAGE
from ..core.operators import OPERATORS
from ..core.settings import Settings
from ..job.endpoints.sample_input import UNIQUE_KEYS
from .scratch_run import BenchRunFailed, follow_run, percentile, rate_overrides, scratch_environment
from .store_configurations import run_state_rows

# A bound in case the SIGTERM never comes (this process killed): batches past the counted ones.
SPARE_BATCHES = 5


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
