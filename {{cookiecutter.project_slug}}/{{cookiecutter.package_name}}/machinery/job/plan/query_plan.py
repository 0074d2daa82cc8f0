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

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ...core import real_time
from ...core.contract import project_code, user_query
from ...core.operators import BY_PLAN_NODE
from ...core.plan_operators import OTHER_STATEFUL, PlanOperator
from ..spark.remote import is_connect
from .plan_source import (
    PlanNode,
    analyzed_plan,
    calls,
    column,
    enclosed,
    items,
    named,
    python_udfs,
    split_top,
    unwrapped,
)
from .processor_state import PLAN_NODE, declared_variables

# What the names of an analyzed plan's nodes that run the user's Python in a worker hold (pandas, Arrow).
PYTHON_PLAN_MARKERS = ("InPandas", "InArrow", "InPySpark", "Python")

if TYPE_CHECKING:  # Spark is imported only when a command needs it
    from pyspark.sql import DataFrame, SparkSession

    from ...core.settings import Settings


class QueryRefused(Exception):
    """A query Spark would refuse once it runs, found in its plan; the message names Spark's rule."""


def read_plan(result: DataFrame) -> list[PlanOperator]:
    """The stateful operators of a streaming DataFrame, by Spark's operator id; QueryRefused for a plan
    Spark runs only to fail at its first batch."""
    root = analyzed_plan(result)
    _refuse_a_second_watermark(root)
    watermarks = {id(node): node.arguments[-1] for node in root.walk() if node.kind == "EventTimeWatermark"}
    stateful = [node for node in root.walk() if is_stateful(node)]
    ids = {id(node): number for number, node in enumerate(stateful)}
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
                window_only=node.kind == "Aggregate" and all(_window_keys(node)),
                slide=shape.slide,
                gap=shape.gap,
                timeout=_timeout(node),
                evicts=_evicts(node, shape),
                spark_operator_name=_spark_name(node, shape),
                state_variables=next(declared, None) if node.kind == PLAN_NODE else None,
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


def _kind(node: PlanNode, shape: _WindowShape) -> str:
    """Our name for the operator (core/operators.py): an aggregation is told apart by its window."""
    if node.kind == "Aggregate":
        if shape.session:  # a gap computed per row has no length to size by: unsized, still guarded
            return "session_window" if shape.gap else "session window of a computed gap"
        windowed = shape.window is not None or any(_window_keys(node))
        return "windowed_aggregation" if windowed else "aggregation"
    return BY_PLAN_NODE.get(node.kind, node.kind)


def _spark_name(node: PlanNode, shape: _WindowShape) -> str | None:
    """transformWithState's two APIs have an operator name each in the state metadata; Spark prints
    which one built the node (`pandas` for transformWithStateInPandas, `python` for the Row API)."""
    if shape.session:
        return "sessionWindowStateStoreSaveExec"
    if node.kind != "TransformWithStateInPySpark":
        return None
    pandas = "pandas" in node.arguments
    return "transformWithStateInPandasExec" if pandas else "transformWithStateInPySparkExec"


def _join_type(node: PlanNode) -> str | None:
    """A stream-stream join's type as Spark names it (Inner, LeftOuter, FullOuter, LeftSemi, ...)."""
    if node.kind != "Join":
        return None
    return node.arguments[0] if node.arguments else None


# The clock an operator's timers run on: applyInPandasWithState's GroupStateTimeout, transformWithState's
# time mode, by the names Spark prints among their arguments.
_TIMED = ("FlatMapGroupsInPandasWithState", "TransformWithStateInPySpark")
_TIMERS = {
    "ProcessingTimeTimeout": "processing_time",
    "EventTimeTimeout": "event_time",
    "ProcessingTime": "processing_time",
    "EventTime": "event_time",
}


def _timeout(node: PlanNode) -> str | None:
    """applyInPandasWithState's timeout or transformWithState's timers: none, processing_time or event_time."""
    if node.kind not in _TIMED:
        return None
    return next((_TIMERS[argument] for argument in node.arguments if argument in _TIMERS), "none")


def _evicts(node: PlanNode, shape: _WindowShape) -> bool:
    """Whether Spark drops rows of this state by the watermark: a deduplication or an aggregation
    without a window only when one of its keys carries it (Spark prints such a column `name#N-T<ms>ms`)."""
    if node.kind == "Deduplicate" or (node.kind == "Aggregate" and shape.window is None and not shape.session):
        return any(_WATERMARKED_COLUMN.search(key) for key in items(node.arguments[0]))
    return True


_WATERMARKED_COLUMN = re.compile(r"#\d+-T\d+ms")


def _refuse_a_second_watermark(root: PlanNode) -> None:
    """Spark fails a query at the first batch that moves the watermark when a watermark is set on a stream
    that already has one ("Redefining watermark is disallowed"), twice in a row or after a stateful operator
    of a watermarked stream: said before it starts instead."""
    for node in root.walk():
        if node.kind != "EventTimeWatermark":
            continue
        again = _watermark_before(node.children)
        if again is not None:
            raise QueryRefused(
                f"it sets the watermark twice on one stream (withWatermark{_watermark_call(again)}, then"
                f" withWatermark{_watermark_call(node)}); Spark refuses to redefine a watermark, at the first batch"
                " that moves it: set it once"
            )
        below = next((n for n in list(node.walk())[1:] if is_stateful(n) and _watermarked(n)), None)
        if below is not None:
            raise QueryRefused(
                f"it sets a watermark (withWatermark) after a stateful operator ({_kind(below, _window_shape(below))});"
                " Spark refuses to redefine the watermark in a query of several stateful operators"
                " (spark.sql.streaming.statefulOperator.allowMultiple): set it once, on the input, before the"
                " first stateful operator"
            )


def _watermark_before(nodes: list[PlanNode]) -> PlanNode | None:
    """The first watermark set on the stream below these nodes with no stateful operator between (those a
    stateful operator passes on are _refuse_a_second_watermark's other case)."""
    for node in nodes:
        if node.kind == "EventTimeWatermark":
            return node
        found = None if is_stateful(node) else _watermark_before(node.children)
        if found is not None:
            return found
    return None


def _watermark_call(node: PlanNode) -> str:
    """A watermark node as the call that made it: `("event_time", "1 minutes")` (Spark prints the delay so)."""
    typed_column, delay = node.arguments[-2:]
    return f'("{_name(typed_column.split(": ")[0])}", "{delay}")'


# Spark's switch for its checks of a streaming query against the output mode (on by default).
UNSUPPORTED_OPERATION_CHECK = "spark.sql.streaming.unsupportedOperationCheck"
# Said by `check` on Spark Connect, which offers no call to Spark's checks short of starting the query.
CONNECT_UNCHECKED = (
    "sink.output_mode: not checked against the query before the start on Spark Connect, which offers no call"
    " to Spark's checks short of a start (the start makes them, and refuses a query they refuse)"
)


def python_calls(result: DataFrame) -> list[str]:
    """What of the query runs Python: each Python UDF by name, each pandas or Arrow function by its node."""
    found = []
    for node in analyzed_plan(result).walk():
        if any(marker in node.kind for marker in PYTHON_PLAN_MARKERS):
            found.append(node.kind)
        found += [f"the UDF {name}" for name in python_udfs(node.text)]
    return list(dict.fromkeys(found))


def refuse_python(result: DataFrame, settings: Settings) -> None:
    """Spark's refusal of Python in a real-time query, before the start (core/real_time.py says it)."""
    from ...core.settings import SettingsError

    problem = real_time.python_udf_problem(python_calls(result)) if settings.query.real_time else None
    if problem:
        raise SettingsError([problem])


def refuse_what_spark_refuses(result: DataFrame, settings: Settings) -> None:
    """Spark's own checks of the query against sink.output_mode (UnsupportedOperationChecker), which a
    start makes before anything runs: made first by the start and by `check` alike, so that both refuse
    a query Spark refuses, in Spark's words (an AnalysisException), and `check` passes no query the start
    would refuse. Skipped where the settings turn Spark's checks off, as the start skips them, and on
    Spark Connect, which runs them only in the start (CONNECT_UNCHECKED)."""
    if str(settings.spark.conf.get(UNSUPPORTED_OPERATION_CHECK, "true")).lower() == "false":
        return
    if is_connect(result.sparkSession):
        return
    jvm: Any = result.sparkSession._jvm  # set while the session runs
    mode = getattr(jvm.org.apache.spark.sql.streaming.OutputMode, settings.sink.output_mode.capitalize())()
    checker = jvm.org.apache.spark.sql.catalyst.analysis.UnsupportedOperationChecker
    checker.checkForStreaming(result._jdf.queryExecution().analyzed(), mode)


def _watermarked(node: PlanNode) -> bool:
    return any(n.kind == "EventTimeWatermark" for n in node.walk())


def is_stateful(node: PlanNode) -> bool:
    if node.kind == "Join":
        return len(node.children) == 2 and all(child.streaming for child in node.children)
    if node.kind in ("Aggregate", "Deduplicate", "DeduplicateWithinWatermark", "GlobalLimit"):
        return node.streaming
    return node.kind in BY_PLAN_NODE or node.kind in OTHER_STATEFUL


def _seconds(duration: str) -> float:
    from ...core.durations import parse_duration

    return parse_duration(duration, zero=True)  # a watermark delay, or a join's range: either may be zero


def _grouping(node: PlanNode) -> list[str]:
    return items(node.arguments[0]) if node.arguments else []


def _keys(node: PlanNode) -> str:
    """The key columns, by name: grouping expressions, deduplication keys, the join's column equalities,
    or the leading columns of the child of a transformWithState. (The printed plan holds no types: a key
    of another type than the state's is Spark's own state schema check to refuse.)"""
    arguments = node.arguments
    if node.kind in ("Aggregate", "Deduplicate", "DeduplicateWithinWatermark"):
        return _columns(items(arguments[0]))
    if node.kind == "FlatMapGroupsInPandasWithState":
        return _columns(items(arguments[1]))
    if node.kind == "GlobalLimit":
        return "the rows emitted"
    if node.kind == "Join":
        return _equalities(" ".join(arguments[1:]))
    if node.kind.startswith("TransformWithState") and node.children and node.children[0].kind == "Project":
        return _columns(items(node.children[0].arguments[0])[: int(arguments[1])])
    return "its own key"


def _columns(expressions: list[str]) -> str:
    return ", ".join(_name(expression) for expression in expressions)


def _name(expression: str) -> str:
    """A column's or an alias's name; an expression's own text, without the ids Spark numbers columns by."""
    body, name = named(expression)
    return name or re.sub(r"#\d+L?(-T\d+ms)?", "", body)


def _equalities(condition: str) -> str:
    """The column = column parts of a join condition (the join's state key), in order."""
    found = []
    for opening in (index for index, char in enumerate(condition) if char == "("):
        sides = split_top(enclosed(condition, opening), " = ")
        if len(sides) == 2 and all(column(side) for side in sides):
            found.append(" = ".join(_name(side) for side in sides))
    return ", ".join(found) or "no column equality"


def _window_columns(node: PlanNode) -> set[int]:
    """The ids of the columns at or below `node` that hold a time window: the struct of start and end
    Spark builds for it, named by an alias, taking its place in an Expand's output, or renamed after."""
    found: set[int] = set()
    for below in reversed(list(node.walk())):  # a column's making before its renaming
        if below.kind == "Expand":
            projection, output = items(items(below.arguments[0])[0]), items(below.arguments[1])
            found |= {
                made[1]
                for value, name in zip(projection, output, strict=False)
                if _window_struct(value) and (made := column(name))
            }
            continue
        for expression in (item for argument in below.arguments for item in items(argument)):
            *body, alias = split_top(expression, " AS ")
            made, source = column(alias), column(" AS ".join(body)) if body else None
            if made and body and (_window_struct(body[0]) or source and source[1] in found):
                found.add(made[1])
    return found


def _window_keys(node: PlanNode) -> list[bool]:
    """Whether each grouping column of an aggregation is a time window."""
    windows = _window_columns(node)
    return [(key := column(expression)) is not None and key[1] in windows for expression in _grouping(node)]


def _window_struct(expression: str) -> list[str] | None:
    """The arguments of the struct of start and end a time window is, if `expression` builds one."""
    for arguments in calls(expression, "named_struct"):
        if arguments[0:1] == ["start"] and arguments[2:3] == ["end"]:
            return arguments
    return None


def _window_shape(node: PlanNode) -> _WindowShape:
    """The window an aggregation groups by, read from the struct Spark builds for it below the
    aggregation: a time window's end is start + length (a Project, or for a sliding window an Expand
    with one projection per window an event falls in, whose start is rounded down to the slide); a
    session window's end is the event time + the gap (`time + gap`, printed without brackets)."""
    if node.kind != "Aggregate":
        return _WindowShape()
    for below in list(node.walk())[1:]:
        if is_stateful(below):
            break
        projections = items(below.arguments[0]) if below.kind == "Project" else []
        if below.kind == "Expand":
            projections = items(items(below.arguments[0])[0])
        for projection in projections:
            struct = _window_struct(projection)
            if struct is not None:
                return _struct_shape(struct[3], below)
    return _WindowShape()


# Functions Spark wraps a window's end in; their first argument is the end.
_WRAPPERS = re.compile(r"^(knownnullable|precisetimestampconversion|cast)\((.*)\)$", re.DOTALL)


def _unwrap(expression: str) -> str:
    while (match := _WRAPPERS.match(expression)) and enclosed(expression, match.start(2) - 1) == match.group(2):
        inner = split_top(match.group(2), ", ")[0]
        expression = split_top(inner, " as ")[0] if match.group(1) == "cast" else inner
    return expression


def _struct_shape(end: str, projecting: PlanNode) -> _WindowShape:
    end = _unwrap(end)
    session = split_top(end, " + ")
    if len(session) == 2:  # TimestampAddInterval: the event time + the gap
        gap = _unwrap(session[1])
        literal = "#" not in gap and "(" not in gap and " " in gap or gap.lstrip("-").isdigit()
        return _WindowShape(gap=_interval(gap) if literal else None, session=True)
    added = split_top(unwrapped(end), " + ")
    if len(added) != 2 or not added[1].isdigit():
        return _WindowShape()
    window = _microseconds(added[1])
    if projecting.kind != "Expand":
        return _WindowShape(window=window)
    slides = re.findall(r" % (\d+)\)", end)
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


# A day-time interval literal as Spark prints it: INTERVAL '0 00:15:00' DAY TO SECOND, INTERVAL '90' MINUTE.
_DAY_TIME = re.compile(r"INTERVAL '(-?)([\d :.]+)' (DAY|HOUR|MINUTE|SECOND)(?: TO (DAY|HOUR|MINUTE|SECOND))?")
_UNITS = {"DAY": 86_400_000_000, "HOUR": 3_600_000_000, "MINUTE": 60_000_000, "SECOND": 1_000_000}


def _join_range(node: PlanNode) -> str | None:
    """The longest time interval in a stream-stream join's condition: how long a row waits for matches."""
    if node.kind != "Join":
        return None
    spans = [_day_time(match) for match in _DAY_TIME.finditer(node.text)]
    return max((_microseconds(span) for span in spans), key=_seconds) if spans else None


def _day_time(match: re.Match[str]) -> int:
    units = list(_UNITS)
    first, last = units.index(match.group(3)), units.index(match.group(4) or match.group(3))
    parts = re.split(r"[ :]", match.group(2))
    micros = sum(round(float(part) * _UNITS[unit]) for part, unit in zip(parts, units[first : last + 1], strict=False))
    return -micros if match.group(1) else micros


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
    events = stand_in_input(spark, settings)  # the source's first, as a start reads them
    return query_result(
        spark, settings, events, None if settings.join_source is None else stand_in_input(spark, settings)
    )


def stand_in_input(spark: SparkSession, settings: Settings) -> DataFrame:
    """An input's stand-in: with query.quiet_input_after, its heartbeats' too (a stream of their own, as a start
    reads them: the guard counts the streams against the checkpoint's)."""
    stream = stand_in_stream(spark)
    return stream if settings.query.quiet_input_after is None else stream.unionByName(stand_in_stream(spark))


def stand_in_stream(spark: SparkSession) -> DataFrame:
    """A stream of EVENT_SCHEMA's columns, all null: an input's place in a plan that is only read."""
    from pyspark.sql import functions as F

    rate = spark.readStream.format("rate-micro-batch").option("rowsPerBatch", 1).load()
    return rate.select(*(F.lit(None).cast(column.dataType).alias(column.name) for column in user_query().EVENT_SCHEMA))


def query_result(
    spark: SparkSession, settings: Settings, events: DataFrame, join_events: DataFrame | None
) -> DataFrame:
    """stateful_query on `events`, and on join_events: join_source's stream where it is set, else None. A
    query that fails without join_events and reads them when given some is a SettingsError naming
    join_source (fit_problems holds a join_source the query leaves unread)."""
    from ...core.settings import SettingsError

    if join_events is not None:
        return _stateful_query(events, settings, join_events)
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
    """The ids of the columns the plan's sources give (each listed among a leaf's arguments)."""
    leaves = [node for node in analyzed_plan(frame).walk() if not node.children]
    listed = [items(argument) for leaf in leaves for argument in leaf.arguments]
    return {found[1] for columns in listed for item in columns if (found := column(item))}


def planned_operators(spark: SparkSession, settings: Settings) -> list[PlanOperator]:
    """The stateful operators of the project's query with these settings."""
    return read_plan(stand_in_result(spark, settings))


def checked_plan(settings: Settings) -> list[PlanOperator]:
    """The plan's operators, read in a local session of their own (nothing runs), and checked against
    the settings (fit_problems): a SettingsError names what does not fit."""
    from ...core.settings import SettingsError
    from ..spark.session import tool_session

    with tool_session("query-plan", {}, settings) as spark:
        plan = planned_operators(spark, settings)
        problems = fit_problems(spark, settings, plan)
    if problems:
        raise SettingsError(problems)
    return plan
