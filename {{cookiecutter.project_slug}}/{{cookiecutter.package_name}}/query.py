{%- set op = "drop_duplicates" if cookiecutter.real_time and cookiecutter.stateful_operator == "deduplication" else cookiecutter.stateful_operator -%}
"""Your query: the events it reads, the stateful steps it runs, and how a sample event looks.

This module is yours to edit, and the query may hold any stateful operators Spark allows, chained:
the machinery (the `machinery` folder beside it) reads them from the plan of what stateful_query
returns, and sizes, guards and inspects each. It calls exactly the names listed in
machinery/core/contract.py: EVENT_SCHEMA and stateful_query, and where defined OPERATOR, Params,
events_from_rate and sample_event. Keep the functions pure DataFrame -> DataFrame: the same code
runs on the stream in the job and on batch data in tests/test_query.py.
"""

from __future__ import annotations

from datetime import UTC, datetime{{ ", timedelta" if op == "stream_stream_join" else "" }}

from pydantic import BaseModel, ConfigDict
from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from pyspark.sql.types import StringType, StructField, StructType, TimestampType

{% if op == "stream_stream_join" -%}
from .machinery.core.durations import parse_duration
{% endif -%}
from .machinery.core.settings import QuerySettings

{% if op != "deduplicated_count" -%}
# The starter this project was generated with. Only the sample input follows it: the sizing, the
# guard and the tools follow the operators of the query below, read from Spark's plan.
OPERATOR = "{{ op }}"

{% endif -%}

# The events, declared once: the files and Kafka sources parse with it and never infer it, so that a
# stray file with an extra or renamed field cannot change the query's columns under a checkpoint.
EVENT_SCHEMA = StructType(
    [
        StructField("event_id", StringType()),
        StructField("key", StringType()),
        StructField("event_time", TimestampType()),
    ]
)
EVENT_COLUMNS = tuple(EVENT_SCHEMA.fieldNames())


class Params(BaseModel):
    """The query's own parameters: query.params in settings.yaml, checked at start like every setting
    and overridable the same way ({{ cookiecutter.package_name | upper }}_QUERY__PARAMS__IGNORED_KEYS='["key-0"]')."""

    model_config = ConfigDict(extra="forbid")
    # Events of these keys (test or internal traffic, say) are left out before any state is kept.
    ignored_keys: list[str] = []


def wanted(events: DataFrame, query: QuerySettings) -> DataFrame:
    """The events the query counts: a stateless step before the stateful ones."""
    return events.where(~F.col("key").isin(query.params.ignored_keys))
{%- if op != "deduplicated_count" %}


def events_from_rate(rate: DataFrame, keys: int) -> DataFrame:
    """Spark's rate source rows (timestamp, value) as events spread over `keys` distinct keys."""
    return rate.select(
        F.format_string("rate-%d", F.col("value")).alias("event_id"),
        F.format_string("key-%d", F.col("value") % keys).alias("key"),
        F.col("timestamp").alias("event_time"),
    )
{%- endif %}
{%- if op == "windowed_aggregation" %}


def stateful_query(events: DataFrame, query: QuerySettings, join_events: DataFrame | None = None) -> DataFrame:
    """Events per key and tumbling window; a window's state is dropped once the watermark passes it."""
    return (
        wanted(events, query)
        .withWatermark("event_time", query.watermark)
        .groupBy(F.window("event_time", query.window).alias("window"), "key")
        .agg(F.count(F.lit(1)).alias("events"))
        .select(
            F.col("window.start").alias("window_start"),
            F.col("window.end").alias("window_end"),
            "key",
            "events",
        )
    )
{%- elif op == "deduplicated_count" %}


def stateful_query(events: DataFrame, query: QuerySettings, join_events: DataFrame | None = None) -> DataFrame:
    """Each event_id counted once, per key and tumbling window: two stateful operators in a chain.

    The first keeps each event id until the watermark passes its time plus the delay (a source that
    delivers at least once repeats events); the second keeps a count per (key, window) until the
    watermark passes the window's end, and writes it then.
    """
    unique = (
        wanted(events, query).withWatermark("event_time", query.watermark).dropDuplicatesWithinWatermark(["event_id"])
    )
    return (
        unique.groupBy(F.window("event_time", query.window).alias("window"), "key")
        .agg(F.count(F.lit(1)).alias("events"))
        .select(
            F.col("window.start").alias("window_start"),
            F.col("window.end").alias("window_end"),
            "key",
            "events",
        )
    )
{%- elif op == "deduplication" %}


def stateful_query(events: DataFrame, query: QuerySettings, join_events: DataFrame | None = None) -> DataFrame:
    """Each event_id once, as long as its repeats come within the watermark delay of the first.

    State holds one row per event id until the watermark passes the event's time plus the delay, so
    it stays bounded. An event whose time plus the delay is already behind the watermark is dropped
    as too late: its id may have been evicted, so it could not be checked.
    """
    watermarked = wanted(events, query).withWatermark("event_time", query.watermark)
    return watermarked.dropDuplicatesWithinWatermark(["event_id"]).select(*EVENT_COLUMNS)
{%- elif op == "drop_duplicates" %}


def stateful_query(events: DataFrame, query: QuerySettings, join_events: DataFrame | None = None) -> DataFrame:
    """Each event once: a repeat (the same event_id and event_time, as a source that delivers at least once
    repeats an event) is dropped, in Spark's real-time mode. A retry that carries a new event time is a new
    event here.

    Real-time mode runs dropDuplicates, not dropDuplicatesWithinWatermark; with the watermarked event time
    among its columns, state holds each (id, time) until the watermark passes the time, so it stays bounded.
    An event older than the watermark is dropped as too late. By the id alone: dropDuplicates(["event_id"])
    keeps every id for ever, or an interval query.trigger runs dropDuplicatesWithinWatermark(["event_id"])
    (docs/settings.md, "Real-time mode").
    """
    watermarked = wanted(events, query).withWatermark("event_time", query.watermark)
    return watermarked.dropDuplicates(["event_id", "event_time"]).select(*EVENT_COLUMNS)
{%- elif op == "stream_stream_join" %}


def stateful_query(events: DataFrame, query: QuerySettings, join_events: DataFrame | None = None) -> DataFrame:
    """Each left event (source) with the right events (join_source) of its key up to join.range after it.

    Both sides carry the watermark, and the time range bounds the state: a left row is kept until the
    watermark passes its time plus the range, a right row until the watermark passes its own time.
    left_outer also emits a left row that found no match, with nulls, once the watermark passes it.
    """
    if join_events is None:
        raise ValueError("stream_stream_join needs the events of join_source")
    span = timedelta(seconds=parse_duration(query.join.range))
    left = wanted(events, query).withWatermark("event_time", query.watermark).select(*EVENT_COLUMNS)
    right = join_events.withWatermark("event_time", query.watermark).select(
        F.col("key").alias("join_key"),
        F.col("event_id").alias("join_event_id"),
        F.col("event_time").alias("join_event_time"),
    )
    condition = (
        (left.key == right.join_key)
        & (right.join_event_time >= left.event_time)
        & (right.join_event_time <= left.event_time + F.lit(span))
    )
    # join.type is inner or left_outer (settings allow no other), both Spark join type names as they are.
    return left.join(right, condition, query.join.type).select(*EVENT_COLUMNS, "join_event_id", "join_event_time")
{%- elif op == "custom_state" %}


def stateful_query(events: DataFrame, query: QuerySettings, join_events: DataFrame | None = None) -> DataFrame:
    """Closed visit sessions per key (sessions.py), emitted when the watermark passes their last event
    plus the session timeout."""
    from .sessions import sessions  # imports pandas only when the query is built

    custom = query.custom_state
    return sessions(wanted(events, query), query.watermark, custom.session_timeout, custom.recent_events)
{%- endif %}

{%- if op == "deduplicated_count" %}


def sample_event(number: int, key: str, event_time: datetime, side: str = "left") -> dict[str, str] | None:
    """Synthetic event `number` as JSON values (sample-input, calibration).

    Every fourth event repeats the one before it (the same id, key and time), as a source that
    delivers at least once sometimes does: the deduplication drops it, and the counts stay exact.
    """
    if number % 4 == 3 and _last_event.get("event_id") == f"evt-{number - 1}":
        return dict(_last_event)
    _last_event.clear()
    _last_event.update({"event_id": f"evt-{number}", "key": key, "event_time": _iso(event_time)})
    return dict(_last_event)


_last_event: dict[str, str] = {}
{%- else %}


def sample_event(number: int, key: str, event_time: datetime, side: str = "left") -> dict[str, str] | None:
    """Synthetic event `number` as JSON values (sample-input, calibration).
{%- if op == "stream_stream_join" %}

    side "right" is the payment of order `number`: none for every fifth order, so that left_outer
    has unmatched orders to show.
    """
    if side == "right":
        if number % 5 == 4:
            return None
        return {"event_id": f"pay-{number}", "key": key, "event_time": _iso(event_time)}
{%- else %}"""
{%- endif %}
    return {"event_id": f"evt-{number}", "key": key, "event_time": _iso(event_time)}
{%- endif %}


def _iso(moment: datetime) -> str:
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
