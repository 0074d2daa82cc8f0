"""Read back what the job has written, as a Spark DataFrame (show-output and the tests use it)."""

from __future__ import annotations

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import StructType

from ...core.settings import SinkSettings
from .kafka import connection_options


def read_output(spark: SparkSession, sink: SinkSettings, schema: StructType | None = None) -> DataFrame:
    """The sink's committed rows. Parquet is read through _spark_metadata, so uncommitted files are ignored.
    A Kafka topic holds every record produced, a batch replayed after a crash twice: its values are
    parsed with `schema`, the query's output (required for Kafka: JSON does not carry the types)."""
    if sink.type == "kafka":
        if schema is None:
            raise ValueError("reading a Kafka sink's records needs the query's output schema")
        options = {**connection_options(sink.kafka), "subscribe": sink.kafka.topic, "startingOffsets": "earliest"}
        values = spark.read.format("kafka").options(**options).load().select(F.col("value").cast("string"))
        return values.select(F.from_json("value", schema).alias("row")).select("row.*")
    if sink.type == "delta":
        from .delta import open_table

        # Any Delta table, whichever writer made it; only committed files are in the table's log.
        table = open_table(sink.path)
        if table is None:
            raise FileNotFoundError(f"no Delta table at {sink.path}")
        return spark.createDataFrame(table.to_pyarrow_table())
    return spark.read.parquet(sink.path)
