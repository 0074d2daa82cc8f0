"""Move a stopped job's RocksDB state into another number of partitions.

The shuffle partitions are pinned into the checkpoint, so a stream that outgrew them used to need a
new checkpoint and reprocessing. Spark 4.2 ships an offline runner that rewrites the state into N
partitions as one extra batch: batch last+1 reads no input, holds the state split N ways, and its
offsets file pins N (what the guard then compares the settings with). It is reached through
`SparkSession._streamingCheckpointManager`, a private and evolving API of Spark Classic; this
module is the only place that calls it.

Around the runner: checks that refuse without touching anything (`plan`), a copy of the checkpoint
until the result is verified, and the verification itself: the rows of every operator and store
read back by Spark's `statestore` reader, equal before and after, over the new partitions.

A kill at any moment leaves the old checkpoint and output or the new ones, complete. The copy is made
under a temporary name and renamed when whole; while it is in place under its working name
(`<checkpoint>.repartitioning-<batch>-to-<count>`) the repartition has not finished, and the start,
`check` and `repartition` see it: `repartition` puts the checkpoint back from it (and takes out of the
file sink's log the entry of the batch the runner added), then goes on. Renaming the copy away is the
moment the new state counts, or, with a Delta sink, the table's commit of the runner's batch, the last
step before it: a table's commit cannot be taken back, so a repartition killed after it is finished.
"""

from __future__ import annotations

import dataclasses
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from ..core.checkpoint.copying import copy_whole
from ..core.checkpoint.files import (
    ASIDE,
    COPY_SUFFIX,
    DISCARDED,
    START_OVER,
    WORKING_COPY,
    batch_metadata,
    interrupted,
    last_committed,
    latest_offsets,
    local_checkpoint,
    read_checkpoint,
)
from ..core.checkpoint.run_lock import holder
from ..core.confs import PARTITIONS_CONF, PROVIDER_CONF, provider_name
from ..core.contract import PACKAGE
from ..job.endpoints.output_log import OutputLog, OutputNotRecorded
from ..job.spark.spark_errors import spark_errors
from .inspection import Inspection
from .state_reader import spark_message, spark_path

if TYPE_CHECKING:  # Spark is imported only when the checks pass
    from pyspark.sql import SparkSession


class RepartitionRefused(Exception):
    """A check failed before anything was written; the message says why and the way on."""


class RepartitionFailed(Exception):
    """Spark's runner or the verification failed; the checkpoint was put back from the copy."""


@dataclass(frozen=True)
class Plan:
    checkpoint: Path
    last_batch: int  # the newest batch in the offsets log
    last_committed: int
    partitions_now: int  # the count the last committed batch ran with
    partitions_new: int
    finish_first: bool = False  # the job left the last batch unfinished: run it before repartitioning

    @property
    def copy(self) -> Path:
        """Where --keep-copy keeps the checkpoint as it was before."""
        return self.checkpoint.with_name(f"{self.checkpoint.name}{COPY_SUFFIX}-{self.last_committed}")

    @property
    def working_copy(self) -> Path:
        name = f"{self.checkpoint.name}{WORKING_COPY}-{self.last_committed}-to-{self.partitions_new}"
        return self.checkpoint.with_name(name)

    @property
    def unfinished_batch(self) -> int | None:
        return self.last_batch if self.last_batch != self.last_committed else None

    @property
    def repartition_batch(self) -> int:
        """The batch the runner writes: the next one, or the interrupted repartition batch it completes
        (a batch the job left unfinished is run before, see --finish-last-batch)."""
        retrying = self.unfinished_batch is not None and not self.finish_first
        return self.last_batch if retrying else self.last_batch + 1


def plan(location: str, partitions: int, finish_last_batch: bool = False) -> Plan:
    """Every check that needs no Spark: a local RocksDB checkpoint, no process on it, its last batch
    committed (or to be finished first), a different count, no copy in the way. Reads only: a refusal
    leaves the checkpoint byte for byte as it was."""
    checkpoint = local_checkpoint(location)
    if checkpoint is None:
        raise RepartitionRefused(
            f"{location} is not on the local file system: repartition checks and copies the checkpoint here"
            " before it changes it. With the job stopped, move the checkpoint and output to a local disk (or a"
            f" mount such as /dbfs) with python -m {PACKAGE} savepoint create SAVEPOINT and savepoint restore"
            " SAVEPOINT --checkpoint FOLDER --output FOLDER (which moves every path Spark wrote),"
            " repartition there, and move it back the same way"
        )
    held = read_checkpoint(checkpoint)
    if held.last_batch is None or held.last_committed is None:
        raise RepartitionRefused(
            f"no committed batch in {checkpoint}: there is no state to move yet. Set spark.shuffle_partitions"
            f" to {partitions} before the first run instead: that run pins it"
        )
    committed = held.last_committed
    provider = provider_name(held.pinned.get(PROVIDER_CONF, ""))
    if provider != "rocksdb":
        raise RepartitionRefused(
            f"{checkpoint} holds the state of the {provider} store, and Spark's repartitioning rewrites RocksDB"
            f" state only. To change the partitions, {START_OVER}; to be able to repartition later, take that chance to move"
            " to state_store.provider rocksdb (the provider is pinned by the first run, like the partitions)"
        )
    holding_it = holder(checkpoint)
    if holding_it is not None:
        raise RepartitionRefused(
            f"{checkpoint} is in use by {holding_it}: stop the job first (repartitioning under a running query"
            " damages the checkpoint)"
        )
    chosen = Plan(checkpoint, held.last_batch, committed, _pinned_partitions(checkpoint, committed), partitions)
    if chosen.unfinished_batch is not None:
        chosen = dataclasses.replace(chosen, finish_first=_job_batch_to_finish(chosen, finish_last_batch))
    if partitions == chosen.partitions_now:
        raise RepartitionRefused(
            f"{checkpoint} already holds its state in {partitions} partitions (batch {committed}): nothing to"
            f" do. Give --partitions another count, or set spark.shuffle_partitions to {partitions}"
        )
    if chosen.copy.exists():
        raise RepartitionRefused(
            f"{chosen.copy} exists (the copy of an earlier repartition): remove it or move it away, then run again"
        )
    return chosen


def _job_batch_to_finish(chosen: Plan, finish_last_batch: bool) -> bool:
    """The last batch did not commit: True for a batch the job left (finished first when asked), False for
    a repartition batch into the same count (Spark's runner completes it); refused otherwise."""
    batch, checkpoint = chosen.last_batch, chosen.checkpoint
    unfinished = _pinned_partitions(checkpoint, batch)
    if unfinished == chosen.partitions_now:
        if not finish_last_batch:
            raise RepartitionRefused(
                f"batch {batch} of {checkpoint} did not commit (the job stopped in the middle of it): finish it"
                f" first with python -m {PACKAGE} repartition --partitions {chosen.partitions_new}"
                " --finish-last-batch (it runs that one batch on its recorded input, then repartitions)."
                " Skipping it instead could write its output twice"
            )
        return True
    if unfinished == chosen.partitions_new:
        return False
    raise RepartitionRefused(
        f"batch {batch} of {checkpoint} is a repartition into {unfinished} partitions that did not finish: run"
        f" python -m {PACKAGE} repartition --partitions {unfinished} to complete it first"
    )


def _pinned_partitions(checkpoint: Path, batch: int) -> int:

    metadata = batch_metadata(checkpoint, batch) or {}
    return int(metadata.get("conf", {}).get(PARTITIONS_CONF, 0))


def require_runner() -> None:
    """The installed pyspark has Spark's offline repartitioning (4.2.0 and later)."""
    import pyspark
    from pyspark.sql import SparkSession

    if not hasattr(SparkSession, "_streamingCheckpointManager"):
        raise RepartitionRefused(
            f"pyspark {pyspark.__version__} has no state repartitioning: it came with Spark 4.2.0. Upgrade pyspark"
            " (and the cluster) to 4.2 or later"
        )


@dataclass(frozen=True)
class Result:
    plan: Plan
    batch: int  # the repartition batch
    before: dict[tuple[int, str], int]  # (operator id, store) -> rows
    after: dict[tuple[int, str], int]
    copy_kept: Path | None
    recorded: str | None  # what the output's log got for the batch, None when nothing was written


def repartition(
    spark: SparkSession,
    chosen: Plan,
    inspect: Callable[[int], Inspection],
    keep_copy: bool = False,
    output: OutputLog | None = None,
) -> Result:
    """Copy the checkpoint, run Spark's runner, verify the state, record the runner's batch in the
    output's log (a sink that keeps one); put the copy back on any failure.

    `inspect(batch)` reads every operator's state as of a batch (inspection.inspect_checkpoint).
    """
    before = inspect(chosen.last_committed)
    copy = chosen.working_copy
    # From here on the copy is whole, and its name says the repartition is unfinished.
    copy_whole(chosen.checkpoint, copy)
    try:
        batch = _run_runner(spark, chosen)
        after = inspect(batch)
        _verify(chosen, batch, before, after)
        recorded = None if output is None else _record(output, batch)
    except BaseException as error:
        put_back(chosen.checkpoint, copy, output)
        if isinstance(error, RepartitionFailed):
            raise
        if isinstance(error, spark_errors()):
            raise RepartitionFailed(
                f"Spark's repartitioning failed: {spark_message(error)}; {chosen.checkpoint} was put back as it was"
            ) from None
        raise
    # The moment the new state counts: the working copy leaves its name.
    if keep_copy:
        copy.rename(chosen.copy)
    else:
        _discard(copy)
    return Result(chosen, batch, _rows(before), _rows(after), chosen.copy if keep_copy else None, recorded)


def _record(output: OutputLog, batch: int) -> str | None:
    try:
        return output.record_empty_batch(batch)
    except OutputNotRecorded as error:
        raise RepartitionFailed(f"{error}; the checkpoint was put back as it was") from None


def _discard(copy: Path) -> None:
    discarded = copy.with_name(copy.name + DISCARDED)
    copy.rename(discarded)
    shutil.rmtree(discarded)


def _run_runner(spark: SparkSession, chosen: Plan) -> int:
    manager = spark._streamingCheckpointManager  # private, evolving: the one call site
    # spark_path: a space, '#' or '%' in the path goes through a link.
    manager.repartition(spark_path(str(chosen.checkpoint)), chosen.partitions_new, True)
    batch = last_committed(chosen.checkpoint)
    return -1 if batch is None else batch


def _rows(inspection: Inspection) -> dict[tuple[int, str], int]:
    return {(o.operator_id, s.store): s.rows for o in inspection.operators for s in o.stores}


def _verify(chosen: Plan, batch: int, before: Inspection, after: Inspection) -> None:
    """The state as the runner left it: one new committed batch pinning the new count, and every store's
    rows equal to those before, spread over the new partitions."""
    problems = []
    if batch != chosen.repartition_batch:
        problems.append(f"the newest committed batch is {batch}, not the repartition batch {chosen.repartition_batch}")
    pinned = _pinned_partitions(chosen.checkpoint, batch)
    if pinned != chosen.partitions_new:
        problems.append(f"batch {batch} pins {pinned} shuffle partitions, not {chosen.partitions_new}")
    rows_before, rows_after = _rows(before), _rows(after)
    for operator_id, name in sorted(rows_before.keys() | rows_after.keys()):
        rows = rows_before.get((operator_id, name)), rows_after.get((operator_id, name))
        if rows[0] != rows[1]:
            problems.append(f"operator {operator_id} store {name}: {rows[0]} rows before, {rows[1]} after")
    for operator in after.operators:
        for store in operator.stores:
            if len(store.rows_per_partition) != chosen.partitions_new:
                problems.append(f"operator {operator.operator_id} store {store.store} is not in {pinned} partitions")
    if problems:
        raise RepartitionFailed(
            f"the repartitioned state does not check out ({'; '.join(problems)});"
            f" {chosen.checkpoint} was put back as it was"
        )


def recover(checkpoint: Path, output: OutputLog | None) -> list[str]:
    """Finish what an interrupted repartition left: the checkpoint put back from the working copy (and
    the output's log without the batch the runner added), or the repartition finished when the output
    holds its batch for good; half-made or discarded copies removed. The lines say what was done."""
    found = interrupted(checkpoint)
    if found is None:
        return []
    lines = []
    if found.working_copy is not None and _recorded_for_good(checkpoint, found.working_copy, output):
        _discard(found.working_copy)
        lines.append(
            f"finished the repartition into {found.partitions_new} partitions that stopped after the Delta table"
            f" had recorded its batch {last_committed(checkpoint)} (a commit cannot be taken back; {checkpoint}"
            f" holds the verified state): removed the copy {found.working_copy}"
        )
    elif found.working_copy is not None:
        removed = put_back(checkpoint, found.working_copy, output)
        extra = f"; took out of the output's log the entries it had added ({', '.join(removed)})" if removed else ""
        lines.append(
            f"put {checkpoint} back as it was before the repartition into {found.partitions_new} partitions that"
            f" did not finish, from {found.working_copy}{extra}"
        )
    for path in found.leftovers:
        if path.exists():
            shutil.rmtree(path)
            lines.append(f"removed {path}, left by an interrupted repartition")
    return lines


def _recorded_for_good(checkpoint: Path, copy: Path, output: OutputLog | None) -> bool:
    """The output holds the runner's batch and cannot take it out: the last step before the copy's rename
    was taken (the output records the batch only once the state is verified)."""
    if output is None or not checkpoint.is_dir():
        return False
    batch, before = last_committed(checkpoint), last_committed(copy)
    return batch is not None and batch > (-1 if before is None else before) and output.holds_for_good(batch)


def put_back(checkpoint: Path, copy: Path, output: OutputLog | None) -> list[str]:
    """Put the checkpoint back from the copy (renames: no half-copied state is ever in place), and take
    out of the file sink's log any batch the restored checkpoint does not hold. Each step can be taken
    again after a kill in the middle of it. The names of the log entries removed."""
    aside = checkpoint.with_name(f"{checkpoint.name}{ASIDE}")
    if checkpoint.exists():
        shutil.rmtree(aside, ignore_errors=True)
        checkpoint.rename(aside)
    copy.rename(checkpoint)
    shutil.rmtree(aside, ignore_errors=True)
    latest = latest_offsets(checkpoint)
    if output is None or latest is None:
        return []
    return output.take_out_after(latest[0])
