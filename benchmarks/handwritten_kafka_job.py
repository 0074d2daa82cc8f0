"""The generated Kafka job's query written by hand, as short as PySpark allows: the baseline of
benchmarks/kafka_latency.py. Same source and sink options, query, output mode and trigger; the Spark
confs and options come in as JSON (the generated job's own, printed by its `config` command), so that
they are the same too. No settings, checks, bad-record handling, progress listener or stop on a batch
boundary: SIGTERM stops the query where it is.

python handwritten_kafka_job.py SPEC_JSON
(SPEC_JSON: {"shape": "deduplication" | "windowed count", "master", "confs", "source_options",
 "sink_options", "key_columns", "watermark", "window", "output_mode", "checkpoint", "trigger"};
 trigger: "real_time" or "real_time <duration>" (real-time mode, Spark 4.3), else a processing-time interval)
"""

import json
import signal
import sys

from pyspark.sql import SparkSession
from pyspark.sql import functions as F

spec = json.loads(sys.argv[1])
builder = SparkSession.builder.appName("handwritten").master(spec["master"])
for key, value in spec["confs"].items():
    builder = builder.config(key, value)
spark = builder.getOrCreate()

raw = spark.readStream.format("kafka").options(**spec["source_options"]).load()
schema = "event_id string, key string, event_time timestamp"
events = raw.select(F.from_json(F.col("value").cast("string"), schema).alias("event")).select("event.*")
watermarked = events.withWatermark("event_time", spec["watermark"])
if spec["shape"] == "deduplication":
    # The template's real-time starter: Spark's real-time mode runs dropDuplicates, not dropDuplicatesWithinWatermark.
    result = watermarked.dropDuplicates(["event_id", "event_time"])
else:
    result = (
        watermarked.groupBy(F.window("event_time", spec["window"]).alias("window"), "key")
        .agg(F.count(F.lit(1)).alias("events"))
        .select(F.col("window.start").alias("window_start"), F.col("window.end").alias("window_end"), "key", "events")
    )
records = result.select(
    F.to_json(F.struct(*spec["key_columns"])).alias("key"), F.to_json(F.struct(*result.columns)).alias("value")
)
writer = records.writeStream.outputMode(spec["output_mode"]).option("checkpointLocation", spec["checkpoint"])
mode, _, duration = spec["trigger"].partition(" ")
if mode == "real_time":
    writer = writer.trigger(realTime=duration or "5 seconds")
else:
    writer = writer.trigger(processingTime=spec["trigger"])
query = writer.format("kafka").options(**spec["sink_options"]).start()
stopping: list[int] = []
signal.signal(signal.SIGTERM, lambda number, frame: stopping.append(number))
while not stopping and not query.awaitTermination(1):
    pass
query.stop()
spark.stop()
