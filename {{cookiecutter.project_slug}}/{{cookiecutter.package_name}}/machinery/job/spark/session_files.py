"""A checkpoint's files read through the Spark session: where the checkpoint is on the disk of the Spark
that runs the job (a Spark Connect server's), which this machine may not see.

Spark reads any file as bytes with its `binaryFile` source, and lists a folder's files without running a job
(`inputFiles()`: an analysis request on Spark Connect). Its listing leaves out names starting with `.` or `_`
(apart from `_metadata`), so the folders with such a name (`_stateSchema`, `_spark_metadata`) are listed by
their own path, and the checksum files (`.<name>.crc`) are out of reach: the checks of those run only where
the checkpoint is on this machine's disk. A listing is read once per folder and kept: a reader is made for
one check (the guard's at a start), of a checkpoint that no job writes meanwhile; so is a file read.
"""

from __future__ import annotations

import builtins
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING
from urllib.parse import unquote, urlparse

from ...core.checkpoint.file_access import LocationPath
from ...core.checkpoint.files import LOCAL, Files, local_checkpoint
from ...core.checkpoint.object_store import StoreFiles, store_of
from .remote import is_connect

if TYPE_CHECKING:  # Spark is imported only when a command needs it
    from pyspark.sql import SparkSession

# Spark lists these although they start with `_` (HadoopFSUtils.shouldFilterOutPathName).
_LISTED = ("_metadata", "_common_metadata")


def checkpoint_files(spark: SparkSession, location: str) -> Files:
    """The reader of the checkpoint at `location`, chosen by who can see its disk (checkpoint_reader)."""
    return checkpoint_reader(spark, location).files()


@dataclass(frozen=True)
class CheckpointReader:
    """A checkpoint and which reader serves its files, decided once (checkpoint_reader) and passed on, so
    that a start's later reads (the state key record, the stop's last batch) take the same reader."""

    location: str  # as Spark is given it
    local: Path | None  # its folder on this machine's file system (None: another file system)
    through: SparkSession | None  # the session whose Spark reads its files; None: this machine reads them

    @property
    def root(self) -> Path:
        """The checkpoint as a path, as its readers name its files."""
        return self.local or LocationPath(self.location)

    def files(self) -> Files:
        """A reader of its files as they are now (a session's keeps what it listed: one reader per check)."""
        if self.through is not None:
            return SessionFiles(self.through, self.root, self.location)
        return LOCAL if self.local is not None else StoreFiles(self.location)


def reader_here(location: str) -> CheckpointReader | None:
    """The reader of a checkpoint this machine reads itself, with no Spark: on its disk or on an object store
    (core/checkpoint/object_store.py); None for one on another file system."""
    local = local_checkpoint(location)
    return CheckpointReader(location, local, None) if local is not None or store_of(location) else None


def checkpoint_reader(spark: SparkSession, location: str) -> CheckpointReader:
    """The reader of the checkpoint at `location`, chosen by who can see its disk: this machine's files on
    Spark Classic (a local path is this machine's), and on Spark Connect where this machine is shown to see
    the very folder the server does (same_folder); an object store's from here (the AWS variables here reach
    it as the server's do); the session's files otherwise."""
    if store_of(location):
        return CheckpointReader(location, None, None)
    local = local_checkpoint(location)
    if local is not None and not is_connect(spark):
        return CheckpointReader(location, local, None)
    if local is not None and same_folder(local, SessionFiles(spark, local, location)):
        return CheckpointReader(location, local, None)
    return CheckpointReader(location, local, spark)


def same_folder(checkpoint: Path, through_session: Files) -> bool:
    """Whether this machine's `checkpoint` is the folder the session reads: its `metadata` file (the query's
    id, a random UUID) the same both ways, and the same batches committed (a copy of the folder kept here
    would have the id but fall behind). A checkpoint without a `metadata` file yet proves nothing."""
    mine = LOCAL.read(checkpoint / "metadata")
    if mine is None or through_session.read(checkpoint / "metadata") != mine:
        return False
    return _batches(LOCAL, checkpoint) == _batches(through_session, checkpoint)


def _batches(files: Files, checkpoint: Path) -> list[str]:
    return [path.name for path in files.list(checkpoint / "commits") if path.name.isdigit()]


def _hidden(name: str) -> bool:
    return name.startswith(".") or name.startswith("_") and not name.startswith(_LISTED)


def _shown_in(folder: Path, base: Path) -> bool:
    """Whether a listing of `base` shows the files under `folder`: no name on the way is one it leaves out."""
    return (folder == base or base in folder.parents) and not any(map(_hidden, folder.relative_to(base).parts))


class SessionFiles:
    """Files as the session's Spark sees them. `root` is the checkpoint as a path, `location` as Spark is
    given it (a `file:` prefix or another scheme kept): paths under the root are read at the location."""

    def __init__(self, spark: SparkSession, root: Path, location: str) -> None:
        self._spark, self._root, self._location = spark, root, location.rstrip("/")
        self._root_key = PurePosixPath(urlparse(self._location).path or self._location)
        self._listed: dict[Path, set[Path]] = {}  # a listed folder: the files under it
        self._read: dict[Path, bytes | None] = {}  # a file read: its bytes (the parsers read some twice)

    def list(self, folder: Path) -> list[Path]:
        under = self._files_under(folder)
        return sorted({folder / path.relative_to(folder).parts[0] for path in under})

    def read(self, path: Path) -> bytes | None:
        if path not in self._read:
            listed = self._covering(path.parent)
            absent = listed is not None and path not in self._listed[listed]
            self._read[path] = None if absent else self._content(path)
        return self._read[path]

    def exists(self, path: Path) -> bool:
        return any(found == path or path in found.parents for found in self._listing(path))

    def _content(self, path: Path) -> bytes | None:
        """The file's bytes, read by Spark (None where there is no such file: a folder's files are not it)."""
        rows = self._spark_read(self._spark.read.format("binaryFile").load, path, lambda df: df.collect())
        return next((bytes(row.content) for row in rows if self._path(row.path) == path), None)

    def _files_under(self, folder: Path) -> set[Path]:
        return {path for path in self._listing(folder) if folder in path.parents}

    def _listing(self, folder: Path) -> set[Path]:
        """The files of a listing made once that shows those under `folder`: of a folder above it already
        listed, else of the checkpoint's folder it is in (`state`, `commits`: a reader of one lists no
        other), else of the first folder on the way whose name Spark's listing leaves out, else its own."""
        listed = self._covering(folder)
        if listed is None:
            listed = self._listing_base(folder)
            self._listed[listed] = self._list(listed)
        return self._listed[listed]

    def _covering(self, folder: Path) -> Path | None:
        return next((base for base in self._listed if _shown_in(folder, base)), None)

    def _listing_base(self, folder: Path) -> Path:
        if folder == self._root or self._root not in folder.parents:
            return folder
        base = self._root / folder.relative_to(self._root).parts[0]
        if _shown_in(folder, base):
            return base
        for part in folder.relative_to(base).parts:
            base = base / part
            if _hidden(part):
                break
        return base

    def _list(self, folder: Path) -> set[Path]:
        files = self._spark.read.format("binaryFile").option("recursiveFileLookup", "true").load
        return {self._path(uri) for uri in self._spark_read(files, folder, lambda df: df.inputFiles())}

    def _spark_read(self, load, path: Path, answer) -> builtins.list:
        """`answer` of the binaryFile frame of `path` ([] where there is nothing). A folder above the
        checkpoint: only what is named like it (the copies a repartition leaves beside it, interrupted in
        core/checkpoint/files.py), not the other jobs' checkpoints there."""
        from pyspark.errors import AnalysisException

        where = f"{self._uri(path)}/{self._root.name}*" if path in self._root.parents else self._uri(path)
        try:
            return list(answer(load(where)))
        except AnalysisException as error:
            if error.getCondition() == "PATH_NOT_FOUND":
                return []
            raise

    def _uri(self, path: Path) -> str:
        """Where Spark finds `path`: under the checkpoint's location as it was given (a folder above the
        checkpoint at the location's folder as many levels up)."""
        if path == self._root or self._root in path.parents:
            relative = path.relative_to(self._root).as_posix()
            return self._location if relative == "." else f"{self._location}/{relative}"
        if path in self._root.parents:
            return self._location.rsplit("/", len(self._root.relative_to(path).parts))[0]
        return f"file:{path}" if self._location.startswith("file:") else str(path)

    def _path(self, uri: str) -> Path:
        """The path of a file Spark listed, as this reader names it: under the checkpoint, or a folder above
        it, by the same names."""
        found = PurePosixPath(unquote(urlparse(uri).path))
        names, keys = [self._root, *self._root.parents], [self._root_key, *self._root_key.parents]
        for name, key in zip(names, keys, strict=False):
            if found == key or key in found.parents:
                return name / found.relative_to(key)
        return Path(found)


class CheckpointOnServer(Exception):
    """A tool that writes into the checkpoint, on a checkpoint this machine does not see; the message names it."""


def require_this_machines(spark: SparkSession, location: str, tool: str) -> None:
    """CheckpointOnServer unless this machine sees the checkpoint's folder (checkpoint_files): the tools that
    write into it (savepoint, restore, repartition's copy) copy files with this machine's file system, and
    Spark's session reads files but copies none."""
    if is_connect(spark) and checkpoint_files(spark, location) is not LOCAL:
        raise CheckpointOnServer(
            f"{tool}: {location} is on the Spark Connect server's file system, which this machine cannot write (the"
            " session reads files, it copies none); run it where the folder is mounted, without spark.remote;"
            " nothing was changed"
        )
