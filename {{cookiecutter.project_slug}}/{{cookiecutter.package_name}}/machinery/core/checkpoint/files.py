"""A checkpoint's files, read without Spark: the one reader of them.

Spark keeps a checkpoint in logs of numbered files: `offsets/<batch>` (a version line, a metadata
line with the watermark and the pinned confs, then one offset per source), `commits/<batch>`, the
query's `metadata` (its id), `state/<operator>/_metadata` (each stateful operator, what Spark's
state-metadata source reads) and, beside them, the schema files (core/checkpoint/state_schema.py)
and the sink's log (core/checkpoint/sink_log.py). Every caller takes what this module reads; none
parses a log itself. A file it cannot parse raises CheckpointUnreadable naming the file and the way on.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from ..contract import PACKAGE
from .copying import PARTIAL


def local_checkpoint(location: str) -> Path | None:
    """The folder of a checkpoint on the local file system, None for any other file system."""
    if "://" in location and not location.startswith("file:"):
        return None
    return Path(location.removeprefix("file://").removeprefix("file:"))


@dataclass(frozen=True)
class Logs:
    """What a checkpoint's offsets and commits say, read once: the newest logged batch, the confs it
    pins and its source offsets, the newest committed batch and the state format version of its
    record (None where there is none yet)."""

    checkpoint: Path
    last_batch: int | None
    pinned: dict[str, str]
    offsets: list[str]
    last_committed: int | None
    format_version: int | None


def read_logs(checkpoint: Path) -> Logs:
    """The checkpoint's logs, after check_log_files has named any damage Spark would report badly."""
    check_log_files(checkpoint)
    latest = latest_offsets(checkpoint)
    last_batch, pinned = latest if latest is not None else (None, {})
    offsets = [] if last_batch is None else source_offsets(checkpoint, last_batch)
    return Logs(checkpoint, last_batch, pinned, offsets, last_committed(checkpoint), held_format_version(checkpoint))


def latest_offsets(checkpoint: Path) -> tuple[int, dict[str, str]] | None:
    """(batch id, pinned confs) of the newest offsets file, or None without one."""
    path = highest_numbered(checkpoint / "offsets")
    if path is None:
        return None
    metadata = _offsets_metadata(path)
    return int(path.name), {key: str(value) for key, value in metadata.get("conf", {}).items()}


def last_committed(checkpoint: Path) -> int | None:
    """The newest batch with a commit record, None before the first commit."""
    path = highest_numbered(checkpoint / "commits")
    return None if path is None else int(path.name)


def batch_metadata(checkpoint: Path, batch: int) -> dict | None:
    """The metadata line of one batch's offsets file (its watermark, its pinned confs), None without one."""
    path = checkpoint / "offsets" / str(batch)
    return _offsets_metadata(path) if path.is_file() else None


def source_offsets(checkpoint: Path, batch: int) -> list[str]:
    """The offset lines of one batch's offsets file, one per source (after the version and metadata lines)."""
    return (checkpoint / "offsets" / str(batch)).read_text().splitlines()[2:]


def query_id(checkpoint: Path) -> str:
    """The query id the checkpoint's `metadata` file holds; CheckpointUnreadable for a half-written one."""
    metadata = checkpoint / "metadata"
    try:
        return str(json.loads(metadata.read_text(encoding="utf-8").splitlines()[0])["id"])
    except (IndexError, KeyError, TypeError, json.JSONDecodeError, UnicodeDecodeError):
        raise CheckpointUnreadable(
            f"{metadata}: not a Spark checkpoint metadata file (the query id); {RESTORE_OR_RESTART}"
        ) from None


def _offsets_metadata(path: Path) -> dict:
    lines = path.read_text(encoding="utf-8").splitlines()
    try:
        return dict(json.loads(lines[1]))
    except (IndexError, TypeError, ValueError):
        raise CheckpointUnreadable(
            f"{path}: not a Spark offsets file (no metadata line; half-written?); {RESTORE_OR_RESTART}"
        ) from None


def _numbered(folder: Path) -> list[Path]:
    """The entries of folder named by a number (batch, operator or version ids), in numeric order."""
    entries = [path for path in folder.iterdir() if path.name.isdigit()] if folder.is_dir() else []
    return sorted(entries, key=lambda path: int(path.name))


def highest_numbered(folder: Path) -> Path | None:
    entries = _numbered(folder)
    return entries[-1] if entries else None


class CheckpointUnreadable(Exception):
    """A checkpoint file the guard cannot parse; the message names it."""


RESTORE_OR_RESTART = (
    "restore the checkpoint from a copy, or set query.checkpoint_location to a new directory and reprocess"
    " the input from the start"
)


def check_log_files(checkpoint: Path) -> None:
    """Damage Spark reports badly or not at all, found before it starts: a half-written `metadata`
    (a Java stack trace otherwise), and a log entry's checksum file left without the entry (Spark
    then claims another query uses the checkpoint)."""
    if (checkpoint / "metadata").is_file():
        query_id(checkpoint)
    commit_record(checkpoint)
    for log in ("offsets", "commits"):
        folder = checkpoint / log
        for checksum in sorted(folder.glob(".*.crc")) if folder.is_dir() else ():
            entry = folder / checksum.name.removeprefix(".").removesuffix(".crc")
            if entry.name.isdigit() and not entry.exists():
                raise CheckpointUnreadable(
                    f"{checksum} is left without {entry} (the entry was removed or lost): remove {checksum} too,"
                    f" and Spark runs batch {entry.name} again from its offsets; or {RESTORE_OR_RESTART}"
                )


def empty_state_files(checkpoint: Path) -> list[Path]:
    """State files of zero bytes: a truncated write, which Spark reports without naming the file."""
    return [path for path in state_files(checkpoint) if path.stat().st_size == 0]


def state_files(checkpoint: Path, pattern: str = "*") -> list[Path]:
    """The state's files, without those a task was still writing when the query stopped: Spark writes
    `.<name>.<uuid>.tmp` (and its checksum) and renames it when whole, so such a file is not damage."""
    found = (checkpoint / "state").rglob(pattern)
    return sorted(path for path in found if path.is_file() and not (path.name.startswith(".") and ".tmp" in path.name))


def commit_record(checkpoint: Path, batch: int | None = None) -> dict | None:
    """A batch's commit record (the newest one unless given), None without one; a record whose line
    does not parse is half-written, and named with the way on."""
    path = highest_numbered(checkpoint / "commits") if batch is None else checkpoint / "commits" / str(batch)
    if path is None or not path.is_file():
        return None
    lines = path.read_text(encoding="utf-8", errors="replace").splitlines()
    if len(lines) < 2:
        return None
    try:
        return dict(json.loads(lines[1]))
    except (TypeError, ValueError):  # JSONDecodeError is a ValueError
        checksum = path.parent / f".{path.name}.crc"
        raise CheckpointUnreadable(
            f"{path}: a half-written commit record; remove it and {checksum}, and Spark runs batch"
            f" {path.name} again (the sink skips what it already wrote); or {RESTORE_OR_RESTART}"
        ) from None


def held_format_version(checkpoint: Path, batch: int | None = None) -> int | None:
    """The state checkpoint format version of a batch's commit record (the newest one unless given): 2
    when it names the state files' unique ids. None without a record. Spark does not pin it."""
    record = commit_record(checkpoint, batch)
    return None if record is None else 2 if "stateUniqueIds" in record else 1


def stateful_operators(checkpoint: Path) -> list[dict]:
    """operatorInfo of each stateful operator from its state metadata file (v1 or v2), by operator id."""
    operators = []
    for directory in _numbered(checkpoint / "state"):
        metadata = _newest_metadata(directory / "_metadata")
        if metadata is not None:
            operators.append(state_metadata(metadata, "operatorInfo")["operatorInfo"])
    return operators


def newest_state_metadata_v2(checkpoint: Path, operator_id: int) -> tuple[Path, dict] | None:
    """(file, content) of an operator's newest version-2 state metadata (transformWithState writes it), or None."""
    newest = highest_numbered(checkpoint / "state" / str(operator_id) / "_metadata" / "v2")
    return None if newest is None else (newest, state_metadata(newest, "stateStoreInfo"))


def state_metadata(path: Path, required: str) -> dict:
    """The JSON line of a state metadata file, which must hold `required`."""
    lines = path.read_text(encoding="utf-8").splitlines()
    try:
        content = json.loads(lines[1])
        content[required]
    except (IndexError, KeyError, TypeError, ValueError):
        raise CheckpointUnreadable(f"{path}: not a Spark state metadata file; {RESTORE_OR_RESTART}") from None
    return dict(content)


def _newest_metadata(folder: Path) -> Path | None:
    if (folder / "metadata").is_file():  # version 1
        return folder / "metadata"
    return highest_numbered(folder / "v2")


# What an unfinished repartition leaves beside a checkpoint (operations/repartition.py makes these names).
COPY_SUFFIX = ".before-repartition"  # the copy kept by --keep-copy
WORKING_COPY = ".repartitioning"  # the copy while the repartition runs: its presence means unfinished
DISCARDED = ".removing"  # a copy no longer needed, being removed
ASIDE = ".failed-repartition"  # the checkpoint the runner changed, moved aside while the copy is put back


@dataclass(frozen=True)
class Interrupted:
    """What an unfinished repartition left beside a checkpoint."""

    checkpoint: Path
    working_copy: Path | None  # the copy to put back: the repartition did not finish
    leftovers: tuple[Path, ...]  # half-made or discarded copies, a checkpoint moved aside: to remove

    @property
    def partitions_new(self) -> int | None:
        if self.working_copy is None:
            return None
        return int(self.working_copy.name.rsplit("-to-", 1)[1])

    def message(self) -> str:
        """One line for the start and `check`: what happened and the one thing to do."""
        if self.working_copy is None:
            names = ", ".join(str(path) for path in self.leftovers)
            return (
                f"a repartition of {self.checkpoint} left {names} behind (the checkpoint itself is complete):"
                f" run python -m {PACKAGE} repartition again, or remove them"
            )
        return (
            f"a repartition of {self.checkpoint} into {self.partitions_new} partitions did not finish (its copy"
            f" {self.working_copy} is still in place): run python -m {PACKAGE} repartition --partitions"
            f" {self.partitions_new} again; it first puts the checkpoint back as it was from the copy (nothing is"
            " lost), then repartitions"
        )


def interrupted(checkpoint: Path) -> Interrupted | None:
    """What an unfinished repartition left beside the checkpoint, if anything."""
    parent = checkpoint.parent
    if not parent.is_dir():
        return None
    working, leftovers = None, []
    for path in sorted(parent.iterdir()):
        name = path.name
        if not name.startswith(checkpoint.name + "."):
            continue
        tail = name[len(checkpoint.name) :]
        if tail.startswith(WORKING_COPY) and tail.endswith((PARTIAL, DISCARDED)) or tail == ASIDE:
            leftovers.append(path)
        elif tail.startswith(WORKING_COPY + "-") and "-to-" in tail:
            working = path
    if working is None and not leftovers:
        return None
    return Interrupted(checkpoint, working, tuple(leftovers))
