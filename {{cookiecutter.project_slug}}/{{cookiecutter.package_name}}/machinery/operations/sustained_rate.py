"""sustain: the highest input rate this query holds on N local cores, found by a bounded search.

Each try is `python -m <package> run` in a fresh process and checkpoint on local[N] with 2 partitions
per core, the whole process kept to N of the machine's CPUs (Linux; the driver's work counts against
the cores as the tasks' does), the rate-micro-batch source carrying `rate x trigger` rows per batch (half on each side
of a join), every event its own key (the sizing's upper bound), and event time advancing with the
trigger as it does in production. The watermark and the state's own span (window, join range,
session timeout) are set short, so that the state reaches its steady size, rows evicted as fast as
they come, within the warm-up batches.

A rate holds when the median of the counted batches' durations stays within the trigger interval:
beyond it, batches start late and the job falls further behind with every one. A try whose warm-up
batches already take WAY_BEHIND x the trigger is stopped there as not holding.

Per try, from Spark's query progress: the batch durations; the state store's time (the stateful
operators' update, removal and commit times, summed over tasks); the driver's share (the batch
less addBatch: planning, offsets, commit log), a fixed cost per batch that more cores do not shorten.
"""

from __future__ import annotations

import math
import os
import shutil
import sys
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from ..core.contract import PACKAGE
from ..core.durations import parse_duration
from ..core.operators import OPERATORS
from ..core.plan_operators import PlanOperator, chain, flow_order
from ..core.sizing import core_rates
from ..core.sizing.partitions import for_cores
from ..job.endpoints.sample_input import UNIQUE_KEYS
from .scratch_run import (
    BenchError,
    BenchRunFailed,
    follow_run,
    percentile,
    rate_overrides,
    scratch_environment,
)
from .store_configurations import CONFIGURATIONS, run_state_rows, unsupported

# A try whose warm-up batches take this many trigger intervals is far behind: stopped, not counted.
WAY_BEHIND = 3
# The watermark is this many trigger intervals of event time; the state's own span one.
WATERMARK_TRIGGERS = 2
# The next rate tried aims this far past the limit a try implies (below it after one that fell behind):
# the fixed costs of a batch make a try's batch time understate what more rows would cost.
OVERSHOOT = 1.2


@dataclass
class Try:
    """One run at one rate."""

    rows_per_second: float
    cores: int
    cpus: int | None  # the CPUs the job's process was kept to; None: not kept (not Linux, or no more CPUs)
    holds: bool
    stopped_early: bool
    failure: str | None  # why the run ended with an error, after some batches: it did not hold either
    batches: int
    input_rows_per_batch: int
    batch_ms_p50: float
    batch_ms_p95: float
    driver_ms_p50: float
    state_rows: int
    state_update_ms: float  # medians per batch, summed over tasks
    state_remove_ms: float
    state_commit_ms: float
    state_rows_written: float  # puts and deletes per batch (rows updated + removed), median

    @property
    def core_us_per_row(self) -> float:
        """Core time per input row: the cores x the batch less its driver share, per row."""
        return self.cores * max(self.batch_ms_p50 - self.driver_ms_p50, 0.0) * 1000 / self.input_rows_per_batch

    @property
    def state_us_per_row(self) -> float:
        return (self.state_update_ms + self.state_remove_ms + self.state_commit_ms) * 1000 / self.input_rows_per_batch


@dataclass
class Sustained:
    """The search's outcome on one configuration and core count."""

    configuration: str
    cores: int
    trigger: str
    rows_per_second: float | None  # the highest rate that held; None when none did
    failed_at: float | None  # the lowest rate that did not
    tries: list[Try]

    @property
    def best(self) -> Try | None:
        held = [t for t in self.tries if t.holds]
        return max(held, key=lambda t: t.rows_per_second) if held else None

    def to_dict(self) -> dict[str, Any]:
        best = self.best
        figures: dict[str, Any] = {}
        if best is not None and self.rows_per_second is not None:
            micro = core_rates.STORE_PUT_US[CONFIGURATIONS[self.configuration].provider]
            writes = best.state_rows_written / best.input_rows_per_batch
            figures = {
                "rows_per_second_per_core": self.rows_per_second / self.cores,
                "core_us_per_row": best.core_us_per_row,
                "state_us_per_row": best.state_us_per_row,
                "rest_us_per_row": best.core_us_per_row - best.state_us_per_row,
                "driver_ms_per_batch": best.driver_ms_p50,
                "state_writes_per_row": writes,
                "store_microbenchmark_us_per_row": micro * writes,
                "store_limit_rows_per_second_per_core": 1e6 / (micro * writes) if writes else None,
            }
        return {
            "configuration": self.configuration,
            "cores": self.cores,
            "trigger": self.trigger,
            "rows_per_second": self.rows_per_second,
            "failed_at": self.failed_at,
            **figures,
            "tries": [asdict(t) | {"core_us_per_row": t.core_us_per_row} for t in self.tries],
        }


def bench_spans(operator: str, trigger_seconds: float) -> dict[str, str]:
    """Settings overrides that keep the state short-lived: a watermark of WATERMARK_TRIGGERS triggers and
    the operator's own span (window, join range, session timeout) of one."""
    span = f"{round(trigger_seconds * 1000)} milliseconds"
    overrides = {"QUERY__WATERMARK": f"{round(WATERMARK_TRIGGERS * trigger_seconds * 1000)} milliseconds"}
    setting = OPERATORS[operator].lifetime_setting
    if setting:
        overrides[f"QUERY__{setting.upper().replace('.', '__')}"] = span
    return overrides


# Batches until the state is at its steady size: the watermark and the span pass, and two more.
WARMUP_BATCHES = WATERMARK_TRIGGERS + 1 + 2


def rows_per_batch(operator: str, rows_per_second: float, trigger_seconds: float) -> int:
    """Rows each source carries per batch: a join's rate is split between its two sides."""
    sides = 2 if OPERATORS[operator].two_inputs else 1
    return max(1, round(rows_per_second * trigger_seconds / sides))


def try_environment(
    folder: Path, lead: str, configuration: str, cores: int, per_batch: int, trigger: str, conf: dict[str, str]
) -> dict[str, str]:
    sources = rate_overrides("SOURCE", per_batch, UNIQUE_KEYS, trigger)
    if OPERATORS[lead].two_inputs:
        sources |= rate_overrides("JOIN_SOURCE", per_batch, UNIQUE_KEYS, trigger)
    spans = bench_spans(lead, parse_duration(trigger))
    on_cores = {"SPARK__MASTER": f"local[{cores}]", "SPARK__SHUFFLE_PARTITIONS": str(for_cores(cores))}
    return scratch_environment(folder, configuration, trigger, conf, sources | spans | on_cores)


def run_try(
    settings_path: Path,
    lead: str,
    folder: Path,
    configuration: str,
    cores: int,
    rows_per_second: float,
    trigger: str,
    batches: int,
    conf: dict[str, str],
) -> Try:
    """One run at one rate; the counted batches follow WARMUP_BATCHES."""
    trigger_ms = parse_duration(trigger) * 1000
    warmup = WARMUP_BATCHES
    per_batch = rows_per_batch(lead, rows_per_second, trigger_ms / 1000)
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    env = try_environment(folder, lead, configuration, cores, per_batch, trigger, conf)
    command = [sys.executable, "-m", PACKAGE, "run", "--settings", str(settings_path.resolve())]
    command += ["--max-batches", str(warmup + batches + 3)]
    last = warmup + batches - 1
    cpus = cpus_for(cores)
    stopped_early: list[int] = []  # the warm-up batch a try far behind was stopped at

    def stop(events: list[dict[str, Any]]) -> str | None:
        batch = events[-1]["batch_id"]
        print(
            f"  {configuration}, local[{cores}], {rows_per_second:,.0f} rows/s, batch {batch}:"
            f" {events[-1]['batch_duration_ms']:,} ms (trigger {trigger_ms:,.0f} ms)",
            file=sys.stderr,
            flush=True,
        )
        behind = [e for e in events[1:] if e["batch_duration_ms"] > WAY_BEHIND * trigger_ms]
        if batch < warmup and len(behind) >= 2:
            stopped_early.append(batch)
            return "now"
        return "after" if batch == last else None

    returncode, events = follow_run(command, env, folder / "job.log", stop, cpus)
    failure = None
    if returncode != 0:
        if not events:  # not a rate that is too high: a run that cannot start
            raise BenchRunFailed(
                f"{configuration} on local[{cores}] at {rows_per_second:,.0f} rows/s failed (exit"
                f" {returncode}) before its first batch; see {folder / 'job.log'}"
            )
        failure = failure_of(folder / "job.log", returncode)
    counted = [e for e in events if warmup <= e["batch_id"] <= last]
    if stopped_early or failure and not counted:
        counted = events[-2:]
    elif len(counted) < batches and not failure:
        raise BenchRunFailed(
            f"{configuration} on local[{cores}] committed {len(counted)} of {batches} counted batches;"
            f" see {folder / 'job.log'}"
        )
    # A failed try's checkpoint may not read back: Spark's figure (0 where rows are not tracked).
    state_rows = (
        counted[-1]["state_rows"] if failure else run_state_rows(configuration, counted[-1], folder / "checkpoint")
    )
    for scratch in ("checkpoint", "output"):
        shutil.rmtree(folder / scratch, ignore_errors=True)
    durations = [e["batch_duration_ms"] for e in counted]
    p50 = percentile(durations, 0.5)

    def state(name: str) -> float:
        return percentile([sum(op.get(name) or 0 for op in e["state_operators"]) for e in counted], 0.5)

    return Try(
        rows_per_second=rows_per_second,
        cores=cores,
        cpus=None if cpus is None else len(cpus),
        holds=not stopped_early and not failure and p50 <= trigger_ms,
        stopped_early=bool(stopped_early),
        failure=failure,
        batches=len(counted),
        input_rows_per_batch=max(1, round(percentile([e["input_rows"] for e in counted], 0.5))),
        batch_ms_p50=p50,
        batch_ms_p95=percentile(durations, 0.95),
        driver_ms_p50=percentile([driver_ms(e) for e in counted], 0.5),
        state_rows=state_rows,
        state_update_ms=state("update_time_ms"),
        state_remove_ms=state("remove_time_ms"),
        state_commit_ms=state("commit_time_ms"),
        state_rows_written=percentile(
            [
                sum((op.get("rows_updated") or 0) + (op.get("rows_removed") or 0) for op in e["state_operators"])
                for e in counted
            ],
            0.5,
        ),
    )


def cpus_for(cores: int) -> set[int] | None:
    """The CPUs a try on `cores` cores runs on: the job's whole process (driver, GC, Python workers and
    the task threads) is kept to that many of this machine's CPUs, as a job given N cores has N, not N
    task threads beside a driver on other CPUs. None where the process cannot be pinned (not Linux)
    or the machine has no more CPUs than that."""
    if not hasattr(os, "sched_getaffinity"):
        return None
    available = sorted(os.sched_getaffinity(0))
    return set(available[:cores]) if len(available) > cores else None


def failure_of(log: Path, code: int) -> str:
    """Why a run that committed batches ended in an error: out of memory, else its first error line."""
    lines = log.read_text(errors="replace").splitlines()
    if any("OutOfMemoryError" in line for line in lines):
        return "out of memory: java.lang.OutOfMemoryError in the JVM (spark.driver.memory holds a local run)"
    errors = [line.strip() for line in lines if "ERROR" in line or line.startswith("query ")]
    return f"exit {code}: {errors[0][:200]}" if errors else f"exit {code}"


def driver_ms(event: dict[str, Any]) -> float:
    """The batch's time outside its tasks: the batch less addBatch (where the tasks run)."""
    durations = event.get("durations_ms") or {}
    return max(0, event["batch_duration_ms"] - durations.get("addBatch", 0))


def next_rate(last: Try, trigger_ms: float) -> float:
    """The rate to try after `last`: where its batch time says the limit is (the part of the batch beyond
    the driver's share scaling with the rows), past it after a try that held so that the next may not,
    short of it after one that fell behind; a quarter more (or less) than the last at least, 4 times at most."""
    spare = trigger_ms - last.driver_ms_p50
    used = max(last.batch_ms_p50 - last.driver_ms_p50, 1.0)
    implied = last.rows_per_second * max(spare, 1.0) / used
    if last.holds:
        return min(max(implied * OVERSHOOT, last.rows_per_second * 1.25), last.rows_per_second * 4)
    return max(min(implied / OVERSHOOT, last.rows_per_second * 0.8), last.rows_per_second / 4)


def search(
    run: Any,
    start: float,
    trigger_ms: float,
    max_tries: int,
    precision: float,
) -> tuple[float | None, float | None, list[Try]]:
    """The highest rate that holds, bracketed within `precision` (0.15: 15 %) or after max_tries runs of
    `run(rate) -> Try`: first by where each try's batch time points, then by halving the bracket."""
    tries: list[Try] = []
    held: float | None = None
    failed: float | None = None
    rate = start
    while len(tries) < max_tries:
        result = run(rate)
        tries.append(result)
        if result.holds:
            held = max(held or 0.0, rate)
        else:
            failed = rate if failed is None else min(failed, rate)
        if held is not None and failed is not None:
            if failed / held <= 1 + precision:
                break
            rate = math.sqrt(held * failed)
            # Where the last try points, if that lies inside the bracket, is a better guess.
            guess = next_rate(result, trigger_ms)
            if held < guess < failed:
                rate = guess
        else:
            rate = next_rate(result, trigger_ms)
    return held, failed, tries


def sustained(
    settings_path: Path,
    spark_conf: dict[str, str],
    plan: Sequence[PlanOperator],
    configuration: str,
    cores: int,
    trigger: str,
    batches: int,
    start: float | None,
    max_tries: int,
    precision: float,
    out: Path,
) -> Sustained:
    """The search on one configuration and core count; each try's log stays under out/runs. spark_conf:
    the settings' spark.conf with what the tries add (the driver's memory)."""
    operators = [operator.kind for operator in flow_order(plan) if operator.known]
    if not operators:
        raise BenchError(
            f"the query's plan holds no operator sustain can shape input for ({chain([o.kind for o in plan])})"
        )
    if configuration not in CONFIGURATIONS:
        raise BenchError(f"--providers {configuration}: not a configuration; choose from {', '.join(CONFIGURATIONS)}")
    reason = unsupported(operators, configuration)
    if reason:
        raise BenchError(f"--providers {configuration}: {reason}")
    trigger_ms = parse_duration(trigger) * 1000
    if start is None:
        start = core_rates.advised_start(operators, CONFIGURATIONS[configuration].provider, cores)

    def run(rate: float) -> Try:
        folder = out / "runs" / f"{configuration}-local{cores}-{round(rate)}"
        started = time.monotonic()
        result = run_try(settings_path, operators[0], folder, configuration, cores, rate, trigger, batches, spark_conf)
        verdict = "holds" if result.holds else f"fails: {result.failure}" if result.failure else "falls behind"
        print(
            f"{configuration}, local[{cores}], {rate:,.0f} rows/s: {verdict} (median batch"
            f" {result.batch_ms_p50:,.0f} ms of {trigger_ms:,.0f}); {time.monotonic() - started:.0f} s",
            file=sys.stderr,
        )
        return result

    held, failed, tries = search(run, start, trigger_ms, max_tries, precision)
    return Sustained(configuration, cores, trigger, held, failed, tries)
