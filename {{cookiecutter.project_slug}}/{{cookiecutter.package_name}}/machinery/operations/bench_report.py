"""The bench's results files: results.json and results.csv, summary.md with its table, the fastest
configuration beside the napkin math's, and a chart of batch time against state size."""

from __future__ import annotations

import csv
import json
from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

from ..core.figures import human_bytes
from ..core.plan_operators import PlanOperator, chain, flow_order
from ..core.settings import Settings
from .bench_run import Result, input_plan
from .scratch_run import machine


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
