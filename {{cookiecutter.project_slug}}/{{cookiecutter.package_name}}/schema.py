"""The input event schema, declared once: the files and Kafka sources parse with it, never infer it.

Change it here when your events change. A declared schema keeps a stray file with an extra or
renamed field from changing the query's columns, which a restart on the checkpoint would not accept.
"""

from __future__ import annotations

from pyspark.sql.types import StringType, StructField, StructType, TimestampType

EVENT_SCHEMA = StructType(
    [
        StructField("event_id", StringType()),
        StructField("key", StringType()),
        StructField("event_time", TimestampType()),
    ]
)
# The columns every source is mapped to, and the transforms read.
EVENT_COLUMNS = tuple(EVENT_SCHEMA.fieldNames())
