"""Whether the checkpoint's state fits the query about to run, read from the query's plan before a
start (and by `check`). The first misfit is refused in one line with the way out; the checkpoint is
left as it was.

- The stateful operators. Spark records each one in `state/<operator id>/_metadata` (its name and
  its stores). A query whose operators are the same, in the same order, restarts on that state; one
  with an operator added, removed or swapped would read another operator's state, or none.
- The query against sink.output_mode, by Spark's own checks (query_plan.refuse_what_spark_refuses),
  so that `check` refuses what a start would, before any file is written.
- The columns that key each operator's state. Spark checks a restarted query's state schema by
  column types only. Grouping by another column of the same type (say `event_id` instead of `key`,
  both strings) passes that check, and the old state is read back under the new key: wrong counts,
  silently (seen on Spark 4.2.1). So the first run records each operator's key in `state_key/` in the
  checkpoint directory, and every later start compares the query's key with that record.
- The window each windowed aggregation's state holds, recorded beside the key: with another window
  length, Spark would go on adding to the windows of the old length beside the new ones, and the
  output would hold overlapping windows, one key's events split between them.
- The output mode the state's results are written in (sink.output_mode), recorded beside them too: Spark
  records none, and the guard (guard/checkpoint.output_mode_drifts) compares it before a start.
- custom_state's state schemas (schema_evolution.py).
- The columns of a parquet output it writes on (the guard reads them beside the checkpoint): a reader
  takes one file's columns for all, so a renamed column would read NULL in every earlier row.
- A Delta table that lacks committed batches which ran without a moved watermark (the guard lets it pass,
  job/guard/output_check.py): they wrote no row only where the output comes straight from an aggregation.
"""

from __future__ import annotations

import json
import re
import uuid
from collections import Counter
from collections.abc import Sequence

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from ...core import real_time
from ...core.checkpoint.file_access import LocationPath
from ...core.checkpoint.files import LOCAL, START_OVER, CheckpointRead, CheckpointUnreadable, Files, local_checkpoint
from ...core.operators import BY_SPARK_NAME
from ...core.plan_operators import OTHER_STATEFUL, PlanOperator, chain, flow_order
from ...core.settings import Settings, SettingsError
from ..plan.merge_key import from_aggregation, output_source
from ..plan.plan_source import analyzed_plan, split_top
from ..plan.query_plan import fit_problems, read_plan, refuse_python, refuse_what_spark_refuses
from ..spark.session_files import CheckpointReader, checkpoint_files
from .output_check import columns, refuse_behind_without_aggregation
from .schema_evolution import StateSchemaRefused, state_schema_drift
from .streams_fit import check_streams

RECORD_FOLDER = "state_key"  # the record: one text file per version, each a JSON line Spark wrote
RECORD_NAME = "state_key.json"  # the record of older templates (a file of one version), still read

_BY_SPARK_NAME = BY_SPARK_NAME | {spark: node for node, spark in OTHER_STATEFUL.items()}


class OperatorsChanged(Exception):
    """The query's stateful operators are not those whose state the checkpoint holds."""


def operators_drift(plan: Sequence[PlanOperator], held: CheckpointRead | None, checkpoint: str) -> str | None:
    """One line when the plan's operators differ by kind or order from those the checkpoint at
    `checkpoint` holds state for (held; None when it is not on the local file system), else None."""
    if held is None:
        return None
    if held.stateless and plan:
        return (
            f"the checkpoint {checkpoint} holds no state: its query ran no stateful operator, and the query now runs"
            f" {chain([operator.kind for operator in flow_order(plan)])}. Spark would find no state for them and fail"
            f" at the first batch. Either change the query back, or {START_OVER}."
        )
    # Spark checks the names it wrote into the state metadata against the plan's, by operator id.
    # (real-time mode writes another name for the same state: the one micro-batch mode writes stands for it)
    names = [real_time.STATE_NAMES.get(info["operatorName"], info["operatorName"]) for info in held.operators]
    if names == [operator.spark_name for operator in plan]:
        return None
    recorded = [_BY_SPARK_NAME.get(name, name) for name in names]
    if not recorded:
        return None
    held_flow = list(reversed(recorded))
    now_flow = [operator.kind for operator in flow_order(plan)]
    return (
        f"the query's stateful operators changed: the checkpoint {checkpoint} holds the state of"
        f" {chain(held_flow)}, and the query now runs {chain(now_flow)} ({_difference(held_flow, now_flow)})."
        " Spark keeps each operator's state by its place in the query, so the state cannot serve the new"
        f" query. Either change the query back to {chain(held_flow)}, or {START_OVER}."
    )


def _difference(held: list[str], now: list[str]) -> str:
    added = list((Counter(now) - Counter(held)).elements())
    removed = list((Counter(held) - Counter(now)).elements())
    parts = [f"{name} added" for name in added] + [f"{name} removed" for name in removed]
    return ", ".join(parts) or "the same operators in another order"


def state_keys(result: DataFrame) -> list[str]:
    """One line per stateful operator of the query's plan, in Spark's operator order: its kind and its
    key columns by name, such as `aggregation by window, key`."""
    return [operator.key_line for operator in read_plan(result)]


class StateKeyChanged(Exception):
    """The query keys its state by other columns than those the checkpoint's state was written with."""

    def __init__(self, record: str, recorded: list[str], now: list[str]) -> None:
        super().__init__(
            f"the state key changed: the state in this checkpoint was written keyed by {'; '.join(recorded)},"
            f" and this query keys it by {'; '.join(now) or 'nothing (no stateful operator)'} (recorded in"
            f" {record}). Spark would read the old state under the new key without an error and give wrong"
            f" results. Either change the query back, or {START_OVER}."
        )


class OutputColumnsChanged(Exception):
    """The query writes other columns than the parquet output it appends to holds."""


class StateWindowChanged(Exception):
    """A windowed aggregation's window is not the one its state holds."""


# Records before KEY_FORM named each key column with its type ("key string"): read as names.
KEY_FORM = "names"
_LEAD = re.compile(r"^(.*? (?:by|on|of)) (.*)$")
_WORDED = ("its own key", "the rows emitted", "no column equality")


def names_only(line: str) -> str:
    """A recorded key line without the column types older records hold: `aggregation by window
    struct<start:timestamp,end:timestamp>, key string` -> `aggregation by window, key`."""
    match = _LEAD.match(line)
    if not match or match.group(2) in _WORDED:
        return line
    columns = [
        " = ".join(side.rsplit(" ", 1)[0] for side in split_top(item, " = "))
        for item in split_top(match.group(2), ", ")
    ]
    return f"{match.group(1)} {', '.join(columns)}"


class KeyRecord:
    """The state key record in the checkpoint directory: `state_key/`, each version of the record a text file
    of one JSON line, read through the checkpoint's files (session_files.py): written by Spark where this
    machine does not see the checkpoint (a Spark Connect server's disk, a cloud store), straight to the
    disk where it does, in the form Spark writes (Spark writes no single file of a given name: hence a
    folder). A checkpoint of an older template
    holds `state_key.json` instead (written through Hadoop's file system API), read where there is no
    `state_key/` yet. A record also names the output mode the results were written in (none in a record of a
    template before that), and the Spark release that ran the start that wrote it (none before that): a start on
    another release writes a record again (spark_moves.py reads it). Read without a session (`spark` None) where
    `files` are given."""

    def __init__(self, spark: SparkSession | None, checkpoint: str, files: Files | None = None) -> None:
        self._spark = spark
        self._files = files if files is not None else checkpoint_files(_session(spark), checkpoint)
        self._root = local_checkpoint(checkpoint) or LocationPath(checkpoint)
        self.folder = checkpoint.rstrip("/") + "/" + RECORD_FOLDER
        self._versions = self._read_versions()
        self.location = self.folder if self._versions else checkpoint.rstrip("/") + "/" + RECORD_NAME

    def read(self) -> tuple[list[str], list[str | None] | None] | None:
        """(the key of each operator, the window of each where recorded: older records have none)."""
        newest = self._newest()
        return None if newest is None else newest[:2]

    def output_mode(self) -> str | None:
        """The output mode the newest record names, None without one."""
        newest = self._newest()
        return None if newest is None else newest[2]

    def spark_version(self) -> str | None:
        """The Spark version that ran the start of the newest record, None without one."""
        newest = self._newest()
        return None if newest is None else newest[3]

    def _newest(self) -> _Record | None:
        if self._versions:
            return max(self._versions, key=lambda found: found[0])[1:]
        text = self._files.read(self._root / RECORD_NAME)
        return None if text is None else _key_record(text, self.location)

    def has_commits(self) -> bool:
        return any(path.name.isdigit() for path in self._files.list(self._root / "commits"))

    def write(self, keys: list[str], windows: list[str | None], output_mode: str, spark_version: str) -> None:
        version = max(found[0] for found in self._versions) + 1 if self._versions else 1
        fields = {"version": version, "state_keys": keys, "windows": windows, "key_form": KEY_FORM}
        # The first batch the start runs: the state of it and of later ones is this Spark's.
        done = [int(path.name) for path in self._files.list(self._root / "commits") if path.name.isdigit()]
        started = {"spark_version": spark_version, "from_batch": max(done, default=-1) + 1}
        line = json.dumps({**fields, "output_mode": output_mode, **started})
        if self._files is LOCAL:
            # This machine's disk: a file of the form Spark writes, without a Spark job (0.1 s, 1.7 s in a fresh
            # JVM), under a hidden name until whole.
            folder = self._root / RECORD_FOLDER
            folder.mkdir(parents=True, exist_ok=True)
            name = f"part-{uuid.uuid4()}.txt"
            (folder / f".{name}").write_text(line + "\n", encoding="utf-8")
            (folder / f".{name}").rename(folder / name)
            return
        # From a literal, not createDataFrame's local rows: those go through a Python RDD on Spark Classic,
        # whose accumulator connection prints a traceback when the JVM dies later (an OutOfMemoryError).
        record = _session(self._spark).range(1).select(F.lit(line).alias("value"))
        record.coalesce(1).write.mode("append").text(self.folder)

    def _read_versions(self) -> list[tuple[int, list[str], list[str | None] | None, str | None, str | None]]:
        """(version, keys, windows, output mode, Spark version) of each record Spark wrote in `state_key/`."""
        found = []
        for path in self._files.list(self._root / RECORD_FOLDER):
            text = self._files.read(path) if path.name.startswith("part-") else None
            for line in [] if text is None else text.decode("utf-8", errors="replace").splitlines():
                version = _version(line)
                if version is None:
                    raise CheckpointUnreadable(_damaged(f"{self.folder}/{path.name}"))
                found.append((version, *_key_record(line.encode(), f"{self.folder}/{path.name}")))
        return found


# A record's key of each operator, window of each (older records: None), output mode and Spark version (older
# records: None).
_Record = tuple[list[str], list[str | None] | None, str | None, str | None]


def _session(spark: SparkSession | None) -> SparkSession:
    assert spark is not None, "a KeyRecord read without a session is given its files and writes nothing"
    return spark


def _version(line: str) -> int | None:
    try:
        version = json.loads(line).get("version")
    except (ValueError, AttributeError):
        return None
    return version if isinstance(version, int) else None


def _key_record(text: bytes, location: str) -> _Record:
    """(keys, windows, output mode, Spark version) of one record's JSON; CheckpointUnreadable naming `location`
    for a damaged one."""
    try:
        record = json.loads(text.decode("utf-8"))
        keys, windows, mode = record["state_keys"], record.get("windows"), record.get("output_mode")
        spark = record.get("spark_version")
        if record.get("key_form") != KEY_FORM and isinstance(keys, list):  # an older record, with types
            keys = [names_only(key) for key in keys]
    except (ValueError, KeyError, TypeError, AttributeError):  # UnicodeDecodeError and JSONDecodeError: ValueErrors
        keys = windows = mode = spark = None
    texts = isinstance(keys, list) and all(isinstance(key, str) for key in keys)
    fits = windows is None or isinstance(windows, list) and len(windows) == len(keys)
    if not texts or not fits or not all(field is None or isinstance(field, str) for field in (mode, spark)):
        raise CheckpointUnreadable(_damaged(location))
    return keys, windows, mode, spark


def _damaged(location: str) -> str:
    return (
        f"{location}: not a state key record (damaged?); remove it if the query's state key is unchanged (the next"
        " start records it again), or restore the checkpoint from a copy"
    )


def check_state_key(
    spark: SparkSession,
    result: DataFrame,
    checkpoint: str,
    output_mode: str,
    record: bool = True,
    files: Files | None = None,
) -> str | None:
    """Raise StateKeyChanged when the query's state key differs from the recorded one; with `record`
    (a start, not `check`), record it, with the output mode (which the guard compared before), when none
    is or either differs. Returns a note for the log when a checkpoint with state had no record. `files`:
    the reader the start chose (None: chosen here)."""
    keys = KeyRecord(spark, checkpoint, files)
    plan = read_plan(result)
    now, windows = [operator.key_line for operator in plan], [operator.window for operator in plan]
    recorded, recorded_windows = keys.read() or (None, None)
    if recorded is not None and keys.has_commits():
        if recorded != now:
            raise StateKeyChanged(keys.location, recorded, now)
        held_windows = recorded_windows if recorded_windows is not None else windows  # older records: none
        changed = [(op, held) for op, held in zip(plan, held_windows, strict=True) if held != op.window]
        if changed:
            raise StateWindowChanged(_window_change(changed, keys.location))
    running = spark.version  # through Spark Connect, the server's
    if (recorded, recorded_windows, keys.output_mode(), keys.spark_version()) == (
        now,
        windows,
        output_mode,
        running,
    ) or not record:
        return None
    # No record, one without the windows, the mode or the Spark version, one of another Spark, or one left by a
    # run that committed nothing (no state kept under it).
    keys.write(now, windows, output_mode, running)
    if recorded is None and keys.has_commits():
        return f"{keys.folder} was missing (a checkpoint older than this check): recorded {'; '.join(now)}"
    return None


def _window_change(changed: list[tuple[PlanOperator, str | None]], record: str) -> str:
    what = "; ".join(
        f"operator {op.operator_id} ({op.kind}) holds windows of {held}, and this query makes windows of {op.window}"
        for op, held in changed
    )
    back = " and ".join(str(held) for _, held in changed)
    return (
        f"the window changed: {what} (recorded in {record}). Spark would go on adding to the windows the state"
        " holds beside the new ones: the output would hold overlapping windows, with one key's events split"
        f" between them. Either set the window back to {back} (query.window, where the query takes it from"
        f" there), or {START_OVER}."
    )


def check_fit(
    result: DataFrame,
    plan: Sequence[PlanOperator],
    settings: Settings,
    held: CheckpointRead | None,
    checkpoint: CheckpointReader,
    record_key: bool,
) -> tuple[str | None, list[str]]:
    """Raise, for the first misfit: OperatorsChanged, SettingsError (the query against the settings),
    Spark's AnalysisException (the query against the output mode), StreamsChanged, OutputLost, StateKeyChanged,
    StateWindowChanged, StateSchemaRefused or OutputColumnsChanged. Return the note of a state key recorded
    again (with record_key: a start) and the state schema changes Spark accepts. `checkpoint`: the
    checkpoint at query.checkpoint_location and its reader, chosen once."""
    location = checkpoint.location
    # The checkpoint's operators first: when the query no longer fits its state, that is the news.
    drift = operators_drift(plan, held, location)
    if drift:
        raise OperatorsChanged(drift)
    check_streams(result, settings, held)
    problems = fit_problems(result.sparkSession, settings, plan)
    if problems:
        raise SettingsError(problems)
    refuse_python(result, settings)
    refuse_what_spark_refuses(result, settings)
    if held is not None and held.table_behind is not None:
        _, source = output_source(analyzed_plan(result))
        refuse_behind_without_aggregation(held, None if from_aggregation(source) else source.kind)
    note = check_state_key(
        result.sparkSession, result, location, settings.sink.output_mode, record_key, checkpoint.files()
    )
    refused, accepted = state_schema_drift(result, plan, held, location)
    if refused:
        raise StateSchemaRefused(refused)
    written = None if held is None else held.output_columns
    now = columns(result.schema)
    if written is not None and sorted(written) != sorted(now):
        names = sorted(column.split(" ")[0] for column in written) == sorted(result.schema.fieldNames())
        consequence = (
            "take one file's types for all and fail reading the files written with the others"
            if names
            else "take one file's columns for all: the earlier rows would read NULL for the new columns, and the old"
            " ones would be gone"
        )
        raise OutputColumnsChanged(
            f"the query's output columns changed: sink.path {settings.sink.path} holds rows of {', '.join(written)},"
            f" and the query now writes {', '.join(now)}. Spark's parquet sink would write on, and a reader of the"
            f" output would {consequence}. Either change the query back, or {START_OVER}."
        )
    return note, accepted
