"""Heartbeats for a quiet input (query.quiet_input_after): its event time, and so its watermark, follows the clock.

Spark moves a watermark only with events. An input that has brought no rows for query.quiet_input_after
gets beats: the driver (job/run/beats.py) writes the wall clock less quiet_input_after into a file on its
own machine, and a Python stream source per input (HeartbeatSource) reads the newest beat at each trigger
and passes it on as one event, unioned into the input before the user's query. The query's withWatermark
sees its event time and the watermark moves; an event that arrives afterwards behind the watermark is late,
as any late event. While an input brings rows, even old ones (a backlog after an outage), it gets no beat.

A heartbeat is an event of EVENT_SCHEMA: its key column HEARTBEAT_MARK:<section>, its other text columns
HEARTBEAT_MARK, its event time the beat, any other column null. A stateful operator keeps a few rows of it
(one key per input), and its results are taken out before the sink by the key (without_heartbeats).
The source's offset is the beat's time: a batch run again after a crash passes the same beat.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.datasource import DataSource, SimpleDataSourceStreamReader
from pyspark.sql.types import StructType

from ...core.contract import user_query
from ...core.settings import Settings
from .schema_events import SchemaRolesError, roles

HEARTBEAT_FORMAT = "quiet_input_heartbeat"
HEARTBEAT_MARK = "__heartbeat__"
# Each input's rows per batch, as the batch's observed metrics "<section>.arrived" (BeatClock reads them).
ARRIVED_OBSERVATION = "arrived"


def heartbeat_key(section: str) -> str:
    return f"{HEARTBEAT_MARK}:{section}"


class HeartbeatSource(DataSource):
    """Options: schema (EVENT_SCHEMA as JSON), section, beats (the file the driver writes the beats to)."""

    @classmethod
    def name(cls) -> str:
        return HEARTBEAT_FORMAT

    def schema(self) -> StructType:
        return StructType.fromJson(json.loads(self.options["schema"]))

    def simpleStreamReader(self, schema: StructType) -> SimpleDataSourceStreamReader:
        return BeatReader(schema, self.options["section"], Path(self.options["beats"]))


class BeatReader(SimpleDataSourceStreamReader):
    """Runs in a Python worker on the driver's machine, where the beats file is."""

    def __init__(self, schema: StructType, section: str, beats: Path) -> None:
        self._schema, self._section, self._beats = schema, section, beats

    def initialOffset(self) -> dict:
        return {"beat_ms": 0}

    def read(self, start: dict) -> tuple[Iterator[tuple], dict]:
        beat = self._newest_beat()
        if beat <= start["beat_ms"]:
            return iter(()), start
        end = {"beat_ms": beat}
        return self.readBetweenOffsets(start, end), end

    def readBetweenOffsets(self, start: dict, end: dict) -> Iterator[tuple]:
        if end["beat_ms"] <= start["beat_ms"]:
            return iter(())
        return iter([heartbeat_row(self._schema, self._section, end["beat_ms"])])

    def _newest_beat(self) -> int:
        try:
            return int(json.loads(self._beats.read_text()).get(self._section) or 0)
        except (OSError, ValueError, AttributeError):
            return 0  # none written yet (or being replaced): no beat this trigger


def heartbeat_row(schema: StructType, section: str, beat_ms: int) -> tuple:
    """The heartbeat event of `section` at beat_ms, in the schema's column order."""
    found = roles(schema)
    values: list[Any] = []
    for field in schema.fields:
        if field.name == found.event_time:
            values.append(datetime.fromtimestamp(beat_ms / 1000, tz=UTC))
        elif field.name == found.key:
            values.append(heartbeat_key(section))
        else:
            values.append(HEARTBEAT_MARK if field.dataType.typeName() == "string" else None)
    return tuple(values)


def with_heartbeats(spark: SparkSession, beats: Path, events: DataFrame, section: str) -> DataFrame:
    """The input of `section` with its rows counted per batch (ARRIVED_OBSERVATION) and its heartbeats unioned in."""
    schema = user_query().EVENT_SCHEMA
    spark.dataSource.register(HeartbeatSource)
    reader = spark.readStream.format(HEARTBEAT_FORMAT).option("schema", schema.json())
    heartbeats = reader.option("section", section).option("beats", str(beats)).load()
    counted = events.observe(f"{section}.{ARRIVED_OBSERVATION}", F.count(F.lit(1)).alias("rows"))
    return counted.unionByName(heartbeats)


def heartbeat_key_column() -> str | None:
    """The column a heartbeat's key is in (EVENT_SCHEMA's key role), None where the schema has none."""
    return roles(user_query().EVENT_SCHEMA).key


def output_key_problem(result: DataFrame, settings: Settings) -> str | None:
    """One line when the heartbeats cannot run: EVENT_SCHEMA has no event-time column to give them, or the output
    does not carry the events' key column they are taken out by."""
    try:
        key = heartbeat_key_column()
    except SchemaRolesError:
        return (
            f"query.quiet_input_after is {settings.query.quiet_input_after!r} but EVENT_SCHEMA has no timestamp"
            " column to give a heartbeat its event time; add the events' time to it, or set query.quiet_input_after"
            " to null"
        )
    if key is not None and key in result.columns:
        return None
    held = f"the events' key column {key}" if key else "a key column (EVENT_SCHEMA has no text column)"
    return (
        f"query.quiet_input_after is {settings.query.quiet_input_after!r} but the query's output"
        f" ({', '.join(result.columns)}) does not carry {held}: the job takes its heartbeats out of the output by it;"
        " keep that column in the output, or set query.quiet_input_after to null"
    )


def without_heartbeats(result: DataFrame) -> DataFrame:
    """The output without the heartbeats' rows (by their key; a row of a null key stays)."""
    key = F.col(str(heartbeat_key_column()))
    # The partition id (always >= 0) makes the condition non-deterministic, which keeps Spark's optimizer from
    # pushing it below the user's withWatermark, down to the heartbeat's source: the watermark would never see it.
    heartbeat = key.startswith(HEARTBEAT_MARK) & (F.spark_partition_id() >= 0)
    return result.where(~F.coalesce(heartbeat, F.lit(False)))
