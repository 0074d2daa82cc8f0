"""A RocksDB checkpoint on an object store (s3a://) repartitioned through a copy on this machine's disk.

Spark's runner and the verification (operations/repartition.py) run on a copy here, as on a local
checkpoint; what they wrote is then uploaded, the batch's offsets after the state and its commit last.
Before the upload a marker is put beside the checkpoint under the working copy's name
(`<checkpoint>.repartitioning-<batch>-to-<count>`), which the start, `check` and `repartition` take for an
unfinished repartition (core/checkpoint/files.interrupted): it lists every file the upload writes, the
output's entry too, and holds the commit's bytes. It is removed once the commit is there. The next
`repartition` after a kill in the upload deletes the files it lists (the checkpoint as it was), or, where a
Delta table already holds the batch (a commit that cannot be taken back), uploads the commit and finishes.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from ..core.checkpoint.file_access import LocationPath
from ..core.checkpoint.files import WORKING_COPY, interrupted
from ..core.checkpoint.lease import LEASE_OBJECT
from ..core.checkpoint.object_store import StoreFiles
from ..core.checkpoint.sink_log import LOG_DIR
from ..job.endpoints.output_log import OutputLog
from .repartition import Plan, RepartitionRefused, Result, repartition

if TYPE_CHECKING:  # Spark is imported only when the checks pass
    from pyspark.sql import SparkSession

    from .inspection import Inspection


@dataclass(frozen=True)
class StoreCheckpoint:
    """The checkpoint on the store, and its copy here (named alike, so that the runner's names match)."""

    location: LocationPath
    here: Path

    @property
    def store(self) -> StoreFiles:
        return StoreFiles(str(self.location))

    def marker(self, plan: Plan) -> LocationPath:
        name = f"{self.location.name}{WORKING_COPY}-{plan.last_committed}-to-{plan.partitions_new}"
        return LocationPath(str(self.location.parent / name))


def copied_here(location: str, staging: Path) -> StoreCheckpoint:
    """The checkpoint copied from the store into `staging` (its lease left out)."""
    checkpoint = StoreCheckpoint(LocationPath(location), staging / LocationPath(location).name)
    checkpoint.store.download(checkpoint.location, checkpoint.here, leave_out=(LEASE_OBJECT,))
    return checkpoint


def output_here(output: OutputLog | None, staging: Path, checkpoint: StoreCheckpoint) -> OutputLog | None:
    """The output's log as the copy here records the runner's batch in it: a parquet output's log copied here
    (uploaded with the checkpoint), a Delta table where it is (committed to by deltalake, the store's too)."""
    if output is None:
        return None
    if output.sink == "parquet":
        copy = staging / "output"
        StoreFiles(str(output.path)).download(output.path / LOG_DIR, copy / LOG_DIR)
        return OutputLog("parquet", copy, checkpoint.here, output.compact_interval)
    return OutputLog(output.sink, output.path, checkpoint.here, output.compact_interval)


def _sums(folder: Path) -> dict[str, str]:
    return {
        path.relative_to(folder).as_posix(): hashlib.sha256(path.read_bytes()).hexdigest()
        for path in sorted(folder.rglob("*"))
        if path.is_file() and not path.name.endswith(".crc")  # a store keeps no Hadoop checksums
    }


def repartition_on_store(
    spark: SparkSession,
    chosen: Plan,
    checkpoint: StoreCheckpoint,
    inspect: Callable[[int], Inspection],
    output: OutputLog | None,
    store_output: OutputLog | None,
) -> Result:
    """Run the repartition on the copy here (verified there, the output recorded at publish), then publish it."""
    before = _sums(checkpoint.here)
    result = repartition(spark, chosen, inspect)
    changed = sorted(name for name, digest in _sums(checkpoint.here).items() if before.get(name) != digest)
    recorded = _publish(checkpoint, chosen, result.batch, changed, output, store_output)
    return Result(chosen, result.batch, result.before, result.after, None, recorded)


def _publish(
    checkpoint: StoreCheckpoint,
    chosen: Plan,
    batch: int,
    changed: list[str],
    output: OutputLog | None,
    store_output: OutputLog | None,
) -> str | None:
    """Upload what the runner wrote: the marker, the state, the offsets, the output's entry, the commit; then
    the marker removed."""
    commit = f"commits/{batch}"
    rest = [name for name in changed if name != commit]
    rest.sort(key=lambda name: name.startswith("offsets/"))  # the state first, the batch's offsets after it
    entry = None
    if output is not None and output.sink == "parquet":
        entry = output.record_empty_batch(batch)  # written here first, uploaded below
    entries = _new_entries(output, batch) if entry else []
    store = checkpoint.store
    marker = checkpoint.marker(chosen)
    record = {"files": rest, "output_entries": entries, "commit": commit}
    record["commit_text"] = (checkpoint.here / commit).read_text(encoding="utf-8")
    store.write(marker, json.dumps(record).encode())
    for name in rest:
        store.write(checkpoint.location / name, (checkpoint.here / name).read_bytes())
    recorded = entry
    if output is not None and store_output is not None and entry is not None:
        for name in entries:
            store.write(store_output.path / LOG_DIR / name, (output.path / LOG_DIR / name).read_bytes())
    elif store_output is not None and store_output.sink == "delta":
        recorded = store_output.record_empty_batch(batch)  # a commit that cannot be taken back
    store.write(checkpoint.location / commit, (checkpoint.here / commit).read_bytes())
    store.delete(marker)
    return recorded


def _new_entries(output: OutputLog | None, batch: int) -> list[str]:
    """The names of the parquet sink's log entries for `batch` written here (an entry or a merge file)."""
    if output is None:
        return []
    return [name for name in (str(batch), f"{batch}.compact") if (output.path / LOG_DIR / name).is_file()]


@contextmanager
def unchanged_names(checkpoint: StoreCheckpoint) -> Iterator[None]:
    """Messages of the copy here named by the checkpoint's location on the store."""
    try:
        yield
    except RepartitionRefused as refused:
        raise RepartitionRefused(str(refused).replace(str(checkpoint.here), str(checkpoint.location))) from None


def recover_on_store(location: str, store_output: OutputLog | None) -> list[str]:
    """Finish what a repartition on the store left (a kill in its upload): roll back (the files it listed
    deleted) or, where a Delta table already holds its batch, finish (the commit uploaded). The lines say
    what was done."""
    checkpoint = LocationPath(location)
    store = StoreFiles(location)
    found = interrupted(checkpoint, store)
    if found is None or found.working_copy is None:
        return []
    marker = found.working_copy
    record = json.loads(store.read(marker) or b"{}")
    batch = int(str(record.get("commit", "commits/-1")).rsplit("/", 1)[-1])
    if store_output is not None and store_output.sink == "delta" and _table_holds(store_output, location, batch):
        store.write(checkpoint / record["commit"], str(record["commit_text"]).encode())
        store.delete(marker)
        return [
            f"finished the repartition into {found.partitions_new} partitions that stopped after the Delta table had"
            f" recorded its batch {batch} (a commit cannot be taken back): uploaded its commit"
        ]
    for name in [*record.get("files", []), record.get("commit", "")]:
        if name:
            store.delete(checkpoint / name)
    for name in record.get("output_entries", []):
        if store_output is not None:
            store.delete(store_output.path / LOG_DIR / name)
    store.delete(marker)
    return [
        f"put {location} back as it was before the repartition into {found.partitions_new} partitions that did not"
        f" finish its upload: deleted the {len(record.get('files', []))} files it had uploaded"
    ]


def _table_holds(output: OutputLog, location: str, batch: int) -> bool:
    from ..core.checkpoint.files import query_id
    from ..job.endpoints import delta

    query = query_id(LocationPath(location), StoreFiles(location))
    return delta.committed_version(str(output.path), query) >= batch
