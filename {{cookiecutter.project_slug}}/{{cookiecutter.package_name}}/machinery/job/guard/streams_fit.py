"""The streams the query reads against those whose offsets the checkpoint holds.

Spark keeps a checkpoint's offsets one line per stream, by position, and refuses a start that reads another
number of streams ("There are [1] sources in the checkpoint offsets and now there are [2] sources requested
by the query"), after the session is up. query.quiet_input_after adds a heartbeat stream to each input, so
setting it on a checkpoint started without it (or the other way round) is such a change: said here first.
"""

from __future__ import annotations

from pyspark.sql import DataFrame

from ...core.checkpoint.files import START_OVER, CheckpointRead
from ...core.settings import Settings
from ..plan.plan_source import analyzed_plan

# The plan nodes of a stream the query reads, as Spark prints them.
STREAM_NODES = ("StreamingRelation", "StreamingRelationV2")


class StreamsChanged(Exception):
    """The query reads another number of streams than the checkpoint holds the offsets of."""


def streams_read(result: DataFrame) -> int:
    """The streams the query reads: one per source Spark keeps offsets for (a stream read twice is one)."""
    return len({node.text for node in analyzed_plan(result).walk() if node.kind in STREAM_NODES})


def check_streams(result: DataFrame, settings: Settings, held: CheckpointRead | None) -> None:
    if held is None or not held.offsets:
        return
    reads, kept = streams_read(result), len(held.offsets)
    if reads == kept:
        return
    after, inputs = settings.query.quiet_input_after, len(settings.inputs)
    if after is not None and kept == reads - inputs:
        why = (
            f"query.quiet_input_after ({after}) adds a heartbeat stream to each input, and the checkpoint was"
            " started without them: set query.quiet_input_after to null"
        )
    elif after is None and kept == reads + inputs:
        why = (
            "the checkpoint was started with query.quiet_input_after set (a heartbeat stream to each input), and"
            " it is null now: set it again"
        )
    else:
        why = "the query's inputs changed: change them back"
    raise StreamsChanged(
        f"the query reads {_streams(reads)} but the checkpoint {held.checkpoint} holds the offsets of {_streams(kept)}, and Spark"
        f" keeps them by position and refuses another number; {why}, or {START_OVER}"
    )


def _streams(count: int) -> str:
    return f"{count} stream" + ("" if count == 1 else "s")
