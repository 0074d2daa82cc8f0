"""Synthetic events made from EVENT_SCHEMA alone, for a query module without sample_event or
events_from_rate: the demo, calibration and bench then need nothing but the schema.

Each column plays a role, told by its type and name: the event time (the first timestamp column),
the key (a string column named `key` or ending in `_key`, else the first string column that is not
the id), the id (a string column named `id` or ending in `_id`: unique per event), and any other
column a value of its type that follows the event's number.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # Spark is imported only when a command needs it
    from pyspark.sql import Column, DataFrame
    from pyspark.sql.types import StructType


class SchemaRolesError(ValueError):
    """The schema lacks a column synthetic events need; the message names it and the way out."""


@dataclass(frozen=True)
class Roles:
    event_time: str
    key: str | None
    id: str | None


def roles(schema: StructType) -> Roles:
    """Which columns are the event time, the key and the id."""
    times = [f.name for f in schema.fields if f.dataType.typeName() == "timestamp"]
    if not times:
        raise SchemaRolesError(
            "EVENT_SCHEMA has no timestamp column for the event time; add one, or define sample_event and"
            " events_from_rate in query.py"
        )
    strings = [f.name for f in schema.fields if f.dataType.typeName() == "string"]
    ids = [name for name in strings if name.lower() == "id" or name.lower().endswith("_id")]
    keys = [name for name in strings if name.lower() == "key" or name.lower().endswith("_key")]
    others = [name for name in strings if name not in ids]
    key = (keys or others)[0] if keys or others else None
    return Roles(times[0], key, ids[0] if ids else None)


def schema_event(schema: StructType, number: int, key: str, event_time: datetime, side: str) -> dict[str, Any]:
    """Event `number` as JSON values: its key, its time, an id unique per event and side."""
    found = roles(schema)
    event: dict[str, Any] = {}
    for field in schema.fields:
        kind = field.dataType.typeName()
        if field.name == found.event_time:
            event[field.name] = event_time.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
        elif field.name == found.key:
            event[field.name] = key
        elif field.name == found.id:
            event[field.name] = f"{'pay' if side == 'right' else 'evt'}-{number}"
        else:
            event[field.name] = _value(kind, field.name, number, event_time)
    return event


def _value(kind: str, name: str, number: int, event_time: datetime) -> Any:
    if kind in ("integer", "long", "short", "byte"):
        return number % 100
    if kind in ("double", "float") or kind.startswith("decimal"):
        return round(number % 1000 / 10, 1)
    if kind == "boolean":
        return number % 2 == 0
    if kind == "date":
        return event_time.date().isoformat()
    if kind == "timestamp":
        return event_time.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    if kind == "string":
        return f"{name}-{number % 10}"
    return None  # a nested type: left null


def schema_events_from_rate(schema: StructType, rate: DataFrame, keys: int) -> DataFrame:
    """Spark's rate source rows (timestamp, value) as EVENT_SCHEMA events over `keys` distinct keys."""
    from pyspark.sql import functions as F

    found = roles(schema)
    value = F.col("value")

    def column(name: str, kind: Any) -> Column:
        if name == found.event_time:
            return F.col("timestamp")
        if name == found.key:
            return F.format_string("key-%d", value % keys)
        if name == found.id:
            return F.format_string("rate-%d", value)
        if kind.typeName() == "string":
            return F.format_string(f"{name}-%d", value % 10)
        if kind.typeName() in ("integer", "long", "short", "byte", "double", "float", "boolean"):
            return (value % 100).cast(kind)
        return F.lit(None).cast(kind)

    return rate.select(*(column(f.name, f.dataType).alias(f.name) for f in schema.fields))
