"""Update mode into Delta: one batch's MERGE time as the table grows, through the template's two writers.

Bakes the default project with `sink=delta` (the windowed count: window_start, window_end, key, events) and
starts its Spark session as the job does (stream_job's build_session: the delta-spark JARs from the local
Ivy cache, the project's confs). For each size it builds a Delta table laid out as the streaming job lays it
out: a count per key for each 1-minute window (`--keys` keys), time-ordered, one file per `--windows-per-file`
windows appended in time order (pyarrow arrays, deltalake write_deltalake, one commit per file, a log
checkpoint at the end), so each file's min/max of window_start is narrow. The table is then given the cap
the deltalake writer makes its tables with (delta.targetFileSize = delta_merge.TARGET_FILE_BYTES), which
the MERGEs' writes follow; delta-spark's writer caps its own files (spark.sql.files.maxRecordsPerFile while
it writes). Each writer gets its own copy.

A round MERGEs a realistic batch: the newest window's keys with new counts and the next window's keys
(2 x keys rows), as a fresh batch id (not a replay), through the template's own foreachBatch functions:
DeltaLakeBatchWriter (deltalake) and DeltaSparkMergeWriter (delta-spark), with the key the plan gives
(window_start, window_end, key; bounded by window_start). The writers alternate round by round, after
`--warmup` rounds left out (and, first of all, a few MERGEs per writer into a small table, so no size pays
the process's first). Reported per size and writer: median and min ms of the writer's call, the first
round's and the median of the rest (the first MERGE into one big file rewrites and splits it); files
scanned and skipped (deltalake: its commit's operationMetrics; delta-spark, whose history does not record
them: the file scan's metric in the SQL executions of Spark's UI); files rewritten, rows copied and the
engine's scan time (the history), rows copied first to last round; the ratio of the largest size's median
to the smallest's.
`--unbounded-at` adds rows at those sizes with the key unbounded (MergeKey bounded=None: the condition
without the window_start range), to show what the bound buys. `--windows-per-file` larger than the
table's windows puts the table in one file (a compacted table, or one the uncapped MERGEs made): use
`--warmup 0` to see its first MERGE.

`--long-run N` measures instead how an update-mode job's MERGE grows (merge_growth): from an empty table,
N batches per writer (`--long-run-spark` for delta-spark's), each the open window's keys updated and the
next window's inserted, as a fresh batch id, through the template's writers capped as shipped and uncapped
(deltalake: the table made empty without the property; delta-spark: maxRecordsPerFile set to 2**31-1,
which the writer keeps). Per batch: the writer's call in ms, the rows copied (the history) and the table's
files, reported at batches 10, 50, 100, ... N.

    .venv/bin/python benchmarks/merge_cost.py [--sizes 10000,100000,1000000,10000000] [--rounds 5] [--warmup 2]
        [--keys 1000] [--windows-per-file 10] [--unbounded-at 1000000] [--conf KEY=VALUE ...] [--name merge_cost]
    .venv/bin/python benchmarks/merge_cost.py --long-run 300 [--long-run-spark 150] [--keys 1000] [--conf ...]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import statistics
import sys
import tempfile
import time
import urllib.request
from datetime import UTC, datetime, timedelta
from importlib.metadata import version
from pathlib import Path

import numpy as np
import pyarrow as pa
from deltalake import DeltaTable, write_deltalake
from overhead import machine, run, save

REPO = Path(__file__).resolve().parents[1]
START = datetime(2026, 1, 1, tzinfo=UTC)
WINDOW = timedelta(minutes=1)
TS = pa.timestamp("us", tz="UTC")
SCHEMA = pa.schema([("window_start", TS), ("window_end", TS), ("key", pa.string()), ("events", pa.int64())])
WRITERS = ("deltalake", "delta-spark")
DELTA_CONFS = ("spark.sql.extensions", "spark.sql.catalog.spark_catalog")
# The MERGE commit's figures in the table's history: files rewritten, rows copied into the new files, and
# the engine's time finding the matches.
HISTORY_METRICS = {
    "deltalake": ("num_target_files_removed", "num_target_rows_copied", "scan_time_ms"),
    "delta-spark": ("numTargetFilesRemoved", "numTargetRowsCopied", "scanTimeMs"),
}
DELTALAKE_FILES = ("num_target_files_scanned", "num_target_files_skipped_during_scan")


def arguments() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", default="10000,100000,1000000,10000000", help="table rows (default: %(default)s)")
    parser.add_argument("--rounds", type=int, default=5, help="timed MERGEs per size and writer (default: %(default)s)")
    parser.add_argument("--warmup", type=int, default=2, help="MERGEs left out first (default: %(default)s)")
    parser.add_argument("--keys", type=int, default=1000, help="keys per window (default: %(default)s)")
    parser.add_argument("--windows-per-file", type=int, default=10, help="(default: %(default)s)")
    parser.add_argument(
        "--unbounded-at", default="1000000", help="sizes also run without the bound (default: %(default)s)"
    )
    parser.add_argument("--conf", action="append", default=[], help="an extra Spark conf KEY=VALUE (repeatable)")
    parser.add_argument("--long-run", type=int, help="instead: N batches into an empty table, capped and uncapped")
    parser.add_argument("--long-run-spark", type=int, help="the long run's batches for delta-spark (default: N)")
    parser.add_argument("--name", help="results file name (default: merge_cost, or merge_growth with --long-run)")
    parser.add_argument("--results-dir", type=Path, default=REPO / "benchmarks" / "results")
    args = parser.parse_args()
    args.sizes = [int(size) for size in args.sizes.split(",")]
    args.unbounded_at = [int(size) for size in args.unbounded_at.split(",") if size]
    args.conf = dict(item.split("=", 1) for item in args.conf)
    args.name = args.name or ("merge_growth" if args.long_run else "merge_cost")
    args.long_run_spark = args.long_run_spark or args.long_run
    if min(args.rounds, args.keys, args.windows_per_file, *args.sizes) < 1 or any(s % args.keys for s in args.sizes):
        parser.error(
            "--rounds, --keys, --windows-per-file and the sizes must be 1 or more, the sizes multiples of --keys"
        )
    return args


def windows(first: int, count: int, keys: int, events: np.ndarray) -> pa.Table:
    """Rows of windows first..first+count-1, each with a count per key, in time order."""
    starts = np.repeat(np.arange(first, first + count, dtype="int64") * 60_000_000, keys) + _micros(START)
    names = pa.array([f"key-{number}" for number in range(keys)]).take(np.tile(np.arange(keys), count))
    arrays = [pa.array(starts, TS), pa.array(starts + 60_000_000, TS), names, pa.array(events, pa.int64())]
    return pa.Table.from_arrays(arrays, schema=SCHEMA)


def _micros(moment: datetime) -> int:
    return int(moment.timestamp()) * 1_000_000


def capped() -> dict[str, str]:
    """The table property the deltalake writer makes its tables with (the cap of a file's bytes)."""
    from stream_job.machinery.core.delta_merge import TARGET_FILE_BYTES

    return {"delta.targetFileSize": str(TARGET_FILE_BYTES)}


def build_table(path: Path, rows: int, keys: int, windows_per_file: int) -> float:
    """The table of `rows` rows, one commit (one file) per windows_per_file windows, then given the deltalake
    writer's property (after: it would split a file bigger than the cap): seconds taken."""
    began = time.perf_counter()
    generator = np.random.default_rng(0)
    total = rows // keys
    for first in range(0, total, windows_per_file):
        count = min(windows_per_file, total - first)
        write_deltalake(path, windows(first, count, keys, generator.integers(1, 100, count * keys)), mode="append")
    DeltaTable(path).alter.set_table_properties(capped())
    DeltaTable(path).create_checkpoint()
    return time.perf_counter() - began


def bake(scratch: Path) -> Path:
    run([sys.executable, "-m", "cookiecutter", "--no-input", "-o", str(scratch), str(REPO), "sink=delta"], REPO)
    return scratch / "stream-job"


def session(project: Path, confs: dict[str, str]):
    """The job's own session (delta-spark writer: its JARs and extensions), from the project's settings."""
    os.chdir(project)
    sys.path.insert(0, str(project))
    from stream_job.machinery.core.settings import load_settings
    from stream_job.machinery.job.spark.session import build_session

    settings = load_settings(project / "settings.yaml")
    assert settings.sink.delta_writer == "delta-spark"
    spark = build_session(settings, also=confs)
    confs = dict(spark.sparkContext.getConf().getAll())
    jars = re.findall(r"delta-spark_[\w.]+?-(\d[\d.]*)\.jar", confs.get("spark.jars", ""))
    delta = {key: value for key, value in confs.items() if key in DELTA_CONFS or key.startswith("spark.databricks.")}
    return spark, {**delta, "delta-spark": ",".join(jars)}


def writer_of(name: str, table: Path, scratch: Path, bounded: bool):
    """The template's writer for `table`, its checkpoint a folder holding a query id, as Spark writes it."""
    from stream_job.machinery.core.delta_merge import MergeKey
    from stream_job.machinery.job.endpoints.delta import DeltaLakeBatchWriter, DeltaSparkMergeWriter

    checkpoint = scratch / f"checkpoint-{table.name}"
    checkpoint.mkdir()
    (checkpoint / "metadata").write_text(json.dumps({"id": f"bench-{table.name}"}) + "\n")
    key = MergeKey(("window_start", "window_end", "key"), "the plan", "window_start" if bounded else None)
    writes = DeltaLakeBatchWriter if name == "deltalake" else DeltaSparkMergeWriter
    return writes(str(table), str(checkpoint), key)


def batch(spark, newest: int, keys: int, round_number: int):
    """The newest window's keys with new counts and the next window's keys: one micro-batch of update mode."""
    events = np.full(2 * keys, 100 + round_number, dtype="int64")
    return spark.createDataFrame(windows(newest, 2, keys, events))


def copies(source: Path, row_names: list[str], scratch: Path) -> tuple[dict[str, Path], dict[str, object]]:
    """A copy of the table per row, and its writer."""
    tables, writers = {}, {}
    for row in row_names:
        tables[row] = scratch / f"{row.replace(' ', '-')}-{source.name}"
        shutil.copytree(source, tables[row])
        writers[row] = writer_of(row.split(" ")[0], tables[row], scratch, "unbounded" not in row)
    return tables, writers


def warm_up(spark, scratch: Path, args) -> None:
    """A few MERGEs per writer into a small table first, so that no size's first round pays the process's
    first MERGE (the one-file layout reports its first round)."""
    source = scratch / "warm-up"
    build_table(source, 10 * args.keys, args.keys, 10)
    tables, writers = copies(source, list(WRITERS), scratch)
    merge_rounds(spark, tables, writers, 10, argparse.Namespace(warmup=3, rounds=0, keys=args.keys))


def merge_rounds(spark, tables: dict[str, Path], writers: dict[str, object], windows_now: int, args) -> dict:
    """Rounds of one size, the rows alternating; each MERGEs the next window into its table."""
    found = {
        row: {name: [] for name in ("ms", "scanned", "skipped", "rewritten", "scan_ms", "rows_copied")}
        for row in tables
    }
    for number in range(args.warmup + args.rounds):
        newest = windows_now - 1 + number
        for row in tables if number % 2 == 0 else reversed(tables):
            data = batch(spark, newest, args.keys, number).cache()
            data.count()
            files = len(DeltaTable(str(tables[row])).file_uris())
            began = time.perf_counter()
            writers[row](data, number)
            elapsed = (time.perf_counter() - began) * 1000
            data.unpersist()
            if number < args.warmup:
                continue
            metrics = DeltaTable(str(tables[row])).history(1)[0]["operationMetrics"]
            if row.startswith("delta-spark"):
                scanned = files_read(spark)
                skipped = files - scanned
            else:  # delta-rs's own counts (an unbounded MERGE may count every file as skipped: see its scan ms)
                scanned, skipped = (int(metrics[name]) for name in DELTALAKE_FILES)
            rewritten, copied, scan_ms = (int(metrics[name]) for name in HISTORY_METRICS[row.split(" ")[0]])
            figures = {
                "ms": elapsed,
                "scanned": scanned,
                "skipped": skipped,
                "rewritten": rewritten,
                "scan_ms": scan_ms,
            }
            for name, value in {**figures, "rows_copied": copied}.items():
                found[row][name].append(value)
    return found


def long_runs(spark, scratch: Path, args) -> list[dict]:
    """Each writer, capped (as shipped) and uncapped, from an empty table: batch b updates window b's keys
    and inserts window b+1's, as a fresh batch id. Per batch: the writer's call in ms, the rows its MERGE
    copied (the table's history) and the table's files after it."""
    from stream_job.machinery.job.endpoints.delta import MAX_RECORDS

    runs = []
    for name, batches in (("deltalake", args.long_run), ("delta-spark", args.long_run_spark)):
        for cap in ("capped", "uncapped"):
            table = scratch / f"growth-{name}-{cap}"
            writer = writer_of(name, table, scratch, bounded=True)
            if name == "deltalake" and cap == "uncapped":  # made without the property the writer sets
                write_deltalake(table, SCHEMA.empty_table())
            if name == "delta-spark" and cap == "uncapped":  # a conf the user set: the writer keeps it
                spark.conf.set(MAX_RECORDS, str(2**31 - 1))
            run = {"writer": name, "cap": cap, "ms": [], "rows_copied": [], "files": []}
            try:
                for number in range(batches):
                    data = batch(spark, number, args.keys, number).cache()
                    data.count()
                    began = time.perf_counter()
                    writer(data, number)
                    run["ms"].append((time.perf_counter() - began) * 1000)
                    data.unpersist()
                    after = DeltaTable(str(table))
                    metrics = after.history(1)[0].get("operationMetrics", {})
                    run["rows_copied"].append(int(metrics.get(HISTORY_METRICS[name][1], 0)))
                    run["files"].append(len(after.file_uris()))
                    if number + 1 in checkpoints(batches):
                        print(f"{name} {cap} batch {number + 1}: {run['ms'][-1]:.0f} ms,"
                              f" {run['rows_copied'][-1]:,} rows copied, {run['files'][-1]} files", flush=True)  # fmt: skip
            finally:
                spark.conf.unset(MAX_RECORDS)
            runs.append(run)
    return runs


def checkpoints(batches: int) -> list[int]:
    """The batches the long run reports: 10, 50, then every 50, and the last."""
    return sorted({10, *range(50, batches, 50), batches} & set(range(1, batches + 1)))


def files_read(spark) -> int:
    """The target files delta-spark's last MERGE read to find its matches: the file scan's metric in the
    SQL executions of the application's UI (the table's history does not record it)."""
    ui, app = spark.sparkContext.uiWebUrl, spark.sparkContext.applicationId
    with urllib.request.urlopen(f"{ui}/api/v1/applications/{app}/sql?details=true&offset=0&length=100000") as answer:
        executions = json.load(answer)
    for execution in reversed(executions):
        if "scanning files for matches" in execution["description"]:
            values = [
                metric["value"]
                for node in execution.get("nodes", [])
                for metric in node.get("metrics", [])
                if metric["name"] == "number of files read"
            ]
            if values:
                return int(values[0].replace(",", ""))
    raise RuntimeError("no file scan of a MERGE in the SQL executions")


def main() -> None:
    args = arguments()
    scratch = Path(tempfile.mkdtemp(prefix="merge-cost-"))
    try:
        spark, delta_confs = session(bake(scratch), args.conf)
        if args.long_run:
            write_growth(args, long_runs(spark, scratch, args), delta_confs)
            return
        warm_up(spark, scratch, args)
        results = []
        for rows in args.sizes:
            source = scratch / f"table-{rows}"
            built = build_table(source, rows, args.keys, args.windows_per_file)
            files = len(DeltaTable(str(source)).file_uris())
            print(f"{rows} rows: built in {built:.1f} s, {files} files", flush=True)
            row_names = [*WRITERS, *(f"{name} unbounded" for name in WRITERS if rows in args.unbounded_at)]
            tables, writers = copies(source, row_names, scratch)
            found = merge_rounds(spark, tables, writers, rows // args.keys, args)
            for row, figures in found.items():
                result = {"rows": rows, "files": files, "build_s": round(built, 1), "writer": row, **figures}
                result.update(median_ms=statistics.median(figures["ms"]), min_ms=min(figures["ms"]))
                result.update(first_ms=figures["ms"][0], rest_median_ms=statistics.median(figures["ms"][1:] or [0]))
                print(f"  {row}: median {result['median_ms']:.0f} ms, min {result['min_ms']:.0f} ms, first {result['first_ms']:.0f} ms,"
                      f" files scanned {figures['scanned']}, skipped {figures['skipped']}, rewritten {figures['rewritten']}, scan ms {figures['scan_ms']},"
                      f" rows copied {figures['rows_copied']}", flush=True)  # fmt: skip
                results.append(result)
            for row in row_names:
                shutil.rmtree(tables[row])
            shutil.rmtree(source)
        write_results(args, results, delta_confs)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def write_results(args, results: list[dict], delta_confs: dict[str, str]) -> None:
    smallest, largest = min(args.sizes), max(args.sizes)
    median = {(r["rows"], r["writer"]): r["median_ms"] for r in results}
    ratios = {name: median[(largest, name)] / median[(smallest, name)] for name in WRITERS}
    result = {
        "what": "one micro-batch's MERGE into a Delta table of windowed counts, by the table's rows: the"
        " writer's call (foreachBatch function), ms",
        "layout": {
            "keys_per_window": args.keys,
            "window": "1 minute",
            "windows_per_file": args.windows_per_file,
            "table_properties": capped(),
        },
        "batch_rows": 2 * args.keys,
        "rounds": args.rounds,
        "warmup_rounds": args.warmup,
        "results": results,
        f"ratio_{largest}_to_{smallest}": ratios,
        "spark_delta_confs": delta_confs,
        "versions": {
            "delta-spark": delta_confs.pop("delta-spark"),
            "deltalake": version("deltalake"),
            "pyarrow": version("pyarrow"),
        },  # fmt: skip
        "machine": machine(),
    }
    lines = [
        "# MERGE cost as the table grows (update mode into Delta)",
        "",
        f"{result['what']}. Table: {args.keys} keys per 1-minute window, time-ordered, one file per"
        f" {args.windows_per_file} windows (one commit each), then given the deltalake writer's property"
        f" {capped()} and a log checkpoint (delta-spark's writer caps its files by spark.sql.files.maxRecordsPerFile"
        f" instead). Batch: {2 * args.keys} rows (the newest window's keys updated, the next window's inserted), a"
        f" fresh batch id each round; {args.rounds} rounds after {args.warmup} left out (and a few MERGEs per"
        " writer into a small table first), the writers alternating.",
        "",
        "| rows | files | writer | median ms | min ms | first round ms | median of the rest ms | files scanned | files skipped | files rewritten | scan ms | rows copied (first to last round) |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
        *(
            f"| {r['rows']:,} | {r['files']} | {r['writer']} | {r['median_ms']:.0f} | {r['min_ms']:.0f} | "
            f"{r['first_ms']:.0f} | {r['rest_median_ms']:.0f} | "
            + " | ".join(f"{statistics.median(r[name]):.0f}" for name in ("scanned", "skipped", "rewritten", "scan_ms"))
            + f" | {r['rows_copied'][0]:,} to {r['rows_copied'][-1]:,}"
            + " |"
            for r in results
        ),
        "",
        f"Median at {largest:,} rows / median at {smallest:,} rows: "
        + ", ".join(f"{name} **{ratio:.2f}x**" for name, ratio in ratios.items())
        + " (the issue's target: within 1.5x).",
        "",
        "Unbounded: the same writer with the key's bound left out (MergeKey bounded=None), the condition only"
        " the null-safe key equality.",
        "",
        f"Versions: {result['versions']}. Spark confs (Delta's, as the project's session sets them):"
        f" {json.dumps(delta_confs)}; extra: {args.conf or 'none'}.",
        "",
    ]
    save(args.results_dir, args.name, result, lines)


def write_growth(args, runs: list[dict], delta_confs: dict[str, str]) -> None:
    result = {
        "what": "an update-mode job's MERGE, batch by batch from an empty table, capped (as the writer ships)"
        " and uncapped: the writer's call (foreachBatch function) in ms, the rows the MERGE copied from the"
        " files it rewrote, the table's files after it",
        "batch": f"window b's {args.keys} keys updated and window b+1's inserted, batch id b",
        "caps": {
            "deltalake": {"capped": capped(), "uncapped": "the table made without the property"},
            "delta-spark": {"capped": "the writer's spark.sql.files.maxRecordsPerFile", "uncapped": 2**31 - 1},
        },
        "runs": runs,
        "spark_delta_confs": delta_confs,
        "versions": {"delta-spark": delta_confs.pop("delta-spark"), "deltalake": version("deltalake")},
        "machine": machine(),
    }
    lines = [
        "# MERGE cost as an update-mode job runs (update mode into Delta)",
        "",
        f"{result['what']}. Batch: {result['batch']}. Capped: deltalake's table made by the writer (property"
        f" {capped()}), delta-spark's writer setting spark.sql.files.maxRecordsPerFile for its batch. Uncapped:"
        f" deltalake's table made empty without the property; delta-spark with maxRecordsPerFile {2**31 - 1}"
        " set on the session (the writer keeps a value the user set). ms: that batch's, and the median of the"
        " 10 batches to it.",
        "",
        "| writer | cap | batch | ms | median ms of 10 | rows copied | files |",
        "| --- | --- | --- | --- | --- | --- | --- |",
        *(
            f"| {run['writer']} | {run['cap']} | {number} | {run['ms'][number - 1]:.0f} |"
            f" {statistics.median(run['ms'][max(0, number - 10) : number]):.0f} |"
            f" {run['rows_copied'][number - 1]:,} | {run['files'][number - 1]} |"
            for run in runs
            for number in checkpoints(len(run["ms"]))
        ),
        "",
        f"Versions: {result['versions']}. Spark confs (Delta's, as the project's session sets them):"
        f" {json.dumps(delta_confs)}; extra: {args.conf or 'none'}.",
        "",
    ]
    save(args.results_dir, args.name, result, lines)


if __name__ == "__main__":
    main()
