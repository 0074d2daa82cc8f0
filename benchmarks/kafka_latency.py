"""Kafka in, state, Kafka out: the time from a record's produce to its result's append in the output topic.

Bakes the template twice with source and sink kafka (a deduplication, a windowed count per key and
minute) and starts one local broker (the project's `kafka up`). For each shape the job runs as a user
runs it, `python main.py`, while a producer (Kafka's console producer, linger.ms 0) writes events at a
held rate: `{"event_id", "key", "event_time": now}`, 1,000 keys in turn, to a one-partition topic.

Latency per result, both ends read back from the topics' own record timestamps (CreateTime, one clock):
- deduplication: each event is one result, matched by event_id: its output record's time less its
  input record's;
- windowed count (update mode, every changed count emitted): a result (window, key, count n) holds the
  key's first n events of the window in topic order, so its latency is from the n-th one's produce.
The first `--warmup` seconds of produced records are left out. p50, p95 and p99 per shape and mode.

Real-time mode (`query.trigger: real_time`, Spark 4.3) needs Spark 4.3's Kafka connector, which this
benchmark cannot fetch where it was written (the Maven mirror serves spark-sql-kafka-0-10 up to 4.2.0);
its rows say so rather than show a figure.

    .venv/bin/python benchmarks/kafka_latency.py [--rate 1000] [--seconds 60] [--trigger "100 milliseconds"]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

from overhead import machine, run, save

REPO = Path(__file__).resolve().parents[1]
RESULTS_DIR = REPO / "benchmarks" / "results"
KEYS = 1000
SHAPES = {"deduplication": "deduplication", "windowed count": "windowed_aggregation"}
MODES = ("micro-batch", "real-time")


def arguments() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rate", type=int, default=1000, help="records per second produced (default: %(default)s)")
    parser.add_argument("--seconds", type=int, default=60, help="seconds of producing per run (default: %(default)s)")
    parser.add_argument("--warmup", type=int, default=10, help="first seconds left out (default: %(default)s)")
    parser.add_argument("--trigger", default="100 milliseconds", help="micro-batch trigger (default: %(default)s)")
    return parser.parse_args()


def bake(scratch: Path, operator: str) -> Path:
    answers = [f"stateful_operator={operator}", "source=kafka", "sink=kafka", "input_rows_per_second=1000"]
    out = scratch / operator
    cookiecutter = str(Path(sys.executable).parent / "cookiecutter")
    run([cookiecutter, "--no-input", "-o", str(out), str(REPO), *answers], REPO)
    return out / "stream-job"


def produce_at_rate(java: str, classpath: str, bootstrap: str, topic: str, rate: int, seconds: int) -> int:
    """Write `rate` events a second for `seconds`, in slices of 10 ms; the number written."""
    producer = subprocess.Popen(
        [
            java,
            "-Xmx256m",
            "-cp",
            classpath,
            "org.apache.kafka.tools.ConsoleProducer",
            "--bootstrap-server",
            bootstrap,
            "--topic",
            topic,
            "--producer-property",
            "linger.ms=0",
        ],  # fmt: skip
        stdin=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    assert producer.stdin is not None
    started, written = time.monotonic(), 0
    while (elapsed := time.monotonic() - started) < seconds:
        due = int(elapsed * rate)
        now = datetime.now(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")
        lines = [
            json.dumps({"event_id": f"e-{n}", "key": f"key-{n % KEYS}", "event_time": now}) for n in range(written, due)
        ]
        if lines:
            producer.stdin.write("\n".join(lines) + "\n")
            producer.stdin.flush()
            written = due
        time.sleep(0.01)
    producer.stdin.close()
    producer.wait(timeout=60)
    return written


def run_shape(project: Path, local_kafka, broker, shape: str, args: argparse.Namespace, folder: Path) -> dict:
    """One shape's job in micro-batch mode while the producer holds the rate; its figures."""
    topics = {"in": f"{folder.name}-in", "out": f"{folder.name}-out"}
    for topic in topics.values():
        local_kafka.create_topic(broker.bootstrap, topic)
    env = {key: value for key, value in os.environ.items() if not key.startswith("STREAM_JOB_")}
    env.update(
        {
            "STREAM_JOB_SOURCE__KAFKA__BOOTSTRAP_SERVERS": broker.bootstrap,
            "STREAM_JOB_SOURCE__KAFKA__TOPIC": topics["in"],
            "STREAM_JOB_SOURCE__KAFKA__STARTING_OFFSETS": "earliest",
            "STREAM_JOB_SINK__KAFKA__BOOTSTRAP_SERVERS": broker.bootstrap,
            "STREAM_JOB_SINK__KAFKA__TOPIC": topics["out"],
            "STREAM_JOB_SINK__OUTPUT_MODE": "update" if shape == "windowed count" else "append",
            "STREAM_JOB_QUERY__CHECKPOINT_LOCATION": str(folder / "checkpoint"),
            "STREAM_JOB_QUERY__TRIGGER": args.trigger,
            "STREAM_JOB_MONITORING__PROGRESS_FORMAT": "json",
        }
    )
    log = open(folder / "job.log", "w")  # noqa: SIM115 - closed below, after the process
    errors = open(folder / "job.err", "w")  # noqa: SIM115 - the same
    job = subprocess.Popen([sys.executable, "main.py"], cwd=project, env=env, stdout=log, stderr=errors)
    # Produce once the query runs: its first (empty) batch is committed.
    deadline = time.monotonic() + 180
    while not (folder / "checkpoint" / "commits" / "0").exists():
        if job.poll() is not None or time.monotonic() > deadline:
            raise SystemExit(f"{shape}: the job did not start: {(folder / 'job.err').read_text()[-2000:]}")
        time.sleep(0.2)
    java = shutil.which("java") or "java"
    produced = produce_at_rate(
        java, str(local_kafka.broker_jars() / "*"), broker.bootstrap, topics["in"], args.rate, args.seconds
    )
    time.sleep(10)  # the last records' results
    job.send_signal(signal.SIGTERM)
    job.wait(timeout=180)
    log.close()
    errors.close()
    batches = [
        json.loads(line)
        for line in (folder / "job.log").read_text().splitlines()
        if line.startswith("{") and '"event": "batch"' in line
    ]
    latencies = measured_latencies(project, broker.bootstrap, topics, shape, args.warmup)
    return {
        "produced": produced,
        "produced_per_second": round(produced / args.seconds),
        "batches": len(batches),
        "median_batch_seconds": statistics.median(b["batch_duration_ms"] / 1000 for b in batches) if batches else None,
        "results": len(latencies),
        **percentiles(latencies),
    }


def measured_latencies(project: Path, bootstrap: str, topics: dict[str, str], shape: str, warmup: int) -> list[float]:
    """Milliseconds from the produce of the record a result waited for to the result's append."""
    from pyspark.sql import SparkSession, Window
    from pyspark.sql import functions as F

    jars = f"org.apache.spark:spark-sql-kafka-0-10_2.13:{'.'.join(__import__('pyspark').__version__.split('.')[:2])}.0"
    spark = (
        SparkSession.builder.master("local[2]")
        .config("spark.jars.packages", jars)
        .config("spark.jars.ivySettings", (project / "ivysettings.xml").as_uri())
        .config("spark.sql.session.timeZone", "UTC")
        .getOrCreate()
    )

    def topic(name: str):
        raw = spark.read.format("kafka").option("kafka.bootstrap.servers", bootstrap).option("subscribe", name).load()
        return raw.select(F.col("value").cast("string").alias("json"), "timestamp", "offset")

    events = topic(topics["in"]).select(
        F.get_json_object("json", "$.event_id").alias("event_id"),
        F.get_json_object("json", "$.key").alias("key"),
        F.to_timestamp(F.get_json_object("json", "$.event_time")).alias("event_time"),
        F.col("timestamp").alias("produced"),
        "offset",
    )
    first = events.agg(F.min("produced")).first()[0]
    results = topic(topics["out"]).select("json", F.col("timestamp").alias("appended"))
    if shape == "deduplication":
        found = results.select(F.get_json_object("json", "$.event_id").alias("event_id"), "appended").join(
            events, "event_id"
        )
    else:
        counted = events.withColumn("window_start", F.window("event_time", "1 minute").start).withColumn(
            "n", F.row_number().over(Window.partitionBy("window_start", "key").orderBy("offset"))
        )
        found = results.select(
            F.to_timestamp(F.get_json_object("json", "$.window_start")).alias("window_start"),
            F.get_json_object("json", "$.key").alias("key"),
            F.get_json_object("json", "$.events").cast("long").alias("n"),
            "appended",
        ).join(counted, ["window_start", "key", "n"])
    kept = found.where(F.col("produced") >= F.lit(first) + F.expr(f"INTERVAL {warmup} SECONDS"))
    millis = kept.select(((F.unix_micros("appended") - F.unix_micros("produced")) / 1000).alias("ms")).collect()
    spark.stop()
    return [row.ms for row in millis]


def percentiles(latencies: list[float]) -> dict[str, float | None]:
    if len(latencies) < 100:
        return {"p50_ms": None, "p95_ms": None, "p99_ms": None}
    cuts = statistics.quantiles(latencies, n=100)
    return {"p50_ms": round(cuts[49]), "p95_ms": round(cuts[94]), "p99_ms": round(cuts[98])}


def main() -> None:
    args = arguments()
    scratch = Path(tempfile.mkdtemp(prefix="kafka-latency-"))
    runs: dict[str, dict[str, dict]] = {}
    try:
        projects = {shape: bake(scratch, operator) for shape, operator in SHAPES.items()}
        sys.path.insert(0, str(next(iter(projects.values()))))
        from stream_job.machinery.operations import local_kafka

        broker = local_kafka.start(scratch / "broker")
        try:
            for shape, project in projects.items():
                print(f"running {shape} ...", flush=True)
                folder = scratch / "runs" / shape.replace(" ", "-")
                folder.mkdir(parents=True)
                runs[shape] = {
                    "micro-batch": run_shape(project, local_kafka, broker, shape, args, folder),
                    "real-time": {"not_run": "Spark 4.3's Kafka connector (spark-sql-kafka-0-10 4.3.0) not fetched"},
                }
        finally:
            local_kafka.stop(scratch / "broker")
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    result = {
        "what": (
            f"{args.rate:,} records/s for {args.seconds} s into a one-partition topic, {KEYS:,} keys; micro-batch"
            f" trigger {args.trigger!r}; the first {args.warmup} s left out"
        ),
        "runs": runs,
        "machine": machine(),
    }
    save(RESULTS_DIR, "kafka_latency", result, report(result))


def report(result: dict) -> list[str]:
    lines = [
        "# Kafka in, state, Kafka out: latency",
        "",
        f"{result['what']}. Latency: from a record's produce to its result's append in the output topic.",
        "",
        "| shape | mode | produced / s | batches | median batch s | results | p50 ms | p95 ms | p99 ms |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for shape, modes in result["runs"].items():
        for mode, r in modes.items():
            if "not_run" in r:
                lines.append(f"| {shape} | {mode} | not run: {r['not_run']} | | | | | | |")
                continue
            median = f"{r['median_batch_seconds']:.2f}" if r["median_batch_seconds"] is not None else "-"
            lines.append(
                f"| {shape} | {mode} | {r['produced_per_second']:,} | {r['batches']} | {median} | {r['results']:,}"
                f" | {r['p50_ms']} | {r['p95_ms']} | {r['p99_ms']} |"
            )
    lines.append("")
    return lines


if __name__ == "__main__":
    main()
