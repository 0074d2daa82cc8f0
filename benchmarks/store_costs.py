"""What each state store costs per row and per partition, measured with Spark's own metrics.

For every operator, bakes a project and runs its example query (benchmarks/state_store_probe.py,
inside the bake) on sample files, on 2 partitions, reading Spark's own metrics (the HDFS store's
memoryUsedBytes, JVM heap with the versions it keeps loaded; RocksDB's memoryUsedBytes, native
memory, and without changelog checkpointing its rocksdbSstFileSize, the SST files on local disk,
which changelog checkpointing writes only at snapshots):
- per store instance: a small state (20 rows per partition of the larger run) on 32 partitions
  against 2, the difference divided by the difference in instances (a join has four stores per
  partition);
- per row, growing: the least-squares slope of each size over the rows while the state grows
  file by file, every row live to the end;
- per row, steady: twice the files, each half a state lifetime on, so that rows leave as fast as
  they come, as in a running job (deletes, and files not yet compacted, included): the median over
  the settled second half of (size - instances x per-instance cost) / rows;
- RocksDB's disk, steady, in two parts (rocksdb_disk): the live rows merged, and each batch's flush
  per row it changed;
- the payload: the bytes of the key and value columns of those rows, as a user would count them
  (state_bytes_per_row's meaning).
Prints the table and writes RESULTS_DIR/store_costs.json and store_costs.md; the constants in
machinery/core/sizing/store_costs.py are copied from such a run, which is recorded beside them.

    .venv/bin/python benchmarks/store_costs.py [--files 8] [--events-per-file 4000]
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import sys
import tempfile
from pathlib import Path

from overhead import machine, run

REPO = Path(__file__).resolve().parents[1]
PROBE = Path(__file__).resolve().with_name("state_store_probe.py")
STORES = ("hdfs", "rocksdb", "rocksdb+changelog")
OPERATORS = {
    "windowed_aggregation": STORES,
    "deduplication": STORES,
    "stream_stream_join": STORES,
    "custom_state": STORES[1:],
}
FEW, MANY = 2, 32  # partitions of the small-state runs
SMALL_STATE_ROWS = 20 * MANY


def arguments() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--files", type=int, default=8, help="sample files, one per batch (default: %(default)s)")
    parser.add_argument("--events-per-file", type=int, default=4000, help="(default: %(default)s)")
    parser.add_argument("--operators", default=",".join(OPERATORS), help="(default: all)")
    parser.add_argument("--results-dir", type=Path, default=REPO / "benchmarks" / "results")
    return parser.parse_args()


def bake(scratch: Path, operator: str) -> Path:
    provider = "hdfs" if "hdfs" in OPERATORS[operator] else "rocksdb"
    answers = {"stateful_operator": operator, "state_store_provider": provider}
    folder = scratch / operator
    command = [sys.executable, "-m", "cookiecutter", "--no-input", "--default-config", "-o", str(folder), str(REPO)]
    run([*command, *(f"{key}={value}" for key, value in answers.items())], cwd=REPO)
    project = folder / "stream-job"  # package stream_job, which the probe imports
    shutil.copy(PROBE, project)
    return project


def probe(
    project: Path, store: str, partitions: int, files: int, events: int, steady: bool = False
) -> tuple[list[dict], float]:
    provider, _, changelog = store.partition("+")
    command = [sys.executable, PROBE.name, "--provider", provider, "--partitions", str(partitions)]
    command += ["--changelog"] if changelog else []
    command += ["--steady"] if steady else []
    command += ["--files", str(files), "--events-per-file", str(events)]
    lines = [json.loads(line) for line in run(command, cwd=project).stdout.splitlines() if line.startswith("{")]
    *batches, payload = lines
    return [batch for batch in batches if batch["rows"]], payload["column_bytes"]


def slope(points: list[tuple[float, float]]) -> float:
    """Least-squares slope of y over x."""
    n = len(points)
    mean_x, mean_y = sum(x for x, _ in points) / n, sum(y for _, y in points) / n
    return sum((x - mean_x) * (y - mean_y) for x, y in points) / sum((x - mean_x) ** 2 for x, _ in points)


def measure(project: Path, store: str, files: int, events: int) -> dict[str, object]:
    # With changelog checkpointing the SST files are written only at snapshots: no disk figure per batch.
    sizes = {"memory": "memory_bytes", **({"disk": "sst_bytes"} if store == "rocksdb" else {})}
    # Per store instance first: a small state that reaches every partition (a store that has
    # written anything holds buffers an empty one does not: RocksDB's memtable arena block).
    few, _ = probe(project, store, FEW, 1, SMALL_STATE_ROWS)
    many, _ = probe(project, store, MANY, 1, SMALL_STATE_ROWS)
    extra = many[-1]["instances"] - few[-1]["instances"]
    per_instance = {name: (many[-1][key] - few[-1][key]) / extra for name, key in sizes.items()}
    # Growing: every row live to the end; the slope over the rows.
    batches, payload = probe(project, store, FEW, files, events)
    growing = batches[:files]  # the last, closing batch evicts everything
    per_row = {name: slope([(b["rows"], b[key]) for b in growing]) for name, key in sizes.items()}
    # Steady: rows evicted as fast as they come (deletes and the files they leave behind until
    # compaction included): per row at the median of the settled batches, per-instance cost taken off.
    batches, steady_payload = probe(project, store, FEW, 2 * files, events, steady=True)
    settled = batches[files : 2 * files]  # the last, closing batch evicts everything
    per_row_steady = {
        name: statistics.median((b[key] - b["instances"] * per_instance[name]) / b["rows"] for b in settled)
        for name, key in sizes.items()
    }
    disk = rocksdb_disk(batches[files - 1 : 2 * files], per_instance, steady_payload) if "disk" in sizes else None
    return {
        "store": store,
        "disk": disk,
        "peak_rows": max(b["rows"] for b in growing),
        "steady_rows": round(statistics.median(b["rows"] for b in settled)),
        "payload_bytes_per_row": round(payload, 1),
        "steady_payload_bytes_per_row": round(steady_payload, 1),
        "bytes_per_row": {name: round(value, 1) for name, value in per_row.items()},
        "steady_bytes_per_row": {name: round(value, 1) for name, value in per_row_steady.items()},
        "instances_per_partition": many[-1]["instances"] // MANY,
        "bytes_per_instance": {name: round(value) for name, value in per_instance.items()},
    }


def rocksdb_disk(batches: list[dict], per_instance: dict[str, float], payload: float) -> dict[str, float]:
    """RocksDB's disk at steady state without changelog checkpointing, in two parts. Each commit flushes
    the batch's writes and deletes to a new level-0 SST file, and RocksDB merges level 0 into the
    level below once it holds 4 files (its level0_file_num_compaction_trigger): the size saws up a
    flush per batch and drops at each merge. The live rows are the bottom of the saw (the smallest
    size over these batches, 4 or more of them); each flush is a rise of the saw over the rows that
    batch changed (Spark's numRowsUpdated + numRowsRemoved). Both as a ratio to the payload."""
    base = min(batches, key=lambda b: b["sst_bytes"])
    live = (base["sst_bytes"] - base["instances"] * per_instance["disk"]) / base["rows"]
    pairs = zip(batches, batches[1:], strict=False)
    rises = [(b["sst_bytes"] - a["sst_bytes"]) / b["changes"] for a, b in pairs if b["sst_bytes"] > a["sst_bytes"]]
    per_change = statistics.median(rises)
    return {
        "live_bytes_per_row": round(live, 1),
        "flush_bytes_per_change": round(per_change, 1),
        "live_ratio": round(live / payload, 2),
        "flush_ratio": round(per_change / payload, 2),
        "changes_per_batch": round(statistics.median(b["changes"] for b in batches[1:])),
    }


def _or_dash(value: float | None) -> str:
    return "-" if value is None else f"{value:,.0f}"


def _saw(disk: dict | None) -> str:
    if disk is None:
        return "-"
    return (
        f"{disk['live_bytes_per_row']:,.0f} / {disk['flush_bytes_per_change']:,.0f}"
        f" (x{disk['live_ratio']:g} / x{disk['flush_ratio']:g})"
    )


def table(results: dict[str, list[dict]]) -> str:
    lines = [
        "| operator | store | payload B/row | memory B/row growing / steady | disk B/row growing / steady"
        " | disk live / flush B per row (x payload) | memory per instance | disk per instance |",
        "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for operator, measured in results.items():
        for m in measured:
            per_row, steady, per_instance = m["bytes_per_row"], m["steady_bytes_per_row"], m["bytes_per_instance"]
            disk = "-" if "disk" not in per_row else f"{per_row['disk']:,.0f} / {steady['disk']:,.0f}"
            lines.append(
                f"| {operator} | {m['store']} | {m['payload_bytes_per_row']:,.0f} |"
                f" {per_row['memory']:,.0f} / {steady['memory']:,.0f} | {disk} | {_saw(m['disk'])} |"
                f" {per_instance['memory']:,} B | {_or_dash(per_instance.get('disk'))} |"
            )
    return "\n".join(lines)


def main() -> None:
    args = arguments()
    operators = args.operators.split(",")
    scratch = Path(tempfile.mkdtemp(prefix="store-costs-"))
    results: dict[str, list[dict]] = {}
    try:
        for operator in operators:
            project = bake(scratch, operator)
            results[operator] = []
            for store in OPERATORS[operator]:
                print(f"{operator} on {store} ...", file=sys.stderr, flush=True)
                results[operator].append(measure(project, store, args.files, args.events_per_file))
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    text = table(results)
    print(text)
    args.results_dir.mkdir(parents=True, exist_ok=True)
    record = {"machine": machine(), "files": args.files, "events_per_file": args.events_per_file, "results": results}
    (args.results_dir / "store_costs.json").write_text(json.dumps(record, indent=2) + "\n")
    (args.results_dir / "store_costs.md").write_text(
        "# State store costs\n\n"
        f"`benchmarks/store_costs.py --files {args.files} --events-per-file {args.events_per_file}`"
        f" on {record['machine']['platform']}, pyspark {record['machine']['pyspark']}.\n\n{text}\n"
    )


if __name__ == "__main__":
    sys.exit(main())
