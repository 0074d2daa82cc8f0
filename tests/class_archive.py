"""A class-data archive of Spark's driver JVM for the suite's JVM starts (Java's AppCDS), made once per run.

The suite starts some 340 Spark JVMs (every job, command and kill in a fresh process), and a start
spends most of its first seconds loading Spark's classes from 250 JARs. An archive of the classes a
streaming query with state loads, written by one JVM at its exit (-XX:ArchiveClassesAtExit) and mapped
by every later start (-XX:SharedArchiveFile), makes a start with the connectors and one query 1.44x
faster (benchmarks/results/jvm_starts.md), and the suite a quarter to a third shorter. The archive
names the class path it was made with (this clone's .venv), so it is made per clone, in build/. It
changes what the JVM reads its classes from, not which classes or what they do: a start whose class
path differs from the archive's (the standalone cluster's executors, a --driver-class-path) ignores
it, silently (-Xlog:cds=off). Test speed only; a generated project's own runs never use it.

    .venv/bin/python tests/class_archive.py     # make test runs it (its `jvm-archive` step)
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pyspark

TEMPLATE = Path(__file__).resolve().parents[1]
# Per pyspark release: its JARs are the archive's class path (a Java update only makes the archive unused).
ARCHIVE = TEMPLATE / "build" / "jvm" / f"spark-{pyspark.__version__}.jsa"
QUIET = "-Xlog:cds=off -Xlog:cds+dynamic=off"  # a start that cannot use the archive says nothing of it
# What the archive's JVM runs: a session, a batch query, and a windowed count with RocksDB state, available-now.
WORKLOAD = """
import json, sys
from pathlib import Path
from pyspark.sql import SparkSession, functions as F
folder = Path(sys.argv[1])
(folder / "in").mkdir()
(folder / "in" / "events.json").write_text("".join(json.dumps({"key": f"k{n % 4}", "ts": f"2026-01-01 00:0{n % 6}:00"}) + "\\n" for n in range(40)))
spark = (SparkSession.builder.master("local[2]").config("spark.ui.enabled", "false")
    .config("spark.sql.shuffle.partitions", "2")
    .config("spark.sql.streaming.stateStore.providerClass",
            "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider").getOrCreate())
spark.range(100).selectExpr("id % 3 as k").groupBy("k").count().collect()
events = spark.readStream.schema("key string, ts timestamp").json(str(folder / "in"))
counts = events.withWatermark("ts", "1 minute").groupBy(F.window("ts", "1 minute"), "key").count()
(counts.writeStream.format("parquet").option("checkpointLocation", str(folder / "checkpoint"))
    .option("path", str(folder / "out")).outputMode("append").trigger(availableNow=True).start().awaitTermination())
spark.read.parquet(str(folder / "out")).count()
spark.stop()
# The JVM writes the archive as it exits: close its gateway (it exits at the end of its stdin) and wait.
from pyspark import SparkContext
gateway = SparkContext._gateway
gateway.shutdown()
gateway.proc.stdin.close()
gateway.proc.wait(timeout=300)
"""


def java_options() -> str:
    """The JVM options that map the archive, when this run has one (none otherwise)."""
    return f"-XX:SharedArchiveFile={ARCHIVE} {QUIET}" if ARCHIVE.is_file() else ""


def main() -> None:
    if ARCHIVE.is_file():
        print(f"class_archive: {ARCHIVE} (kept)")
        return
    started = time.monotonic()
    ARCHIVE.parent.mkdir(parents=True, exist_ok=True)
    writing = ARCHIVE.with_suffix(f".{os.getpid()}.part")
    env = {**os.environ, "SPARK_SUBMIT_OPTS": f"-XX:ArchiveClassesAtExit={writing} {QUIET}"}
    env.setdefault("PYSPARK_PYTHON", sys.executable)
    with tempfile.TemporaryDirectory() as folder:
        run = subprocess.run([sys.executable, "-c", WORKLOAD, folder], env=env, capture_output=True, text=True)
    if run.returncode != 0 or not writing.is_file():
        writing.unlink(missing_ok=True)
        sys.exit(f"class_archive: the archive's JVM failed (exit {run.returncode}):\n{run.stderr[-3000:]}")
    writing.replace(ARCHIVE)  # whole or not at all
    print(f"class_archive: {ARCHIVE} written ({ARCHIVE.stat().st_size >> 20} MiB, {time.monotonic() - started:.1f} s)")


if __name__ == "__main__":
    main()
