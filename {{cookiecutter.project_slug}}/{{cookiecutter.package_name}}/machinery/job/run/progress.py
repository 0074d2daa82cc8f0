"""One line per committed micro-batch, so a user (or a log shipper) sees the job working, and the
state-size watchdog's warnings after the batch that crossed them.

The watchdog holds each batch's measured state against the sizing of settings.yaml, and counts the
rows its stateful operators dropped as late. Two warnings, each given once per run: the state rows
passed the estimate by the configured factor (the sizing was too low: recheck it, and whether state
still fits the provider), and HDFS-backed state per partition nears the 1 GiB where the JVM heap
starts to hurt. The second is loud, because the provider is pinned into the checkpoint: moving to
RocksDB needs a new checkpoint.

A third, loud, whenever late rows jump: a batch drops rows behind the watermark after one that
dropped none, or drops more than LATE_SHARE of its input rows after one that did not. Those rows are
lost for the output; Spark's progress counts them, and nothing else says so.

And the quiet watch's notices (quiet.py): the watermark stands still while an input brings nothing.
"""

from __future__ import annotations

import json
import sys
import threading
from dataclasses import dataclass
from typing import Any, TextIO

from pyspark.sql.streaming import StreamingQueryListener

from ...core.figures import human_bytes
from ...core.sizing.estimate import Estimate
from ...core.sizing.limits import ROCKSDB_THRESHOLD_BYTES
from ...core.text import first_line
from ..endpoints.heartbeats import ARRIVED_OBSERVATION
from ..endpoints.sources import BAD_RECORDS_OBSERVATION, EVENT_TIME_AHEAD, MALFORMED, WITHOUT_EVENT_TIME
from ..spark.heap import HeapProbe
from .beats import BeatClock
from .quiet import QuietNotice, QuietWatch


def format_progress(progress: dict[str, Any], rows_counted: bool = True) -> str:
    """Batch id, input rows, rows/s, state rows, state memory and batch duration of one progress event,
    then the rows the batch dropped, if any: late (behind the watermark), malformed, without an event
    time, or with one too far ahead (the last three with on_bad_record drop). rows_counted false: a store that
    does not track its rows, whose 0 is not a count."""
    event = batch_event(progress)
    rows = f"{event['state_rows']:,} rows" if rows_counted else "rows not counted"
    line = (
        f"batch {event['batch_id']}: {event['input_rows']:,} input rows, "
        f"{event['rows_per_second']:,.0f} rows/s, state {rows} / "
        f"{event['state_memory_bytes'] / 2**20:,.1f} MiB, took {event['batch_duration_ms'] / 1000:.2f} s"
    )
    dropped = [
        f"{event[field]:,} {what}"
        for field, what in (
            ("rows_dropped_late", "late (behind the watermark)"),
            ("rows_dropped_malformed", "malformed"),
            ("rows_dropped_without_event_time", "without an event time"),
            ("rows_dropped_event_time_ahead", "with an event time too far ahead"),
        )
        if event[field]
    ]
    return f"{line}, dropped {', '.join(dropped)}" if dropped else line


def input_rows(progress: dict[str, Any]) -> int:
    """The batch's input rows: Spark's count, but with a quiet input's heartbeats (job/endpoints/heartbeats.py)
    the inputs' own rows, which the job then counts per input, so that a quiet spell reads 0 input rows."""
    observed = progress.get("observedMetrics") or {}
    arrived = [
        int(values.get("rows") or 0)
        for name, values in observed.items()
        if name.endswith(f".{ARRIVED_OBSERVATION}") and isinstance(values, dict)
    ]
    return sum(arrived) if arrived else int(progress.get("numInputRows") or 0)


def dropped_bad_records(progress: dict[str, Any], metric: str) -> int:
    """Bad records of one kind the sources dropped (job/endpoints/sources.py), summed over the inputs."""
    observed = progress.get("observedMetrics") or {}
    return sum(
        int(values.get(metric) or 0)
        for name, values in observed.items()
        if name.endswith(f".{BAD_RECORDS_OBSERVATION}") and isinstance(values, dict)
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
        "input_rows": input_rows(progress),
        "rows_per_second": progress.get("processedRowsPerSecond") or 0.0,
        "batch_duration_ms": progress.get("batchDuration", 0),
        "state_rows": sum(operator.get("numRowsTotal", 0) for operator in operators),
        "state_memory_bytes": sum(operator.get("memoryUsedBytes", 0) for operator in operators),
        "rows_dropped_late": sum(operator.get("numRowsDroppedByWatermark") or 0 for operator in operators),
        "rows_dropped_malformed": dropped_bad_records(progress, MALFORMED),
        "rows_dropped_without_event_time": dropped_bad_records(progress, WITHOUT_EVENT_TIME),
        "rows_dropped_event_time_ahead": dropped_bad_records(progress, EVENT_TIME_AHEAD),
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


# The share of a batch's input rows dropped as late that warns even when the batch before dropped some.
LATE_SHARE = 0.1


@dataclass(frozen=True)
class StateWarning:
    kind: str  # "rows_over_estimate", "hdfs_memory" or "late_rows"
    loud: bool
    message: str


class StateWatchdog:
    def __init__(
        self,
        estimate: Estimate | None,
        provider: str,
        factor: float,
        hdfs_share: float,
        heap: HeapProbe | None = None,
    ) -> None:
        # estimate: None for a query whose operators the estimate cannot size (no rows warning then).
        # heap: the JVM the state lives in (a local run's driver), read after each batch.
        self._estimate = estimate
        self._heap = heap
        self._heap_read: tuple[int, int] | None = None
        self._provider = provider
        self._factor = factor
        self._hdfs_share = hdfs_share
        self._given: set[str] = set()
        self._late_before = (0, False)  # the batch before: rows dropped as late, and past LATE_SHARE

    @property
    def heap_max(self) -> int | None:
        return None if self._heap_read is None else self._heap_read[1]

    def read_heap(self) -> tuple[int, int] | None:
        """The live heap after the last GC and the heap's maximum, read now; None without a probe."""
        if self._heap is not None:
            self._heap_read = self._heap.read()
        return self._heap_read

    def check(self, progress: dict[str, Any]) -> list[StateWarning]:
        """The warnings this batch's progress newly crosses (each kind at most once per run)."""
        operators = progress.get("stateOperators") or []
        if not operators:
            return []
        rows = sum(operator.get("numRowsTotal", 0) for operator in operators)
        memory = sum(operator.get("memoryUsedBytes", 0) for operator in operators)
        partitions = max(operator.get("numShufflePartitions") or 0 for operator in operators) or 1
        found = []
        estimate = self._estimate
        if estimate is not None and rows > estimate.rows * self._factor and "rows_over_estimate" not in self._given:
            found.append(
                StateWarning(
                    "rows_over_estimate",
                    False,
                    f"state watchdog: batch {progress['batchId']} holds {rows:,} state rows,"
                    f" {rows / max(estimate.rows, 1):.1f}x the estimate of {estimate.rows:,}"
                    f" (warning at {self._factor:g}x, monitoring.state_warning_factor). Recheck the capacity"
                    " section of settings.yaml (`estimate` redoes the sizing; `inspect` shows the state per"
                    " partition), and whether the state still fits the provider.",
                )
            )
        per_partition = memory / partitions
        alarm = ROCKSDB_THRESHOLD_BYTES * self._hdfs_share
        if self._provider == "hdfs" and per_partition > alarm and "hdfs_memory" not in self._given:
            found.append(
                StateWarning(
                    "hdfs_memory",
                    True,
                    f"STATE WATCHDOG: batch {progress['batchId']}: the HDFS-backed state holds"
                    f" {human_bytes(int(per_partition))} of JVM heap per partition on average"
                    f" ({human_bytes(memory)} over {partitions} partitions; skewed partitions hold more),"
                    f" past {self._hdfs_share * 100:g}% of the {human_bytes(ROCKSDB_THRESHOLD_BYTES)} per"
                    " partition where heap-held state brings long GC pauses and out-of-memory failures."
                    " The provider cannot be switched on this checkpoint: Spark pinned it at the first run"
                    " and ignores a new one. To move to RocksDB, set state_store.provider to rocksdb with a"
                    " new query.checkpoint_location and an empty sink.path, and reprocess the input; until then,"
                    " give the executors more memory.",
                )
            )
        found += self._heap_filling(progress)
        self._given.update(warning.kind for warning in found)
        return found + self._late_rows(progress, operators)

    def _heap_filling(self, progress: dict[str, Any]) -> list[StateWarning]:
        """A loud warning, once, when the heap still in use after the last GC passes the share of its maximum."""
        heap = self._heap_read or self.read_heap()
        if heap is None or "heap" in self._given:
            return []
        live, most = heap
        if live <= self._hdfs_share * most:
            return []
        return [
            StateWarning(
                "heap",
                True,
                f"HEAP WATCHDOG: batch {progress['batchId']}: {human_bytes(live)} of the JVM's"
                f" {human_bytes(most)} heap is still in use after garbage collection"
                f" ({live / most:.0%}, warning at {self._hdfs_share:.0%},"
                " monitoring.hdfs_memory_warning_share): the job nears an OutOfMemoryError. Raise"
                " spark.driver_memory (on a cluster spark.executor.memory) before it does; `estimate` says what"
                " the state needs.",
            )
        ]

    def _late_rows(self, progress: dict[str, Any], operators: list[dict[str, Any]]) -> list[StateWarning]:
        """A loud warning when this batch's late rows jump (see the module's docstring)."""
        late = sum(operator.get("numRowsDroppedByWatermark") or 0 for operator in operators)
        inputs = input_rows(progress)
        heavy = late > LATE_SHARE * inputs
        before, heavy_before = self._late_before
        self._late_before = (late, heavy)
        if not late or (before and (heavy_before or not heavy)):
            return []
        watermark = (progress.get("eventTime") or {}).get("watermark", "unknown")
        return [
            StateWarning(
                "late_rows",
                True,
                f"LATE ROWS: batch {progress['batchId']} dropped {late:,} row{'' if late == 1 else 's'} as late"
                f" (of {inputs:,} input rows):"
                f" their event time is behind the watermark, {watermark}, so they are not in the output."
                " If they are not that old, an event far ahead moved the watermark (query.max_event_time_ahead"
                " bounds it); if they are, an input arrives later than query.watermark allows: raise it.",
            )
        ]


class ProgressPrinter(StreamingQueryListener):
    """Prints each batch (a line, or a JSON object per line) and counts the distinct batches each
    query committed in this run. With a watchdog, its warnings follow the batch that crossed them:
    on stderr as text, or as events in the JSON stream."""

    def __init__(
        self,
        out: TextIO | None = None,
        json_lines: bool = False,
        watchdog: StateWatchdog | None = None,
        rows_counted: bool = True,
        quiet: QuietWatch | None = None,
        beats: BeatClock | None = None,
    ):
        self._out = sys.stdout if out is None else out  # the standard output of now, not of import time
        self._json = json_lines  # JSON passes Spark's figures on as they are (0 rows where not counted)
        self._rows_counted = rows_counted
        self._watchdog = watchdog
        self._quiet = quiet
        self._beats = beats
        self._lock = threading.Lock()
        self._told = threading.Condition(self._lock)
        self._batches: dict[str, set[int]] = {}
        self._names: dict[str, str] = {}
        self._running: set[str] = set()  # the runs told started and not yet ended

    def wait_until_all_ended(self, seconds: float) -> bool:
        """Wait until each run this listener was told of has been told ended too (at most `seconds`)."""
        with self._told:
            return self._told.wait_for(lambda: not self._running, seconds)

    def committed_batches(self, query_id: str) -> int:
        with self._lock:
            return len(self._batches.get(query_id, ()))

    def _emit(self, text: str, event: dict[str, Any]) -> None:
        print(json.dumps(event) if self._json else text, file=self._out, flush=True)

    def onQueryStarted(self, event) -> None:
        name = self._names[str(event.id)] = event.name or str(event.id)
        with self._told:
            self._running.add(str(event.runId))
        if self._beats is not None:
            self._beats.started(event.timestamp)
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
            # Spark Classic's bridge; a Connect session never asks: its listeners run on the client's bus.
            from py4j.protocol import Py4JError
            from pyspark import SparkContext

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
        event = batch_event(progress)
        heap = self._watchdog.read_heap() if self._watchdog else None
        if heap is not None:  # the JVM the state lives in (a local run's driver), after its last GC
            event["heap_live_bytes"], event["heap_max_bytes"] = heap
        self._emit(format_progress(progress, self._rows_counted), event)
        for warning in self._watchdog.check(progress) if self._watchdog else ():
            if self._json:
                self._emit("", {"event": "state_warning", "kind": warning.kind, "message": warning.message})
            else:
                print(warning.message, file=sys.stderr, flush=True)
        if self._quiet is not None:
            self._tell_quiet(self._quiet.progress(progress))
        if self._beats is not None:
            self._beats.progress(progress)

    def onQueryIdle(self, event) -> None:
        if self._beats is not None:
            self._beats.idle(event.timestamp)
        if self._quiet is not None:
            self._tell_quiet(self._quiet.idle(event.timestamp))

    def _tell_quiet(self, notice: QuietNotice | None) -> None:
        if notice is None:
            return
        if self._json:
            event = {"event": "quiet_input", "kind": notice.kind, "watermark": notice.watermark}
            self._emit("", {**event, "quiet_inputs": list(notice.quiet_inputs), "message": notice.message})
        else:
            print(notice.message, file=sys.stderr, flush=True)

    def onQueryTerminated(self, event) -> None:
        name = self._names.get(str(event.id), str(event.id))
        error = first_line(event.exception) if event.exception else None
        self._emit(
            f"query {name} stopped" + (f": {error}" if error else ""),
            {"event": "stopped", "query": name, "query_id": str(event.id), "error": error},
        )
        with self._told:
            self._running.discard(str(event.runId))
            self._told.notify_all()
