"""Savepoints: a stopped job's checkpoint and output, taken whole at a committed batch, put back anywhere.

A savepoint is one folder: `checkpoint/` (the checkpoint without its lock file), `output/` (the sink's
folder whole: the parquet sink's log and the data files it lists, or the Delta table; none for the
console sink) and `manifest.json`: the batch, the query id, the pinned confs, the inputs, the rows of
every operator and store as Spark's state reader reads them, and every file's size and SHA-256. The
data files are in it because a restored output must read back whole, and the log names them.

`restore` copies it into new locations (each made whole under a temporary name, then renamed) and
moves the absolute paths Spark wrote (path_records) to them; `verify` compares a savepoint, or a
restored checkpoint and output, with the manifest. The landing folders are the user's input, not the
job's: a savepoint does not copy them, and `restore --landing` only rewrites where the checkpoint says
the files it has read are.

The job's folders may be on an object store (s3a://): create copies them down into the savepoint (a folder
on this machine's disk), and restore makes and checks the copy here first (`staged`), then uploads it,
the checkpoint's logs last: until they are there, the store holds no checkpoint to start from.
"""

from __future__ import annotations

import hashlib
import json
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..core.checkpoint import path_records
from ..core.checkpoint.copying import made_whole
from ..core.checkpoint.file_access import LOCAL, Files, LocationPath, path_scheme
from ..core.checkpoint.files import (
    LANDING_FLAGS,
    held_format_version,
    interrupted,
    latest_offsets,
    local_checkpoint,
    query_id,
    read_checkpoint,
)
from ..core.checkpoint.lease import LEASE_OBJECT
from ..core.checkpoint.object_store import StoreFiles, store_of
from ..core.checkpoint.run_lock import LOCK_FILE, holder
from ..core.checkpoint.sink_log import DELTA_LOG, LOG_DIR
from ..core.confs import INTEGRITY_CONFS
from ..core.contract import PACKAGE
from ..core.settings import Settings
from ..job.guard.output_check import lost_output, with_output
from .inspection import checkpoint_facts, inspect_checkpoint

if TYPE_CHECKING:  # Spark is imported only when the checks pass
    from pyspark.sql import SparkSession

MANIFEST = "manifest.json"
CHECKPOINT, OUTPUT = "checkpoint", "output"  # the savepoint's folders, and the manifest's names for them
FORMAT = 1
TAKE_A_NEW_ONE = "take a new savepoint from the stopped job, or use another copy of this one"


class SavepointRefused(Exception):
    """A check failed before anything was written; the message says why and the way on."""


class SavepointMismatch(Exception):
    """A savepoint or a restored copy differs from the manifest; the message names the first difference."""


# A checkpoint's files that say there is one (its query id and logs): uploaded to a store last.
CHECKPOINT_LAST = ("metadata", "offsets", "commits")
OUTPUT_LAST = (LOG_DIR, DELTA_LOG)


def place_of(location: str) -> Path | None:
    """A job's folder as a savepoint names it: absolute on this machine's disk, or its LocationPath on an
    object store; None on another file system."""
    if store_of(location):
        return LocationPath(location)
    local = local_checkpoint(location)
    return None if local is None else local.expanduser().absolute()


def files_of(folder: Path) -> Files:
    """The reader of a folder's files: an object store's for a LocationPath, else this machine's disk."""
    return StoreFiles(str(folder)) if path_scheme(folder) else LOCAL


@dataclass(frozen=True)
class Origin:
    """What a savepoint is taken of: checked, nothing written yet."""

    checkpoint: Path
    output: Path | None
    batch: int
    settings: Settings


def plan_create(settings: Settings, target: Path) -> Origin:
    """Every check that needs no Spark: a checkpoint here or on an object store, nobody on it, its last batch
    committed, its committed output all there, an empty target. Reads only."""
    location = settings.query.checkpoint_location
    checkpoint = place_of(location)
    if checkpoint is None:
        raise SavepointRefused(
            f"{location} is neither on the local file system nor on an object store: a savepoint copies and checks"
            " the checkpoint here; take it where the checkpoint is mounted locally (with the job stopped)"
        )
    files = files_of(checkpoint)
    unfinished = interrupted(checkpoint, files)
    if unfinished is not None:
        raise SavepointRefused(unfinished.message())
    if not files.exists(checkpoint / "offsets"):
        raise SavepointRefused(f"no checkpoint at {checkpoint} (no offsets folder): there is nothing to save yet")
    held = read_checkpoint(checkpoint, files)
    running = None if files is not LOCAL else holder(checkpoint)  # a store's lease: the create takes it
    if running is not None:
        raise SavepointRefused(
            f"{checkpoint} is in use by {running}: stop the job first (it lands on a batch boundary), then take"
            " the savepoint; a copy taken under a running job can hold half a batch"
        )
    batch = held.last_committed
    if batch is None or held.last_batch is None:
        raise SavepointRefused(f"{checkpoint} has no committed batch yet: there is no state to save")
    if held.last_batch != batch:
        raise SavepointRefused(
            f"batch {held.last_batch} of {checkpoint} is logged but not committed (the job was stopped in the middle of"
            f" it): a savepoint holds committed batches only. Start the job and let it commit (python main.py"
            f" --max-batches 1 runs that batch and stops), or, on RocksDB, python -m {PACKAGE} repartition"
            " --finish-last-batch; then take the savepoint"
        )
    lost = lost_output(settings, with_output(settings, held))
    if lost:
        raise SavepointRefused(lost[0])
    output = None
    if settings.sink.writes_files:
        output = place_of(settings.sink.path)
        if output is None:
            raise SavepointRefused(
                f"sink.path {settings.sink.path} is neither on the local file system nor on an object store: a"
                " savepoint copies the output with the checkpoint; take it where the output is mounted locally"
            )
    refuse_filled(target, "the savepoint")
    for folder in (checkpoint, output):
        if folder is not None and (target.is_relative_to(folder) or folder.is_relative_to(target)):
            raise SavepointRefused(f"{target} overlaps {folder}: give a savepoint folder outside the job's folders")
    return Origin(checkpoint, output, batch, settings)


def refuse_filled(target: Path, what: str) -> None:
    if target.is_file() or (target.is_dir() and any(target.iterdir())):
        raise SavepointRefused(f"{target} is not an empty folder: give a new or empty one for {what}")


def create(spark_session, origin: Origin, target: Path) -> dict[str, Any]:
    """Copy the checkpoint and the output into target, read its state, write the manifest; whole or nothing.
    `spark_session()` starts the session that reads the state (not started for a query without state)."""
    with made_whole(target) as partial:
        partial.mkdir(parents=True)
        _copy_here(origin.checkpoint, partial / CHECKPOINT, leave_out=(LOCK_FILE, LEASE_OBJECT))
        if origin.output is not None:
            _copy_here(origin.output, partial / OUTPUT)
        state = read_state(spark_session, partial / CHECKPOINT, origin.batch)
        manifest = _manifest(origin, partial, state)
        (partial / MANIFEST).write_text(json.dumps(manifest, indent=2) + "\n")
    return manifest


def staged_here(places: dict[str, Path], staging: Path) -> dict[str, Path]:
    """The folders as this machine reads them: those on an object store copied into `staging`, the rest
    where they are."""
    copies = {}
    for part, place in places.items():
        copies[part] = staging / part if path_scheme(place) else place
        if path_scheme(place):
            _copy_here(place, copies[part])
    return copies


def _copy_here(folder: Path, into: Path, leave_out: tuple[str, ...] = ()) -> None:
    """A job's folder copied whole into a new local folder, but its top-level names `leave_out`."""
    if path_scheme(folder):
        StoreFiles(str(folder)).download(folder, into, leave_out)
        return
    top = str(folder)
    shutil.copytree(folder, into, symlinks=True, ignore=lambda at, names: set(leave_out) if at == top else set())


def _manifest(origin: Origin, folder: Path, state: list[dict[str, Any]]) -> dict[str, Any]:
    from pyspark import __version__ as spark_version

    checkpoint = folder / CHECKPOINT
    settings = origin.settings
    latest = latest_offsets(checkpoint)
    inputs = {}
    for section, source in settings.inputs.items():
        landing = str(place_of(source.files.path) or source.files.path) if source.type == "files" else None
        inputs[section] = {"type": source.type, "path": landing}
    return {
        "format": FORMAT,
        "batch": origin.batch,
        "query_id": query_id(checkpoint),
        "pyspark": spark_version,
        "pinned_confs": latest[1] if latest else {},
        "locations": {
            CHECKPOINT: str(origin.checkpoint),
            OUTPUT: None if origin.output is None else str(origin.output),
        },
        "sink": settings.sink.type,
        "inputs": inputs,
        "state": state,
        "files": file_sums(folder),
    }


def file_sums(folder: Path) -> dict[str, dict[str, Any]]:
    """Size and SHA-256 of every file of the savepoint (but the manifest), and for a file holding absolute
    paths the SHA-256 without their folders, which stays equal when a restore moves them."""
    holding_paths = {path for part in (CHECKPOINT, OUTPUT) for path in path_records.uris_in(folder / part)}
    sums = {}
    for path in sorted(folder.rglob("*")):
        if not path.is_file() or path.parent == folder:
            continue
        entry: dict[str, Any] = {"bytes": path.stat().st_size, "sha256": _sha256(path)}
        if path in holding_paths:
            entry["sha256_without_folders"] = path_records.without_folders(path)
        sums[path.relative_to(folder).as_posix()] = entry
    return sums


def read_state(spark_session, checkpoint: Path, batch: int) -> list[dict[str, Any]]:
    """Rows of every operator and store as of batch, by Spark's state reader; [] for a query without state."""
    if not (checkpoint / "state").is_dir():
        return []
    spark: SparkSession = spark_session()
    # A reader set to format version 1 fails on version 2's file names.
    spark.conf.set(INTEGRITY_CONFS["checkpoint_format_version"], str(held_format_version(checkpoint, batch) or 1))
    inspection = inspect_checkpoint(spark, str(checkpoint), checkpoint_facts(str(checkpoint), batch), batch)
    return [
        {"operator_id": operator.operator_id, "operator": operator.operator, "store": store.store, "rows": store.rows}
        for operator in inspection.operators
        for store in operator.stores
    ]


def read_manifest(savepoint: Path) -> dict[str, Any]:
    path = savepoint / MANIFEST
    try:
        manifest = json.loads(path.read_text(encoding="utf-8"))
        manifest["batch"], manifest["files"], manifest["locations"][CHECKPOINT]  # noqa: B018 (the keys it needs)
    except FileNotFoundError:
        raise SavepointRefused(
            f"{savepoint} is not a savepoint (no {MANIFEST}): give the folder savepoint create wrote"
        ) from None
    except (ValueError, KeyError, TypeError, UnicodeDecodeError):
        raise SavepointMismatch(f"{path} is not a savepoint manifest (damaged?): {TAKE_A_NEW_ONE}") from None
    if manifest.get("format") != FORMAT:
        raise SavepointRefused(
            f"{path}: savepoint format {manifest.get('format')} is not {FORMAT}, which this version reads"
        )
    return dict(manifest)


def check_files(savepoint: Path, manifest: dict[str, Any]) -> None:
    """Every file of the manifest in the savepoint, byte for byte, and no other."""
    extra = _file_not_listed(manifest, {part: savepoint / part for part in (CHECKPOINT, OUTPUT)})
    if extra is not None:
        raise SavepointMismatch(f"{extra} is not in the savepoint's manifest (added after it was taken): remove it")
    for name, entry in manifest["files"].items():
        path = savepoint / name
        if not path.is_file():
            raise SavepointMismatch(f"{path} is missing from the savepoint (the manifest lists it): {TAKE_A_NEW_ONE}")
        if path.stat().st_size != entry["bytes"] or _sha256(path) != entry["sha256"]:
            raise SavepointMismatch(
                f"{path} differs from the manifest ({entry['bytes']:,} bytes, SHA-256 {entry['sha256'][:12]}...): the"
                f" savepoint is damaged; {TAKE_A_NEW_ONE}"
            )


def check_restored(manifest: dict[str, Any], copies: dict[str, Path], places: dict[str, Path] | None = None) -> None:
    """A restored checkpoint (and output) against the manifest: every file there, the same bytes, or, for a
    file holding absolute paths, the same lines with none left pointing at the savepoint's old places. The
    copies are on this machine's disk; `places`, where they are copies of folders elsewhere (on an object
    store, which keeps no Hadoop checksums: those are not looked for there)."""
    places = places or copies
    old = [named(folder) for part, folder in manifest["locations"].items() if folder is not None and part in copies]
    extra = _file_not_listed(manifest, copies)
    if extra is not None:
        raise SavepointMismatch(f"{extra} is not in the savepoint's manifest: the savepoint never held it")
    for name, entry in manifest["files"].items():
        part, _, rest = name.partition("/")
        if part not in copies or (name.endswith(".crc") and path_scheme(places[part])):
            continue
        path = copies[part] / rest
        if not path.is_file():
            raise SavepointMismatch(f"{path} is missing (the savepoint's manifest lists {name})")
        if "sha256_without_folders" not in entry:
            if _sha256(path) != entry["sha256"] and not _rewritten_checksum(path):
                raise SavepointMismatch(
                    f"{path} differs from {name} of the savepoint (SHA-256 {entry['sha256'][:12]}...)"
                )
            continue
        if path_records.without_folders(path) != entry["sha256_without_folders"]:
            raise SavepointMismatch(f"{path} holds other entries than {name} of the savepoint")
        left = [folder for folder in old if folder not in places.values()]
        stale = [uri for uri in path_records.uris_in_file(path) if path_records.is_under(uri, left)]
        if stale:
            raise SavepointMismatch(f"{path} still points at the savepoint's old location: {stale[0]}")


def _file_not_listed(manifest: dict[str, Any], folders: dict[str, Path]) -> Path | None:
    """The first file under the folders (by their part of the savepoint) that the manifest does not list:
    a stray data file in an output is read as output (a plain parquet reader counts its rows twice)."""
    for part, folder in folders.items():
        for path in sorted(folder.rglob("*")) if folder.is_dir() else ():
            if path.is_file() and f"{part}/{path.relative_to(folder).as_posix()}" not in manifest["files"]:
                return path
    return None


def _rewritten_checksum(path: Path) -> bool:
    """A `.crc` beside a file whose paths a restore moved: it matches that file's bytes now."""
    target = path.with_name(path.name.removeprefix(".").removesuffix(".crc"))
    return (
        path.name.endswith(".crc")
        and target.is_file()
        and path.read_bytes() == path_records.hadoop_crc(target.read_bytes())
    )


def compare_state(manifest: dict[str, Any], state: list[dict[str, Any]], where: Path) -> None:
    rows = {(s["operator_id"], s["store"]): s["rows"] for s in manifest["state"]}
    now = {(s["operator_id"], s["store"]): s["rows"] for s in state}
    for operator_id, store in sorted(rows.keys() | now.keys()):
        before, after = rows.get((operator_id, store)), now.get((operator_id, store))
        if before != after:
            raise SavepointMismatch(
                f"operator {operator_id} store {store}: {before} rows in the savepoint's manifest, {after} in {where}"
                f" (Spark's state reader, batch {manifest['batch']})"
            )


@dataclass(frozen=True)
class Targets:
    checkpoint: Path
    output: Path | None
    landing: dict[str, Path]  # settings section -> its new landing folder

    def moves(self, manifest: dict[str, Any]) -> path_records.Moves:
        locations = manifest["locations"]
        moves = [(named(locations[CHECKPOINT]), self.checkpoint)]
        if self.output is not None:
            moves.append((named(locations[OUTPUT]), self.output))
        moves += [(named(manifest["inputs"][section]["path"]), new) for section, new in self.landing.items()]
        return moves

    def staged(self, staging: Path) -> Targets:
        """The targets with each on an object store replaced by a local folder under `staging`, where the
        restore makes and checks its copy before the upload (publish)."""
        here = {
            part: staging / part if folder is not None and path_scheme(folder) else folder
            for part, folder in ((CHECKPOINT, self.checkpoint), (OUTPUT, self.output))
        }
        return Targets(here[CHECKPOINT] or self.checkpoint, here[OUTPUT], self.landing)

    @property
    def places(self) -> dict[str, Path]:
        """The targets by the savepoint's part they take."""
        return {CHECKPOINT: self.checkpoint, **({OUTPUT: self.output} if self.output is not None else {})}


def named(location: str) -> Path:
    """A location a manifest holds as a path: a LocationPath on an object store."""
    return LocationPath(location) if store_of(location) else Path(location)


def plan_restore(savepoint: Path, manifest: dict[str, Any], targets: Targets) -> None:
    """The targets checked against the savepoint: what it holds is given a place, each place empty."""
    has_output = manifest["locations"][OUTPUT] is not None
    if has_output and targets.output is None:
        raise SavepointRefused(f"{savepoint} holds the {manifest['sink']} sink's output: give --output, its new folder")
    if not has_output and targets.output is not None:
        raise SavepointRefused(
            f"{savepoint} holds no output (the {manifest['sink']} sink wrote none): leave out --output"
        )
    for section, folder in targets.landing.items():
        source = manifest["inputs"].get(section)
        if source is None or source["type"] != "files":
            kind = "no such input" if source is None else f"a {source['type']} source"
            raise SavepointRefused(
                f"{LANDING_FLAGS[section]}: {section} of the saved job is {kind}; only a files source has a landing"
                " folder"
            )
        if not files_of(folder).exists(folder):
            raise SavepointRefused(f"landing folder {folder} does not exist: move the input files there first")
    for place in targets.places.values():
        if place.is_relative_to(savepoint) or savepoint.is_relative_to(place):
            raise SavepointRefused(f"{place} overlaps the savepoint {savepoint}: restore into a folder outside it")
        if path_scheme(place):
            if StoreFiles(str(place)).sizes(place):
                raise SavepointRefused(f"{place} is not empty: give a new folder for the restore")
            continue
        held_by = next((folder for folder in place.parents if _job_folder(folder)), None)
        if held_by is not None:
            raise SavepointRefused(
                f"{place} is inside {held_by}, {_job_folder(held_by)}: restore into a folder of its own, outside"
                " any job's checkpoint or output"
            )
        refuse_filled(place, "the restore")
    if targets.output is not None and (
        targets.output.is_relative_to(targets.checkpoint) or targets.checkpoint.is_relative_to(targets.output)
    ):
        raise SavepointRefused(
            f"--checkpoint {targets.checkpoint} and --output {targets.output} overlap: give two separate folders"
        )


def _job_folder(folder: Path) -> str | None:
    """What a folder is to a job: a checkpoint (its offsets log), an output (a sink's log), or None."""
    if (folder / "offsets").is_dir() and ((folder / "commits").is_dir() or (folder / "metadata").is_file()):
        return "a checkpoint"
    if (folder / LOG_DIR).is_dir() or (folder / DELTA_LOG).is_dir():
        return "a sink's output"
    return None


def restore(savepoint: Path, manifest: dict[str, Any], targets: Targets, here: Targets) -> list[Path]:
    """Copy the savepoint's folders to the local folders `here` (the targets, or their stand-ins for those on
    an object store: Targets.staged) and move the absolute paths in them to the targets; the files rewritten.
    The output is made first and the checkpoint last: a checkpoint in place means its output is too."""
    moves = targets.moves(manifest)
    rewritten = []
    for part, target in ((OUTPUT, here.output), (CHECKPOINT, here.checkpoint)):
        if target is None:
            continue
        if target.is_dir():
            try:
                target.rmdir()  # empty (checked): the copy takes its place
            except OSError as error:  # a mount point, say: the copy cannot be renamed onto it
                raise SavepointRefused(
                    f"{target} cannot be replaced ({error.strerror}; a mount point?): give a new folder inside it"
                ) from None
        with made_whole(target) as partial:
            shutil.copytree(savepoint / part, partial, symlinks=True)
            for path in path_records.uris_in(partial):
                if path_records.rewrite(path, moves):
                    rewritten.append(target / path.relative_to(partial))
    return rewritten


def publish(here: Targets, targets: Targets) -> None:
    """Upload the restored copies made here for the targets on an object store (the output first, the
    checkpoint's logs last), and check that the store holds each file, at its size; SavepointMismatch if not."""
    for copy, target, last in (
        (here.output, targets.output, OUTPUT_LAST),
        (here.checkpoint, targets.checkpoint, CHECKPOINT_LAST),
    ):
        if copy is None or target is None or copy == target:
            continue
        store = StoreFiles(str(target))
        made = {name: (copy / name).stat().st_size for name in store.upload(copy, target, last)}
        held = store.sizes(target)
        missing = sorted(name for name in made if held.get(name) != made[name])
        if missing:
            raise SavepointMismatch(f"{target / missing[0]} was not uploaded whole ({made[missing[0]]:,} bytes)")


def undo_restore(targets: Targets) -> None:
    """Remove what restore made (its targets were empty or absent before)."""
    for target in (targets.checkpoint, targets.output):
        if target is not None and path_scheme(target):
            StoreFiles(str(target)).remove(target)
        elif target is not None:
            shutil.rmtree(target, ignore_errors=True)


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as stream:
        for block in iter(lambda: stream.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()
