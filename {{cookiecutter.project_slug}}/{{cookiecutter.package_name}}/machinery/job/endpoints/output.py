"""Read back what the job has written, as a Spark DataFrame (show-output and the tests use it)."""

from __future__ import annotations

from pyspark.sql import DataFrame, SparkSession

from ...core.settings import SinkSettings


def read_output(spark: SparkSession, sink: SinkSettings) -> DataFrame:
    """The sink's committed rows. Parquet is read through _spark_metadata, so uncommitted files are ignored."""
    if sink.type == "delta":
        from deltalake import DeltaTable

        # Any Delta table, whichever writer made it; only committed files are in the table's log.
        return spark.createDataFrame(DeltaTable(sink.path).to_pyarrow_table())
    return spark.read.parquet(sink.path)
