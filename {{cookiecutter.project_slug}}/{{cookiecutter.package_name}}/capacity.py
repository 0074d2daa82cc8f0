"""State store sizing: the napkin math that picks the provider.

The headline is the seed rule, rows = watermark x input rate. Each operator then counts its own
rows (FORMULAS); bytes = rows x bytes per row; per partition = bytes / partitions; projected =
per partition x growth factor. At or above 1 GiB per partition: RocksDB.

Standard library only, no relative imports: the template's hooks load this very file (the
pre-generation hook from the template, the post-generation hook from the generated project),
under cookiecutter's Python, so the estimate exists once.
"""

from __future__ import annotations

import math
import re
from dataclasses import asdict, dataclass

GIB = 1024**3
ROCKSDB_THRESHOLD_BYTES = GIB
# Below the threshold but within this share of it, the report warns that growth may cross it.
NEAR_THRESHOLD_SHARE = 0.25
ASSUMED_BYTES_PER_ROW = (
    "state_bytes_per_row as given, an assumption: `estimate --calibrate` measures it for this query and provider"
)

# What each stateful operator keeps, and so which formula sizes it.
FORMULAS = {
    "windowed_aggregation": (
        "one row per (key, window) until the watermark passes the window's end: rows = open windows x keys per window"
    ),
    "deduplication": "one row per event id, kept until the watermark passes the event's time: rows = watermark x rate",
    "stream_stream_join": (
        "each side keeps its rows until no row of the other side can match them:"
        " rows = left rate x (watermark + range) + right rate x watermark"
    ),
    "custom_state": (
        "one value-state row (and one timer) per active key, until the watermark passes its last event"
        " plus the session timeout: rows = active keys"
    ),
}
# The operator-specific inputs, their defaults, and the setting each comes from.
SHAPE_DEFAULTS = {
    "window": "1 minute",
    "key_cardinality": None,  # unknown: every event may be a new key (the upper bound)
    "join_input_rows_per_second": None,  # unknown: the same as the input rate
    "join_range": "15 minutes",
    "session_timeout": "30 minutes",
}
SHAPE_INPUTS = {
    "windowed_aggregation": ("window", "key_cardinality"),
    "deduplication": (),
    "stream_stream_join": ("join_input_rows_per_second", "join_range"),
    "custom_state": ("session_timeout", "key_cardinality"),
}
UNSET_MEANS = {
    "key_cardinality": "unknown, so every event is taken as a new key (the upper bound; set it for a tighter figure)",
    "join_input_rows_per_second": "not set, so the input rate is used",
}
SHAPE_SETTINGS = {
    "window": "query.window",
    "key_cardinality": "capacity.key_cardinality",
    "join_input_rows_per_second": "capacity.join_input_rows_per_second",
    "join_range": "query.join.range",
    "session_timeout": "query.custom_state.session_timeout",
}

# Units Spark's interval parser accepts for a watermark. Months and years are refused on
# purpose: Spark counts a month as 31 days there, which is never what a user means.
_UNIT_SECONDS = {
    "microsecond": 1e-6,
    "millisecond": 1e-3,
    "second": 1.0,
    "minute": 60.0,
    "hour": 3600.0,
    "day": 86400.0,
    "week": 604800.0,
}
_PAIR = re.compile(r"(\d+(?:\.\d+)?)\s+([a-z]+?)s?(?=\s|$)")


class DurationError(ValueError):
    """A duration string that Spark would not accept (or that is not positive)."""


def parse_duration(text: str) -> float:
    """Seconds in a Spark interval string such as "10 minutes" or "1 hour 30 minutes"."""
    if not isinstance(text, str):
        raise DurationError(f"expected text such as '10 minutes', got {text!r}")
    body = text.strip().lower()
    if body.startswith("interval "):
        body = body[len("interval ") :].strip()
    if not body:
        raise DurationError("is empty; write a number and a unit, such as '10 minutes'")
    seconds = 0.0
    position = 0
    for match in _PAIR.finditer(body):
        if body[position : match.start()].strip():
            break
        number, unit = match.groups()
        if unit in ("month", "year"):
            raise DurationError(f"{text!r} uses {unit}s; write it in days or weeks instead")
        if unit not in _UNIT_SECONDS:
            raise DurationError(f"{text!r} has an unknown unit {unit!r}; use {_unit_list()}")
        seconds += float(number) * _UNIT_SECONDS[unit]
        position = match.end()
    if position == 0 or body[position:].strip():
        raise DurationError(
            f"{text!r} is not an interval Spark can parse; write '<number> <unit>' with a unit "
            f"among {_unit_list()}, such as '30 seconds' or '2 hours'"
        )
    if seconds <= 0:
        raise DurationError(f"{text!r} must be longer than zero")
    return seconds


def _unit_list() -> str:
    return ", ".join(f"{unit}s" for unit in _UNIT_SECONDS)


@dataclass(frozen=True)
class Estimate:
    """The sizing inputs and what they imply for one query."""

    operator: str
    formula: str
    input_rows_per_second: float
    watermark: str
    watermark_seconds: float
    # The seed rule, watermark x rate: the headline, and exact for deduplication.
    headline_rows: int
    # The operator's own formula with its figures, and the inputs it used.
    rows_working: str
    shape: dict[str, object]
    state_bytes_per_row: int
    # Where state_bytes_per_row comes from: a guess until `estimate --calibrate` measures it.
    bytes_per_row_source: str
    shuffle_partitions: int
    growth_factor: float
    rows: int
    total_bytes: int
    bytes_per_partition: int
    projected_bytes_per_partition: int
    threshold_bytes: int
    recommended_provider: str

    def to_dict(self) -> dict[str, object]:
        return asdict(self)


def estimate(
    input_rows_per_second: float,
    watermark: str,
    state_bytes_per_row: int,
    shuffle_partitions: int,
    growth_factor: float = 1.0,
    operator: str = "windowed_aggregation",
    bytes_per_row_source: str = ASSUMED_BYTES_PER_ROW,
    **shape: object,
) -> Estimate:
    """Napkin math for the state a watermarked query keeps; see the module docstring.

    `shape` takes the operator's own inputs (SHAPE_DEFAULTS names them); None means the default.
    """
    if operator not in FORMULAS:
        raise ValueError(f"operator must be one of {', '.join(FORMULAS)}, got {operator!r}")
    unknown = sorted(set(shape) - set(SHAPE_DEFAULTS))
    if unknown:
        raise ValueError(f"unknown sizing input {unknown[0]!r}; use {', '.join(SHAPE_DEFAULTS)}")
    _require_positive("input_rows_per_second", input_rows_per_second)
    _require_positive("state_bytes_per_row", state_bytes_per_row)
    _require_positive("shuffle_partitions", shuffle_partitions)
    if growth_factor < 1:
        raise ValueError(f"growth_factor must be 1 or more (state does not shrink), got {growth_factor}")
    seconds = _positive_duration("watermark", watermark)
    inputs = {name: SHAPE_DEFAULTS[name] if shape.get(name) is None else shape[name] for name in SHAPE_INPUTS[operator]}
    rows, working = _ROWS[operator](input_rows_per_second, seconds, **inputs)
    total_bytes = rows * state_bytes_per_row
    per_partition = total_bytes // shuffle_partitions
    projected = round(per_partition * growth_factor)
    provider = "rocksdb" if projected >= ROCKSDB_THRESHOLD_BYTES else "hdfs"
    return Estimate(
        operator=operator,
        formula=FORMULAS[operator],
        input_rows_per_second=input_rows_per_second,
        watermark=watermark,
        watermark_seconds=seconds,
        headline_rows=round(seconds * input_rows_per_second),
        rows_working=working,
        shape=inputs,
        state_bytes_per_row=state_bytes_per_row,
        bytes_per_row_source=bytes_per_row_source,
        shuffle_partitions=shuffle_partitions,
        growth_factor=growth_factor,
        rows=rows,
        total_bytes=total_bytes,
        bytes_per_partition=per_partition,
        projected_bytes_per_partition=projected,
        threshold_bytes=ROCKSDB_THRESHOLD_BYTES,
        recommended_provider=provider,
    )


def _aggregation_rows(rate: float, watermark_s: float, window: str, key_cardinality: int | None) -> tuple[int, str]:
    # A window's state lives until the watermark passes its end: the window holding the newest
    # event plus those ending within the watermark delay before it.
    window_s = _positive_duration("window", window)
    open_windows = math.ceil(watermark_s / window_s) + 1
    events_per_window = round(rate * window_s)
    if key_cardinality is None:
        keys, why = events_per_window, "key cardinality unknown: every event a new key, rate x window"
    else:
        _require_positive("key_cardinality", key_cardinality)
        keys = min(int(key_cardinality), events_per_window)
        why = f"min({num(key_cardinality)} keys, {num(events_per_window)} events per window)"
    rows = open_windows * keys
    return rows, (
        f"{open_windows} open windows (watermark / window {window}, rounded up, + 1)"
        f" x {num(keys)} keys per window ({why}) = {num(rows)} rows"
    )


def _deduplication_rows(rate: float, watermark_s: float) -> tuple[int, str]:
    rows = round(rate * watermark_s)
    return rows, f"{num(watermark_s)} s x {num(rate)} rows/s = {num(rows)} rows"


def _join_rows(
    rate: float, watermark_s: float, join_input_rows_per_second: float | None, join_range: str
) -> tuple[int, str]:
    # A left row waits for right rows up to `range` after it, and those may be up to the watermark
    # late; a right row waits only for left rows still to come within the watermark.
    right_rate = rate if join_input_rows_per_second is None else join_input_rows_per_second
    _require_positive("join_input_rows_per_second", right_rate)
    range_s = _positive_duration("join_range", join_range)
    left = round(rate * (watermark_s + range_s))
    right = round(right_rate * watermark_s)
    return left + right, (
        f"left {num(rate)} rows/s x ({num(watermark_s)} s + range {num(range_s)} s) = {num(left)}"
        f" + right {num(right_rate)} rows/s x {num(watermark_s)} s = {num(right)}; = {num(left + right)} rows"
    )


def _custom_state_rows(
    rate: float, watermark_s: float, session_timeout: str, key_cardinality: int | None
) -> tuple[int, str]:
    # A key stays active until the watermark passes its last event plus the timeout.
    timeout_s = _positive_duration("session_timeout", session_timeout)
    events = round(rate * (timeout_s + watermark_s))
    if key_cardinality is None:
        keys, why = events, "key cardinality unknown: every event a new key"
    else:
        _require_positive("key_cardinality", key_cardinality)
        keys, why = min(int(key_cardinality), events), f"min({num(key_cardinality)} keys, {num(events)} events)"
    return keys, (
        f"active keys within timeout {num(timeout_s)} s + watermark {num(watermark_s)} s"
        f" at {num(rate)} rows/s ({why}) = {num(keys)} rows"
    )


_ROWS = {
    "windowed_aggregation": _aggregation_rows,
    "deduplication": _deduplication_rows,
    "stream_stream_join": _join_rows,
    "custom_state": _custom_state_rows,
}


def _positive_duration(name: str, text: object) -> float:
    try:
        return parse_duration(text)  # type: ignore[arg-type]
    except DurationError as error:
        raise DurationError(f"{name} {error}") from None


def _require_positive(name: str, value: float) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0:
        raise ValueError(f"{name} must be a number greater than zero, got {value!r}")


@dataclass(frozen=True)
class Decision:
    """The provider and changelog setting a project gets, and why."""

    provider: str
    changelog_checkpointing: bool
    against_recommendation: bool
    notes: tuple[str, ...]


def decide(requested_provider: str, changelog_checkpointing: bool, sizing: Estimate) -> Decision:
    """Resolve `auto`, honour an explicit choice, and drop changelog where it cannot apply."""
    if requested_provider not in ("auto", "hdfs", "rocksdb"):
        raise ValueError(f"provider must be auto, hdfs or rocksdb, got {requested_provider!r}")
    recommended = sizing.recommended_provider
    notes = []
    if sizing.operator == "custom_state":
        # Spark runs transformWithState on the RocksDB store only, whatever the size.
        if requested_provider == "hdfs":
            raise ValueError(
                "custom_state needs the rocksdb state store (Spark runs transformWithState only on RocksDB);"
                " answer rocksdb or auto for state_store_provider"
            )
        if recommended == "hdfs":
            notes.append("rocksdb although the sizing says hdfs: Spark runs transformWithState only on RocksDB.")
        recommended = "rocksdb"
    provider = recommended if requested_provider == "auto" else requested_provider
    against = provider != recommended
    if against:
        notes.append(
            f"WARNING: you chose {provider} but the sizing recommends {recommended} "
            f"({human_bytes(sizing.projected_bytes_per_partition)} per partition against a "
            f"{human_bytes(sizing.threshold_bytes)} threshold). Your choice is kept; check it "
            "before the first run, because the provider cannot be changed once the checkpoint exists."
        )
    changelog = changelog_checkpointing
    if changelog and provider == "hdfs":
        changelog = False
        notes.append(
            "changelog checkpointing is written as off: it is a RocksDB feature and the "
            "HDFS-backed store always writes its own delta files."
        )
    return Decision(provider, changelog, against, tuple(notes))


def report(sizing: Estimate, decision: Decision | None = None) -> str:
    """The sizing report: every step of the napkin math, the recommendation and its reasons."""
    e = sizing
    share = e.projected_bytes_per_partition / e.threshold_bytes
    lines = [
        "State store sizing (napkin math)",
        f"  operator       = {e.operator}: {e.formula}",
        f"  headline       = watermark {e.watermark} ({num(e.watermark_seconds)} s)"
        f" x {num(e.input_rows_per_second)} rows/s = {num(e.headline_rows)} rows (state kept for the watermark)",
        f"  state rows     = {e.rows_working}",
        f"  inputs         = {_inputs(e)}",
        f"  bytes per row  = {num(e.state_bytes_per_row)} B: {e.bytes_per_row_source}",
        f"  state bytes    = {num(e.rows)} rows x {num(e.state_bytes_per_row)} B"
        f" = {num(e.total_bytes)} B ({human_bytes(e.total_bytes)})",
        f"  per partition  = {num(e.total_bytes)} B / {num(e.shuffle_partitions)} partitions"
        f" = {num(e.bytes_per_partition)} B ({human_bytes(e.bytes_per_partition)})",
        f"  with growth    = x{num(e.growth_factor)} = {num(e.projected_bytes_per_partition)} B"
        f" per partition ({share:.1%} of the {human_bytes(e.threshold_bytes)} threshold)",
        f"  recommendation = {e.recommended_provider}: {_reason(e, share)}",
    ]
    if decision is not None:
        changelog = "on" if decision.changelog_checkpointing else "off"
        lines.append(f"  chosen         = {decision.provider}, changelog checkpointing {changelog}")
        lines.extend(f"  {note}" for note in decision.notes)
    lines.append(
        "  Note: the provider and the number of shuffle partitions are pinned into the checkpoint"
        " at the first run; Spark ignores later changes to either. Changing them means a new"
        " checkpoint and reprocessing."
    )
    return "\n".join(lines)


def _inputs(e: Estimate) -> str:
    """The operator's own inputs, where each is set, and which are still guesses."""
    if not e.shape:
        return "watermark and rate only"
    parts = []
    for name, value in e.shape.items():
        shown = UNSET_MEANS[name] if value is None else num(value) if isinstance(value, (int, float)) else value
        parts.append(f"{name} {shown} ({SHAPE_SETTINGS[name]})")
    return "; ".join(parts)


def _reason(e: Estimate, share: float) -> str:
    if e.recommended_provider == "rocksdb":
        return (
            "at or above 1 GiB per partition, state held in the JVM heap brings long GC pauses and"
            " out-of-memory failures; RocksDB keeps it in native memory and on local disk."
        )
    reason = "below 1 GiB per partition the HDFS-backed store keeps all state in JVM memory without GC trouble, and it is the fastest per row."
    if share >= NEAR_THRESHOLD_SHARE:
        reason += (
            " It is within 4x of the threshold: if the rate or key space may grow, choose rocksdb"
            " now, since the provider cannot be switched later."
        )
    return reason


def num(value: float) -> str:
    if float(value).is_integer():
        return f"{int(value):,}"
    return f"{value:,.3f}".rstrip("0")


def human_bytes(value: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(value) < 1024 or unit == "TiB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    raise AssertionError("unreachable")
