"""Which Spark the job talks to: a JVM this process starts (Spark Classic) or a Spark Connect server elsewhere.

One process holds one of the two: pyspark's builder turns a process to Connect for good once it builds a
remote session (its columns and functions become Connect's), so the mode is asked of the session at hand.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:  # Spark is imported only when a command needs it
    from pyspark.sql import SparkSession


def is_connect(spark: SparkSession) -> bool:
    """Whether `spark` is a Spark Connect session: no JVM in this process, no `_jvm`, `_jdf` or `sparkContext`;
    the checkpoint and the output are on the server's file system."""
    try:
        from pyspark.sql.connect.session import SparkSession as ConnectSession
    except ImportError:  # pyspark without the Connect client's packages (grpcio): no Connect session can exist
        return False
    return isinstance(spark, ConnectSession)
