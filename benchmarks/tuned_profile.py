"""The tuned RocksDB profile against the default one: the rows per second one core holds (sustain).

Bakes each operator's project and runs its `sustain` on one core (the job kept to one CPU) with two
configurations side by side in one command: `rocksdb+changelog` (the default bake's store) and
`rocksdb+tuned` (the same with spark.sql.streaming.stateStore.rocksdb.trackTotalNumberOfRows off,
which saves RocksDB a read before each write; the state rows are then counted from the state files).
Per operator: the highest rate each held, and the state store's µs per row at that rate (Spark's
update, removal and commit times per input row), with their ratios tuned / default.

Writes RESULTS_DIR/tuned_profile.json and tuned_profile.md and prints them. Run nothing else beside it.

    .venv/bin/python benchmarks/tuned_profile.py [--operators ...] [--max-tries N]
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
from pathlib import Path

from core_rates import TRIGGER, bake, sustain
from overhead import machine, save

REPO = Path(__file__).resolve().parents[1]
OPERATORS = ("windowed_aggregation", "deduplication")
CONFIGURATIONS = ("rocksdb+changelog", "rocksdb+tuned")


def arguments() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--operators", nargs="+", default=list(OPERATORS), choices=OPERATORS)
    parser.add_argument("--max-tries", type=int, default=5, help="tries per search (default: %(default)s)")
    parser.add_argument("--results-dir", type=Path, default=REPO / "benchmarks" / "results")
    return parser.parse_args()


def table(rows: list[dict]) -> list[str]:
    lines = [
        "# The tuned RocksDB profile against the default (sustain, 1 core)",
        "",
        f"Each operator's example query (every event its own key), {TRIGGER} trigger, 2 partitions, the job"
        " kept to one CPU; the highest rate whose median batch stayed within the trigger (`sustain`, each"
        " search's tries in the JSON), and at that rate the state store's µs per input row (Spark's update,"
        " removal and commit times, summed over tasks). Both configurations use changelog checkpointing;"
        " `rocksdb+tuned` also turns trackTotalNumberOfRows off.",
        "",
        "| operator | configuration | held rows/s per core | did not hold at | state µs per row | state rows at the end"
        " | held rows/s, tuned / default | state µs per row, tuned / default |",
        "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    by_key = {(row["operator"], row["configuration"]): row for row in rows}
    for row in rows:
        default = by_key.get((row["operator"], CONFIGURATIONS[0]))
        ratios = ["", ""]
        if (
            row["configuration"] == CONFIGURATIONS[1]
            and default
            and row["rows_per_second"]
            and default["rows_per_second"]
        ):
            ratios = [
                f"{row['rows_per_second'] / default['rows_per_second']:.2f}",
                f"{row['state_us_per_row'] / default['state_us_per_row']:.2f}",
            ]
        held = "none held" if row["rows_per_second"] is None else f"{row['rows_per_second_per_core']:,.0f}"
        failed = "-" if row["failed_at"] is None else f"{row['failed_at']:,.0f}"
        state_us = f"{row['state_us_per_row']:.1f}" if row.get("state_us_per_row") is not None else ""
        best = max((t for t in row["tries"] if t["holds"]), key=lambda t: t["rows_per_second"], default=None)
        rows_end = f"{best['state_rows']:,}" if best else ""
        lines.append(
            f"| {row['operator']} | {row['configuration']} | {held} | {failed} | {state_us} | {rows_end} |"
            f" {ratios[0]} | {ratios[1]} |"
        )
    return [*lines, ""]


def main() -> None:
    args = arguments()
    scratch = Path(tempfile.mkdtemp(prefix="tuned-profile-"))
    rows = []
    try:
        for operator in args.operators:
            project = bake(scratch, operator)
            flags = ["--providers", ",".join(CONFIGURATIONS), "--cores", "1", "--max-tries", str(args.max_tries)]
            found = sustain(project, operator, scratch / f"{operator}-sustain", *flags)
            rows += [{"operator": operator, **result} for result in found["results"]]
            save(
                args.results_dir,
                "tuned_profile",
                {"machine": machine(), "trigger": TRIGGER, "results": rows},
                table(rows),
            )
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


if __name__ == "__main__":
    main()
