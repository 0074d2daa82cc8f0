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
from dataclasses import replace
from pathlib import Path

import pyarrow.parquet as pq
from pyspark.sql.types import StructType

from ...core.checkpoint.file_access import LOCAL, Files, LocationPath, local_resolved
from ...core.checkpoint.files import (
    START_OVER,
    CheckpointRead,
    CheckpointUnreadable,
    batch_metadata,
    check_checksums,
    local_checkpoint,
)
from ...core.checkpoint.object_store import StoreFiles, store_of
from ...core.checkpoint.sink_log import (
    DELTA_LOG,
    LOG_DIR,
    LOG_VERSION,
    MISSING_SHOWN,
    SinkLog,
    TableBehind,
    files_gone,
    files_missing,
    read_sink_log,
)
from ...core.settings import Settings
from ..endpoints.delta import columns, committed_version, gone_files, open_table, stream_writers


def output_place(settings: Settings) -> tuple[Path, Files] | None:
    """The output of a sink that writes files and the reader of its files: its folder on this machine's disk,
    or its LocationPath on an object store; None for another sink, or another file system."""
    if not settings.sink.writes_files:
        return None
    if store_of(settings.sink.path):
        return LocationPath(settings.sink.path), StoreFiles(settings.sink.path)
    local = local_checkpoint(settings.sink.path)
    return None if local is None else (local, LOCAL)


def output_folder(settings: Settings) -> Path | None:
    place = output_place(settings)
    return None if place is None else place[0]


def read_output_log(settings: Settings) -> SinkLog | None:
    """The log of a parquet output on this machine's disk or an object store, read once for a start's checks."""
    place = output_place(settings) if settings.sink.type == "parquet" else None
    return None if place is None else read_sink_log(*place)


def with_output(settings: Settings, held: CheckpointRead) -> CheckpointRead:
    """`held` with the parquet output's log beside it, and its columns, or the Delta table's lag, read once."""
    log = read_output_log(settings)
    return replace(held, sink_log=log, output_columns=output_columns(log), table_behind=table_behind(settings, held))


class OutputLost(Exception):
    """Committed output that is gone, found in the query's plan (a Delta table's missing batches that wrote
    rows): the lost-output line."""


def lost_output(settings: Settings, held: CheckpointRead) -> list[str]:
    """Committed output that is gone: one line, with the ways on; [] when it is all there."""
    last = held.last_committed
    place = output_place(settings)
    if last is None or place is None:
        return []
    output = place[0]
    if settings.sink.type == "parquet":
        problem = _file_sink_problem(held.sink_log, last)
    else:
        problem = _delta_problem(place, held.table_behind)
    return [] if problem is None else [lost_output_line(output, held, problem)]


def lost_output_line(output: Path, held: CheckpointRead, problem: str) -> str:
    return (
        f"sink.path {output} has lost committed output: {problem}, while the checkpoint {held.checkpoint} has"
        f" committed batches up to {held.last_committed}, which a restart never writes again. Put the output back"
        f" as it was (a backup, or where it was moved); or write everything again: {START_OVER}"
    )


def table_behind(settings: Settings, held: CheckpointRead) -> TableBehind | None:
    """The Delta table at sink.path against the checkpoint's last commit, None when it holds every committed
    batch of the query (or one more), or is not there (lost_output says so). A batch's watermark is in its
    offsets file (Spark keeps those of the last 100 batches): batches the table lacks that each ran with the
    watermark of the batch before them wrote no row in append mode where the output comes straight from an
    aggregation (sink_log.TableBehind), which check_fit reads in the plan."""
    place = output_place(settings) if settings.sink.type == "delta" else None
    last = held.last_committed
    if place is None or last is None or not place[1].exists(place[0] / DELTA_LOG):
        return None
    output = place[0]
    query = held.query_id or ""  # a committed batch: the checkpoint's metadata names its query
    recorded = committed_version(str(output), query)
    if recorded >= last:
        return None
    marks = {batch: _watermark(held.checkpoint, batch) for batch in range(recorded, last + 1)}
    missing = range(recorded + 1, last + 1)
    moved = tuple(batch for batch in missing if marks[batch] is None or marks[batch] != marks[batch - 1])
    return TableBehind(query, recorded, last, moved, append=settings.sink.output_mode == "append", folder=output)


def _watermark(checkpoint: Path, batch: int) -> int | None:
    """The watermark `batch` ran with, in ms since the epoch (0 before the first batch); None without its offsets."""
    metadata = {} if batch < 0 else batch_metadata(checkpoint, batch)
    return None if metadata is None else int(metadata.get("batchWatermarkMs", 0))


def behind_notes(settings: Settings, held: CheckpointRead) -> list[str]:
    """The line a start prints for a Delta table whose missing batches wrote no row (TableBehind.without_rows)."""
    behind = held.table_behind
    if behind is None or not behind.without_rows:
        return []
    return [
        f"sink.path {settings.sink.path}: {_table_holds(behind)} and the checkpoint {held.checkpoint} committed up to"
        f" {behind.last}: {_batches(behind)} ran with {_watermark_of(behind)}: an aggregation in append mode writes a"
        " row for each window the watermark closes, and this closed none (the deltalake writer of older templates"
        " made no commit for a batch without rows). Nothing is missing where the output comes straight from an"
        " aggregation, which the start reads in the query's plan"
    ]


def refuse_behind_without_aggregation(held: CheckpointRead, output_from: str | None) -> None:
    """OutputLost when the Delta table lacks batches that wrote no row only if the output comes straight from
    an aggregation (behind_notes), and the plan's comes from a node of kind `output_from` (None: from one)."""
    behind = held.table_behind
    if behind is None or not behind.without_rows or output_from is None:
        return
    problem = (
        f"{_table_holds(behind)} (its log's transactions; {_batches(behind)} ran with {_watermark_of(behind)}, which"
        " writes no row only where the output comes straight from an aggregation, and this query's comes from a"
        f" {output_from})"
    )
    raise OutputLost(lost_output_line(behind.folder, held, problem))


def _table_holds(behind: TableBehind) -> str:
    if behind.recorded < 0:
        return f"its Delta table holds none of the batches of query {behind.query}"
    return f"its Delta table holds the batches of query {behind.query} up to {behind.recorded}"


def _batches(behind: TableBehind) -> str:
    first = behind.recorded + 1
    return f"batch {first}" if first == behind.last else f"batches {first} to {behind.last}"


def _named(batches: tuple[int, ...]) -> str:
    if len(batches) == 1:
        return f"batch {batches[0]}"
    more = f" and {len(batches) - MISSING_SHOWN} more" if len(batches) > MISSING_SHOWN else ""
    return f"batches {', '.join(map(str, batches[:MISSING_SHOWN]))}{more}"


def _watermark_of(behind: TableBehind) -> str:
    return f"the watermark of batch {behind.recorded}" if behind.recorded >= 0 else "no watermark yet"


def output_elsewhere(settings: Settings, log: SinkLog | None) -> list[tuple[str, Path]]:
    """A parquet output whose log lists committed files outside sink.path (an output copied with its
    log, whose entries name the files by their full path): Spark reads the output through those paths,
    so the rows there are lost with that folder. (why, the first such folder), or []."""
    if log is None:
        return []
    output = local_resolved(log.folder.parent)
    folders = {local_resolved(path.parent) for path in log.live_files}  # a folder or a few: resolved once each
    elsewhere = sorted(folder for folder in folders if folder != output and output not in folder.parents)
    if not elsewhere:
        return []
    return [
        (
            f"sink.path is {settings.sink.path} in settings, but its log {log.folder} lists committed files in"
            f" {', '.join(map(str, elsewhere))}: Spark reads the output through those paths, and it would be lost"
            " with that folder",
            elsewhere[0],
        )
    ]


def check_sink_log(log: SinkLog | None) -> None:
    """CheckpointUnreadable naming a parquet sink's log entry that is damaged: one that no longer matches
    its checksum, or, from the newest merge file on (what Spark and every reader of the output read),
    one that does not parse. Spark would go on writing batches, and the output could no longer be read."""
    if log is None or not log.batches:
        return
    way_on = f"put the output back with its {LOG_DIR} from a copy, or {START_OVER}"
    check_checksums(log.entries, way_on)
    if log.unreadable is not None:
        raise CheckpointUnreadable(
            f"{log.unreadable} is not a {LOG_VERSION} entry of the file sink's log (cut short or changed): Spark"
            f" would go on writing batches, and the output could no longer be read; {way_on}"
        )


def output_ahead(settings: Settings, held: CheckpointRead) -> list[str]:
    """One line when the output holds batches past the last one the checkpoint logged, which the sink
    would skip as written (see the module's docstring); [] otherwise."""
    place = output_place(settings)
    if place is None:
        return []
    output, files = place
    last = -1 if held.last_batch is None else held.last_batch
    if settings.sink.type == "delta" and held.last_batch is None:
        return _delta_written_by_others(place, held, settings.sink.merges)
    if settings.sink.type == "parquet":
        newest, log = (-1 if held.sink_log is None else held.sink_log.newest), f"its log {output / LOG_DIR}"
    elif files.exists(output / DELTA_LOG) and held.query_id is not None:
        query = held.query_id
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


_BESIDE = "write the input it reads again beside those rows, each result twice (a window's count in two rows)"
_OVER = (
    "MERGE its results over those rows, each key's result replaced by one counted from the input this checkpoint"
    " reads alone"
)


def _delta_written_by_others(place: tuple[Path, Files], held: CheckpointRead, merges: bool) -> list[str]:
    """A new checkpoint, a new query id, against a Delta table other queries wrote: no batch is skipped
    (the table knows batches by query id), but the input read again lands beside its earlier rows, or in
    update mode, MERGEd over them, replaces each key's result with one of this checkpoint's input alone."""
    output = place[0]
    writers = stream_writers(*place)
    if not writers:
        return []
    named = ", ".join(f"query {query} up to batch {batch}" for query, batch in sorted(writers.items()))
    return [
        f"sink.path {output} holds the output of {named} (its Delta log's transactions), and the checkpoint"
        f" {held.checkpoint} has logged no batch yet: its query would {_OVER if merges else _BESIDE}."
        " Nothing was started; set sink.path to an"
        " empty directory too, or set query.checkpoint_location back to the checkpoint that wrote that output"
    ]


# Where Spark's parquet writer keeps the rows' Spark schema in each file's footer.
SPARK_ROW_SCHEMA = b"org.apache.spark.sql.parquet.row.metadata"


def output_columns(log: SinkLog | None) -> tuple[str, ...] | None:
    """The columns of the newest data file of a parquet output as "name type" (a reader of the output
    takes one file's columns and types for all), None without one or without Spark's schema in it."""
    newest = None if log is None else next((path for path in reversed(log.live_files) if log.files.exists(path)), None)
    try:
        footer = None if log is None or newest is None else pq.read_schema(_opened(log, newest)).metadata or {}
        written = None if footer is None or SPARK_ROW_SCHEMA not in footer else json.loads(footer[SPARK_ROW_SCHEMA])
        return None if written is None else columns(StructType.fromJson(written))
    except (
        OSError,
        ValueError,
        KeyError,
        TypeError,
    ):  # a damaged data file (ArrowInvalid is a ValueError): Spark names it
        return None


def _opened(log: SinkLog, path: Path) -> object:
    """A data file of the log's output for pyarrow to read its footer: a local path, or a store's file opened
    for reads by range (the footer alone is fetched)."""
    return log.files.open(path) if isinstance(log.files, StoreFiles) else path


def _file_sink_problem(log: SinkLog | None, last_committed: int) -> str | None:
    if log is None:
        return f"{LOG_DIR}, the parquet sink's log of the files it committed, is not there"
    if log.newest < last_committed:
        ends = f"ends at batch {log.newest}" if log.batches else "is empty"
        return f"its {LOG_DIR} {ends}"
    return files_gone(files_missing(log.live_files, log.files))


def _delta_problem(place: tuple[Path, Files], behind: TableBehind | None) -> str | None:
    """Both Delta writers record every batch of a query in the table's log, an empty one too (its id
    and the query's: job/endpoints/delta.py), so a table missing a batch the checkpoint committed lost
    it, unless the batches it lacks wrote no row (TableBehind.without_rows: the deltalake writer of older
    templates made no commit for such a batch). One batch more than the checkpoint is a crash between the
    table's commit and Spark's: fine."""
    output, files = place
    if not files.exists(output / DELTA_LOG):
        return f"it holds no Delta table (no {DELTA_LOG})"
    if behind is not None and not behind.without_rows:
        why = (
            f"; of the batches after it, {_named(behind.moved)} may have written rows: an aggregation in append mode"
            " writes the windows a moved watermark closes"
            if behind.append
            else ""
        )
        return f"{_table_holds(behind)} (its log's transactions{why})"
    table = open_table(str(output))
    return files_gone(gone_files([] if table is None else table.file_uris()))
