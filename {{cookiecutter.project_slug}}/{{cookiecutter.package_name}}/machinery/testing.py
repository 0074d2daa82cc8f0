"""What your tests may use of the machinery: this module is public, and a template update keeps its
names and signatures (the rest of `machinery/` may move).

    query_settings(**changes) -> QuerySettings
        settings.yaml's query section, with changes (a nested section as a dict: join={"range": "5 minutes"})
    run_batch(spark, events, join_events=None, *, query=None, **changes) -> DataFrame
        your stateful_query on batch data: rows (tuples in EVENT_SCHEMA's order) or DataFrames;
        dropDuplicatesWithinWatermark, which Spark runs on streams only, acts as dropDuplicates
    StreamTest(spark, folder, **changes)
        one real stream of sample files through your query, run and restarted on its checkpoint:
        add_sample_files(files, events_per_file), run(), output(), events(), join_events(), watermark()

A test that needs nothing else of the machinery survives `cruft update`.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.streaming import StreamingQuery

from .core.checkpoint.files import read_local
from .core.contract import user_query
from .core.durations import parse_duration
from .core.settings import QuerySettings, Settings, load_settings
from .job.endpoints.output import read_output
from .job.endpoints.sample_input import write_for_settings
from .job.run.runner import run_query
from .job.spark.session import apply_confs

# The project's settings.yaml: beside the package, where the tests run.
PROJECT_SETTINGS = Path(__file__).resolve().parents[2] / "settings.yaml"

__all__ = ["StreamTest", "query_settings", "run_batch"]


def query_settings(**changes: Any) -> QuerySettings:
    """settings.yaml's query section, with changes, validated as the job validates it."""
    return load_settings(PROJECT_SETTINGS, query=changes).query


def run_batch(
    spark: SparkSession,
    events: DataFrame | list[tuple[Any, ...]],
    join_events: DataFrame | list[tuple[Any, ...]] | None = None,
    *,
    query: QuerySettings | None = None,
    **changes: Any,
) -> DataFrame:
    """The query module's stateful_query on batch data, with settings.yaml's query section changed
    (or `query`, a whole query section such as StreamTest's settings.query)."""
    schema = user_query().EVENT_SCHEMA

    def frame(rows: DataFrame | list[tuple[Any, ...]]) -> DataFrame:
        return rows if isinstance(rows, DataFrame) else spark.createDataFrame(rows, schema)

    first, second = frame(events), None if join_events is None else frame(join_events)
    with _batch_meaning(type(first)):
        section = query_settings(**changes) if query is None else query.model_copy(update=changes)
        return user_query().stateful_query(first, section, second)


@contextlib.contextmanager
def _batch_meaning(frame_type: Any) -> Iterator[None]:
    """Streaming-only calls given their batch meaning while the query is built on batch data: Spark
    refuses dropDuplicatesWithinWatermark there, and on batch data, where every repeat is seen at
    once, it keeps the first of each key, as dropDuplicates does. Streams are left as they are."""
    original = frame_type.dropDuplicatesWithinWatermark

    def within_watermark(self: DataFrame, subset: list[str] | None = None) -> DataFrame:
        return original(self, subset) if self.isStreaming else self.dropDuplicates(subset)

    frame_type.dropDuplicatesWithinWatermark = within_watermark
    try:
        yield
    finally:
        frame_type.dropDuplicatesWithinWatermark = original


class StreamTest:
    """Sample files through the query as a real stream: the files source (one file per batch), a
    parquet sink, the state store of settings.yaml on 2 partitions, a checkpoint in `folder`; each
    run reads what is there and stops, and the next restarts on the same checkpoint."""

    def __init__(self, spark: SparkSession, folder: Path, **changes: Any) -> None:
        self.spark = spark
        self.settings = _stream_settings(Path(folder), changes)
        self._last_batch = -1

    def add_sample_files(self, files: int = 3, events_per_file: int = 40) -> None:
        """More sample files (from the query module's sample_event, or from EVENT_SCHEMA) after the others."""
        write_for_settings(self.settings, files=files, events_per_file=events_per_file)

    def run(self) -> StreamingQuery:
        """One run until every file is read; it fails when the query fails or does not go on from the
        batch the last run stopped at."""
        apply_confs(self.spark, self.settings)
        query = run_query(self.spark, self.settings, held=read_local(self.settings.query.checkpoint_location))
        if query.exception() is not None:
            raise AssertionError(f"the stream failed: {query.exception()}")
        first = query.recentProgress[0]["batchId"] if query.recentProgress else None
        if first is not None and first <= self._last_batch:
            raise AssertionError(f"the restart began at batch {first}, not after batch {self._last_batch}")
        if query.lastProgress:
            self._last_batch = query.lastProgress["batchId"]
        return query

    def output(self) -> DataFrame:
        """What the sink committed, read through its log."""
        return read_output(self.spark, self.settings.sink)

    def events(self) -> DataFrame:
        """Every event written to the source so far."""
        return self._read(self.settings.source.files.path)

    def join_events(self) -> DataFrame | None:
        """Every event written to join_source so far (a join), else None."""
        source = self.settings.join_source
        return None if source is None else self._read(source.files.path)

    def watermark(self) -> datetime:
        """The watermark the stream reached: the newest event time less the watermark delay."""
        newest = self.events().agg(F.max(F.col(_event_time()))).collect()[0][0]
        return newest - timedelta(seconds=parse_duration(self.settings.query.watermark, zero=True))

    def _read(self, path: str) -> DataFrame:
        return self.spark.read.schema(user_query().EVENT_SCHEMA).json(path)


def _event_time() -> str:
    from .job.endpoints.schema_events import roles

    return roles(user_query().EVENT_SCHEMA).event_time


def _stream_settings(folder: Path, changes: dict[str, Any]) -> Settings:
    files = {"type": "files", "files": {"path": str(folder / "landing"), "max_files_per_trigger": 1}}
    query = {"checkpoint_location": str(folder / "checkpoint"), "trigger": "available_now", **changes}
    overrides: dict[str, Any] = {
        "spark": {"shuffle_partitions": 2, "master": "local[2]", "platform": "oss"},
        "source": files,
        "sink": {"type": "parquet", "output_mode": "append", "path": str(folder / "output")},
        "query": query,
    }
    settings = load_settings(PROJECT_SETTINGS)
    if settings.join_source is not None:
        overrides["join_source"] = {
            "type": "files",
            "files": {"path": str(folder / "landing-join"), "max_files_per_trigger": 1},
        }
    return load_settings(PROJECT_SETTINGS, **overrides)
