"""How the machinery reads a checkpoint's (or an output's) files: the one interface of its readers.

The files are on this machine's disk (LocalFiles), or on the disk of the Spark that runs the job and read
through its session (job/spark/session_files.py: a Spark Connect server's, which this machine may not see). The
parsers (files.py, sink_log.py) read through it, so there is one parser of each file whichever reads it.
"""

from __future__ import annotations

from pathlib import Path, PosixPath
from typing import Protocol


class Files(Protocol):
    """Read access to a checkpoint's files where they are: this machine's disk (LocalFiles), or the disk of
    the Spark that runs the job, through its session (job/spark/session_files.py: a Spark Connect server's). A
    path names a file as the checkpoint's location does. Spark's listing leaves out names that start with
    `.` or `_` (apart from `_metadata`), so a reader reaches those by their full path or not at all: the
    checksum files are checked where they are visible only."""

    def list(self, folder: Path) -> list[Path]:
        """The entries directly in `folder` (files and folders) in name order, [] for none or no folder."""
        ...

    def read(self, path: Path) -> bytes | None:
        """The file's bytes, None where there is no such file."""
        ...

    def exists(self, path: Path) -> bool:
        """Whether `path` is a file, or a folder holding any."""
        ...


# The object stores a location may be on (core/checkpoint/object_store.py reads them), by URI scheme.
STORES = {"s3a": "S3", "gs": "Google Cloud Storage", "abfss": "Azure Data Lake Storage"}


class LocationPath(PosixPath):
    """A file of another file system than this machine's, named by its URI (`s3a://lake/ckpt`): joined,
    listed and compared as any path (its parts: `s3a:`, `lake`, `ckpt`), and shown as the URI again."""

    __slots__ = ()

    def __str__(self) -> str:
        return super().__str__().replace(":/", "://", 1)


def path_scheme(path: Path) -> str:
    """The scheme of a path of another file system (LocationPath's parts: `s3a:` first), "" for a local one."""
    head = path.parts[0] if path.parts else ""
    return head[:-1] if head.endswith(":") and not path.is_absolute() else ""


def local_resolved(path: Path) -> Path:
    """A local path made absolute; another file system's as it is."""
    return path if path_scheme(path) else path.resolve()


class LocalFiles:
    """The files on this machine's disk."""

    def list(self, folder: Path) -> list[Path]:
        return sorted(folder.iterdir()) if folder.is_dir() else []

    def read(self, path: Path) -> bytes | None:
        return path.read_bytes() if path.is_file() else None

    def exists(self, path: Path) -> bool:
        return path.exists()


LOCAL: Files = LocalFiles()


def read_text(files: Files, path: Path, errors: str = "strict") -> str:
    """A file's text (UTF-8); FileNotFoundError where there is none, as a local read gives."""
    data = files.read(path)
    if data is None:
        raise FileNotFoundError(f"no such file: {path}")
    return data.decode("utf-8", errors=errors)
