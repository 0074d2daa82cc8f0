"""The key a batch's results are MERGEd into a Delta table by (update mode), found and checked before a start.

The key is the grouping columns of the query's last aggregation, window included, as they reach the output:
the analyzed plan names each, and the projections above the aggregation may rename or take fields of them
(`window.start AS window_start`). Where the plan cannot say (the last stateful step is not an aggregation, or
the output leaves a grouping column out), sink.delta.key_columns names the key; named columns are checked
against the output either way. A table already at sink.path must hold the output's columns.
"""

from __future__ import annotations

import re

from pyspark.sql import DataFrame
from pyspark.sql.types import StructType, TimestampType

from ...core.delta_merge import MergeKey, columns_differ
from ...core.settings import Settings, SettingsError, SinkSettings
from ..endpoints.delta import columns, open_table, table_schema
from ..endpoints.heartbeats import output_key_problem
from .plan_source import PlanNode, analyzed_plan, column, items, split_top
from .query_plan import is_stateful

# Nodes above the aggregation that write each of its rows as it is, keeping, dropping or renaming columns.
_PASS_THROUGH = ("Project", "SubqueryAlias", "Repartition", "RepartitionByExpression")
# The stateful nodes whose rows are written once, final, in update mode too (the others write a key's row
# again as it changes: an aggregation, transformWithState).
_WRITTEN_ONCE = ("Deduplicate", "DeduplicateWithinWatermark", "Join", "GlobalLimit")
# Where update mode writes a result again over the one before, by its key: the row a MERGE replaces, the
# record whose key's consumers keep the latest.
KEPT_BY_KEY = {"delta": ("row in the Delta table", "the table"), "kafka": ("record in the topic", "the topic")}
_SHOWN_CHARS = 100
_ID = re.compile(r"#(\d+)")
_WATERMARKED_ID = re.compile(r"#\d+L?(?:-T\d+ms)?")
FROM_PLAN = "the grouping columns of the query's last aggregation"
FROM_SETTINGS = "sink.delta.key_columns"


def merge_key(result: DataFrame, sink: SinkSettings) -> MergeKey:
    """The key, or SettingsError naming the setting, the columns and the way on."""
    output = result.columns
    named = tuple(sink.delta.key_columns)
    if named:
        missing = [name for name in named if name not in output]
        if missing:
            raise SettingsError(
                [
                    f"sink.delta.key_columns {list(named)}: {', '.join(missing)} not among the query's output columns"
                    f" ({', '.join(output)}); name the columns that identify a result row"
                ]
            )
        return _key(named, FROM_SETTINGS, result.schema)
    found, why_not = plan_key(analyzed_plan(result))
    if not found:
        raise SettingsError(
            [
                f"sink.output_mode is update into a Delta table, which MERGEs each batch by the result's key, but"
                f" {why_not}; set sink.delta.key_columns to"
                f" the output columns that identify a result row (of {', '.join(output)})"
            ]
        )
    return _key(tuple(found), FROM_PLAN, result.schema)


def _key(columns: tuple[str, ...], origin: str, schema: StructType) -> MergeKey:
    timestamps = [field.name for field in schema.fields if isinstance(field.dataType, TimestampType)]
    return MergeKey(columns, origin, next((name for name in columns if name in timestamps), None))


def output_source(root: PlanNode) -> tuple[list[PlanNode], PlanNode]:
    """The nodes that pass the output on row for row, top down, and the node it comes from below them."""
    above: list[PlanNode] = []
    node = root
    while node.kind in _PASS_THROUGH and node.children:
        above.append(node)
        node = node.children[0]
    return above, node


def from_aggregation(node: PlanNode) -> bool:
    return node.kind == "Aggregate" and node.streaming


def plan_key(root: PlanNode) -> tuple[list[str], str | None]:
    """The output columns that carry the last aggregation's grouping columns, or ([], why not)."""
    above, node = output_source(root)
    if not from_aggregation(node):
        return (
            [],
            f"the query's output comes from a {node.kind}, not straight from an aggregation, so its plan gives no key",
        )
    grouping, outputs = (items(argument) for argument in node.arguments[:2])
    # Each key column's id -> the grouping expressions it carries.
    keys = {
        _own_id(item): {grouping.index(expression)}
        for item in outputs
        if (expression := _expression(item)) in grouping and _own_id(item) is not None
    }
    top = outputs
    for project in reversed(above):
        if project.kind != "Project":
            continue
        top = items(project.text.split("\n", 1)[0])
        carried = {}
        for item in top:
            refs = {int(found) for found in _ID.findall(_expression(item))}
            if refs and refs <= keys.keys() and _own_id(item) is not None:
                carried[_own_id(item)] = set().union(*(keys[ref] for ref in refs))
        keys = carried
    covered = set().union(*keys.values()) if keys else set()
    if covered != set(range(len(grouping))):
        left_out = ", ".join(
            _WATERMARKED_ID.sub("", grouping[index]) for index in range(len(grouping)) if index not in covered
        )
        return [], f"the output leaves out the aggregation's grouping column {left_out}"
    return [_name(item) for item in top if _own_id(item) in keys], None


def changed_rows_refusal(result: DataFrame, sink: SinkSettings) -> str | None:
    """In update mode into an output kept by key (KEPT_BY_KEY), one line when a step between the last
    stateful operator that writes a key's row again and the output can drop or change a row after an earlier
    batch wrote it (a filter, a HAVING, an explode, a join with a table): the row written before stays, so the
    output no longer equals the query run as a batch job. None where no such step is."""
    if sink.output_mode != "update" or sink.type not in KEPT_BY_KEY:
        return None
    node, changing = analyzed_plan(result), None
    while not is_stateful(node):
        if changing is None and node.kind not in _PASS_THROUGH:
            changing = node
        streams = [child for child in node.children if child.streaming]
        if not streams:
            return None  # no stateful operator: each row is written once
        node = streams[0]
    if changing is None or node.kind in _WRITTEN_ONCE:
        return None
    kept, read = KEPT_BY_KEY[sink.type]
    stateful = "aggregation" if node.kind == "Aggregate" else f"stateful operator ({node.kind})"
    return (
        f"sink.output_mode is update, but the query passes the results of its last {stateful} through a"
        f" {changing.kind} `{_shown(changing.text)}`: update mode writes a result again only when it changes, so one"
        f" that passed once and is dropped or changed later keeps its earlier {kept} for ever. Filter where"
        f" {read} is read, or before the {stateful.split(' (')[0]}, or set sink.output_mode to append"
    )


def _shown(text: str) -> str:
    """A node's arguments without the ids Spark numbers columns by, cut short."""
    plain = _WATERMARKED_ID.sub("", text.split("\n", 1)[0])
    return plain if len(plain) <= _SHOWN_CHARS else plain[:_SHOWN_CHARS] + "..."


def _expression(item: str) -> str:
    *body, alias = split_top(item, " AS ")
    return " AS ".join(body) if body and column(alias) else item


def _own_id(item: str) -> int | None:
    found = column(split_top(item, " AS ")[-1])
    return found[1] if found else None


def _name(item: str) -> str:
    found = column(split_top(item, " AS ")[-1])
    return found[0] if found else item


def checked_output(result: DataFrame, settings: Settings) -> MergeKey | None:
    """Before a start (and `check`): the output's key column where query.quiet_input_after's heartbeats are
    taken out by it; in update mode the steps after the last stateful operator (changed_rows_refusal) and, into
    Delta, the key and the table's columns; each misfit a SettingsError. The key each batch is MERGEd by (None
    but into Delta)."""
    refused = changed_rows_refusal(result, settings.sink)
    if settings.query.quiet_input_after is not None:
        refused = refused or output_key_problem(result, settings)
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
        from deltalake.exceptions import DeltaError

        table_read = open_table(settings.sink.path)
    except (ImportError, DeltaError, OSError):
        return None
    if table_read is None:
        return None
    schema = table_schema(table_read)
    table, output = columns(schema), columns(result.schema)
    if not columns_differ(table, output):
        return None
    return (
        f"sink.path {settings.sink.path} is a Delta table of columns ({', '.join(table)}) but the query's output is"
        f" ({', '.join(output)}): a MERGE writes each row whole, by name; set sink.path to a new directory, or"
        " change the table to the output's columns (ALTER TABLE) or the query to the table's. Nothing was started"
    )
