"""bench: this project's query on synthetic input, once per state store configuration and state size.

Each run is `python -m <package> run` in a fresh process with a fresh checkpoint, its settings
overridden through the environment: the rate-micro-batch source (one second of event time per
batch), a 1-hour watermark (and window, and session timeout) so that nothing is evicted during the
run, JSON progress lines, and Spark's event log. What "N keys" means follows the operator
(see `bench_run.input_plan`): the state rows the query holds at the last counted batch.
bench_run.py runs and measures one configuration at one size; bench_report.py writes the files.
"""

from __future__ import annotations

import shutil
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from ..core.plan_operators import PlanOperator, chain, flow_order
from ..core.settings import Settings
from .bench_report import write_results
from .bench_run import SPARE_BATCHES, Result, run_one
from .scratch_run import BenchError
from .store_configurations import CONFIGURATIONS, unsupported

# A run's event time advances 1 s per batch and stays in one 1-hour window.
MAX_RUN_BATCHES = 3600 - SPARE_BATCHES


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
