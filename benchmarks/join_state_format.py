"""A stream-stream join's time a batch with Spark's join state format 3 against 4 (Spark 4.3: eviction by
the rows evicted rather than a scan of the state), at about a million state rows.

Two rate-micro-batch inputs (ROWS a batch each, one second of event time a batch), each with a watermark,
inner-joined on a key and equal event times; the state holds both sides' rows until the watermark passes
them (about WATERMARK seconds of each side's rows). RocksDB with changelog checkpointing, local[2], one
session; each format runs BATCHES batches on a fresh checkpoint, the two alternating over --rounds rounds.
Per run: the median batch (Spark's progress durationMs) after the first WARMUP batches, the state rows of
the last batch, and the rows joined (the same in both formats, or the script stops). Writes
RESULTS_DIR/join_state_format.json and .md.

Needs pyspark 4.3 (format 4 is gated for testing on 4.2): run on an older one, the script runs itself again
in the real-time proofs' environment (tests/real_time_spark.py).

    .venv/bin/python benchmarks/join_state_format.py [--rows 100000] [--batches 16] [--rounds 2]
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
from overhead import machine, save  # noqa: E402

from tests import real_time_spark  # noqa: E402

RESULTS_DIR = REPO / "benchmarks" / "results"
FORMATS = (3, 4)
WATERMARK_SECONDS = 5
KEYS = 100_000
WARMUP = 4


def arguments() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=100_000, help="rows a batch on each side (default: %(default)s)")
    parser.add_argument("--batches", type=int, default=16, help="batches a run (default: %(default)s)")
    parser.add_argument("--rounds", type=int, default=2, help="rounds, alternating (default: %(default)s)")
    parser.add_argument("--results-dir", type=Path, default=RESULTS_DIR)
    args = parser.parse_args()
    if args.rows < 1 or args.batches <= WARMUP or args.rounds < 1:
        parser.error(f"--rows and --rounds must be 1 or more, --batches more than {WARMUP}")
    return args


def side(spark, name: str, rows: int):
    from pyspark.sql import functions as F

    stream = (
        spark.readStream.format("rate-micro-batch")
        .option("rowsPerBatch", rows)
        .option("advanceMillisPerBatch", 1000)
        .option("numPartitions", 2)
        .load()
    )
    return stream.select(
        (F.col("value") % KEYS).alias(f"{name}_key"), F.col("timestamp").alias(f"{name}_time")
    ).withWatermark(f"{name}_time", f"{WATERMARK_SECONDS} seconds")


def run(spark, state_format: int, rows: int, batches: int) -> dict:
    from pyspark.sql import functions as F

    spark.conf.set("spark.sql.streaming.join.stateFormatVersion", str(state_format))
    left, right = side(spark, "left", rows), side(spark, "right", rows)
    joined = left.join(right, F.expr("left_key = right_key AND left_time = right_time"))
    checkpoint = tempfile.mkdtemp(prefix=f"join-v{state_format}-")
    try:
        query = (
            joined.writeStream.format("noop")
            .option("checkpointLocation", checkpoint)
            .trigger(processingTime="0 seconds")
            .start()
        )
        while len(query.recentProgress) < batches and query.exception() is None:
            query.awaitTermination(1)
        query.stop()
        if query.exception() is not None:
            sys.exit(f"format {state_format}: {query.exception()}")
        progress = query.recentProgress[:batches]
        measured = progress[WARMUP:]
        state = progress[-1]["stateOperators"][0]
        return {
            "state_format": state_format,
            "median_batch_ms": statistics.median(p["durationMs"]["triggerExecution"] for p in measured),
            "median_add_batch_ms": statistics.median(p["durationMs"]["addBatch"] for p in measured),
            "state_rows": state["numRowsTotal"],
            "rows_removed_last_batch": state.get("numRowsRemoved"),
            "rows_joined": sum(p["sink"]["numOutputRows"] for p in progress),
        }
    finally:
        shutil.rmtree(checkpoint, ignore_errors=True)


def main() -> None:
    real_time_spark.run_script_on_it(__file__)
    args = arguments()
    from pyspark.sql import SparkSession

    spark = (
        SparkSession.builder.master("local[2]")
        .config("spark.driver.memory", "4g")
        .config("spark.sql.shuffle.partitions", "2")
        .config(
            "spark.sql.streaming.stateStore.providerClass",
            "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider",
        )
        .config("spark.sql.streaming.stateStore.rocksdb.changelogCheckpointing.enabled", "true")
        .config("spark.ui.showConsoleProgress", "false")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    runs: list[dict] = []
    for number in range(args.rounds):
        for state_format in FORMATS if number % 2 == 0 else FORMATS[::-1]:
            runs.append(run(spark, state_format, args.rows, args.batches))
            print(f"round {number + 1}: {runs[-1]}", flush=True)
    spark.stop()
    joined = {run["rows_joined"] for run in runs}
    if len(joined) != 1:
        sys.exit(f"the formats joined different rows: {sorted(joined)}")
    medians = {
        state_format: statistics.median(run["median_batch_ms"] for run in runs if run["state_format"] == state_format)
        for state_format in FORMATS
    }
    result = {
        "what": f"{args.rows:,} rows a batch on each side, {args.batches} batches a run ({WARMUP} left out),"
        f" a {WATERMARK_SECONDS}-second watermark, RocksDB with changelog checkpointing, local[2]",
        "runs": runs,
        "median_batch_ms": medians,
        "ratio_4_over_3": medians[4] / medians[3],
        "machine": machine(),
    }
    lines = [
        "# A stream-stream join's batch, join state format 3 against 4",
        "",
        f"{result['what']}; {args.rounds} rounds alternating. Rows joined by every run: {joined.pop():,}.",
        "",
        "| round | format | median batch ms | addBatch ms | state rows |",
        "| ---: | ---: | ---: | ---: | ---: |",
        *(
            f"| {index // 2 + 1} | {run['state_format']} | {run['median_batch_ms']:.0f} | {run['median_add_batch_ms']:.0f}"
            f" | {run['state_rows']:,} |"
            for index, run in enumerate(runs)
        ),
        "",
        f"Format 4's median batch over format 3's: **{result['ratio_4_over_3']:.3f}**.",
        "",
    ]
    save(args.results_dir, "join_state_format", result, lines)


if __name__ == "__main__":
    main()
