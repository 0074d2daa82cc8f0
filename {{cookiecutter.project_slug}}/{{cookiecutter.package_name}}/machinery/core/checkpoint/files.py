"""A checkpoint's files, read without Spark: the one reader of them.

Spark keeps a checkpoint in logs of numbered files: `offsets/<batch>` (a version line, a metadata
line with the watermark and the pinned confs, then one offset per source), `commits/<batch>`, the
query's `metadata` (its id), `state/<operator>/_metadata` (each stateful operator, what Spark's
state-metadata source reads) and the state schema files; beside them lies the sink's log
(core/checkpoint/sink_log.py). Every caller takes what this module reads; none
parses a log itself. A file it cannot parse raises CheckpointUnreadable naming the file and the way on.
"""

from __future__ import annotations

import json
import struct
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from ..confs import ENCODING_CONF
from ..contract import PACKAGE
from .copying import PARTIAL
from .file_access import LOCAL, Files, LocationPath, read_text
from .path_records import file_path, hadoop_crc, json_line
from .sink_log import SinkLog, TableBehind


def local_checkpoint(location: str) -> Path | None:
    """The folder of a checkpoint on the local file system, None for any other file system."""
    if "://" in location and not location.startswith("file:"):
        return None
    return Path(location.removeprefix("file://").removeprefix("file:"))


def reader_root(location: str, files: Files) -> Path | None:
    """The checkpoint as the path `files` names its files by: its folder on this machine's disk, its LocationPath
    for another reader (an object store's, a Spark session's); None where only this disk's reader is given
    and the checkpoint is not on it."""
    return local_checkpoint(location) or (None if files is LOCAL else LocationPath(location))


@dataclass(frozen=True)
class CheckpointRead:
    """What a checkpoint's files say, read once: the newest logged batch, the confs it pins and its
    source offsets, the newest committed batch and the state format version of its record (None where
    there is none yet), each stateful operator's info from its state metadata, by operator id, and the
    state schemas in force for each (None for an operator without schema files)."""

    checkpoint: Path
    last_batch: int | None
    pinned: dict[str, str]
    offsets: list[str]
    last_committed: int | None
    format_version: int | None
    operators: list[dict]
    schemas: dict[int, list[ColumnFamily] | None]
    # Per source with a log of its own (the file source), the files of its newest entry.
    files_read: list[list[Path]]
    # The parquet output's log and its columns (its newest data file's), where the guard read them.
    sink_log: SinkLog | None = None
    output_columns: tuple[str, ...] | None = None
    # A Delta output holding fewer of the query's batches than were committed, where the guard read it.
    table_behind: TableBehind | None = None
    # The id in its `metadata` file (None before the first start), and whether it has a state folder.
    query_id: str | None = None
    has_state: bool = False

    @property
    def stateless(self) -> bool:
        """A checkpoint whose query ran no stateful operator: committed batches, and no state folder at all
        (a checkpoint of a Spark that wrote no state metadata still has its operators' state folders). One
        whose first batch failed has no state folder either, and holds nothing yet."""
        return self.last_committed is not None and not self.operators and not self.has_state


def read_checkpoint(checkpoint: Path, files: Files = LOCAL) -> CheckpointRead:
    """The checkpoint's files, read once. Damage is named first where a file does not parse (check_log_files
    and the parsers), then where one parses but no longer matches the checksum Hadoop wrote beside it:
    Spark reads offsets, commits and metadata without looking at it (a changed digit in a commit's
    watermark passed silently)."""
    check_log_files(checkpoint, files)
    latest = latest_offsets(checkpoint, files)
    last_batch, pinned = latest if latest is not None else (None, {})
    offsets = [] if last_batch is None else source_offsets(checkpoint, last_batch, files)
    committed = last_committed(checkpoint, files)
    record = None if committed is None else commit_record(checkpoint, committed, files)
    operators = stateful_operators(checkpoint, files)
    ids = [int(info["operatorId"]) for info in operators]
    schemas = {operator: operator_schemas(checkpoint, operator, files) for operator in ids}
    newest = [] if committed is None else [checkpoint / "commits" / str(committed)]
    rerun = f"remove it and .{committed}.crc, and Spark runs batch {committed} again (the sink skips what it already"
    check_checksums(newest, f"{rerun} wrote); or {RESTORE_OR_RESTART}", files)
    kept = [path for path in checksummed_files(checkpoint, files) if path not in newest]
    check_checksums(kept, RESTORE_OR_RESTART, files)
    return CheckpointRead(
        checkpoint,
        last_batch,
        pinned,
        offsets,
        committed,
        format_version(record),
        operators,
        schemas,
        newest_files_read(checkpoint, files),
        query_id=query_id(checkpoint, files) if files.exists(checkpoint / "metadata") else None,
        has_state=files.exists(checkpoint / "state"),
    )


def read_local(location: str) -> CheckpointRead | None:
    """read_checkpoint of a checkpoint on the local file system, None for one elsewhere."""
    checkpoint = local_checkpoint(location)
    return None if checkpoint is None else read_checkpoint(checkpoint)


def latest_offsets(checkpoint: Path, files: Files = LOCAL) -> tuple[int, dict[str, str]] | None:
    """(batch id, pinned confs) of the newest offsets file, or None without one."""
    path = highest_numbered(checkpoint / "offsets", files)
    if path is None:
        return None
    metadata = _offsets_metadata(path, files)
    return int(path.name), {key: str(value) for key, value in metadata.get("conf", {}).items()}


def last_committed(checkpoint: Path, files: Files = LOCAL) -> int | None:
    """The newest batch with a commit record, None before the first commit."""
    path = highest_numbered(checkpoint / "commits", files)
    return None if path is None else int(path.name)


def unfinished_batch(checkpoint: Path, files: Files = LOCAL) -> int | None:
    """The batch whose offsets are logged and which has no commit, if the checkpoint ends with one."""
    latest, committed = latest_offsets(checkpoint, files), last_committed(checkpoint, files)
    if latest is None or (committed is not None and committed >= latest[0]):
        return None
    return latest[0]


def batch_metadata(checkpoint: Path, batch: int, files: Files = LOCAL) -> dict | None:
    """The metadata line of one batch's offsets file (its watermark, its pinned confs), None without one."""
    path = checkpoint / "offsets" / str(batch)
    return _offsets_metadata(path, files) if files.exists(path) else None


@dataclass(frozen=True)
class WatermarkStand:
    """Where the watermark of a checkpoint's newest batch stands, and since which batch its offsets log keeps."""

    watermark_ms: int
    since_batch: int  # the first batch that ran with it, of those the log keeps
    since_ms: int  # that batch's start (Spark's batchTimestampMs)
    newest_batch: int
    newest_ms: int
    since_oldest_kept: bool  # the oldest offsets file kept has it already: it may have stood longer


def watermark_stand(checkpoint: Path, files: Files = LOCAL) -> WatermarkStand | None:
    """The newest batch's watermark and since when it stands, from the offsets log; None before a watermark
    (a query without one, or no event yet). Reads back from the newest offsets file while it is the same."""
    batches = _numbered(checkpoint / "offsets", files)
    if not batches:
        return None
    newest = _offsets_metadata(batches[-1], files)
    watermark = newest.get("batchWatermarkMs")
    if not isinstance(watermark, int) or watermark <= 0:
        return None
    since, since_metadata, oldest = batches[-1], newest, True
    for path in reversed(batches[:-1]):
        metadata = _offsets_metadata(path, files)
        if metadata.get("batchWatermarkMs") != watermark:
            oldest = False
            break
        since, since_metadata = path, metadata
    return WatermarkStand(
        watermark,
        int(since.name),
        int(since_metadata.get("batchTimestampMs", 0)),
        int(batches[-1].name),
        int(newest.get("batchTimestampMs", 0)),
        oldest and int(batches[0].name) > 0,
    )


def source_offsets(checkpoint: Path, batch: int, files: Files = LOCAL) -> list[str]:
    """The offset lines of one batch's offsets file, one per source (after the version and metadata lines)."""
    return read_text(files, checkpoint / "offsets" / str(batch)).splitlines()[2:]


def newest_files_read(checkpoint: Path, files: Files = LOCAL) -> list[list[Path]]:
    """Per source of a checkpoint that keeps a log of its own (the file source's `sources/<id>/<batch>`:
    one JSON line per file read), the files its newest entry lists (file_path: a local file, or Path(uri))."""
    found = []
    for source in _numbered(checkpoint / "sources", files):
        entries = _source_log_entries(source, files)
        lines = read_text(files, entries[-1], errors="replace").splitlines()[1:] if entries else []
        uris = [record.get("path") for record in map(json_line, lines) if isinstance(record, dict)]
        found.append([path for uri in uris if isinstance(uri, str) and (path := file_path(uri)) is not None])
    return found


def _source_log_entries(source: Path, files: Files = LOCAL) -> list[Path]:
    """A source's log entries (`<batch>` and `<batch>.compact`), in batch order."""
    entries = (path for path in files.list(source) if path.name.removesuffix(".compact").isdigit())
    return sorted(entries, key=lambda path: int(path.name.removesuffix(".compact")))


def query_id(checkpoint: Path, files: Files = LOCAL) -> str:
    """The query id the checkpoint's `metadata` file holds; CheckpointUnreadable for a half-written one."""
    metadata = checkpoint / "metadata"
    try:
        return str(json.loads(read_text(files, metadata).splitlines()[0])["id"])
    except (IndexError, KeyError, TypeError, json.JSONDecodeError, UnicodeDecodeError):
        raise CheckpointUnreadable(
            f"{metadata}: not a Spark checkpoint metadata file (the query id); {RESTORE_OR_RESTART}"
        ) from None


def _offsets_metadata(path: Path, files: Files = LOCAL) -> dict:
    lines = read_text(files, path).splitlines()
    try:
        return dict(json.loads(lines[1]))
    except (IndexError, TypeError, ValueError):
        raise CheckpointUnreadable(
            f"{path}: not a Spark offsets file (no metadata line; half-written?); {RESTORE_OR_RESTART}"
        ) from None


def _numbered(folder: Path, files: Files = LOCAL) -> list[Path]:
    """The entries of folder named by a number (batch, operator or version ids), in numeric order."""
    entries = [path for path in files.list(folder) if path.name.isdigit()]
    return sorted(entries, key=lambda path: int(path.name))


def highest_numbered(folder: Path, files: Files = LOCAL) -> Path | None:
    entries = _numbered(folder, files)
    return entries[-1] if entries else None


class CheckpointUnreadable(Exception):
    """A checkpoint file the guard cannot parse; the message names it."""


# Starting over: a new checkpoint writes its batches from 0, and a file sink whose log already holds
# those batches would skip them as written (their input lost); a Delta table would get them twice.
START_OVER = (
    "set query.checkpoint_location to a new directory and sink.path to an empty one, and reprocess the input"
    " from the start"
)
RESTORE_OR_RESTART = f"restore the checkpoint from a copy, or {START_OVER}"
# `savepoint restore`'s flag per settings section: where that input's landing folder is now.
LANDING_FLAGS = {"source": "--landing", "join_source": "--join-landing"}


def check_log_files(checkpoint: Path, files: Files = LOCAL) -> None:
    """Damage Spark reports badly or not at all, found before it starts: a half-written `metadata` (a
    Java stack trace otherwise), and a log entry's checksum file left without the entry (Spark then
    claims another query uses the checkpoint). A half-written commit record is named where it is read."""
    if files.exists(checkpoint / "metadata"):
        query_id(checkpoint, files)
    for log in ("offsets", "commits"):
        entries = files.list(checkpoint / log)
        for checksum in (path for path in entries if path.name.startswith(".") and path.name.endswith(".crc")):
            entry = checksum.with_name(checksum.name.removeprefix(".").removesuffix(".crc"))
            if entry.name.isdigit() and entry not in entries:
                raise CheckpointUnreadable(
                    f"{checksum} is left without {entry} (the entry was removed or lost): remove {checksum} too,"
                    f" and Spark runs batch {entry.name} again from its offsets; or {RESTORE_OR_RESTART}"
                )


def checksummed_files(checkpoint: Path, files: Files = LOCAL) -> list[Path]:
    """The checkpoint's files that Spark reads whole and trusts: its logs (the sources' own too: the file
    source's list of the files it read), its metadata, each operator's state metadata and state schemas
    (the state's data files are the integrity settings' and state_checks')."""
    logs = [path for log in ("offsets", "commits") for path in _numbered(checkpoint / log, files)]
    for source in _numbered(checkpoint / "sources", files):
        logs += _source_log_entries(source, files)
    kept = []
    for operator in files.list(checkpoint / "state"):
        kept += [path for path in files.list(operator / "_metadata") if path.name == "metadata"]
        kept += files.list(operator / "_metadata" / "v2")
        kept += [path for store in files.list(operator / "_stateSchema") for path in files.list(store)]
        kept += _schema_files(operator / "0", files)
    visible = (path for path in kept if not path.name.startswith("."))
    return [*logs, checkpoint / "metadata", *visible]


def _schema_files(partition: Path, files: Files) -> list[Path]:
    """The v2 state schema files of an operator's partition folder: `[<store>/]_metadata/schema`."""
    stores = [partition, *(path for path in files.list(partition) if not path.name.startswith((".", "_")))]
    return sorted(path for store in stores if files.exists(path := store / "_metadata" / "schema"))


def check_checksums(paths: Iterable[Path], way_on: str, files: Files = LOCAL) -> None:
    """CheckpointUnreadable naming the first file whose bytes no longer match the `.<name>.crc` Hadoop wrote
    beside it (a file without one, or whose checksum the reader cannot see, is not checked)."""
    for path in paths:
        checksum = path.with_name(f".{path.name}.crc")
        held = files.read(checksum)
        data = None if held is None else files.read(path)
        if held is not None and data is not None and hadoop_crc(data) != held:
            raise CheckpointUnreadable(
                f"{path} does not match its checksum {checksum.name} (its bytes changed after Spark wrote it,"
                f" and Spark would read it as it is): {way_on}"
            )


def empty_state_files(checkpoint: Path) -> list[Path]:
    """State files of zero bytes: a truncated write, which Spark reports without naming the file."""
    return [path for path in state_files(checkpoint) if path.stat().st_size == 0]


def state_files(checkpoint: Path, pattern: str = "*") -> list[Path]:
    """The state's files, without those a task was still writing when the query stopped: Spark writes
    `.<name>.<uuid>.tmp` (and its checksum) and renames it when whole, so such a file is not damage."""
    found = (checkpoint / "state").rglob(pattern)
    return sorted(path for path in found if path.is_file() and not (path.name.startswith(".") and ".tmp" in path.name))


def commit_record(checkpoint: Path, batch: int | None = None, files: Files = LOCAL) -> dict | None:
    """A batch's commit record (the newest one unless given), None without one; a record whose line
    does not parse is half-written, and named with the way on."""
    path = highest_numbered(checkpoint / "commits", files) if batch is None else checkpoint / "commits" / str(batch)
    data = None if path is None else files.read(path)
    if path is None or data is None:
        return None
    lines = data.decode("utf-8", errors="replace").splitlines()
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


def held_format_version(checkpoint: Path, batch: int | None = None, files: Files = LOCAL) -> int | None:
    """The state checkpoint format version of a batch's commit record (the newest one unless given): 2
    when it names the state files' unique ids. None without a record. Spark does not pin it."""
    return format_version(commit_record(checkpoint, batch, files))


def format_version(record: dict | None) -> int | None:
    return None if record is None else 2 if "stateUniqueIds" in record else 1


def stateful_operators(checkpoint: Path, files: Files = LOCAL) -> list[dict]:
    """operatorInfo of each stateful operator from its state metadata file (v1 or v2), by operator id."""
    operators = []
    for directory in _numbered(checkpoint / "state", files):
        metadata = _newest_metadata(directory / "_metadata", files)
        if metadata is not None:
            operators.append(state_metadata(metadata, "operatorInfo", files)["operatorInfo"])
    return operators


def newest_state_metadata_v2(checkpoint: Path, operator_id: int, files: Files = LOCAL) -> tuple[Path, dict] | None:
    """(file, content) of an operator's newest version-2 state metadata (transformWithState writes it), or None."""
    newest = highest_numbered(checkpoint / "state" / str(operator_id) / "_metadata" / "v2", files)
    return None if newest is None else (newest, state_metadata(newest, "stateStoreInfo", files))


def state_metadata(path: Path, required: str, files: Files = LOCAL) -> dict:
    """The JSON line of a state metadata file, which must hold `required`."""
    lines = read_text(files, path).splitlines()
    try:
        content = json.loads(lines[1])
        content[required]
    except (IndexError, KeyError, TypeError, ValueError):
        raise CheckpointUnreadable(f"{path}: not a Spark state metadata file; {RESTORE_OR_RESTART}") from None
    return dict(content)


def _newest_metadata(folder: Path, files: Files) -> Path | None:
    if files.exists(folder / "metadata"):  # version 1
        return folder / "metadata"
    return highest_numbered(folder / "v2", files)


# The state schemas. Spark writes each stateful operator's key and value schemas when a query first
# plans it: transformWithState in `state/<op>/_stateSchema/<store>/<batch>_<uuid>` (format v3, one entry
# per state variable and internal column family; the newest `state/<op>/_metadata/v2/<batch>` names the
# file in force), the other operators in `state/<op>/<partition 0>[/<store>]/_metadata/schema` (format
# v2). Both are Java DataOutputStream records: a UTF string is a 2-byte length and its bytes, a JSON
# schema a 4-byte count of such strings, joined.

# What Spark uses when a checkpoint's offsets record no encoding (checkpoints of Spark before 4.0).
DEFAULT_ENCODING = "unsaferow"


@dataclass(frozen=True)
class ColumnFamily:
    """One store's (or one state variable's) key and value schema, as Spark's JSON of a StructType;
    for a state variable, its kind as the operator metadata records it (ValueState, ListState, MapState)."""

    name: str
    key: dict
    value: dict
    kind: str | None = None


class _Reader:
    def __init__(self, path: Path, files: Files) -> None:
        data = files.read(path)
        if data is None:
            raise FileNotFoundError(f"no such file: {path}")
        self.path, self.data, self.at = path, data, 0

    def take(self, size: int) -> bytes:
        if self.at + size > len(self.data):
            raise CheckpointUnreadable(f"{self.path}: a state schema file cut short; {RESTORE_OR_RESTART}")
        chunk = self.data[self.at : self.at + size]
        self.at += size
        return chunk

    def number(self, size: int) -> int:
        return int(struct.unpack(">h" if size == 2 else ">i", self.take(size))[0])

    def text(self) -> str:
        return self.take(self.number(2)).decode("utf-8")

    def schema(self) -> dict:
        joined = "".join(self.text() for _ in range(self.number(4)))
        try:
            return dict(json.loads(joined))
        except (TypeError, ValueError):
            raise CheckpointUnreadable(f"{self.path}: not a Spark state schema file; {RESTORE_OR_RESTART}") from None


def read_schema_file(path: Path, files: Files = LOCAL) -> list[ColumnFamily]:
    """The column families of one schema file (format v2 or v3); CheckpointUnreadable for another."""
    reader = _Reader(path, files)
    version = reader.text()
    if version == "v2":
        return [ColumnFamily("default", reader.schema(), reader.schema())]
    if version != "v3":
        raise CheckpointUnreadable(f"{path}: state schema format {version!r}, which this check does not read")
    families = []
    for _ in range(reader.number(4)):
        name = reader.text()
        reader.number(2)  # the key schema's id
        key = reader.schema()
        reader.number(2)  # the value schema's id
        families.append(ColumnFamily(name, key, reader.schema()))
        reader.schema()  # the key encoder's spec
        reader.schema()  # the user key encoder's schema (map state)
    return families


def operator_schemas(checkpoint: Path, operator_id: int, files: Files = LOCAL) -> list[ColumnFamily] | None:
    """The schemas in force for one operator: its newest v3 file, else its v2 files; None without any."""
    folder = checkpoint / "state" / str(operator_id)
    found = newest_state_metadata_v2(checkpoint, operator_id, files)
    if found is not None:
        newest, metadata = found
        stores = metadata["stateStoreInfo"]
        try:
            properties = json.loads(metadata.get("operatorPropertiesJson") or "{}")
        except ValueError:
            raise CheckpointUnreadable(f"{newest}: not a Spark state metadata file; {RESTORE_OR_RESTART}") from None
        kinds = {v["stateName"]: v["stateVariableType"] for v in properties.get("stateVariables", [])}
        # The file names, found under this checkpoint: it may have been moved since Spark wrote the paths.
        schema_files = [
            folder / "_stateSchema" / store["storeName"] / Path(path).name
            for store in stores
            for path in store.get("stateSchemaFilePaths", [])
        ]
        if schema_files:
            return [
                ColumnFamily(family.name, family.key, family.value, kinds.get(family.name))
                for path in schema_files
                if files.exists(path)
                for family in read_schema_file(path, files)
            ]
    v2_files = _schema_files(folder / "0", files)
    if not v2_files:
        return None
    families = []
    for path in v2_files:
        store = path.parent.parent.name
        families += [
            ColumnFamily(store if store != "0" else "default", f.key, f.value) for f in read_schema_file(path, files)
        ]
    return families


def recorded_encoding(pinned: dict[str, str]) -> str:
    """The state encoding a checkpoint's offsets pin (Spark keeps it for the checkpoint's life)."""
    return pinned.get(ENCODING_CONF, DEFAULT_ENCODING)


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
            f" {self.partitions_new} again; it puts the checkpoint back as it was from the copy and repartitions, or"
            " finishes the repartition where a Delta table already holds its batch (nothing is lost)"
        )


def interrupted(checkpoint: Path, files: Files = LOCAL) -> Interrupted | None:
    """What an unfinished repartition left beside the checkpoint, if anything."""
    working, leftovers = None, []
    for path in files.list(checkpoint.parent):
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
