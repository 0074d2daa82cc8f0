"""Kafka in, state, Kafka out: the time from a record's produce to its result's append in the output topic,
in micro-batch and in Spark's real-time mode, the template's job against the same query written by hand.

Bakes the template (real-time answers: rocksdb, checkpoint format version 2, update mode) for two shapes,
a deduplication (the real-time starter: dropDuplicates by event_id and event_time) and a windowed count per
key and minute, and starts one local broker (the project's `kafka up`). Each row runs one job while a
producer (Kafka's console producer, linger.ms 0) writes events at a held rate, `{"event_id", "key",
"event_time": now}`, 1,000 keys in turn, to a one-partition topic of its own:
- template: the baked project as a user runs it, `python main.py`, its settings from the environment
  (STREAM_JOB_QUERY__TRIGGER=real_time, ...);
- hand-written: benchmarks/handwritten_kafka_job.py, the same query, Spark confs, source and sink options
  and trigger (the template's own, printed by its `config` command), without the template's machinery.
Runs go one at a time, each a fresh process, topic and checkpoint; the two implementations of a shape
and trigger side by side, alternating which goes first, so that drift favours neither; `--rounds` runs
every row again (the other way round), its results pooled, each run's p99 shown beside.

Latency per result, both ends read back from the topics' own record timestamps (CreateTime, one clock):
- deduplication: each event is one result, matched by event_id: its output record's time less its
  input record's;
- windowed count (update mode, every changed count emitted): a result (window, key, count n) holds the
  key's first n events of the window in topic order, so its latency is from the n-th one's produce.
The first `--warmup` seconds of produced records are left out. p50, p95 and p99 per row; for a real-time
row also the latency by when in its long-running batch the record was produced (batches from the
checkpoint: batch N starts at its offsets file's batchTimestampMs), and the results at a batch boundary
(produced in a batch's first half second, or after its duration was up, before the next batch read them)
against the others. Each run's share of the machine's CPU busy (every process, /proc/stat) is shown too.

Real-time mode needs pyspark 4.3: run on an older one, the script runs itself again in the real-time
proofs' environment (tests/real_time_spark.py: pyspark 4.3.0 over .venv's packages, made once in seconds).
The Kafka connector is 4.2.0 (the Maven mirror here serves no 4.3.0; 4.2.0 runs under pyspark 4.3.0).

    .venv/bin/python benchmarks/kafka_latency.py [--rate 500] [--seconds 45] [--warmup 10]
        [--triggers "100 milliseconds,real_time 5 seconds"] [--master "local[3]"] [--shapes deduplication,windowed count]
        [--implementations template,hand-written] [--rounds 1] [--source-options JSON] [--keep] [--name kafka_latency]
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
from itertools import pairwise
from pathlib import Path

import pyspark
import yaml
from overhead import busy_jiffies, cpu_busy_share, machine, run, save

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
from tests import real_time_spark  # noqa: E402  (the pyspark 4.3.0 the real-time proofs run on)

RESULTS_DIR = REPO / "benchmarks" / "results"
HANDWRITTEN = Path(__file__).resolve().with_name("handwritten_kafka_job.py")
KEYS = 1000
SHAPES = {"deduplication": "deduplication", "windowed count": "windowed_aggregation"}
IMPLEMENTATIONS = ("template", "hand-written")
CONNECTOR = "4.2.0"
BROKER = "Kafka 4.2.0 (the project's local broker, KRaft, one node)"
# Seconds a job is given after the producer stops, for the last records' results.
DRAIN_SECONDS = 10
# The latency by when in its batch a record was produced: bins of this many seconds since the batch started.
PHASE_BIN_SECONDS = 0.5
# The latency percentiles reported, and compared between implementations and modes.
LEVELS = ("p50", "p95", "p99")


def arguments() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rate", type=int, default=500, help="records per second produced (default: %(default)s)")
    parser.add_argument("--seconds", type=int, default=45, help="seconds of producing per row (default: %(default)s)")
    parser.add_argument("--warmup", type=int, default=10, help="first seconds left out (default: %(default)s)")
    parser.add_argument(
        "--triggers",
        default="100 milliseconds,real_time 5 seconds",
        help="query.trigger values, comma separated: an interval is micro-batch, real_time [duration] real-time"
        " mode (default: %(default)s)",
    )
    parser.add_argument(
        "--master",
        default="local[3]",
        help="spark.master: real-time mode needs a task slot per Kafka partition and per shuffle partition"
        " (default: %(default)s)",
    )
    parser.add_argument("--shapes", default=",".join(SHAPES), help="comma separated (default: %(default)s)")
    parser.add_argument(
        "--implementations", default=",".join(IMPLEMENTATIONS), help="comma separated (default: %(default)s)"
    )
    parser.add_argument(
        "--rounds", type=int, default=1, help="runs of every row, pooled per row (default: %(default)s)"
    )
    parser.add_argument(
        "--source-options",
        type=json.loads,
        default={},
        help='source.kafka.options for every run, as JSON, such as \'{"kafka.fetch.max.wait.ms": "10"}\'',
    )
    parser.add_argument("--keep", action="store_true", help="keep the scratch folder (bakes, job logs, checkpoints)")
    parser.add_argument("--name", default="kafka_latency", help="results file name (default: %(default)s)")
    args = parser.parse_args()
    args.triggers = [trigger.strip() for trigger in args.triggers.split(",") if trigger.strip()]
    args.shapes = [shape.strip() for shape in args.shapes.split(",") if shape.strip()]
    args.implementations = [name.strip() for name in args.implementations.split(",") if name.strip()]
    if not set(args.shapes) <= set(SHAPES) or not set(args.implementations) <= set(IMPLEMENTATIONS):
        parser.error(f"--shapes: choose from {', '.join(SHAPES)}; --implementations: from {', '.join(IMPLEMENTATIONS)}")
    return args


def bake(scratch: Path, operator: str, rate: int) -> Path:
    answers = [f"stateful_operator={operator}", "source=kafka", "sink=kafka", f"input_rows_per_second={rate}"]
    answers += ["state_store_provider=rocksdb", "real_time=true"]
    out = scratch / operator
    run([sys.executable, "-m", "cookiecutter", "--no-input", "-o", str(out), str(REPO), *answers], REPO)
    return out / "stream-job"


def job_environment(bootstrap: str, topics: dict[str, str], checkpoint: Path, trigger: str, master: str) -> dict:
    """The template's settings for one row, as environment overrides (the hand-written job gets the same, read
    back through the template's `config` command)."""
    env = {key: value for key, value in os.environ.items() if not key.startswith("STREAM_JOB_")}
    env.update(
        {
            "STREAM_JOB_SPARK__MASTER": master,
            "STREAM_JOB_SPARK__KAFKA_CONNECTOR_VERSION": CONNECTOR,
            "STREAM_JOB_SOURCE__KAFKA__BOOTSTRAP_SERVERS": bootstrap,
            "STREAM_JOB_SOURCE__KAFKA__TOPIC": topics["in"],
            "STREAM_JOB_SOURCE__KAFKA__STARTING_OFFSETS": "earliest",
            "STREAM_JOB_SINK__KAFKA__BOOTSTRAP_SERVERS": bootstrap,
            "STREAM_JOB_SINK__KAFKA__TOPIC": topics["out"],
            "STREAM_JOB_SINK__OUTPUT_MODE": "update",
            "STREAM_JOB_STATE_STORE__PROVIDER": "rocksdb",
            "STREAM_JOB_STATE_STORE__CHANGELOG_CHECKPOINTING": "true",
            "STREAM_JOB_STATE_STORE__INTEGRITY__CHECKPOINT_FORMAT_VERSION": "2",
            "STREAM_JOB_QUERY__CHECKPOINT_LOCATION": str(checkpoint),
            "STREAM_JOB_QUERY__TRIGGER": trigger,
            "STREAM_JOB_MONITORING__PROGRESS_FORMAT": "json",
        }
    )
    return env


def effective_config(project: Path, env: dict) -> dict:
    """The template's effective configuration under these overrides: settings, Spark confs, source and sink options."""
    return yaml.safe_load(run([sys.executable, "-m", "stream_job", "config"], project, env).stdout)


def handwritten_command(project: Path, env: dict, shape: str, folder: Path) -> list[str]:
    """The hand-written job with the template's own confs, options and query settings for this row."""
    config = effective_config(project, env)
    settings = config["settings"]
    spec = {
        "shape": shape,
        "master": settings["spark"]["master"],
        # The driver JVM's log configuration as the template's (a quiet console), and its confs.
        "confs": {
            **config["spark_confs"],
            "spark.driver.extraJavaOptions": f"-Dlog4j2.configurationFile={project / 'log4j2.properties'}"
            f" -Djob.log.dir={folder / 'logs'}",
        },
        "source_options": config["source_options"]["source"],
        "sink_options": config["sink_options"],
        "key_columns": settings["sink"]["kafka"]["key_columns"],
        "watermark": settings["query"]["watermark"],
        "window": settings["query"]["window"],
        "output_mode": settings["sink"]["output_mode"],
        "checkpoint": settings["query"]["checkpoint_location"],
        "trigger": settings["query"]["trigger"],
    }
    return [sys.executable, str(HANDWRITTEN), json.dumps(spec)]


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


def run_row(row: dict, project: Path, local_kafka, broker, args: argparse.Namespace, folder: Path) -> dict:
    """One job while the producer holds the rate: what was produced, and how busy the machine was meanwhile."""
    topics = {"in": f"{folder.name}-in", "out": f"{folder.name}-out"}
    for topic in topics.values():
        local_kafka.create_topic(broker.bootstrap, topic)
    checkpoint = folder / "checkpoint"
    env = job_environment(broker.bootstrap, topics, checkpoint, row["trigger"], args.master)
    if args.source_options:  # the user's Kafka client options: both implementations get them (through config)
        env["STREAM_JOB_SOURCE__KAFKA__OPTIONS"] = json.dumps(args.source_options)
    if row["implementation"] == "template":
        command = [sys.executable, "main.py"]
    else:
        command = handwritten_command(project, env, row["shape"], folder)
    with open(folder / "job.log", "w") as log, open(folder / "job.err", "w") as errors:
        job = subprocess.Popen(command, cwd=project, env=env, stdout=log, stderr=errors, start_new_session=True)
        try:
            # Produce once the query runs: its first batch is committed.
            deadline = time.monotonic() + 180
            while not (checkpoint / "commits" / "0").exists():
                if job.poll() is not None or time.monotonic() > deadline:
                    raise SystemExit(f"{row}: the job did not start: {(folder / 'job.err').read_text()[-3000:]}")
                time.sleep(0.2)
            load_before, busy = os.getloadavg()[0], busy_jiffies()
            java = shutil.which("java") or "java"
            classpath = str(local_kafka.broker_jars() / "*")
            produced = produce_at_rate(java, classpath, broker.bootstrap, topics["in"], args.rate, args.seconds)
            time.sleep(DRAIN_SECONDS)
            cpu = cpu_busy_share(busy, busy_jiffies())
            load_after = os.getloadavg()[0]
            job.send_signal(signal.SIGTERM)
            job.wait(timeout=180)
        finally:
            if job.poll() is None:  # its process group: the job's Python and the JVM it started
                os.killpg(job.pid, signal.SIGKILL)
                job.wait()
    return {
        **row,
        "topics": topics,
        "produced": produced,
        "produced_per_second": round(produced / args.seconds),
        "cpu_busy": cpu,
        "load_1min_before": round(load_before, 2),
        "load_1min_after": round(load_after, 2),
        "batches": batches(checkpoint),
    }


def batches(checkpoint: Path) -> list[dict[str, float]]:
    """Each batch's start (its offsets file's batchTimestampMs), end of planning or of reading (the offsets
    file written: a micro-batch writes it before it runs, a real-time batch once its duration is up) and
    commit, in epoch milliseconds."""
    found = []
    for offsets in sorted((checkpoint / "offsets").glob("[0-9]*"), key=lambda path: int(path.name)):
        commit = checkpoint / "commits" / offsets.name
        if not commit.exists():
            continue
        metadata = json.loads(offsets.read_text().splitlines()[1])
        found.append(
            {
                "start": metadata["batchTimestampMs"],
                "offsets": offsets.stat().st_mtime * 1000,
                "commit": commit.stat().st_mtime * 1000,
            }
        )
    return found


def measured_latencies(project: Path, bootstrap: str, rows: list[dict], warmup: int) -> list[list[tuple[float, float]]]:
    """For each row, (produced, latency) in milliseconds of each result: from the produce of the record the
    result waited for to the result's append. One Spark session for every row, after the jobs."""
    from pyspark.sql import SparkSession, Window
    from pyspark.sql import functions as F

    spark = (
        SparkSession.builder.master("local[2]")
        .config("spark.jars.packages", f"org.apache.spark:spark-sql-kafka-0-10_2.13:{CONNECTOR}")
        .config("spark.jars.ivySettings", (project / "ivysettings.xml").as_uri())
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .getOrCreate()
    )

    def topic(name: str):
        raw = spark.read.format("kafka").option("kafka.bootstrap.servers", bootstrap).option("subscribe", name).load()
        return raw.select(F.col("value").cast("string").alias("json"), "timestamp", "offset")

    found = []
    for row in rows:
        events = topic(row["topics"]["in"]).select(
            F.get_json_object("json", "$.event_id").alias("event_id"),
            F.get_json_object("json", "$.key").alias("key"),
            F.to_timestamp(F.get_json_object("json", "$.event_time")).alias("event_time"),
            F.col("timestamp").alias("produced"),
            "offset",
        )
        first = events.agg(F.min("produced")).first()[0]
        results = topic(row["topics"]["out"]).select("json", F.col("timestamp").alias("appended"))
        if row["shape"] == "deduplication":
            matched = results.select(F.get_json_object("json", "$.event_id").alias("event_id"), "appended").join(
                events, "event_id"
            )
        else:
            counted = events.withColumn("window_start", F.window("event_time", "1 minute").start).withColumn(
                "n", F.row_number().over(Window.partitionBy("window_start", "key").orderBy("offset"))
            )
            matched = results.select(
                F.to_timestamp(F.get_json_object("json", "$.window_start")).alias("window_start"),
                F.get_json_object("json", "$.key").alias("key"),
                F.get_json_object("json", "$.events").cast("long").alias("n"),
                "appended",
            ).join(counted, ["window_start", "key", "n"])
        kept = matched.where(F.col("produced") >= F.lit(first) + F.expr(f"INTERVAL {warmup} SECONDS"))
        pairs = kept.select(
            (F.unix_micros("produced") / 1000).alias("produced"),
            ((F.unix_micros("appended") - F.unix_micros("produced")) / 1000).alias("ms"),
        ).collect()
        found.append([(pair.produced, pair.ms) for pair in pairs])
    spark.stop()
    return found


def percentiles(latencies: list[float], least: int = 100) -> dict[str, float | None]:
    """p50, p95 and p99; None with fewer than `least` latencies."""
    if len(latencies) < max(least, 2):
        return {"p50_ms": None, "p95_ms": None, "p99_ms": None}
    cuts = statistics.quantiles(latencies, n=100)
    return {"p50_ms": round(cuts[49]), "p95_ms": round(cuts[94]), "p99_ms": round(cuts[98])}


def by_phase(runs: list[tuple[list[tuple[float, float]], list[dict[str, float]]]], batch_seconds: float) -> dict:
    """The latency of a real-time row's results by when in its batch their record was produced, pooled over its
    runs (each run's results with its own batches): PHASE_BIN_SECONDS bins of the time since the batch started,
    and the results at a boundary (produced after the batch's duration was up, before the next batch read, or
    in a batch's first bin) against those inside a batch."""
    bins: dict[int, list[float]] = {}
    for results, batch_list in runs:
        starts = [batch["start"] for batch in batch_list]
        for produced, ms in results:
            started = max((start for start in starts if start <= produced), default=None)
            if started is not None:
                bins.setdefault(int((produced - started) / 1000 / PHASE_BIN_SECONDS), []).append(ms)
    at_boundary = [ms for number, values in bins.items() if at_a_boundary(number, batch_seconds) for ms in values]
    inside = [ms for number, values in bins.items() if not at_a_boundary(number, batch_seconds) for ms in values]
    return {
        "bins": [
            {
                "since_start_s": round(number * PHASE_BIN_SECONDS, 1),
                "results": len(values),
                "p50_ms": round(statistics.median(values)),
                "max_ms": round(max(values)),
            }
            for number, values in sorted(bins.items())
        ],
        "at_boundary": {"results": len(at_boundary), **percentiles(at_boundary, least=1)},
        "inside": {"results": len(inside), **percentiles(inside, least=1)},
    }


def at_a_boundary(phase_bin: int, batch_seconds: float) -> bool:
    return phase_bin == 0 or phase_bin * PHASE_BIN_SECONDS >= batch_seconds


def figures(runs: list[dict], latencies: list[list[tuple[float, float]]], batch_seconds: float) -> dict:
    """A row's figures over its runs: the percentiles of all its results, each run's p99, and for a real-time
    row the latency by phase."""
    pooled = [ms for results in latencies for _, ms in results]
    batch_lists = [run["batches"] for run in runs]
    durations = [(batch["commit"] - batch["start"]) / 1000 for batches in batch_lists for batch in batches]
    between = [(b["start"] - a["commit"]) / 1000 for batches in batch_lists for a, b in pairwise(batches)]
    first = {key: value for key, value in runs[0].items() if key in ("shape", "mode", "trigger", "implementation")}
    found = {
        **first,
        "produced": sum(run["produced"] for run in runs),
        "produced_per_second": round(statistics.mean(run["produced_per_second"] for run in runs)),
        "results": len(pooled),
        **percentiles(pooled),
        "p99_ms_per_run": [percentiles([ms for _, ms in results])["p99_ms"] for results in latencies],
        "batches": sum(len(batches) for batches in batch_lists),
        "median_batch_seconds": round(statistics.median(durations), 2) if durations else None,
        "median_seconds_between_batches": round(statistics.median(between), 3) if between else None,
        "cpu_busy_per_run": [run["cpu_busy"] for run in runs],
        "load_1min_per_run": [[run["load_1min_before"], run["load_1min_after"]] for run in runs],
    }
    if batch_seconds:
        found["by_phase"] = by_phase(list(zip(latencies, batch_lists, strict=True)), batch_seconds)
    return found


def ordered_rows(args: argparse.Namespace, batch_seconds: dict[str, float]) -> list[dict]:
    """Every shape x trigger x implementation, round after round; the implementations of one shape and trigger
    side by side, which of them goes first alternating (and in each round the other way from the last)."""
    rows = []
    pairs = [(shape, trigger) for shape in args.shapes for trigger in args.triggers]
    for round_number in range(args.rounds):
        for number, (shape, trigger) in enumerate(pairs):
            flip = (number + round_number) % 2
            implementations = args.implementations[::-1] if flip else args.implementations
            rows += [
                {"shape": shape, "mode": mode(batch_seconds[trigger]), "trigger": trigger, "implementation": name}
                for name in implementations
            ]
    return rows


def mode(batch_seconds: float) -> str:
    return f"real-time, {batch_seconds:g} s batches" if batch_seconds else "micro-batch"


def main() -> None:
    real_time_spark.run_script_on_it(__file__)
    args = arguments()
    scratch = Path(tempfile.mkdtemp(prefix="kafka-latency-"))
    try:
        projects = {shape: bake(scratch, SHAPES[shape], args.rate) for shape in args.shapes}
        project = next(iter(projects.values()))
        sys.path.insert(0, str(project))
        from stream_job.machinery.core import real_time
        from stream_job.machinery.operations import local_kafka

        batch_seconds = {trigger: real_time.batch_ms(trigger) / 1000 for trigger in args.triggers}
        config = effective_config(project, {**os.environ, "STREAM_JOB_SPARK__KAFKA_CONNECTOR_VERSION": CONNECTOR})
        broker = local_kafka.start(scratch / "broker")
        load_before = os.getloadavg()
        try:
            runs = []
            for number, row in enumerate(ordered_rows(args, batch_seconds)):
                print(f"{row['shape']}, {row['mode']}, {row['implementation']} ...", flush=True)
                folder = scratch / "runs" / f"run-{number}"
                folder.mkdir(parents=True)
                runs.append(run_row(row, projects[row["shape"]], local_kafka, broker, args, folder))
            latencies = measured_latencies(project, broker.bootstrap, runs, args.warmup)
            load_after = os.getloadavg()
        finally:
            local_kafka.stop(scratch / "broker")
    finally:
        if args.keep:
            print(f"kept: {scratch}")
        else:
            shutil.rmtree(scratch, ignore_errors=True)
    keys = list(dict.fromkeys((run["shape"], run["trigger"], run["implementation"]) for run in runs))
    rows = []
    for key in keys:
        chosen = [
            number for number, run in enumerate(runs) if (run["shape"], run["trigger"], run["implementation"]) == key
        ]
        rows.append(figures([runs[n] for n in chosen], [latencies[n] for n in chosen], batch_seconds[key[1]]))
    result = {
        "what": (
            f"{args.rate:,} records/s for {args.seconds} s into a one-partition topic, {KEYS:,} keys,"
            f" {config['settings']['spark']['shuffle_partitions']} shuffle partitions, spark.master {args.master}"
            f" on {os.cpu_count()} cores, {args.rounds} run{'s' if args.rounds > 1 else ''} of each row;"
            f" the first {args.warmup} s of each run left out"
            + (f"; source.kafka.options {args.source_options}" if args.source_options else "")
        ),
        "versions": {"pyspark": pyspark.__version__, "kafka_connector": CONNECTOR, "broker": BROKER},
        "rows": rows,
        "ratios": ratios(rows),
        "load_average_before_after": [list(load_before), list(load_after)],
        "machine": machine(),
    }
    save(RESULTS_DIR, args.name, result, report(result))


def ratios(rows: list[dict]) -> list[dict]:
    """The goals' ratios at p50, p95 and p99: template / hand-written in each shape and mode, and real-time /
    micro-batch in each shape and implementation (against the first micro-batch trigger)."""
    found = []
    by_row = {(row["shape"], row["mode"], row["implementation"]): row for row in rows}

    def of(row: dict, other: dict) -> dict[str, float | None]:
        return {
            f"{level}_ratio": round(row[f"{level}_ms"] / other[f"{level}_ms"], 2)
            if row[f"{level}_ms"] and other[f"{level}_ms"]
            else None
            for level in LEVELS
        }

    for (shape, mode_, implementation), row in by_row.items():
        hand = by_row.get((shape, mode_, "hand-written"))
        if implementation == "template" and hand:
            found.append({"shape": shape, "of": f"{mode_}: template / hand-written", **of(row, hand)})
    for (shape, mode_, implementation), row in by_row.items():
        micro = next(
            (other for (s, m, i), other in by_row.items() if (s, i) == (shape, implementation) and m == "micro-batch"),
            None,
        )
        if mode_ != "micro-batch" and micro:
            found.append({"shape": shape, "of": f"{implementation}: {mode_} / micro-batch", **of(row, micro)})
    return found


def report(result: dict) -> list[str]:
    versions = result["versions"]
    lines = [
        "# Kafka in, state, Kafka out: latency, micro-batch and real-time mode, template and hand-written",
        "",
        f"{result['what']}. pyspark {versions['pyspark']}, Kafka connector {versions['kafka_connector']}, broker"
        f" {versions['broker']}. Latency: from a record's produce to its result's append in the output topic.",
        "",
        "| shape | mode | implementation | produced / s | results | batches | median batch s | p50 ms | p95 ms"
        " | p99 ms | p99 ms per run | CPU busy per run |",
        "| --- | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- | --- |",
    ]
    for row in result["rows"]:
        median = "-" if row["median_batch_seconds"] is None else f"{row['median_batch_seconds']:.2f}"
        lines.append(
            f"| {row['shape']} | {row['mode']} | {row['implementation']} | {row['produced_per_second']:,}"
            f" | {row['results']:,} | {row['batches']} | {median} | {row['p50_ms']} | {row['p95_ms']} | {row['p99_ms']}"
            f" | {', '.join(map(str, row['p99_ms_per_run']))} | {', '.join(f'{c:.0%}' for c in row['cpu_busy_per_run'])} |"
        )
    lines += ["", "| shape | ratio of | p50 | p95 | p99 |", "| --- | --- | ---: | ---: | ---: |"]
    lines += [
        f"| {ratio['shape']} | {ratio['of']} | " + " | ".join(str(ratio[f"{level}_ratio"]) for level in LEVELS) + " |"
        for ratio in result["ratios"]
    ]
    phased = [row for row in result["rows"] if "by_phase" in row]
    if phased:
        lines += [
            "",
            f"Real-time rows, the results whose record was produced at a batch boundary (in a batch's first"
            f" {PHASE_BIN_SECONDS:g} s, or after its duration was up and before the next batch read it) and the"
            " others:",
            "",
            "| shape | mode | implementation | at a boundary | share | p50 ms | p99 ms | inside a batch | p50 ms | p99 ms"
            " | s from a commit to the next batch |",
            "| --- | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
        ]
        for row in phased:
            edge, inside = row["by_phase"]["at_boundary"], row["by_phase"]["inside"]
            share = edge["results"] / max(1, edge["results"] + inside["results"])
            lines.append(
                f"| {row['shape']} | {row['mode']} | {row['implementation']} | {edge['results']:,} | {share:.1%}"
                f" | {edge['p50_ms']} | {edge['p99_ms']} | {inside['results']:,} | {inside['p50_ms']} | {inside['p99_ms']}"
                f" | {row['median_seconds_between_batches']} |"
            )
    before, after = result["load_average_before_after"]
    lines += [
        "",
        f"Load average (1, 5, 15 min): {', '.join(f'{v:.1f}' for v in before)} before the runs,"
        f" {', '.join(f'{v:.1f}' for v in after)} after.",
        "",
    ]
    return lines


if __name__ == "__main__":
    main()
