"""The columns that key the query's state: read from Spark's plan, recorded beside the checkpoint.

Spark checks a restarted query's state schema by column types only. Grouping by another column of
the same type (say `event_id` instead of `key`, both strings) passes that check, and the old state
is read back under the new key: wrong counts, silently (seen on Spark 4.2.1). So the first run
records each stateful operator's key in `state_key.json` in the checkpoint directory, and every
later start compares the key of the query it is about to run with that record.
"""

from __future__ import annotations

import json

from py4j.protocol import Py4JJavaError
from pyspark.sql import DataFrame, SparkSession

from ..core.checkpoint.files import CheckpointUnreadable
from .query_plan import read_plan

RECORD_NAME = "state_key.json"


def state_keys(result: DataFrame) -> list[str]:
    """One line per stateful operator of the query's plan, in Spark's operator order: its kind and its
    key columns, such as `aggregation by window struct<start:timestamp,end:timestamp>, key string`."""
    return [operator.key_line for operator in read_plan(result)]


class StateKeyChanged(Exception):
    """The query keys its state by other columns than those the checkpoint's state was written with."""

    def __init__(self, record: str, recorded: list[str], now: list[str]) -> None:
        super().__init__(
            f"the state key changed: the state in this checkpoint was written keyed by {'; '.join(recorded)},"
            f" and this query keys it by {'; '.join(now) or 'nothing (no stateful operator)'} (recorded in"
            f" {record}). Spark would read the old state under the new key without an error and give wrong"
            " results. Either change the query back, or set query.checkpoint_location to a new directory and"
            " reprocess the input from the start."
        )


class KeyRecord:
    """state_key.json in the checkpoint directory, read and written through Hadoop's file system
    API, so that it works wherever Spark can write the checkpoint (local, HDFS, S3, ABFS)."""

    def __init__(self, spark: SparkSession, checkpoint: str) -> None:
        jvm = spark.sparkContext._jvm
        assert jvm is not None  # set by the first SparkContext of the process
        self._jvm = jvm
        self.location = checkpoint.rstrip("/") + "/" + RECORD_NAME
        self._path = jvm.org.apache.hadoop.fs.Path(self.location)
        self._fs = self._path.getFileSystem(spark.sparkContext._jsc.hadoopConfiguration())
        self._io = jvm.org.apache.commons.io.IOUtils

    def read(self) -> list[str] | None:
        if not self._fs.exists(self._path):
            return None
        try:
            stream = self._fs.open(self._path)
            try:
                keys = json.loads(self._io.toString(stream, "UTF-8"))["state_keys"]
            finally:
                stream.close()
        except (Py4JJavaError, json.JSONDecodeError, KeyError, TypeError):  # Java: a checksum mismatch
            keys = None
        if not isinstance(keys, list) or not all(isinstance(key, str) for key in keys):
            raise CheckpointUnreadable(
                f"{self.location}: not a state key record (damaged?); remove it if the query's state key is"
                " unchanged (the next start records it again), or restore the checkpoint from a copy"
            )
        return keys

    def has_commits(self) -> bool:
        commits = self._jvm.org.apache.hadoop.fs.Path(self._path.getParent(), "commits")
        if not self._fs.exists(commits):
            return False
        return any(status.getPath().getName().isdigit() for status in self._fs.listStatus(commits))

    def write(self, keys: list[str]) -> None:
        text = json.dumps({"state_keys": keys}, indent=2) + "\n"
        stream = self._fs.create(self._path, True)
        try:
            stream.write(bytearray(text.encode("utf-8")))
        finally:
            stream.close()


def state_key_drift(spark: SparkSession, result: DataFrame, checkpoint: str) -> str | None:
    """The refusal check_state_key would raise, as a line, without recording anything (for `check`)."""
    record = KeyRecord(spark, checkpoint)
    recorded, now = record.read(), state_keys(result)
    if recorded is not None and recorded != now and record.has_commits():
        return str(StateKeyChanged(record.location, recorded, now))
    return None


def check_state_key(spark: SparkSession, result: DataFrame, checkpoint: str) -> str | None:
    """Raise StateKeyChanged when the query's state key differs from the recorded one; record it when
    none is recorded. Returns a note for the log when a checkpoint with state had no record."""
    record = KeyRecord(spark, checkpoint)
    now = state_keys(result)
    recorded = record.read()
    if recorded is not None and recorded != now and record.has_commits():
        raise StateKeyChanged(record.location, recorded, now)
    if recorded == now:
        return None
    # No record, or one left by a run that committed nothing (so no state was kept under it).
    record.write(now)
    if recorded is None and record.has_commits():
        return f"{record.location} was missing (a checkpoint older than this check): recorded {'; '.join(now)}"
    return None
