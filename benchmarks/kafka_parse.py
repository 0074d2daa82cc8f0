"""The Kafka source's parse and bad-record check: rows per second and the size of the plan Spark makes of it,
the template's against the parse written by hand.

Bakes the Kafka starter and builds, on the same Kafka-shaped rows held in memory (value, topic, partition,
offset, timestamp: JSON events of 1,000 keys), each way of reading events from them:
- hand-written: `from_json` and its fields, nothing checked;
- template: the job's own source (job/endpoints/sources.py: the parse with its corrupt-record column,
  then the bad-record check, with on_bad_record fail and drop);
- template, plain select: the parse as the template wrote it before, a plain select of `from_json`, under
  the same check with on_bad_record fail: Spark's optimizer pushes the check's filter below that select and
  copies `from_json` into each column the filter reads.
Each is written to Spark's noop sink (every row parsed and checked, nothing stored), the ways alternating,
`--rounds` times; the median rows per second, and the `from_json` calls in each optimized plan and the
plan's length in characters (what a real-time batch plans anew). Writes RESULTS_DIR/NAME.json and .md.

    .venv/bin/python benchmarks/kafka_parse.py [--rows 2000000] [--rounds 3] [--name kafka_parse]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

from overhead import machine, run, save

REPO = Path(__file__).resolve().parents[1]
RESULTS_DIR = REPO / "benchmarks" / "results"
KEYS = 1000


def arguments() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=2_000_000, help="rows per run (default: %(default)s)")
    parser.add_argument("--rounds", type=int, default=3, help="runs of each way (default: %(default)s)")
    parser.add_argument("--name", default="kafka_parse", help="results file name (default: %(default)s)")
    return parser.parse_args()


def ways(spark, rows: int) -> dict:
    """Each way of reading events from the same cached Kafka-shaped rows, by name (the bake is on sys.path)."""
    from pyspark.sql import functions as F
    from stream_job.machinery.core.settings import load_settings
    from stream_job.machinery.job.endpoints import sources
    from stream_job.query import EVENT_SCHEMA

    query = load_settings("settings.yaml").query
    value = F.format_string(
        '{"event_id": "e%d", "key": "key-%d", "event_time": "2026-01-01T00:00:00Z"}', "id", F.col("id") % KEYS
    )
    raw = spark.range(rows).select(
        value.cast("binary").alias("value"),
        F.lit("events").alias("topic"),
        F.lit(0).alias("partition"),
        F.col("id").alias("offset"),
        F.lit("2026-01-01 00:00:01").cast("timestamp").alias("timestamp"),
    )
    raw = raw.cache()
    raw.count()
    keep = ("topic", "partition", "offset", F.col("timestamp").alias(sources.ARRIVAL))
    origin = F.format_string("topic %s partition %d offset %d", "topic", "partition", "offset")
    arrival = sources.Arrival(F.col(sources.ARRIVAL), "its Kafka timestamp")
    columns = EVENT_SCHEMA.fieldNames()

    def checked(events, on_bad_record: str):
        """The check, then the event columns alone, as read_kafka hands them on."""
        check = sources.without_bad_records(events, EVENT_SCHEMA, on_bad_record, origin, arrival, "source", query)
        return check.select(*columns)

    def plain_select():
        event = F.from_json(F.col("value").cast("string"), sources.with_unparsed(EVENT_SCHEMA), sources.PARSE_OPTIONS)
        parsed = raw.select(event.alias("event"), *keep)
        return parsed.select("event.*", *parsed.columns[1:])

    def hand_written():
        event = F.from_json(F.col("value").cast("string"), EVENT_SCHEMA)
        return raw.select(event.alias("event")).select("event.*")

    return {
        "hand-written": hand_written,
        "template, fail": lambda: checked(sources.events_from_json(raw, "value", EVENT_SCHEMA, keep), "fail"),
        "template, drop": lambda: checked(sources.events_from_json(raw, "value", EVENT_SCHEMA, keep), "drop"),
        "template, plain select, fail": lambda: checked(plain_select(), "fail"),
    }


def main() -> None:
    args = arguments()
    here = machine()  # before the bake's folder is the working directory (java -version cannot start in it once gone)
    with tempfile.TemporaryDirectory(prefix="kafka-parse-") as scratch:
        answers = ["source=kafka", "sink=kafka", "stateful_operator=windowed_aggregation"]
        run([sys.executable, "-m", "cookiecutter", "--no-input", "-o", scratch, str(REPO), *answers], REPO)
        project = Path(scratch) / "stream-job"
        sys.path.insert(0, str(project))
        os.chdir(project)
        from pyspark.sql import SparkSession

        spark = (
            SparkSession.builder.master("local[2]")
            .config("spark.ui.enabled", "false")
            .config("spark.sql.session.timeZone", "UTC")
            .getOrCreate()
        )
        spark.sparkContext.setLogLevel("ERROR")
        built = ways(spark, args.rows)
        figures: dict[str, dict] = {}
        for name, build in built.items():
            plan = build()._jdf.queryExecution().optimizedPlan().toString()
            figures[name] = {
                "from_json_in_plan": plan.count("from_json("),
                "plan_chars": len(plan),
                "rows_per_second": [],
            }
        for round_number in range(args.rounds):
            order = list(built) if round_number % 2 == 0 else list(reversed(built))
            for name in order:
                started = time.perf_counter()
                built[name]().write.format("noop").mode("overwrite").save()
                figures[name]["rows_per_second"].append(round(args.rows / (time.perf_counter() - started)))
        spark.stop()
    for entry in figures.values():
        entry["median_rows_per_second"] = statistics.median(entry["rows_per_second"])
    hand = figures["hand-written"]["median_rows_per_second"]
    lines = [
        "# The Kafka source's parse and bad-record check",
        "",
        f"{args.rows:,} Kafka-shaped rows (JSON events, {KEYS:,} keys) cached in memory, each way written to Spark's"
        f" noop sink, {args.rounds} rounds alternating, local[2] on 2 cores; `from_json` calls and length of the"
        " optimized plan.",
        "",
        "| way | rows/s (median) | per round | of hand-written | from_json in plan | plan chars |",
        "| --- | ---: | --- | ---: | ---: | ---: |",
    ]
    for name, entry in figures.items():
        rounds = ", ".join(f"{value:,}" for value in entry["rows_per_second"])
        lines.append(
            f"| {name} | {entry['median_rows_per_second']:,.0f} | {rounds} |"
            f" {entry['median_rows_per_second'] / hand:.2f} | {entry['from_json_in_plan']} | {entry['plan_chars']:,} |"
        )
    lines.append("")
    result = {"rows": args.rows, "rounds": args.rounds, "ways": figures, "machine": here}
    save(RESULTS_DIR, args.name, result, lines)


if __name__ == "__main__":
    main()
