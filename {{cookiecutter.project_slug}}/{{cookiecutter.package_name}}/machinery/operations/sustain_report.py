"""sustain's results files: sustain.json, and sustain.md with a row per configuration and every try."""

from __future__ import annotations

import json
from pathlib import Path

from ..core.sizing import core_rates
from . import sustained_rate
from .scratch_run import machine
from .sustained_rate import Sustained


def write_results(out: Path, operator: str, results: list[Sustained]) -> str:
    """results.json and summary.md under out; returns the summary."""
    ran_on = machine()
    about = {"operator": operator, "machine": ran_on, "how": sustained_rate.__doc__}
    (out / "sustain.json").write_text(json.dumps({**about, "results": [r.to_dict() for r in results]}, indent=2) + "\n")
    lines = [
        f"# sustain: {operator}",
        "",
        "Machine: " + ", ".join(f"{key} {value}" for key, value in ran_on.items()) + ".",
        "",
        "| configuration | cores | trigger | sustained rows/s | rows/s per core | fell behind at | core µs per row"
        " | of which state store | rest | driver ms per batch | store microbenchmark µs per row |",
        "| --- | ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for result in results:
        d = result.to_dict()
        if result.rows_per_second is None:
            lines.append(
                f"| {result.configuration} | {result.cores} | {result.trigger} | none held | - |"
                f" {fmt(result.failed_at)} | - | - | - | - | - |"
            )
            continue
        lines.append(
            f"| {result.configuration} | {result.cores} | {result.trigger} | {fmt(result.rows_per_second)} |"
            f" {fmt(d['rows_per_second_per_core'])} | {fmt(result.failed_at)} | {d['core_us_per_row']:.1f} |"
            f" {d['state_us_per_row']:.1f} | {d['rest_us_per_row']:.1f} | {d['driver_ms_per_batch']:,.0f} |"
            f" {d['store_microbenchmark_us_per_row']:.1f} |"
        )
    lines += [
        "",
        "Core µs per row: the cores x the median batch less its driver share, per input row, at the highest"
        " rate that held. Of which state store: the stateful operators' update, removal and commit times"
        " (Spark's progress, summed over tasks) per input row. Rest: reading, shuffling and writing the rows"
        " and the operators' own work. Driver ms per batch: planning, offsets and the commit log, a cost no"
        " core count shortens. Store microbenchmark: "
        + core_rates.STORE_PUT_SOURCE
        + ", times the state rows each input row writes or deletes.",
        "",
        "Tries (rate, verdict, median batch ms; failed: the run ended in an error, such as running out of"
        " memory, which the JSON names):",
        *(
            f"- {r.configuration} local[{r.cores}]: "
            + "; ".join(
                f"{t.rows_per_second:,.0f} {'holds' if t.holds else 'failed' if t.failure else 'behind'}"
                f" {t.batch_ms_p50:,.0f}"
                for t in r.tries
            )
            for r in results
        ),
        "",
    ]
    summary = "\n".join(lines)
    (out / "sustain.md").write_text(summary)
    return summary


def fmt(value: float | None) -> str:
    return "-" if value is None else f"{value:,.0f}"
