"""The stateful operators the machinery can size, and every fact it knows about each, in one table.

A query may chain any number of them (job/plan/query_plan.py reads which from Spark's plan). A rule
about an operator (what its state holds and how many rows, the rows it passes on, the names Spark
gives it in the plan and in the state metadata, the store it needs, how sample input is shaped for
it) is written here once; the sizing, the guard, the settings checks, the sample writer,
calibration and bench read it from here.
Standard library only: the template sizes the state through this module at generation time.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from . import real_time
from .durations import AVAILABLE_NOW, named_duration
from .figures import num, require_positive

# A row count and the working that led to it, for the report.
Rows = tuple[int, str]


def _aggregation_rows(
    rate: float,
    watermark_s: float,
    window: str,
    key_cardinality: int | None,
    slide: str | None = None,
    trigger: str = "10 seconds",
    upstream_window: str | None = None,
) -> Rows:
    # A window's state lives until the watermark passes its end: the windows that hold the newest
    # event and those ending within the watermark delay (and the batch it lags) before it. Windows
    # start every slide (a tumbling window slides by its length), so on average their ends fall
    # every slide over watermark + one batch + window.
    window_s = named_duration("window", window)
    slide_s = window_s if slide is None else named_duration("slide", slide)
    batch_s = batch_seconds(trigger)
    open_windows = (watermark_s + batch_s + window_s) / slide_s
    events_per_window = round(rate * window_s)
    if key_cardinality is None:
        keys, why = events_per_window, "key cardinality unknown: every event a new key, rate x window"
    else:
        require_positive("key_cardinality", key_cardinality)
        keys = min(int(key_cardinality), events_per_window)
        why = f"min({num(key_cardinality)} keys, {num(events_per_window)} events per window)"
    if upstream_window is not None:
        # Fed by a windowed aggregation: a window's rows come as the windows before it close, the first
        # one of them after it opens, and it closes with the last: it is open that share of the time.
        share = max(0.0, 1 - named_duration("upstream window", upstream_window) / window_s)
        rows = round(share * keys)
        return rows, (
            f"fed by {upstream_window} windows, a window of {window} is open {share:.2f} of the time"
            f" x {num(keys)} keys per window ({why}) = {num(rows)} rows"
        )
    rows = round(open_windows * keys)
    slides = f"slide {slide}" if slide else f"window {window} (tumbling)"
    return rows, (
        f"{open_windows:,.2f} open windows ((watermark {num(watermark_s)} s + one batch {num(batch_s)} s + window"
        f" {window}) / {slides}) x {num(keys)} keys per window ({why}) = {num(rows)} rows"
    )


def _keys(key_cardinality: int | None, events: float) -> tuple[int, str]:
    """The distinct keys among `events` events: all of them when the key cardinality is unknown."""
    if key_cardinality is None:
        return round(events), "key cardinality unknown: every event a new key"
    require_positive("key_cardinality", key_cardinality)
    return min(int(key_cardinality), round(events)), f"min({num(key_cardinality)} keys, {num(events)} events)"


def _kept_forever_rows(rate: float, key_cardinality: int | None, state_horizon: str, what: str) -> Rows:
    # Nothing drops a row: the state holds every key it has seen, and has no steady state. Its size
    # after the horizon stands in for the steady state.
    horizon_s = named_duration("state_horizon", state_horizon)
    keys, why = _keys(key_cardinality, rate * horizon_s)
    return keys, (
        f"no steady state: {what}, so the state only grows; after the horizon {state_horizon} (capacity.state_horizon)"
        f" it holds every key seen, {num(rate)} rows/s x {num(horizon_s)} s ({why}) = {num(keys)} rows"
    )


def _plain_aggregation_rows(
    rate: float, watermark_s: float, key_cardinality: int | None, state_horizon: str, evicts: bool = False
) -> Rows:
    # No window: one row per key. Without the event time among its keys nothing ever drops a row.
    if evicts:  # grouped by the watermarked event time itself: a row goes once the watermark passes it
        return _watermarked_key_rows(rate, watermark_s, key_cardinality)
    return _kept_forever_rows(
        rate, key_cardinality, state_horizon, "an aggregation without a window keeps a row per key"
    )


def _watermarked_key_rows(rate: float, watermark_s: float, key_cardinality: int | None, batch_s: float = 0.0) -> Rows:
    keys, why = _keys(key_cardinality, rate * (watermark_s + batch_s))
    return keys, (
        f"a row per key until the watermark passes its event time: {num(rate)} rows/s x (watermark"
        f" {num(watermark_s)} s + one batch {num(batch_s)} s) ({why}) = {num(keys)} rows"
    )


def _drop_duplicates_rows(
    rate: float, watermark_s: float, key_cardinality: int | None, state_horizon: str, trigger: str, evicts: bool = False
) -> Rows:
    if evicts:  # the event time is one of the columns: an id goes once the watermark passes its time
        return _watermarked_key_rows(rate, watermark_s, key_cardinality, batch_seconds(trigger))
    return _kept_forever_rows(
        rate,
        key_cardinality,
        state_horizon,
        "dropDuplicates without the watermarked event time among its columns keeps every id",
    )


def _session_rows(
    rate: float, watermark_s: float, gap: str, key_cardinality: int | None, trigger: str, **_: object
) -> Rows:
    # A session ends a gap after its last event and is kept until the watermark passes that end. A
    # key whose events come closer than the gap keeps one session open; otherwise each event opens
    # its own session, kept for gap + watermark + one batch.
    gap_s = named_duration("gap", gap)
    batch_s = batch_seconds(trigger)
    lifetime = gap_s + watermark_s + batch_s
    if key_cardinality is not None and key_cardinality <= rate * gap_s:
        require_positive("key_cardinality", key_cardinality)
        rows = int(key_cardinality)
        return rows, (
            f"{num(key_cardinality)} keys each seen within the gap {gap} ({num(rate)} rows/s x {num(gap_s)} s ="
            f" {num(rate * gap_s)} events): one open session per key = {num(rows)} rows"
        )
    rows = round(rate * lifetime)
    return rows, (
        f"a key seen less often than the gap {gap} opens a session per event, each kept for gap {num(gap_s)} s"
        f" + watermark {num(watermark_s)} s + one batch {num(batch_s)} s: {num(rate)} rows/s x {num(lifetime)} s"
        f" = {num(rows)} rows"
    )


def _pandas_state_rows(
    rate: float,
    watermark_s: float,
    timeout: str,
    state_timeout: str | None,
    key_cardinality: int | None,
    state_horizon: str,
    trigger: str,
) -> Rows:
    # Spark drops a key's row only when the function calls state.remove(); a timeout only calls the
    # function for a quiet key. Sized as the usual function is written: it removes the state of a
    # key that timed out, so a key stays for the timeout after its last event (and the watermark for
    # an event-time timeout), and one batch more since timeouts are seen between batches.
    if timeout == "none" or state_timeout is None:
        why = (
            "applyInPandasWithState without a timeout keeps a key until the function removes it"
            if timeout == "none"
            else f"its {timeout.replace('_', ' ')} timeout is not known to the estimate (set capacity.state_timeout)"
        )
        return _kept_forever_rows(rate, key_cardinality, state_horizon, why)
    timeout_s = named_duration("state_timeout", state_timeout)
    delay_s = watermark_s if timeout == "event_time" else 0.0
    batch_s = batch_seconds(trigger)
    keys, why = _keys(key_cardinality, rate * (timeout_s + delay_s + batch_s))
    return keys, (
        f"keys seen within the {timeout.replace('_', ' ')} timeout {num(timeout_s)} s + watermark {num(delay_s)} s"
        f" + one batch {num(batch_s)} s at {num(rate)} rows/s ({why}) = {num(keys)} rows, each removed by the function"
        " when it times out"
    )


def _limit_rows(rate: float, watermark_s: float) -> Rows:
    return 1, "one row, the count of rows emitted so far, in partition 0 = 1 row"


def _evicts(evicts: bool = True, **_: object) -> bool:
    return evicts


def _pandas_evicts(timeout: str = "none", state_timeout: str | None = None, **_: object) -> bool:
    return timeout != "none" and state_timeout is not None


def _no_delay(**_inputs: object) -> float:
    return 0.0


def _join_delay(join_range: str = "15 minutes", trigger: str = "10 seconds", **_: object) -> float:
    # A match can come the range after its left row, and both sides lag two batches (see _join_rows):
    # an operator after the join gets rows that much behind the watermark, and keeps state that much longer.
    return named_duration("join_range", join_range) + 2 * batch_seconds(trigger)


def batch_seconds(trigger: str) -> float:
    """The event time one batch covers at steady state: the trigger interval, a real-time batch's duration
    (its state is committed, and the watermark moves, at its end), none for available_now (whose batches
    are as large as the backlog)."""
    if trigger == AVAILABLE_NOW:
        return 0.0
    return named_duration("trigger", real_time.batch_duration(trigger) or trigger)


def _deduplication_rows(rate: float, watermark_s: float, trigger: str) -> Rows:
    # An id stays until the watermark passes its time plus the delay, and the watermark trails the
    # newest event by the delay and moves only between batches: 2 x watermark + one batch.
    batch_s = batch_seconds(trigger)
    rows = round(rate * (2 * watermark_s + batch_s))
    return rows, (
        f"(2 x watermark {num(watermark_s)} s + one batch {num(batch_s)} s) x {num(rate)} rows/s = {num(rows)} rows"
    )


# The join types, as Spark names them in the plan, that Spark also runs in update mode (an inner or left
# semi join emits nothing as a row leaves; an outer join is refused there: checked on Spark 4.2.1).
UPDATE_JOIN_TYPES = ("Inner", "LeftSemi")


def _join_rows(
    rate: float,
    watermark_s: float,
    join_input_rows_per_second: float | None,
    join_range: str,
    trigger: str,
    join_type: str,
) -> Rows:
    # A left row waits for right rows up to `range` after it, and those may be up to the watermark
    # late; a right row waits only for left rows still to come within the watermark. Measured
    # against Spark's numRowsTotal (tests/machinery/test_state_rows.py), each side also keeps two
    # batches more: the watermark moves only between batches. Inner and outer joins keep the same
    # rows (an outer join emits its unmatched rows as they leave). A left semi join drops a left row
    # at its first match, so the left side's figure is its bound: every left row unmatched.
    right_rate = rate if join_input_rows_per_second is None else join_input_rows_per_second
    require_positive("join_input_rows_per_second", right_rate)
    range_s = named_duration("join_range", join_range)
    batches_s = 2 * batch_seconds(trigger)
    left = round(rate * (watermark_s + range_s + batches_s))
    right = round(right_rate * (watermark_s + batches_s))
    semi = " (at most: a left semi join drops a left row at its first match)" if join_type == "LeftSemi" else ""
    return left + right, (
        f"left {num(rate)} rows/s x ({num(watermark_s)} s + range {num(range_s)} s + 2 batches {num(batches_s)} s)"
        f" = {num(left)}{semi} + right {num(right_rate)} rows/s x ({num(watermark_s)} s + 2 batches {num(batches_s)} s)"
        f" = {num(right)}; = {num(left + right)} rows"
    )


def _custom_state_rows(
    rate: float,
    watermark_s: float,
    session_timeout: str,
    key_cardinality: int | None,
    trigger: str,
    state_variables: Sequence[Any] | None = None,
    map_entries_per_key: float | None = None,
) -> Rows:
    # A key stays active until the watermark passes its last event plus the timeout, and its timer
    # fires only between batches: one batch more.
    timeout_s = named_duration("session_timeout", session_timeout)
    batch_s = batch_seconds(trigger)
    keys, why = _keys(key_cardinality, round(rate * (timeout_s + watermark_s + batch_s)))
    active = (
        f"active keys within timeout {num(timeout_s)} s + watermark {num(watermark_s)} s + one batch {num(batch_s)} s"
        f" at {num(rate)} rows/s ({why}) = {num(keys)}"
    )
    if not state_variables:  # the template's processor: one value state per key
        return keys, f"{active} rows"
    return _declared_rows(rate, batch_s, key_cardinality, keys, active, state_variables, map_entries_per_key or 1)


def _declared_rows(
    rate: float,
    batch_s: float,
    key_cardinality: int | None,
    keys: int,
    active: str,
    variables: Sequence[Any],
    map_entries: float,
) -> Rows:
    """The rows of a processor's declared state variables as Spark counts them: a value or a list
    (whatever its length) a row per key, a map a row per entry. A variable with a time to live keeps a
    key for that long after its last update; one without, for as long as a key is active."""
    rows, parts = 0, []
    for variable in variables:
        held, lifetime = keys, "active keys"
        if variable.ttl_seconds:
            held, _ = _keys(key_cardinality, round(rate * (variable.ttl_seconds + batch_s)))
            lifetime = f"keys within its ttl {num(variable.ttl_seconds)} s + one batch"
        per_key = map_entries if variable.kind == "MapState" else 1
        rows += round(held * per_key)
        entries = f" x {num(per_key)} entries (capacity.map_entries_per_key)" if variable.kind == "MapState" else ""
        parts.append(f"{variable}: {num(held)} {lifetime}{entries}")
    return rows, f"{active}; rows per variable (a list counts one row per key): {'; '.join(parts)} = {num(rows)} rows"


def _same_rate(rate: float, **_inputs: object) -> float:
    # At most every event passes (no repeat dropped, every session closing at once): an upper bound.
    return rate


def _rows_per_window(rate: float, window: str = "1 minute", key_cardinality: int | None = None, **_: object) -> float:
    # A closed window emits one row per key it saw: the keys of a window, once per window length.
    window_s = named_duration("window", window)
    keys = rate * window_s if key_cardinality is None else min(key_cardinality, rate * window_s)
    return keys / window_s


@dataclass(frozen=True)
class Operator:
    name: str
    # What the state holds, and the formula that counts its rows (printed in the sizing report).
    formula: str
    rows: Callable[..., Rows]
    # The operator's own sizing inputs (beyond rate and watermark), by their answer names.
    sizing_inputs: tuple[str, ...]
    # Why the state holds more rows than the headline (watermark x rate), when it does: one line.
    beyond_headline: str | None
    # The operator name Spark writes into the checkpoint's state metadata (the guard compares it).
    spark_name: str
    # The node of Spark's analyzed plan that is this operator (machinery/job/plan/query_plan.py reads it).
    plan_node: str
    # The rows per second it passes on to a stateful operator after it, from the rate into it and its
    # sizing inputs: the next operator's input rate unless capacity.operators sets one.
    output_rate: Callable[..., float]
    # How far behind the watermark, in event time, its output comes (from its sizing inputs): an
    # operator after it keeps its state that much longer.
    output_delay: Callable[..., float] = _no_delay
    # How long a state row stays (inspect --key says it for a key it finds or misses).
    held_until: str = ""
    # Why it runs on RocksDB only, or None when both stores can hold its state.
    rocksdb_only: str | None = None
    # Whether Spark can encode its state in Avro (state_store.encoding_format avro): transformWithState only.
    avro_encoding: bool = False
    # The modules its Python workers import beyond pyspark (pandas batches, Arrow, the state server's
    # protobuf messages), as `import` names them; the job names a missing one before the start.
    python_modules: tuple[str, ...] = ()
    # A stream-stream join reads a second input, join_source.
    two_inputs: bool = False
    # Output mode: Spark runs these in append mode only (a session window, an outer join, a limit);
    # an aggregation also emits updates, and a deduplication, an inner or a left semi join and
    # transformWithState (whatever mode its processor declares) run in either (tried on Spark 4.2.1).
    append_only: bool = False
    # The setting (under query) whose duration a state row lives on top of the watermark, if any.
    lifetime_setting: str | None = None
    # Sample input: distinct keys (None: a key per event, so a payment matches one order) and runs
    # of consecutive events sharing a key (visit sessions), and whether a file spans the lifetime
    # setting twice over (so that sessions end) instead of one watermark.
    sample_keys: int | None = 100
    sample_run_length: int = 1
    sample_spans_lifetime: bool = False
    # bench: the state holds one row per key from the first batch on (True), or every event until
    # the watermark passes it, growing batch by batch (False).
    state_per_key: bool = True
    # Whether its state drops rows (by the watermark or a timeout), from its sizing inputs: a state
    # that never does has no steady state, and the sizing chooses RocksDB for it.
    evicts: Callable[..., bool] = lambda **_: True
    # The measured operator whose store costs (sizing/store_costs.py) and rows per core
    # (sizing/core_rates.py) stand in for this one's, until they are measured: its state rows are
    # counted by its own rule, and the report names the stand-in.
    costs_like: str | None = None


OPERATORS: dict[str, Operator] = {
    op.name: op
    for op in (
        Operator(
            name="windowed_aggregation",
            plan_node="Aggregate",
            output_rate=_rows_per_window,
            formula=(
                "one row per (key, window) until the watermark passes the window's end:"
                " rows = open windows ((watermark + one batch + window) / slide) x keys per window"
            ),
            rows=_aggregation_rows,
            sizing_inputs=("window", "key_cardinality", "slide", "trigger"),
            beyond_headline=(
                "a window is kept until the watermark passes its end, so up to one window more than"
                " the watermark covers is open per key"
            ),
            spark_name="stateStoreSave",
            held_until="a (key, window) row stays until the watermark passes the window's end; then it is emitted and dropped",
            lifetime_setting="window",
        ),
        Operator(
            name="deduplication",
            plan_node="DeduplicateWithinWatermark",
            output_rate=_same_rate,
            formula=(
                "one row per event id, kept until the watermark passes the event's time plus the delay:"
                " rows = (2 x watermark + one batch) x rate"
            ),
            rows=_deduplication_rows,
            sizing_inputs=("trigger",),
            beyond_headline=(
                "an id is kept until the watermark, itself a delay behind the newest event, passes"
                " its time plus the delay: twice the watermark, and one batch since the watermark"
                " moves between batches"
            ),
            spark_name="dedupeWithinWatermark",
            held_until="an event id stays until the watermark passes its event time plus the delay (its expiry)",
            state_per_key=False,
        ),
        Operator(
            name="stream_stream_join",
            plan_node="Join",
            output_rate=_same_rate,
            output_delay=_join_delay,
            formula=(
                "each side keeps its rows until no row of the other side can match them:"
                " rows = left rate x (watermark + range + 2 batches) + right rate x (watermark + 2 batches)"
            ),
            rows=_join_rows,
            sizing_inputs=("join_input_rows_per_second", "join_range", "trigger", "join_type"),
            beyond_headline=(
                "a left row also waits the join range for its matches, and both sides keep two"
                " batches more since the watermark moves between batches"
            ),
            spark_name="symmetricHashJoin",
            held_until=(
                "a left row stays until the watermark passes its event time plus the join range, a right row until"
                " the watermark passes its event time; a row unmatched then is emitted with nulls (an outer join's"
                " side) and dropped; a left semi join drops a left row at its first match"
            ),
            two_inputs=True,
            append_only=True,
            lifetime_setting="join.range",
            sample_keys=None,
            state_per_key=False,
        ),
        Operator(
            name="custom_state",
            plan_node="TransformWithStateInPySpark",
            output_rate=_same_rate,
            formula=(
                "per active key, a row for each value or list state the processor declares (a list is one row"
                " whatever its length; the template's processor: one value state) and a row per entry of each map"
                " state; a key is active until the watermark passes its last event plus the session timeout, a"
                " variable with a time to live for that long: rows = active keys x rows per key"
            ),
            rows=_custom_state_rows,
            sizing_inputs=("session_timeout", "key_cardinality", "trigger", "state_variables", "map_entries_per_key"),
            beyond_headline=(
                "a key is kept until the watermark passes its last event plus the session timeout,"
                " and its timer fires between batches"
            ),
            spark_name="transformWithStateInPandasExec",
            held_until="a key stays until the watermark passes its last event plus the session timeout; then its session is emitted and dropped",
            rocksdb_only="Spark runs transformWithState only on RocksDB",
            avro_encoding=True,
            python_modules=("pandas", "pyarrow", "google.protobuf"),
            lifetime_setting="custom_state.session_timeout",
            sample_run_length=10,
            sample_spans_lifetime=True,
        ),
        Operator(
            name="session_window",
            costs_like="windowed_aggregation",
            plan_node="Aggregate",
            output_rate=_same_rate,
            formula=(
                "one row per session (key, session start) until the watermark passes the session's end:"
                " rows = open sessions"
            ),
            rows=_session_rows,
            sizing_inputs=("gap", "key_cardinality", "trigger"),
            beyond_headline="a session is kept for its gap after its last event, on top of the watermark",
            spark_name="sessionWindowStateStoreSaveExec",
            held_until="a session stays until the watermark passes its end (its last event plus the gap); then it is emitted and dropped",
            append_only=True,
        ),
        Operator(
            name="aggregation",
            costs_like="windowed_aggregation",
            plan_node="Aggregate",
            output_rate=_same_rate,
            formula="one row per key, never dropped (no window): rows = the keys seen",
            rows=_plain_aggregation_rows,
            sizing_inputs=("key_cardinality", "state_horizon", "evicts"),
            beyond_headline="nothing drops a key's row: the state holds every key it has seen",
            spark_name="stateStoreSave",
            held_until="a key's row stays for as long as the query runs (no window drops it)",
            evicts=_evicts,
        ),
        Operator(
            name="drop_duplicates",
            costs_like="deduplication",
            plan_node="Deduplicate",
            output_rate=_same_rate,
            formula=(
                "one row per distinct value of its columns; dropped once the watermark passes it only when the"
                " watermarked event time is one of them: rows = the ids seen, or rate x (watermark + one batch)"
            ),
            rows=_drop_duplicates_rows,
            sizing_inputs=("key_cardinality", "state_horizon", "trigger", "evicts"),
            beyond_headline="an id is kept until the watermark passes it, or for as long as the query runs",
            spark_name="dedupe",
            held_until=(
                "an id stays until the watermark passes its event time when the event time is one of the columns,"
                " otherwise for as long as the query runs"
            ),
            evicts=_evicts,
            state_per_key=False,
        ),
        Operator(
            name="pandas_state",
            costs_like="custom_state",
            plan_node="FlatMapGroupsInPandasWithState",
            output_rate=_same_rate,
            formula=(
                "one row per key with state (applyInPandasWithState), until the function removes it;"
                " rows = keys seen within the timeout"
            ),
            rows=_pandas_state_rows,
            sizing_inputs=("timeout", "state_timeout", "key_cardinality", "state_horizon", "trigger"),
            beyond_headline="a key is kept for its timeout after its last event, and a batch more",
            spark_name="applyInPandasWithState",
            held_until="a key's state stays until the function calls state.remove(); a timeout only calls the function",
            evicts=_pandas_evicts,
            python_modules=("pandas", "pyarrow"),
        ),
        Operator(
            name="limit",
            costs_like="deduplication",
            plan_node="GlobalLimit",
            output_rate=_same_rate,
            formula="one row holding the count of rows emitted so far: rows = 1",
            rows=_limit_rows,
            sizing_inputs=(),
            beyond_headline=None,
            spark_name="globalLimit",
            held_until="one row, the count of rows emitted, for as long as the query runs",
            append_only=True,
        ),
    )
}
NAMES = tuple(OPERATORS)
# The starters a project can be generated with: each one's stateful operators, in the order events
# reach them (the bake sizes them; the job reads them from the query's plan).
STARTERS: dict[str, tuple[str, ...]] = {
    name: (name,) for name in ("windowed_aggregation", "deduplication", "stream_stream_join", "custom_state")
} | {
    "deduplicated_count": ("deduplication", "windowed_aggregation"),
}


def operator(name: str) -> Operator:
    """The operator called `name`; a ValueError naming the choices otherwise."""
    if name not in OPERATORS:
        raise ValueError(f"operator must be one of {', '.join(NAMES)}, got {name!r}")
    return OPERATORS[name]


# The operator name Spark writes into the state metadata -> ours (stateStoreSave: a windowed
# aggregation, the commoner of the two aggregations that share it).
BY_SPARK_NAME = {op.spark_name: op.name for op in reversed(OPERATORS.values())}
# transformWithState's Row API (transformWithState, not ...InPandas) runs under another name.
BY_SPARK_NAME["transformWithStateInPySparkExec"] = "custom_state"
# The analyzed plan's node -> ours, where the node alone says it (an Aggregate is one of three: the
# plan reader tells them apart by their window).
BY_PLAN_NODE = {op.plan_node: op.name for op in OPERATORS.values() if op.plan_node != "Aggregate"}


def held_operator(spark_name: str, key_schema: dict | None) -> str:
    """Ours for an operator a checkpoint holds, given the key schema of its state when known: Spark
    writes `stateStoreSave` for an aggregation with and without a window; a window is in the key as a
    struct of start and end, whatever its column is called. Real-time mode's name is micro-batch's here."""
    spark_name = real_time.STATE_NAMES.get(spark_name, spark_name)
    name = BY_SPARK_NAME.get(spark_name, spark_name)
    if spark_name != OPERATORS["aggregation"].spark_name or key_schema is None:
        return name
    windowed = any(
        isinstance(column["type"], dict) and {f["name"] for f in column["type"].get("fields", [])} == {"start", "end"}
        for column in key_schema.get("fields", [])
    )
    return "windowed_aggregation" if windowed else "aggregation"


def measured_as(name: str) -> str:
    """The operator whose measured costs stand for `name`'s: its own when measured."""
    return OPERATORS[name].costs_like or name
