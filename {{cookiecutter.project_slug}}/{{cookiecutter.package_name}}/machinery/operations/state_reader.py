"""Spark's state readers, opened for a checkpoint in this one place.

Spark 4 reads state with two batch data sources: `state-metadata` (one row per operator and store,
with its partitions and the range of batches whose state is kept) and `statestore` (the rows of one
store as of one batch, each with its partition; with `readChangeFeed`, its puts and deletes over a
range of batches). Inspect, the change feed, key lookups and repartition read through here: the
confs the readers need, the path they can take, the stores a metadata row stands for, and Spark's
errors in one line.
"""

from __future__ import annotations

import atexit
import json
import os
import re
import shutil
import tempfile
from typing import TYPE_CHECKING, Any

from ..core.checkpoint.files import CheckpointUnreadable, held_format_version, local_checkpoint
from ..core.confs import INTEGRITY_CONFS
from ..job.spark.spark_errors import root_message, spark_errors

if TYPE_CHECKING:  # Spark is imported only when a command needs it
    from pyspark.sql import DataFrame, SparkSession

# Reading a RocksDB checkpoint from a session that runs no query fails in Spark 4.2 with "Cannot
# find endpoint: StateStoreCoordinator" unless the snapshot-lag reports to the coordinator are off; the
# forced snapshot upload that relies on those reports goes off with them, or a query run in the same
# session (repartition --finish-last-batch) is refused.
READER_CONFS = {
    "spark.sql.streaming.stateStore.coordinatorReportSnapshotUploadLag": "false",
    "spark.sql.streaming.stateStore.forceSnapshotUploadOnLag": "false",
}
# A join keeps two stores per side: keyWithIndexToValue holds the rows (what Spark's progress
# counts as state rows, and what the sizing formula estimates); keyToNumValues is an index.
JOIN_INDEX_STORES = ("left-keyToNumValues", "right-keyToNumValues")
# transformWithState keeps its timers beside the state variables; they are not counted as rows.
TIMERS = "timers"
# Spark's state readers and its repartition runner turn the checkpoint's path into a URI and parse it
# again: a space, '#' or '%' comes back as %20, %23 or %25, and "no committed batch" is found. They
# are handed a symbolic link to the checkpoint whose path has none of them.
SPARK_SAFE_PATH = re.compile(r"[A-Za-z0-9/._+=,@:~-]*")
_LINKS: dict[str, str] = {}  # link -> checkpoint


def reader_confs(location: str) -> dict[str, str]:
    """READER_CONFS, and the format version the checkpoint's state was written in: Spark's state
    reader takes it from the session, and finds no file of format version 2 under version 1."""
    checkpoint = local_checkpoint(location)
    held = None if checkpoint is None else held_format_version(checkpoint)
    return {**READER_CONFS, **({} if held is None else {INTEGRITY_CONFS["checkpoint_format_version"]: str(held)})}


def read_state_metadata(spark: SparkSession, location: str) -> list[Any]:
    """Spark's state-metadata rows of the checkpoint (none when no operator has committed state)."""
    try:
        return spark.read.format("state-metadata").load(spark_path(location)).collect()
    except spark_errors() as error:
        raise CheckpointUnreadable(
            f"{location}: Spark cannot read its state metadata: {spark_message(error)}"
        ) from None


def stores_of(metadata: list[Any]) -> list[dict[str, str]]:
    """The statestore options (without the batch) of every store, state variable and timer set."""
    found = []
    for row in metadata:
        base = {"operatorId": str(row.operatorId)}
        if row.operatorName.startswith("transformWithState"):
            properties = json.loads(row.operatorProperties or "{}")
            for variable in properties.get("stateVariables", []):
                if not variable["stateName"].startswith("$"):
                    found.append({**base, "stateVarName": variable["stateName"]})
            found.append({**base, "readRegisteredTimers": "true"})
        else:
            found.append({**base, "storeName": row.stateStoreName})
    return found


def list_variables(row: Any) -> set[str]:
    """A transformWithState operator's list states, by name (from its state metadata row). Spark counts
    a key's list as one state row; the statestore reader gives each element a row of its own."""
    properties = json.loads(row.operatorProperties or "{}") if row.operatorName.startswith("transformWithState") else {}
    variables = properties.get("stateVariables", [])
    return {variable["stateName"] for variable in variables if variable.get("stateVariableType") == "ListState"}


def store_name(options: dict[str, str]) -> str:
    """The store, state variable or timer set that stores_of's options read."""
    return options.get("storeName") or options.get("stateVarName") or TIMERS


def counts_as_rows(options: dict[str, str]) -> bool:
    """Whether the store's rows are the operator's state rows (not timers, not a join's index)."""
    return store_name(options) not in (TIMERS, *JOIN_INDEX_STORES)


def has_feed(options: dict[str, str]) -> bool:
    """Whether this store's change feed is read: not transformWithState's timers, whose feed fails in
    Spark 4.2.1 in a session that has run the query (see change_feed)."""
    return "readRegisteredTimers" not in options


def read_store(spark: SparkSession, location: str, options: dict[str, str], batch: int) -> DataFrame:
    """One store's (or state variable's, or timer set's) rows as of a batch."""
    return spark.read.format("statestore").options(**options, batchId=str(batch)).load(spark_path(location))


def read_changes(spark: SparkSession, location: str, options: dict[str, str], first: int, last: int) -> DataFrame:
    """One store's (or state variable's) puts and deletes over batches first..last."""
    feed = {"readChangeFeed": "true", "changeStartBatchId": str(first), "changeEndBatchId": str(last)}
    return spark.read.format("statestore").options(**options, **feed).load(spark_path(location))


def spark_path(location: str) -> str:
    """The checkpoint as Spark's state readers can take it: the location itself, or, for a local path
    they would mangle, a symbolic link to it in a temporary folder (removed when this process ends)."""
    local = local_checkpoint(location)
    if local is None or SPARK_SAFE_PATH.fullmatch(str(local)):
        return location
    for link, checkpoint in _LINKS.items():
        if checkpoint == str(local):
            return link
    folder = tempfile.mkdtemp(prefix="checkpoint-link-")
    atexit.register(shutil.rmtree, folder, True)
    link = os.path.join(folder, "checkpoint")
    os.symlink(local, link)
    _LINKS[link] = str(local)
    return link


def spark_message(error: Exception) -> str:
    """The first line of Spark's error and of its root cause, naming the checkpoint where Spark named a link."""
    return _unlinked(root_message(error))


def _unlinked(message: str) -> str:
    """Spark's message with the checkpoint's own path where it names a link of spark_path."""
    for link, checkpoint in _LINKS.items():
        message = message.replace(link, checkpoint)
    return message
