"""The stateful operators of the query the user wrote, read from Spark's plan without starting it.

Spark knows which stateful operators a query holds: its analyzed plan names them (Aggregate on a
stream, DeduplicateWithinWatermark, a Join of two streams, TransformWithStateInPySpark, ...). The
sizing, the guard and the tools follow this list, so a query edited into a chain (deduplicate, then
count) is sized, guarded and inspected as the chain it is. Spark numbers the operators of a query
from the sink back (operator 0 is the last before the sink), in the order a pre-order walk of the
plan meets them; the list here keeps that order, and plan_operators.flow_order turns it the way
events flow.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ..core.contract import project_code, user_query
from ..core.operators import BY_PLAN_NODE
from ..core.plan_operators import OTHER_STATEFUL, PlanOperator
from .processor_state import PLAN_NODE, declared_variables

if TYPE_CHECKING:  # Spark is imported only when a command needs it
    from pyspark.sql import DataFrame, SparkSession

    from ..core.settings import Settings

_WATERMARK_LINE = re.compile(r"EventTimeWatermark [^,]+, [^,]+, (.+)$")


@dataclass
class _Node:
    kind: str
    fields: dict[str, Any]
    children: list[_Node] = field(default_factory=list)

    def walk(self) -> Iterator[_Node]:
        yield self
        for child in self.children:
            yield from child.walk()

    @property
    def streaming(self) -> bool:
        """Whether a stream feeds this subtree (a stream-static join's static side is not stateful)."""
        return any(not node.children and "Streaming" in node.kind for node in self.walk())


def _tree(nodes: list[dict[str, Any]]) -> _Node:
    """Spark's JSON form of a tree: a pre-order list, each node with its number of children."""
    position = 0

    def take() -> _Node:
        nonlocal position
        raw = nodes[position]
        position += 1
        node = _Node(raw["class"].rsplit(".", 1)[-1], raw)
        node.children = [take() for _ in range(raw.get("num-children", 0))]
        return node

    return take()


class QueryRefused(Exception):
    """A query Spark would refuse once it runs, found in its plan; the message names Spark's rule."""


def read_plan(result: DataFrame) -> list[PlanOperator]:
    """The stateful operators of a streaming DataFrame, by Spark's operator id; QueryRefused for a plan
    Spark runs only to fail at its first batch."""
    analyzed = result._jdf.queryExecution().analyzed()
    root = _tree(json.loads(analyzed.toJSON()))
    _refuse_a_second_watermark(root)
    delays = iter(_watermark_delays(analyzed.toString()))
    watermarks = {id(node): next(delays, None) for node in root.walk() if node.kind == "EventTimeWatermark"}
    stateful = [node for node in root.walk() if _is_stateful(node)]
    ids = {id(node): number for number, node in enumerate(stateful)}
    lines = _node_lines(analyzed.toString(), root)
    declared = iter(declared_variables(result) if any(node.kind == PLAN_NODE for node in stateful) else ())
    operators = []
    for number, node in enumerate(stateful):
        delays_below = [delay for n in node.walk() if (delay := watermarks.get(id(n)))]
        below = next((ids[id(n)] for n in list(node.walk())[1:] if id(n) in ids), None)
        shape = _window_shape(node)
        operators.append(
            PlanOperator(
                operator_id=number,
                kind=_kind(node, shape),
                node=node.kind,
                keys=_keys(node),
                watermark=max(delays_below, key=_seconds) if delays_below else None,
                window=shape.window,
                join_range=_join_range(node),
                join_type=_join_type(node),
                upstream=below,
                window_only=node.kind == "Aggregate" and all(map(_is_window, node.fields["groupingExpressions"])),
                slide=shape.slide,
                gap=shape.gap,
                timeout=_timeout(node),
                evicts=_evicts(node, shape, lines.get(id(node), "")),
                spark_operator_name=_spark_name(node, shape),
                state_variables=next(declared) if node.kind == PLAN_NODE else None,
            )
        )
    return operators


@dataclass(frozen=True)
class _WindowShape:
    """The time window an aggregation groups by: a tumbling or sliding window's length (and a sliding
    one's slide), or a session window's gap; all None for an aggregation without one."""

    window: str | None = None
    slide: str | None = None
    gap: str | None = None
    session: bool = False


def _kind(node: _Node, shape: _WindowShape) -> str:
    """Our name for the operator (core/operators.py): an aggregation is told apart by its window."""
    if node.kind == "Aggregate":
        if shape.session:  # a gap computed per row has no length to size by: unsized, still guarded
            return "session_window" if shape.gap else "session window of a computed gap"
        windowed = shape.window is not None or any(map(_is_window, node.fields["groupingExpressions"]))
        return "windowed_aggregation" if windowed else "aggregation"
    return BY_PLAN_NODE.get(node.kind, node.kind)


# transformWithState's user function kinds (PythonEvalType): 213 and 214 are the Row API, which Spark
# names transformWithStateInPySparkExec in the state metadata; 211 and 212 the pandas one.
_ROW_API_EVAL_TYPES = (213, 214)


def _spark_name(node: _Node, shape: _WindowShape) -> str | None:
    if shape.session:
        return "sessionWindowStateStoreSaveExec"
    if node.kind != "TransformWithStateInPySpark":
        return None
    function = node.fields.get("functionExpr") or [{}]
    row_api = function[0].get("evalType") in _ROW_API_EVAL_TYPES
    return "transformWithStateInPySparkExec" if row_api else "transformWithStateInPandasExec"


def _join_type(node: _Node) -> str | None:
    """A stream-stream join's type as Spark names it (Inner, LeftOuter, FullOuter, LeftSemi, ...)."""
    if node.kind != "Join":
        return None
    return str(node.fields.get("joinType", {}).get("object", "")).rsplit(".", 1)[-1].rstrip("$") or None


# The clock an operator's timers run on: applyInPandasWithState's GroupStateTimeout, transformWithState's
# time mode (its `timeMode`), by their names in the plan.
_TIMER_FIELDS = {"FlatMapGroupsInPandasWithState": "timeout", "TransformWithStateInPySpark": "timeMode"}
_TIMERS = {
    "ProcessingTimeTimeout": "processing_time",
    "EventTimeTimeout": "event_time",
    "ProcessingTime": "processing_time",
    "EventTime": "event_time",
}


def _timeout(node: _Node) -> str | None:
    """applyInPandasWithState's timeout or transformWithState's timers: none, processing_time or event_time."""
    if node.kind not in _TIMER_FIELDS:
        return None
    name = str(node.fields.get(_TIMER_FIELDS[node.kind], {}).get("object", "")).rsplit(".", 1)[-1].rstrip("$")
    return _TIMERS.get(name, "none")


def _evicts(node: _Node, shape: _WindowShape, line: str) -> bool:
    """Whether Spark drops rows of this state by the watermark: a deduplication or an aggregation
    without a window only when one of its keys carries it (Spark prints such a column `name#N-T<ms>ms`)."""
    if node.kind == "Deduplicate" or (node.kind == "Aggregate" and shape.window is None and not shape.session):
        keys = line.split("[", 1)[1].split("]", 1)[0] if "[" in line else ""
        return bool(_WATERMARKED_COLUMN.search(keys))
    return True


_WATERMARKED_COLUMN = re.compile(r"#\d+-T\d+ms")


def _node_lines(tree_string: str, root: _Node) -> dict[int, str]:
    """Each node's own line of Spark's printed plan (the JSON drops the columns' watermark marks):
    both list the nodes in pre-order, one line each."""
    lines = [line for line in tree_string.splitlines() if line.strip()]
    nodes = list(root.walk())
    if len(lines) != len(nodes):
        return {}
    return {id(node): line for node, line in zip(nodes, lines, strict=True)}


def _refuse_a_second_watermark(root: _Node) -> None:
    """Spark fails a query of several stateful operators at its first batch when a watermark is set
    after one of them ("Redefining watermark is disallowed"): said before it starts instead."""
    for node in root.walk():
        if node.kind != "EventTimeWatermark":
            continue
        below = next((n for n in list(node.walk())[1:] if _is_stateful(n) and _watermarked(n)), None)
        if below is not None:
            raise QueryRefused(
                f"it sets a watermark (withWatermark) after a stateful operator ({_kind(below, _window_shape(below))});"
                " Spark refuses to redefine the watermark in a query of several stateful operators"
                " (spark.sql.streaming.statefulOperator.allowMultiple): set it once, on the input, before the"
                " first stateful operator"
            )


# Spark's switch for its checks of a streaming query against the output mode (on by default).
UNSUPPORTED_OPERATION_CHECK = "spark.sql.streaming.unsupportedOperationCheck"


def refuse_what_spark_refuses(result: DataFrame, settings: Settings) -> None:
    """Spark's own checks of the query against sink.output_mode (UnsupportedOperationChecker), which a
    start makes before anything runs: made first by the start and by `check` alike, so that both refuse
    a query Spark refuses, in Spark's words (an AnalysisException), and `check` passes no query the start
    would refuse. Skipped where the settings turn Spark's checks off, as the start skips them."""
    if str(settings.spark.conf.get(UNSUPPORTED_OPERATION_CHECK, "true")).lower() == "false":
        return
    jvm: Any = result.sparkSession._jvm  # set while the session runs
    mode = getattr(jvm.org.apache.spark.sql.streaming.OutputMode, settings.sink.output_mode.capitalize())()
    checker = jvm.org.apache.spark.sql.catalyst.analysis.UnsupportedOperationChecker
    checker.checkForStreaming(result._jdf.queryExecution().analyzed(), mode)


def _watermarked(node: _Node) -> bool:
    return any(n.kind == "EventTimeWatermark" for n in node.walk())


def _is_stateful(node: _Node) -> bool:
    if node.kind == "Join":
        return len(node.children) == 2 and all(child.streaming for child in node.children)
    if node.kind in ("Aggregate", "Deduplicate", "DeduplicateWithinWatermark", "GlobalLimit"):
        return node.streaming
    return node.kind in BY_PLAN_NODE or node.kind in OTHER_STATEFUL or "groupingAttributesLen" in node.fields


def _watermark_delays(tree_string: str) -> list[str]:
    """Each EventTimeWatermark's delay as Spark prints it ("10 minutes"), in pre-order (the JSON drops it)."""
    return [match.group(1).strip() for line in tree_string.splitlines() if (match := _WATERMARK_LINE.search(line))]


def _seconds(duration: str) -> float:
    from ..core.durations import parse_duration

    return parse_duration(duration, zero=True)  # a watermark delay, or a join's range: either may be zero


def _keys(node: _Node) -> str:
    """The key columns: grouping expressions, deduplication keys, the join's column equalities, or the
    leading columns of the child of a transformWithState and its kin."""
    fields = node.fields
    if node.kind == "Aggregate":
        return _columns(fields["groupingExpressions"])
    if node.kind in ("Deduplicate", "DeduplicateWithinWatermark"):
        return _columns(fields["keys"])
    if node.kind == "FlatMapGroupsInPandasWithState":
        return _columns(fields["groupingAttributes"])
    if node.kind == "GlobalLimit":
        return "the rows emitted"
    if node.kind == "Join":
        return _equalities(fields.get("condition") or [])
    if "groupingAttributesLen" in fields and node.children:
        child = node.children[0].fields
        columns = child.get("projectList") or child.get("output") or []
        return _columns(columns[: fields["groupingAttributesLen"]])
    return "its own key"


def _columns(expressions: list[list[dict[str, Any]]]) -> str:
    """Each expression is a flat pre-order list whose first node is the top; an attribute or alias names it."""
    return ", ".join(_describe(expression[0]) for expression in expressions)


def _describe(top: dict[str, Any]) -> str:
    from pyspark.sql.types import _parse_datatype_json_value

    name = top.get("name", top["class"].rsplit(".", 1)[-1])
    if "dataType" not in top:
        return name
    return f"{name} {_parse_datatype_json_value(top['dataType']).simpleString()}"


def _equalities(condition: list[dict[str, Any]]) -> str:
    """The column = column parts of a join condition (the join's state key), in order."""
    found = []
    for index, node in enumerate(condition):
        if node["class"].endswith(".EqualTo"):
            left, right = condition[index + 1], condition[index + 2]
            if "name" in left and "name" in right:
                found.append(f"{_describe(left)} = {_describe(right)}")
    return ", ".join(found) or "no column equality"


def _is_window(expression: list[dict[str, Any]]) -> bool:
    """A grouping column that is a time window: a struct of start and end."""
    kind = expression[0].get("dataType")
    return isinstance(kind, dict) and [field["name"] for field in kind.get("fields", [])] == ["start", "end"]


def _expressions(node: _Node, name: str) -> list[_Node]:
    return [_tree(expression) for expression in node.fields.get(name) or [] if expression]


def _window_shape(node: _Node) -> _WindowShape:
    """The window an aggregation groups by, read from the struct Spark builds for it below the
    aggregation: a time window's end is start + length (a Project, or for a sliding window an Expand
    with one projection per window an event falls in, whose start is rounded down to the slide); a
    session window's end is the event time + the gap (TimestampAddInterval)."""
    if node.kind != "Aggregate":
        return _WindowShape()
    for below in list(node.walk())[1:]:
        if below is not node and _is_stateful(below):
            break
        projections = _expressions(below, "projectList")
        if below.kind == "Expand":
            projections = [
                _tree(expression) for projection in below.fields["projections"][:1] for expression in projection
            ]
        for projection in projections:
            for struct in (n for n in projection.walk() if n.kind == "CreateNamedStruct"):
                names = [child.fields.get("value") for child in struct.children[0::2]]
                if names[:2] == ["start", "end"]:
                    return _struct_shape(struct.children[3], below)
    return _WindowShape()


def _struct_shape(end: _Node, projecting: _Node) -> _WindowShape:
    session = next((n for n in end.walk() if n.kind == "TimestampAddInterval"), None)
    if session is not None:
        gap = session.children[1]
        while gap.kind == "Cast":
            gap = gap.children[0]
        return _WindowShape(gap=_interval(gap.fields.get("value")) if gap.kind == "Literal" else None, session=True)
    while end.kind != "Add" and len(end.children) == 1:
        end = end.children[0]
    if end.kind != "Add" or end.children[1].kind != "Literal":
        return _WindowShape()
    window = _microseconds(end.children[1].fields["value"])
    if projecting.kind != "Expand":
        return _WindowShape(window=window)
    slides = [
        n.children[1].fields["value"] for n in end.walk() if n.kind == "Remainder" and n.children[1].kind == "Literal"
    ]
    slide = _microseconds(slides[0]) if slides else None
    return _WindowShape(window=window, slide=None if slide == window else slide)


def _interval(value: object) -> str | None:
    """A session gap as Spark's literal holds it: an interval string ("5 minutes") or microseconds."""
    text = str(value)
    if text.lstrip("-").isdigit():
        return _microseconds(text)
    try:
        gap = _seconds(text)
    except ValueError:
        gap = 0.0
    return text if gap > 0 else None  # else a gap the estimate cannot read: the operator is sized as unknown


def _join_range(node: _Node) -> str | None:
    """The longest time interval in a stream-stream join's condition: how long a row waits for matches."""
    if node.kind != "Join":
        return None
    literals = [
        n.fields["value"]
        for condition in _expressions_of(node.fields.get("condition"))
        for n in condition.walk()
        if n.kind == "Literal" and "interval" in str(n.fields.get("dataType")) and n.fields.get("value") is not None
    ]
    spans = [_microseconds(value) for value in literals if str(value).lstrip("-").isdigit()]
    return max(spans, key=_seconds) if spans else None


def _expressions_of(expression: list[dict[str, Any]] | None) -> list[_Node]:
    return [_tree(expression)] if expression else []


def _microseconds(value: object) -> str:
    """A duration in Spark's words, in the largest unit that divides it: 60000000 -> '1 minute'."""
    seconds = int(str(value)) / 1_000_000
    for unit, length in (("day", 86400), ("hour", 3600), ("minute", 60)):
        if seconds >= length and seconds % length == 0:
            count = int(seconds // length)
            return f"{count} {unit}{'' if count == 1 else 's'}"
    return f"{seconds:g} second{'' if seconds == 1 else 's'}"


def stand_in_result(spark: SparkSession, settings: Settings) -> DataFrame:
    """The query over stand-in streams of EVENT_SCHEMA: the plan of the real one, without its sources
    (so that reading the plan needs no Kafka connector, no broker and no landing files)."""
    return query_result(spark, settings, stand_in_stream(spark), lambda: stand_in_stream(spark))


def stand_in_stream(spark: SparkSession) -> DataFrame:
    """A stream of EVENT_SCHEMA's columns, all null: an input's place in a plan that is only read."""
    from pyspark.sql import functions as F

    rate = spark.readStream.format("rate-micro-batch").option("rowsPerBatch", 1).load()
    return rate.select(*(F.lit(None).cast(column.dataType).alias(column.name) for column in user_query().EVENT_SCHEMA))


def query_result(
    spark: SparkSession, settings: Settings, events: DataFrame, read_join_source: Callable[[], DataFrame]
) -> DataFrame:
    """stateful_query on `events`, and on join_events: read_join_source() where join_source is set, else
    None. A query that fails without join_events and reads them when given some is a SettingsError
    naming join_source (fit_problems holds a join_source the query leaves unread)."""
    from ..core.settings import SettingsError

    if settings.join_source is not None:
        return _stateful_query(events, settings, read_join_source())
    try:
        return _stateful_query(events, settings, None)
    except Exception:  # the query's own error, Spark's or Python's: it may be for want of join_events
        if not _wants_join_events(spark, settings):
            raise
        raise SettingsError([settings.join_source_misfit()]) from None


def fit_problems(spark: SparkSession, settings: Settings, plan: Sequence[PlanOperator]) -> list[str]:
    """What of the settings does not fit the query: join_source against whether the query reads
    join_events (what its code does, not the starter's label), then Settings.plan_problems."""
    problems = settings.plan_problems(plan)
    if settings.join_source is not None and not _reads_join_events(spark, settings):
        problems.insert(0, settings.join_source_misfit())
    return problems


def _stateful_query(events: DataFrame, settings: Settings, join_events: DataFrame | None) -> DataFrame:
    with project_code():
        return user_query().stateful_query(events, settings.query, join_events)


def _wants_join_events(spark: SparkSession, settings: Settings) -> bool:
    """Whether the query reads join_events when given some (not where it fails then too: its error stands)."""
    try:
        return _reads_join_events(spark, settings)
    except Exception:
        return False


def _reads_join_events(spark: SparkSession, settings: Settings) -> bool:
    """Whether the query, given stand-in streams, reads its second one: a source of its plan holds the
    columns Spark gave that stream's source (by the ids Spark numbers each column of a plan with)."""
    join_events = stand_in_stream(spark)
    result = _stateful_query(stand_in_stream(spark), settings, join_events)
    return bool(_source_columns(join_events) & _source_columns(result))


def _source_columns(frame: DataFrame) -> set[int]:
    nodes = json.loads(frame._jdf.queryExecution().analyzed().toJSON())
    leaves = [node for node in nodes if not node.get("num-children")]
    return {part["exprId"]["id"] for leaf in leaves for column in leaf.get("output") or [] for part in column}


def planned_operators(spark: SparkSession, settings: Settings) -> list[PlanOperator]:
    """The stateful operators of the project's query with these settings."""
    return read_plan(stand_in_result(spark, settings))


def checked_plan(settings: Settings) -> list[PlanOperator]:
    """The plan's operators, read in a local session of their own (nothing runs), and checked against
    the settings (fit_problems): a SettingsError names what does not fit."""
    from ..core.settings import SettingsError
    from .session import tool_session

    with tool_session("query-plan", {}, settings) as spark:
        plan = planned_operators(spark, settings)
        problems = fit_problems(spark, settings, plan)
    if problems:
        raise SettingsError(problems)
    return plan
