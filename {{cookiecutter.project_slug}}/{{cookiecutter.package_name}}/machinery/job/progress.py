"""One line per committed micro-batch, so a user (or a log shipper) sees the job working."""

from __future__ import annotations

import json
import sys
import threading
from typing import Any, TextIO

from py4j.protocol import Py4JError
from pyspark import SparkContext
from pyspark.sql.streaming import StreamingQueryListener

from ..core.text import first_line
from .endpoints.sources import EVENT_TIME_AHEAD, EVENT_TIME_OBSERVATION, WITHOUT_EVENT_TIME
from .watchdog import StateWatchdog


def format_progress(progress: dict[str, Any]) -> str:
    """Batch id, input rows, rows/s, state rows, state memory and batch duration of one progress event,
    then the rows the batch dropped, if any: late (behind the watermark), without an event time, or
    with one too far ahead (the last two with on_bad_record drop)."""
    event = batch_event(progress)
    line = (
        f"batch {event['batch_id']}: {event['input_rows']:,} input rows, "
        f"{event['rows_per_second']:,.0f} rows/s, state {event['state_rows']:,} rows / "
        f"{event['state_memory_bytes'] / 2**20:,.1f} MiB, took {event['batch_duration_ms'] / 1000:.2f} s"
    )
    dropped = [
        f"{event[field]:,} {what}"
        for field, what in (
            ("rows_dropped_late", "late (behind the watermark)"),
            ("rows_dropped_without_event_time", "without an event time"),
            ("rows_dropped_event_time_ahead", "with an event time too far ahead"),
        )
        if event[field]
    ]
    return f"{line}, dropped {', '.join(dropped)}" if dropped else line


def dropped_bad_event_time(progress: dict[str, Any], metric: str) -> int:
    """Rows the sources dropped for their event time (job/endpoints/sources.py), summed over the inputs."""
    observed = progress.get("observedMetrics") or {}
    return sum(
        int(values.get(metric) or 0)
        for name, values in observed.items()
        if name.endswith(f".{EVENT_TIME_OBSERVATION}") and isinstance(values, dict)
    )


def batch_event(progress: dict[str, Any]) -> dict[str, Any]:
    """The JSON-lines event of one batch: the text line's figures, then each stateful operator with
    the custom metrics this Spark version reports (passed on as they are, not a fixed list)."""
    operators = progress.get("stateOperators") or []
    return {
        "event": "batch",
        "query": progress.get("name"),
        "query_id": progress.get("id"),
        "run_id": progress.get("runId"),
        "batch_id": progress["batchId"],
        "timestamp": progress.get("timestamp"),
        "input_rows": progress.get("numInputRows", 0),
        "rows_per_second": progress.get("processedRowsPerSecond") or 0.0,
        "batch_duration_ms": progress.get("batchDuration", 0),
        "state_rows": sum(operator.get("numRowsTotal", 0) for operator in operators),
        "state_memory_bytes": sum(operator.get("memoryUsedBytes", 0) for operator in operators),
        "rows_dropped_late": sum(operator.get("numRowsDroppedByWatermark") or 0 for operator in operators),
        "rows_dropped_without_event_time": dropped_bad_event_time(progress, WITHOUT_EVENT_TIME),
        "rows_dropped_event_time_ahead": dropped_bad_event_time(progress, EVENT_TIME_AHEAD),
        "watermark": (progress.get("eventTime") or {}).get("watermark"),
        "durations_ms": progress.get("durationMs") or {},
        "state_operators": [
            {
                "operator": operator.get("operatorName"),
                "rows_total": operator.get("numRowsTotal"),
                "rows_updated": operator.get("numRowsUpdated"),
                "rows_removed": operator.get("numRowsRemoved"),
                "rows_dropped_by_watermark": operator.get("numRowsDroppedByWatermark"),
                "memory_used_bytes": operator.get("memoryUsedBytes"),
                "commit_time_ms": operator.get("commitTimeMs"),
                "update_time_ms": operator.get("allUpdatesTimeMs"),
                "remove_time_ms": operator.get("allRemovalsTimeMs"),
                "shuffle_partitions": operator.get("numShufflePartitions"),
                "state_store_instances": operator.get("numStateStoreInstances"),
                "custom_metrics": operator.get("customMetrics") or {},
            }
            for operator in operators
        ],
    }


class ProgressPrinter(StreamingQueryListener):
    """Prints each batch (a line, or a JSON object per line) and counts the distinct batches each
    query committed in this run. With a watchdog, its warnings follow the batch that crossed them:
    on stderr as text, or as events in the JSON stream."""

    def __init__(self, out: TextIO | None = None, json_lines: bool = False, watchdog: StateWatchdog | None = None):
        self._out = sys.stdout if out is None else out  # the standard output of now, not of import time
        self._json = json_lines
        self._watchdog = watchdog
        self._lock = threading.Lock()
        self._batches: dict[str, set[int]] = {}
        self._names: dict[str, str] = {}

    def committed_batches(self, query_id: str) -> int:
        with self._lock:
            return len(self._batches.get(query_id, ()))

    def _emit(self, text: str, event: dict[str, Any]) -> None:
        print(json.dumps(event) if self._json else text, file=self._out, flush=True)

    def onQueryStarted(self, event) -> None:
        name = self._names[str(event.id)] = event.name or str(event.id)
        self._emit(
            f"query {name} started (id {event.id})",
            {"event": "started", "query": name, "query_id": str(event.id), "run_id": str(event.runId)},
        )

    @property
    def _jlistener(self) -> Any:
        """The JVM's handle on this listener, through a bridge that passes each progress event as its
        JSON: PySpark's own bridge turns every event into Python objects first, some 70 Py4J calls,
        which took about 15 ms a batch on 2 cores, all of the job's cost per batch
        (benchmarks/overhead.py). It rests on PySpark internals of Spark Classic (checked on 4.2.1);
        where they are missing, PySpark's bridge is used."""
        if not hasattr(self, "_jlistenerobj"):
            try:
                from pyspark.sql.streaming.listener import JStreamingQueryListener

                printer = self

                class JsonProgressBridge(JStreamingQueryListener):
                    def onQueryProgress(self, jevent: Any) -> None:
                        printer.on_progress(json.loads(jevent.progress().json()))

                jvm: Any = SparkContext._jvm
                self._jlistenerobj = jvm.PythonStreamingQueryListenerWrapper(JsonProgressBridge(self))
            except (ImportError, Py4JError, TypeError):
                return StreamingQueryListener._jlistener.fget(self)  # type: ignore[attr-defined]
        return self._jlistenerobj

    def onQueryProgress(self, event) -> None:
        self.on_progress(json.loads(event.progress.json))

    def on_progress(self, progress: dict[str, Any]) -> None:
        with self._lock:
            # Idle queries repeat the last batch id in their progress events; count each batch once.
            self._batches.setdefault(progress["id"], set()).add(progress["batchId"])
        self._emit(format_progress(progress), batch_event(progress))
        for warning in self._watchdog.check(progress) if self._watchdog else ():
            if self._json:
                self._emit("", {"event": "state_warning", "kind": warning.kind, "message": warning.message})
            else:
                print(warning.message, file=sys.stderr, flush=True)

    def onQueryIdle(self, event) -> None:
        pass

    def onQueryTerminated(self, event) -> None:
        name = self._names.get(str(event.id), str(event.id))
        error = first_line(event.exception) if event.exception else None
        self._emit(
            f"query {name} stopped" + (f": {error}" if error else ""),
            {"event": "stopped", "query": name, "query_id": str(event.id), "error": error},
        )
