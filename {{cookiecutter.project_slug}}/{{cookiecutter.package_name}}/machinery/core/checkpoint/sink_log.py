"""The parquet sink's batch log (`<output>/_spark_metadata`): its one reader, and the one batch Spark does not write.

Spark's file sink records the files of every batch in `_spark_metadata/<batch>` and, every
`compactInterval` batches, merges the entries since the last merge into `<batch>.compact`. The merge
reads every batch in between and fails on a missing one (BATCH_METADATA_NOT_FOUND). Spark's offline
repartitioning adds a batch that runs no query, so the sink never writes its entry and the job breaks
at its next merge (seen on Spark 4.2.1 at batch 9). `record_empty_batch` writes what the sink writes
for a batch without files: the header alone, or, on a merge batch, the merged entries.

`read_sink_log` reads the log once for the checks of a start (job/guard/output_check.py): the batches it
holds, their entry files, and, from the newest merge file on (what Spark and every reader of the
output read), the data files it holds as written, or the first entry that does not parse.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from urllib.parse import unquote, urlparse

from .copying import write_atomically
from .file_access import LOCAL, Files, LocationPath, path_scheme, read_text
from .path_records import json_line

LOG_DIR = "_spark_metadata"
DELTA_LOG = "_delta_log"  # a Delta table's log, which both Delta writers keep (job/endpoints/sinks.py)
LOG_VERSION = "v1"
MISSING_SHOWN = 3  # the missing files (or batches) named in a line, of however many
COMPACT_INTERVAL_CONF = "spark.sql.streaming.fileSink.log.compactInterval"
DEFAULT_COMPACT_INTERVAL = 10


def record_empty_batch(output: Path, batch: int, configured_interval: int = DEFAULT_COMPACT_INTERVAL) -> Path | None:
    """Write the sink's entry for `batch` with no files; None when the output has no log or has the entry."""
    log = output / LOG_DIR
    if not log.is_dir() or _entry(log, batch) is not None:
        return None
    interval = compact_interval(log, configured_interval)
    if (batch + 1) % interval == 0:
        lines = [line for earlier in range(max(0, batch - interval), batch) for line in _entries(log, earlier)]
        target = log / f"{batch}.compact"
    else:
        lines, target = [], log / str(batch)
    write_atomically(target, "\n".join([LOG_VERSION, *lines]).encode())
    return target


def files_gone(paths: list[Path]) -> str | None:
    """The phrase naming committed data files that are gone (None: none is)."""
    if not paths:
        return None
    named = ", ".join(str(path) for path in paths[:MISSING_SHOWN])
    more = f" and {len(paths) - MISSING_SHOWN} more" if len(paths) > MISSING_SHOWN else ""
    return f"{len(paths)} of the files its log lists as committed are gone ({named}{more})"


def logged_batches(output: Path, files: Files = LOCAL) -> list[int]:
    """The batches the sink's log holds an entry for (a batch or a merge file), in order; [] without a log."""
    names = (path.name.removesuffix(".compact") for path in files.list(output / LOG_DIR))
    return sorted(int(name) for name in names if name.isdigit())


def files_missing(paths: list[Path], files: Files = LOCAL) -> list[Path]:
    """The paths that are not there, each folder listed once (one request a folder on an object store)."""
    present: dict[Path, set[Path]] = {}
    for folder in dict.fromkeys(path.parent for path in paths):
        present[folder] = set(files.list(folder))
    return [path for path in paths if path not in present[path.parent]]


@dataclass(frozen=True)
class TableBehind:
    """A Delta table that holds fewer of the query's batches than the checkpoint committed (job/guard/output_check.py):
    the query, the last batch the table holds (-1: none), the checkpoint's last commit, and which batches
    between ran with a watermark moved on from the batch before's (or whose offsets file is gone). In append
    mode an aggregation writes the windows the watermark closes, so a batch whose watermark stayed wrote no
    row, and a table without it misses nothing: the deltalake writer of older templates made no commit for
    such a batch."""

    query: str
    recorded: int
    last: int
    moved: tuple[int, ...]
    append: bool
    folder: Path  # the table's, on this machine's file system

    @property
    def without_rows(self) -> bool:
        """Every batch the table lacks wrote no row, where the output comes straight from an aggregation."""
        return self.append and not self.moved


@dataclass(frozen=True)
class SinkLog:
    """A parquet output's log as read: the batches it holds, each one's entry (its merge file where it has
    one), the data files it holds as written (adds less deletes) on the output's file system, the first
    entry from the newest merge file on that is not a log entry (None when all are), and the reader of
    its files (this machine's disk, an object store's)."""

    folder: Path
    batches: list[int]
    entries: list[Path]
    live_files: list[Path]
    unreadable: Path | None
    files: Files = LOCAL

    @property
    def newest(self) -> int:
        return self.batches[-1] if self.batches else -1


def read_sink_log(output: Path, files: Files = LOCAL) -> SinkLog | None:
    """The log of the output at `output` (a local folder, or the LocationPath of one on an object store, read
    through `files`), None without one."""
    log = output / LOG_DIR
    listed = files.list(log)
    if not listed:
        return None
    batches = logged_batches(output, files)
    entries = [
        log / f"{batch}.compact" if log / f"{batch}.compact" in listed else log / str(batch) for batch in batches
    ]
    merged = [index for index, entry in enumerate(entries) if entry.name.endswith(".compact")]
    scheme = path_scheme(output)
    data: dict[str, Path] = {}
    for entry in entries[merged[-1] if merged else 0 :]:
        lines = read_text(files, entry, errors="replace").splitlines()
        parsed = [_record(line) for line in lines[1:] if line.strip()]
        records = [record for record in parsed if record is not None]
        if not lines or lines[0] != LOG_VERSION or len(records) < len(parsed):
            return SinkLog(log, batches, entries, list(data.values()), entry, files)
        for record in records:
            location = urlparse(record["path"])
            if location.scheme not in ((scheme,) if scheme else ("", "file")):
                continue  # another file system's: not read from here
            named = unquote(location.path)
            if record.get("action") == "delete":
                data.pop(named, None)
            else:
                data[named] = LocationPath(f"{scheme}://{location.netloc}{named}") if scheme else Path(named)
    return SinkLog(log, batches, entries, list(data.values()), None, files)


def _record(line: str) -> dict | None:
    record = json_line(line)
    return record if isinstance(record, dict) and isinstance(record.get("path"), str) else None


def remove_entries_after(output: Path, batch: int) -> list[Path]:
    """Remove the log's entries (and checksums) of batches after `batch`: those of a batch that the
    checkpoint no longer holds, such as the one a repartition that was rolled back added."""
    log = output / LOG_DIR
    if not log.is_dir():
        return []
    removed = []
    for path in sorted(log.iterdir()):
        name = path.name.removeprefix(".").removesuffix(".crc").removesuffix(".compact")
        if name.isdigit() and int(name) > batch:
            path.unlink()
            removed.append(path)
    return [path for path in removed if not path.name.startswith(".")]


def compact_interval(log: Path, configured: int) -> int:
    """The interval Spark's sink uses for this log: the configured one, adjusted to the newest merge file
    the way Spark does it (CompactibleFileStreamLog.deriveCompactInterval)."""
    merged = [int(path.name.removesuffix(".compact")) for path in log.glob("*.compact") if path.name[0].isdigit()]
    if not merged:
        return configured
    size = max(merged) + 1
    if size <= configured:
        return size
    if configured < size // 2:  # the smallest divisor of size from the configured interval on
        return next((divisor for divisor in range(configured, size // 2 + 1) if size % divisor == 0), size)
    return size


def _entry(log: Path, batch: int) -> Path | None:
    for name in (str(batch), f"{batch}.compact"):
        if (log / name).is_file():
            return log / name
    return None


def _entries(log: Path, batch: int) -> list[str]:
    entry = _entry(log, batch)
    if entry is None:
        raise FileNotFoundError(f"{log} has no entry for batch {batch}: the sink's log is incomplete")
    lines = entry.read_text().splitlines()
    if not lines or lines[0] != LOG_VERSION:
        raise ValueError(f"{entry} is not a {LOG_VERSION} file sink log entry")
    return [line for line in lines[1:] if line.strip()]
