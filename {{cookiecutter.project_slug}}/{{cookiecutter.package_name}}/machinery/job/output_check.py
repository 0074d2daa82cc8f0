"""The output against the checkpoint, found before a start, since Spark does not look.

Committed output that is gone: a restart continues from the checkpoint and never writes a committed
batch again, so output deleted between runs is lost for good; the parquet sink even runs on until its
log's next merge needs the entries that went with it.

Output ahead of the checkpoint: a sink knows a batch by its id alone (the file sink by its log's
entry, a Delta table by the query id and batch id of its transactions), and skips a batch it holds
as written already. A new checkpoint numbers its batches from 0 again, and an older copy of the
checkpoint numbers them from where it stood: against an output that went further, their input would
be skipped, lost without a word.

The file sink keeps a log of every file it committed (`_spark_metadata`), a Delta table its own;
both are read here, without Spark, and compared with the checkpoint.
"""

from __future__ import annotations

import json
from pathlib import Path
from urllib.parse import unquote, urlparse

import pyarrow.parquet as pq
from pyspark.sql.types import StructType

from ..core.checkpoint.files import (
    START_OVER,
    CheckpointRead,
    CheckpointUnreadable,
    check_checksums,
    last_committed,
    local_checkpoint,
    query_id,
)
from ..core.checkpoint.sink_log import LOG_DIR, LOG_VERSION, logged_batches
from ..core.settings import Settings
from .endpoints.sinks import committed_version

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
        f" where it was moved); or write everything again: {START_OVER}"
    ], []


def check_sink_log(settings: Settings) -> None:
    """CheckpointUnreadable naming a parquet sink's log entry that is damaged: one that no longer matches
    its checksum, or, from the newest merge file on (what Spark and every reader of the output read),
    one that does not parse. Spark would go on writing batches, and the output could no longer be read."""
    output = local_checkpoint(settings.sink.path) if settings.sink.type == "parquet" else None
    batches = [] if output is None else logged_batches(output)
    if output is None or not batches:
        return
    log = output / LOG_DIR
    entries = [entry for batch in batches for entry in (log / f"{batch}.compact", log / str(batch)) if entry.is_file()]
    way_on = f"put the output back with its {LOG_DIR} from a copy, or {START_OVER}"
    check_checksums(entries, way_on)
    merged = [entry for entry in entries if entry.name.endswith(".compact")]
    for entry in entries[entries.index(merged[-1]) if merged else 0 :]:
        lines = entry.read_text(encoding="utf-8", errors="replace").splitlines()
        if not lines or lines[0] != LOG_VERSION or not all(_is_entry(line) for line in lines[1:] if line.strip()):
            raise CheckpointUnreadable(
                f"{entry} is not a {LOG_VERSION} entry of the file sink's log (cut short or changed): Spark would"
                f" go on writing batches, and the output could no longer be read; {way_on}"
            )


def _is_entry(line: str) -> bool:
    try:
        return isinstance(json.loads(line).get("path"), str)
    except (ValueError, AttributeError):
        return False


def output_ahead(settings: Settings, held: CheckpointRead) -> list[str]:
    """One line when the output holds batches past the last one the checkpoint logged, which the sink
    would skip as written (see the module's docstring); [] otherwise."""
    output = None if settings.sink.type == "console" else local_checkpoint(settings.sink.path)
    if output is None:
        return []
    last = -1 if held.last_batch is None else held.last_batch
    if settings.sink.type == "parquet":
        batches = logged_batches(output)
        newest, log = (batches[-1] if batches else -1), f"its log {output / LOG_DIR}"
    elif (output / "_delta_log").is_dir() and (held.checkpoint / "metadata").is_file():
        query = query_id(held.checkpoint)
        newest, log = committed_version(str(output), query), f"its Delta log's transactions of query {query}"
    else:
        return []
    if newest <= last:
        return []
    skipped = f"batches {last + 1} to {newest}" if newest > last + 1 else f"batch {newest}"
    where = (
        f"and the checkpoint {held.checkpoint} has logged no batch yet"
        if held.last_batch is None
        else f"past batch {last}, the last the checkpoint {held.checkpoint} logged"
    )
    way_out = (
        "set sink.path to an empty directory too, or set query.checkpoint_location back to the checkpoint that"
        " wrote that output"
        if held.last_batch is None
        else f"put back the checkpoint that wrote that output (a savepoint restores both together), or {START_OVER}"
    )
    return [
        f"sink.path {output} holds the output of batches up to {newest} ({log}), {where}: the sink would take"
        f" this checkpoint's {skipped} as written already and skip them, and their input would be lost."
        f" Nothing was started; {way_out}"
    ]


# Where Spark's parquet writer keeps the rows' Spark schema in each file's footer.
SPARK_ROW_SCHEMA = b"org.apache.spark.sql.parquet.row.metadata"


def output_columns(settings: Settings) -> tuple[str, ...] | None:
    """The columns of the newest data file of a parquet output as "name type" (a reader of the output
    takes one file's columns and types for all), None without one or without Spark's schema in it."""
    output = local_checkpoint(settings.sink.path) if settings.sink.type == "parquet" else None
    batches = [] if output is None else logged_batches(output)
    if output is None or not batches:
        return None
    newest = next((path for path in reversed(_live_files(output / LOG_DIR, batches)) if path.is_file()), None)
    try:
        footer = None if newest is None else pq.read_schema(newest).metadata or {}
        written = None if footer is None or SPARK_ROW_SCHEMA not in footer else json.loads(footer[SPARK_ROW_SCHEMA])
        return None if written is None else columns(StructType.fromJson(written))
    except (
        OSError,
        ValueError,
        KeyError,
        TypeError,
    ):  # a damaged data file (ArrowInvalid is a ValueError): Spark names it
        return None


def columns(schema: StructType) -> tuple[str, ...]:
    return tuple(f"{field.name} {field.dataType.simpleString()}" for field in schema.fields)


def _file_sink_problem(output: Path, last_committed: int) -> str | None:
    log = output / LOG_DIR
    if not log.is_dir():
        return f"{LOG_DIR}, the parquet sink's log of the files it committed, is not there"
    batches = logged_batches(output)
    if not batches or batches[-1] < last_committed:
        ends = f"ends at batch {batches[-1]}" if batches else "is empty"
        return f"its {LOG_DIR} {ends}"
    missing = [path for path in _live_files(log, batches) if not path.exists()]
    return _missing(missing)


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
