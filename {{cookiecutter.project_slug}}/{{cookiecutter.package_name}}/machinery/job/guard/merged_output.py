"""Update mode's output checked before a start: the steps after the last stateful operator, and into
Delta the MERGE key and the columns of a table already at sink.path, which must hold the output's."""

from __future__ import annotations

from pyspark.sql import DataFrame

from ...core.delta_merge import MergeKey, columns_differ
from ...core.settings import Settings, SettingsError
from ..endpoints.delta import columns, table_schema
from ..plan.merge_key import changed_rows_refusal, merge_key


def checked_output(result: DataFrame, settings: Settings) -> MergeKey | None:
    """Before a start (and `check`), in update mode: the steps after the last stateful operator
    (changed_rows_refusal) and, into Delta, the key and the table's columns, each misfit a SettingsError;
    the key each batch is MERGEd by (None but into Delta)."""
    refused = changed_rows_refusal(result, settings.sink)
    if refused:
        raise SettingsError([refused])
    if not settings.sink.merges:
        return None
    key = merge_key(result, settings.sink)
    misfit = table_columns_refusal(settings, result)
    if misfit:
        raise SettingsError([misfit])
    return key


def merged_by_line(key: MergeKey, path: str) -> str:
    """What each batch is MERGEd into the Delta table at path by."""
    return f"update mode into Delta: each batch MERGEd into {path} by ({', '.join(key.columns)}), {key.origin}"


def table_columns_refusal(settings: Settings, result: DataFrame) -> str | None:
    """One line when the Delta table at sink.path holds other columns than the output (names and types,
    in any order: a MERGE sets and inserts by name); None without a table, or when it fits, or when this
    machine cannot read it (no deltalake package, a store it has no credentials for): the MERGE checks."""
    try:
        from deltalake import DeltaTable
        from deltalake.exceptions import DeltaError

        schema = table_schema(DeltaTable(settings.sink.path))
    except (ImportError, DeltaError, OSError):  # TableNotFoundError is a DeltaError
        return None
    table, output = columns(schema), columns(result.schema)
    return schema_line(settings.sink.path, list(table), list(output)) if columns_differ(table, output) else None


def schema_line(path: str, table: list[str], output: list[str]) -> str:
    return (
        f"sink.path {path} is a Delta table of columns ({', '.join(table)}) but the query's output is"
        f" ({', '.join(output)}): a MERGE writes each row whole, by name; set sink.path to a new directory, or"
        " change the table to the output's columns (ALTER TABLE) or the query to the table's. Nothing was started"
    )
