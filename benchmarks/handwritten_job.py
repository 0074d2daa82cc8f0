"""The generated default job's query written by hand, as short as PySpark allows: the baseline of
benchmarks/overhead.py. Same source options, query, sink and trigger; the Spark confs come in as
JSON (the generated job's own, printed by its `config` command), so that they are the same too.

python handwritten_job.py LANDING OUTPUT CHECKPOINT QUERY_JSON CONFS_JSON
(QUERY_JSON: {"watermark": ..., "window": ..., "max_files_per_trigger": ...})
"""

import json
import sys

from pyspark.sql import SparkSession
from pyspark.sql import functions as F

landing, output, checkpoint = sys.argv[1:4]
query_settings, confs = json.loads(sys.argv[4]), json.loads(sys.argv[5])
builder = SparkSession.builder.appName("handwritten")
for key, value in confs.items():
    builder = builder.config(key, value)
spark = builder.getOrCreate()

events = (
    spark.readStream.schema("event_id string, key string, event_time timestamp")
    .options(latestFirst="false", maxFilesPerTrigger=query_settings["max_files_per_trigger"], mode="FAILFAST")
    .json(landing)
)
counts = (
    events.withWatermark("event_time", query_settings["watermark"])
    .groupBy(F.window("event_time", query_settings["window"]).alias("window"), "key")
    .agg(F.count(F.lit(1)).alias("events"))
    .select(F.col("window.start").alias("window_start"), F.col("window.end").alias("window_end"), "key", "events")
)
query = (
    counts.writeStream.outputMode("append")
    .format("parquet")
    .option("path", output)
    .option("checkpointLocation", checkpoint)
    .trigger(availableNow=True)
    .start()
)
query.awaitTermination()
spark.stop()
