"""What each of the state checkpoint's integrity features costs per batch (docs/state.md, "A checkpoint
that checks itself"), side by side with the baseline in one run.

Bakes the default project on RocksDB and runs its query (benchmarks/integrity_probe.py, inside the
bake, one local[2] JVM) on the same sample files once per variant and round, RocksDB with changelog
checkpointing, each run on a new checkpoint, the variants' order rotating from round to round. Per
variant: the median over rounds of each run's median batch duration and state commit time (the
first batch, which warms the JVM, left out), their ratio to the baseline's in the same round, and
the files and bytes left in the checkpoint's state folder. Auto snapshot repair is on in every
variant: it costs nothing until a snapshot fails to load (then it replays changelogs instead of
failing). Prints the table and writes RESULTS_DIR/integrity_costs.json and integrity_costs.md.

    .venv/bin/python benchmarks/integrity_costs.py [--files 8] [--events-per-file 20000] [--rounds 3]
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import sys
import tempfile
from pathlib import Path

from overhead import machine, run, save

REPO = Path(__file__).resolve().parents[1]
PROBE = Path(__file__).resolve().with_name("integrity_probe.py")
ANSWERS = {"state_store_provider": "rocksdb"}


def arguments() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--files", type=int, default=8, help="sample files, one per batch (default: %(default)s)")
    parser.add_argument("--events-per-file", type=int, default=20000, help="(default: %(default)s)")
    parser.add_argument("--rounds", type=int, default=3, help="(default: %(default)s)")
    parser.add_argument("--results-dir", type=Path, default=REPO / "benchmarks" / "results")
    return parser.parse_args()


def bake(scratch: Path) -> Path:
    command = [sys.executable, "-m", "cookiecutter", "--no-input", "--default-config", "-o", str(scratch), str(REPO)]
    run([*command, *(f"{key}={value}" for key, value in ANSWERS.items())], cwd=REPO)
    project = scratch / "stream-job"  # package stream_job, which the probe imports
    shutil.copy(PROBE, project)
    return project


def per_run(record: dict) -> dict[str, float]:
    batches = [batch for batch in record["batches"] if batch["rows"]][1:]  # the first warms the JVM
    return {
        "batch_ms": statistics.median(batch["batch_ms"] for batch in batches),
        "commit_ms": statistics.median(batch["commit_ms"] for batch in batches),
        "changelog_commit_ms": statistics.median(batch["changelog_commit_ms"] for batch in batches),
        "state_files": record["state_files"],
        "state_bytes": record["state_bytes"],
    }


def summary(records: list[dict]) -> dict[str, dict[str, float]]:
    runs = {(record["variant"], record["round"]): per_run(record) for record in records}
    variants = list(dict.fromkeys(record["variant"] for record in records))
    rounds = sorted({record["round"] for record in records})
    result = {}
    for variant in variants:
        mine = [runs[variant, number] for number in rounds]
        base = [runs["baseline", number] for number in rounds]
        result[variant] = {
            **{key: statistics.median(run[key] for run in mine) for key in mine[0]},
            "batch_ratio": statistics.median(m["batch_ms"] / b["batch_ms"] for m, b in zip(mine, base, strict=True)),
            "commit_ratio": statistics.median(
                m["commit_ms"] / max(b["commit_ms"], 1) for m, b in zip(mine, base, strict=True)
            ),
        }
    return result


def table(result: dict[str, dict[str, float]]) -> list[str]:
    lines = [
        "| variant | batch ms (x baseline) | state commit ms (x baseline) | changelog commit ms"
        " | state files | state bytes |",
        "| --- | ---: | ---: | ---: | ---: | ---: |",
    ]
    for variant, m in result.items():
        lines.append(
            f"| {variant} | {m['batch_ms']:,.0f} (x{m['batch_ratio']:.2f}) | {m['commit_ms']:,.0f}"
            f" (x{m['commit_ratio']:.2f}) | {m['changelog_commit_ms']:,.0f} | {m['state_files']:,.0f}"
            f" | {m['state_bytes']:,.0f} |"
        )
    return lines


def main() -> None:
    args = arguments()
    scratch = Path(tempfile.mkdtemp(prefix="integrity-costs-"))
    try:
        project = bake(scratch)
        command = [sys.executable, PROBE.name, "--files", str(args.files)]
        command += ["--events-per-file", str(args.events_per_file), "--rounds", str(args.rounds)]
        output = run(command, cwd=project).stdout
        records = [json.loads(line) for line in output.splitlines() if line.startswith("{")]
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    result = summary(records)
    what = (
        f"`benchmarks/integrity_costs.py --files {args.files} --events-per-file {args.events_per_file}"
        f" --rounds {args.rounds}`: the default project's windowed count on RocksDB with changelog"
        f" checkpointing, local[2], 2 shuffle partitions, one batch per file, every event its own key;"
        f" medians over {args.rounds} rounds (the variants' order rotating), after a warm-up round, the first batch of each run left out"
    )
    record = {"what": what, "machine": machine(), "summary": result, "runs": records}
    lines = ["# Integrity feature costs", "", what + ".", "", *table(result), ""]
    save(args.results_dir, "integrity_costs", record, lines)


if __name__ == "__main__":
    sys.exit(main())
