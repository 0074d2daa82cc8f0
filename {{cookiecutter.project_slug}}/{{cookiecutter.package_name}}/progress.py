"""One line per committed micro-batch, so a user sees the job working."""

from __future__ import annotations

import json
import sys
import threading
from typing import Any, TextIO

from pyspark.sql.streaming import StreamingQueryListener


def format_progress(progress: dict[str, Any]) -> str:
    """Batch id, input rows, rows/s, state rows, state memory and batch duration of one progress event."""
    operators = progress.get("stateOperators") or []
    state_rows = sum(op.get("numRowsTotal", 0) for op in operators)
    state_bytes = sum(op.get("memoryUsedBytes", 0) for op in operators)
    rate = progress.get("processedRowsPerSecond") or 0.0
    seconds = progress.get("batchDuration", 0) / 1000
    return (
        f"batch {progress['batchId']}: {progress.get('numInputRows', 0):,} input rows, "
        f"{rate:,.0f} rows/s, state {state_rows:,} rows / {state_bytes / 2**20:,.1f} MiB, "
        f"took {seconds:.2f} s"
    )


class ProgressPrinter(StreamingQueryListener):
    """Prints each batch and counts the distinct batches each query committed in this run."""

    def __init__(self, out: TextIO = sys.stdout):
        self._out = out
        self._lock = threading.Lock()
        self._batches: dict[str, set[int]] = {}
        self._names: dict[str, str] = {}

    def committed_batches(self, query_id: str) -> int:
        with self._lock:
            return len(self._batches.get(query_id, ()))

    def onQueryStarted(self, event) -> None:
        self._names[str(event.id)] = event.name or str(event.id)
        print(f"query {self._names[str(event.id)]} started (id {event.id})", file=self._out, flush=True)

    def onQueryProgress(self, event) -> None:
        progress = json.loads(event.progress.json)
        with self._lock:
            # Idle queries repeat the last batch id in their progress events; count each batch once.
            self._batches.setdefault(progress["id"], set()).add(progress["batchId"])
        print(format_progress(progress), file=self._out, flush=True)

    def onQueryIdle(self, event) -> None:
        pass

    def onQueryTerminated(self, event) -> None:
        reason = f": {event.exception.splitlines()[0]}" if event.exception else ""
        name = self._names.get(str(event.id), str(event.id))
        print(f"query {name} stopped{reason}", file=self._out, flush=True)
