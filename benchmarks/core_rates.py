"""The rows per second one core holds, per operator and provider, and the core advice checked against runs.

measure: bakes each operator's project and runs its `sustain` (the highest rate whose batches stay
within a 2-second trigger, found by a bounded search) on each provider (RocksDB with changelog
checkpointing) and core count. The local[1] figures go into the generated package's
machinery/core/sizing/core_rates.py by hand (its comment says why local[1]).

check: with those figures, per operator, two rates: one `estimate` advises 1 core for, and one it
advises 2 for (90 % of the most 2 cores are advised for); each run on its advised cores (a
single `sustain` try at that rate), and the second also on half of them. The advice holds when
the first two keep their median batch within the trigger and the third does not.

Writes RESULTS_DIR/core_rates.json and core_rates.md (measure), core_advice.json and core_advice.md
(check), and prints them. Every run is alone on the machine: run nothing else beside it.

    .venv/bin/python benchmarks/core_rates.py measure [--cores 1 2] [--operators ...]
    .venv/bin/python benchmarks/core_rates.py check
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
from pathlib import Path

from overhead import machine, run, save

REPO = Path(__file__).resolve().parents[1]
OPERATORS = ("windowed_aggregation", "deduplication", "stream_stream_join", "custom_state")
PROVIDERS = {"custom_state": ("rocksdb+changelog",)}
DEFAULT_PROVIDERS = ("hdfs", "rocksdb+changelog")
# The provider each operator's advice is checked on: its default bake's.
CHECKED_ON = {"custom_state": "rocksdb"}
TRIGGER = "2 seconds"
# custom_state's batches cost over 2 seconds on one core whatever the rate (its Python workers and
# their state server, per partition): it is measured at the settings' default trigger instead, with
# fewer counted batches to keep a try near 1.5 minutes.
TRIGGERS = {"custom_state": ("10 seconds", 3)}


def arguments() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("phase", choices=("measure", "check"))
    parser.add_argument("--operators", nargs="+", default=list(OPERATORS), choices=OPERATORS)
    parser.add_argument("--cores", type=int, nargs="+", default=[1, 2], help="measure: local cores (default: 1 2)")
    parser.add_argument("--max-tries", type=int, default=4, help="measure: tries per search (default: %(default)s)")
    parser.add_argument("--results-dir", type=Path, default=REPO / "benchmarks" / "results")
    parser.add_argument(
        "--scratch", type=Path, help="folder for the bakes and the runs' logs, kept (default: a temporary one, removed)"
    )
    return parser.parse_args()


def bake(scratch: Path, operator: str) -> Path:
    command = [sys.executable, "-m", "cookiecutter", "--no-input", "--default-config", "-o", str(scratch / operator)]
    run([*command, str(REPO), f"stateful_operator={operator}"], cwd=REPO)
    return scratch / operator / "stream-job"


def sustain(project: Path, operator: str, out: Path, *flags: str) -> dict:
    trigger, batches = TRIGGERS.get(operator, (TRIGGER, 5))
    command = ["-m", "stream_job", "sustain", "--trigger", trigger, "--batches", str(batches), "--out", str(out)]
    run([sys.executable, *command, *flags], cwd=project)
    return json.loads((out / "sustain.json").read_text())


def measure(args: argparse.Namespace, scratch: Path) -> None:
    """Each operator's searches; the results file is written after each operator, and an operator measured
    again replaces its rows (--operators measures some of them)."""
    previous = args.results_dir / "core_rates.json"
    rows = json.loads(previous.read_text())["results"] if previous.exists() else []
    for operator in args.operators:
        project = bake(scratch, operator)
        providers = ",".join(PROVIDERS.get(operator, DEFAULT_PROVIDERS))
        flags = ["--providers", providers, "--cores", *map(str, args.cores), "--max-tries", str(args.max_tries)]
        found = sustain(project, operator, scratch / f"{operator}-sustain", *flags)
        rows = [row for row in rows if row["operator"] != operator]
        rows += [{"operator": operator, **result} for result in found["results"]]
        rows.sort(key=lambda row: (OPERATORS.index(row["operator"]), row["configuration"], row["cores"]))
        save(
            args.results_dir,
            "core_rates",
            {"machine": machine(), "trigger": TRIGGER, "results": rows},
            table(rows),
        )


def table(rows: list[dict]) -> list[str]:
    lines = [
        "# Rows per second a core holds (sustain)",
        "",
        f"Each operator's example query (every event its own key), {TRIGGER} trigger (custom_state:"
        f" {TRIGGERS['custom_state'][0]}), 2 partitions per core, the job kept to as many CPUs; the"
        " highest rate whose median batch stayed within the trigger, found by `sustain` (each search's tries"
        " are in the JSON). Time per row at that rate, in µs of core time: the state store's"
        " (update, removal and commit times from Spark's progress, summed over tasks) and the rest; beside it"
        " Spark's own microbenchmark of the store (a put, times the state rows each input row writes or deletes)"
        " and the rows per second per core that alone would allow.",
        "",
        "| operator | provider | cores | held rows/s | rows/s per core | did not hold at | core µs per row | state store"
        " | rest | driver ms per batch | store microbenchmark µs per row | store's limit rows/s per core | job / store"
        " limit |",
        "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for row in rows:
        if row["rows_per_second"] is None:
            lines.append(
                f"| {row['operator']} | {row['configuration']} | {row['cores']} | none held | | | | | | | | | |"
            )
            continue
        limit = row["store_limit_rows_per_second_per_core"]
        ratio = row["rows_per_second_per_core"] / limit if limit else None
        share = "-" if ratio is None else f"{ratio:.0%}" if ratio >= 0.01 else f"{ratio:.2%}"
        lines.append(
            f"| {row['operator']} | {row['configuration']} | {row['cores']} | {row['rows_per_second']:,.0f} |"
            f" {row['rows_per_second_per_core']:,.0f} | {fmt(row['failed_at'])} | {row['core_us_per_row']:.1f} |"
            f" {row['state_us_per_row']:.1f} | {row['rest_us_per_row']:.1f} | {row['driver_ms_per_batch']:,.0f} |"
            f" {row['store_microbenchmark_us_per_row']:.1f} | {fmt(limit)} | {share} |"
        )
    failures = [
        f"- {row['operator']} {row['configuration']} local[{row['cores']}] at {t['rows_per_second']:,.0f} rows/s: {t['failure']}"
        for row in rows
        for t in row["tries"]
        if t.get("failure")
    ]
    lines += [
        "",
        "A search that found no rate that did not hold (did not hold at -) gives a floor. Tries that ended in an"
        " error count as not holding:"
        if failures
        else "No try ended in an error.",
        *failures,
        "",
    ]
    return lines


def estimate(project: Path, operator: str, provider: str, rate: float) -> dict:
    """The bake's `estimate` for this operator at this rate, on this provider (through the settings' environment)."""
    flags = ["--operator", operator, "--rate", str(rate)]
    if operator == "stream_stream_join":  # the rate is both sides'
        flags = ["--operator", operator, "--rate", str(rate / 2), "--join-rate", str(rate / 2)]
    env = {**os.environ, "STREAM_JOB_STATE_STORE__PROVIDER": provider}
    done = run([sys.executable, "-m", "stream_job", "estimate", "--json", *flags], cwd=project, env=env)
    return json.loads(done.stdout)["cores"]


def check(args: argparse.Namespace, scratch: Path) -> int:
    rows = []
    for operator in args.operators:
        project = bake(scratch, operator)
        provider = CHECKED_ON.get(operator, "hdfs")
        configuration = "rocksdb+changelog" if provider == "rocksdb" else provider
        probe = estimate(project, operator, provider, 1000.0)
        per_core, load = probe["rows_per_second_per_core"][0], probe["target_load"]
        rates = {"advised 1": 0.5 * load * per_core, "advised 2": 0.9 * 2 * load * per_core}
        for name, rate in rates.items():
            advised = estimate(project, operator, provider, rate)["cores_needed"]
            for cores in dict.fromkeys([advised, advised // 2]):
                if cores < 1:
                    continue
                out = scratch / f"{operator}-{name.replace(' ', '')}-{cores}"
                flags = ["--providers", configuration, "--cores", str(cores), "--start-rate", str(rate)]
                found = sustain(project, operator, out, *flags, "--max-tries", "1")["results"][0]["tries"][0]
                expected = cores == advised
                rows.append(
                    {
                        "operator": operator,
                        "provider": configuration,
                        "rows_per_second": rate,
                        "advised_cores": advised,
                        "cores": cores,
                        "holds": found["holds"],
                        "expected": expected,
                        "batch_ms_p50": found["batch_ms_p50"],
                        "batch_ms_p95": found["batch_ms_p95"],
                    }
                )
                print(
                    f"{operator} {rate:,.0f} rows/s on {cores} of {advised} advised: {found['holds']}", file=sys.stderr
                )
    result = {"machine": machine(), "trigger": TRIGGER, "runs": rows}
    lines = [
        "# The core advice against runs",
        "",
        f"Per operator, a rate `estimate` advises 1 core for (half a core's share at the target load) and one it"
        f" advises 2 for (90 % of the most 2 cores are advised for), each run once on local[N] for its advised cores,"
        f" the second also on half of them; {TRIGGER} trigger (custom_state: {TRIGGERS['custom_state'][0]}), a single"
        " `sustain` try each, the job kept to as many CPUs as cores.",
        "",
        "| operator | provider | rows/s | advised cores | ran on | median batch ms | p95 ms | holds | as advised |",
        "| --- | --- | ---: | ---: | ---: | ---: | ---: | --- | --- |",
        *(
            f"| {r['operator']} | {r['provider']} | {r['rows_per_second']:,.0f} | {r['advised_cores']} | {r['cores']} |"
            f" {r['batch_ms_p50']:,.0f} | {r['batch_ms_p95']:,.0f} | {'yes' if r['holds'] else 'no'} |"
            f" {'yes' if r['holds'] == r['expected'] else 'NO'} |"
            for r in rows
        ),
        "",
    ]
    save(args.results_dir, "core_advice", result, lines)
    return 0 if all(r["holds"] == r["expected"] for r in rows) else 1


def fmt(value: float | None) -> str:
    return "-" if value is None else f"{value:,.0f}"


def main() -> int:
    args = arguments()
    scratch = args.scratch or Path(tempfile.mkdtemp(prefix="core-rates-"))
    scratch.mkdir(parents=True, exist_ok=True)
    try:
        if args.phase == "measure":
            measure(args, scratch)
            return 0
        return check(args, scratch)
    finally:
        if args.scratch is None:
            shutil.rmtree(scratch, ignore_errors=True)


if __name__ == "__main__":
    raise SystemExit(main())
