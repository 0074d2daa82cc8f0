"""Committed output that is gone: found before a start, since Spark does not look.

A restart continues from the checkpoint and never writes a committed batch again, so output deleted
between runs is lost for good; the parquet sink even runs on until its log's next merge needs the
entries that went with it. The file sink keeps a log of every file it committed (`_spark_metadata`),
a Delta table its own; both are read here, without Spark, and compared with the checkpoint.
"""

from __future__ import annotations

import json
from pathlib import Path
from urllib.parse import unquote, urlparse

from ..core.checkpoint.files import last_committed, local_checkpoint
from ..core.checkpoint.sink_log import LOG_DIR
from ..core.settings import Settings

MISSING_SHOWN = 3  # the missing files named in the line, of however many


def lost_output(settings: Settings, checkpoint: Path) -> tuple[list[str], list[str]]:
    """(refusals, notes): committed output that is gone, one line each; a note where it cannot be told."""
    last = last_committed(checkpoint)
    output = None if settings.sink.type == "console" else local_checkpoint(settings.sink.path)
    if last is None or output is None:
        return [], []
    if settings.sink.type == "parquet":
        problem = _file_sink_problem(output, last)
    else:
        problem = _delta_problem(output)
        if problem is None and not (output / "_delta_log").is_dir():
            return [], [
                f"sink.path {output} holds no Delta table, though the checkpoint has committed batches up to {last}:"
                " if no batch had a row yet, nothing is missing; if the table was deleted, the rows of those batches"
                " are gone for good (a restart does not write them again)"
            ]
    if problem is None:
        return [], []
    return [
        f"sink.path {output} has lost committed output: {problem}, while the checkpoint {checkpoint} has committed"
        f" batches up to {last}, which a restart never writes again. Put the output back as it was (a backup, or"
        " where it was moved); or write everything again: set query.checkpoint_location to a new directory and"
        " sink.path to an empty one, and reprocess the input from the start"
    ], []


def _file_sink_problem(output: Path, last_committed: int) -> str | None:
    log = output / LOG_DIR
    if not log.is_dir():
        return f"{LOG_DIR}, the parquet sink's log of the files it committed, is not there"
    batches = sorted(number for number in map(_batch_number, log.iterdir()) if number is not None)
    if not batches or batches[-1] < last_committed:
        ends = f"ends at batch {batches[-1]}" if batches else "is empty"
        return f"its {LOG_DIR} {ends}"
    missing = [path for path in _live_files(log, batches) if not path.exists()]
    return _missing(missing)


def _batch_number(path: Path) -> int | None:
    name = path.name.removesuffix(".compact")
    return int(name) if name.isdigit() else None


def _live_files(log: Path, batches: list[int]) -> list[Path]:
    """The files the log holds as written: from its newest merge file on, adds less deletes."""
    merged = [batch for batch in batches if (log / f"{batch}.compact").is_file()]
    first = merged[-1] if merged else batches[0]
    files: dict[str, Path] = {}
    for batch in (batch for batch in batches if batch >= first):
        entry = log / (f"{batch}.compact" if (log / f"{batch}.compact").is_file() else str(batch))
        for line in entry.read_text(encoding="utf-8", errors="replace").splitlines()[1:]:
            try:
                record = json.loads(line)
            except ValueError:
                continue
            location = urlparse(str(record.get("path", "")))
            if location.scheme not in ("", "file"):
                continue
            if record.get("action") == "delete":
                files.pop(location.path, None)
            else:
                files[location.path] = Path(unquote(location.path))
    return list(files.values())


def _delta_problem(output: Path) -> str | None:
    if not (output / "_delta_log").is_dir():
        return None
    from deltalake import DeltaTable

    paths = [Path(unquote(urlparse(uri).path)) for uri in DeltaTable(str(output)).file_uris()]
    return _missing([path for path in paths if not path.exists()])


def _missing(paths: list[Path]) -> str | None:
    if not paths:
        return None
    named = ", ".join(str(path) for path in paths[:MISSING_SHOWN])
    more = f" and {len(paths) - MISSING_SHOWN} more" if len(paths) > MISSING_SHOWN else ""
    return f"{len(paths)} of the files its log lists as committed are gone ({named}{more})"
