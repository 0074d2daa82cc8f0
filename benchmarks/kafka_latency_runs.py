"""Each run's p99 of benchmarks/kafka_latency.py, pooled over several of its results files: per row (shape and
mode), the runs of the template against those of the hand-written job.

A real-time row's p99 is set by the records at its batch boundaries, and their wait moves more from run to
run than between the two jobs, so one results file's pooled p99 says little (0.96 in one, 1.50 in the next,
for the same shape). Many runs say more: per row, the median run of each implementation and their ratio,
the median of the ratios of every pair of runs (the template's over the hand-written job's, a ratio that
one unlucky run does not move), and a rank test (Mann-Whitney U, two-sided, normal approximation with a
correction for ties) of whether the template's runs are slower at all. Reads RESULTS_DIR/NAME.json for each
name given; writes RESULTS_DIR/OUT.json and .md.

    .venv/bin/python benchmarks/kafka_latency_runs.py NAME [NAME ...] [--out kafka_latency_runs]
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
from collections import defaultdict
from pathlib import Path

from overhead import save

RESULTS_DIR = Path(__file__).resolve().parent / "results"


def rank_test(slower: list[float], faster: list[float]) -> float:
    """The two-sided p-value of the Mann-Whitney U of `slower` against `faster` (pairs where the first is larger,
    ties a half), by the normal approximation with the tie correction."""
    u = sum(1.0 if a > b else 0.5 if a == b else 0.0 for a in slower for b in faster)
    n1, n2 = len(slower), len(faster)
    counts = defaultdict(int)
    for value in slower + faster:
        counts[value] += 1
    n = n1 + n2
    ties = sum(t**3 - t for t in counts.values()) / (n * (n - 1))
    spread = math.sqrt(n1 * n2 / 12 * (n + 1 - ties))
    z = (u - n1 * n2 / 2) / spread if spread else 0.0
    return math.erfc(abs(z) / math.sqrt(2))


def pooled(names: list[str]) -> dict[tuple[str, str], dict[str, list[float]]]:
    """(shape, mode) -> implementation -> every run's p99 in ms, over the results files."""
    rows: dict[tuple[str, str], dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    for name in names:
        for row in json.loads((RESULTS_DIR / f"{name}.json").read_text())["rows"]:
            rows[(row["shape"], row["mode"])][row["implementation"]] += row["p99_ms_per_run"]
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("names", nargs="+", help="kafka_latency results files, without .json")
    parser.add_argument("--out", default="kafka_latency_runs", help="results file name (default: %(default)s)")
    args = parser.parse_args()
    machines = {json.dumps(json.loads((RESULTS_DIR / f"{name}.json").read_text())["machine"]) for name in args.names}
    lines = [
        "# Real-time and micro-batch p99, run by run",
        "",
        f"Each run's p99 from {', '.join(f'`{name}.md`' for name in args.names)} (every file's runs alternate the"
        " template and the hand-written job).",
        "",
        "| shape | mode | runs, template / hand-written | median run's p99 ms, template / hand-written | ratio"
        " | median ratio of pairs | rank test p |",
        "| --- | --- | ---: | ---: | ---: | ---: | ---: |",
    ]
    figures = []
    for (shape, mode), runs in pooled(args.names).items():
        template, hand = runs["template"], runs["hand-written"]
        if not template or not hand:
            continue
        pairs = statistics.median(a / b for a in template for b in hand)
        p = rank_test(template, hand)
        medians = statistics.median(template), statistics.median(hand)
        figures.append(
            {
                "shape": shape,
                "mode": mode,
                "template_p99_ms": template,
                "hand_written_p99_ms": hand,
                "median_runs_ms": medians,
                "ratio_of_medians": medians[0] / medians[1],
                "median_ratio_of_pairs": pairs,
                "rank_test_p": p,
            }
        )
        lines.append(
            f"| {shape} | {mode} | {len(template)} / {len(hand)} | {medians[0]:,.0f} / {medians[1]:,.0f}"
            f" | {medians[0] / medians[1]:.2f} | {pairs:.2f} | {p:.2f} |"
        )
    lines.append("")
    save(RESULTS_DIR, args.out, {"names": args.names, "rows": figures, "machine": " / ".join(sorted(machines))}, lines)


if __name__ == "__main__":
    main()
