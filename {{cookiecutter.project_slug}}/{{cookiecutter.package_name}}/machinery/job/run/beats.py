"""The driver's side of query.quiet_input_after: when an input has brought no rows for that long, a beat.

BeatClock reads each batch's progress (each input's rows, counted by the observation heartbeats.py adds)
and each idle event, in Spark's clock, and writes the beat of every input quiet for quiet_input_after or
longer (that clock less quiet_input_after, in epoch ms) into the beats file, whole (written aside, then
moved over it): HeartbeatSource reads it at the next trigger. A quiet input's beat moves on with each
progress event, so a quiet spell runs a batch a trigger, each with one heartbeat per quiet input.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ...core.figures import spark_instant
from ..endpoints.heartbeats import ARRIVED_OBSERVATION


class BeatClock:
    def __init__(self, sections: Sequence[str], after_seconds: float, beats: Path) -> None:
        self._sections = tuple(sections)
        self._after_ms = round(after_seconds * 1000)
        self.beats = beats
        self._last_rows: dict[str, int] = {}  # each input's last batch with rows (from the start on)
        self._written: dict[str, int] = {}

    def started(self, timestamp: str | None) -> None:
        """The query started at Spark's `timestamp`: each input's quiet spell counts from here until it brings rows
        (a restart on a quiet input runs no batch to count from)."""
        now = _epoch_ms(timestamp)
        if now is None:
            return
        for section in self._sections:
            self._last_rows.setdefault(section, now)

    def progress(self, progress: dict[str, Any]) -> dict[str, int]:
        """A batch's progress (Spark's JSON): the beats it writes (none when no input is quiet long enough)."""
        now = _epoch_ms(progress.get("timestamp"))
        if now is None:
            return {}
        observed = progress.get("observedMetrics") or {}
        for section in self._sections:
            rows = (observed.get(f"{section}.{ARRIVED_OBSERVATION}") or {}).get("rows") or 0
            if int(rows) or section not in self._last_rows:
                self._last_rows[section] = now
        return self._beat(now)

    def idle(self, timestamp: str | None) -> dict[str, int]:
        """An idle event (no batch ran) at Spark's `timestamp`: the beats it writes."""
        now = _epoch_ms(timestamp)
        return {} if now is None or not self._last_rows else self._beat(now)

    def _beat(self, now: int) -> dict[str, int]:
        due = {
            section: now - self._after_ms
            for section, last in self._last_rows.items()
            if now - last >= self._after_ms and now - self._after_ms > self._written.get(section, 0)
        }
        if due:
            self._written.update(due)
            aside = self.beats.with_name(f".{self.beats.name}.new")
            aside.write_text(json.dumps(self._written))
            os.replace(aside, self.beats)  # whole: the source never reads half a file
        return due


def _epoch_ms(text: Any) -> int | None:
    instant = spark_instant(text)
    return None if instant is None else round(instant.timestamp() * 1000)
