"""A quiet input, seen: the watermark stands still while the wall clock runs on.

Spark moves the watermark only with new events. When an input goes quiet (a topic at night, a landing
folder nobody writes to), the last windows of an append-mode aggregation never close, and with two inputs
(a join, a union) one quiet input holds back the watermark they share (multipleWatermarkPolicy min), so the
other's state grows. Nothing in Spark says so: its progress shows the same watermark batch after batch, and
an idle query shows no batch at all.

QuietWatch reads each batch's progress and each idle event (Spark's clock in both), and says once per quiet
spell when the watermark has stood still for longer than monitoring.quiet_after, naming the inputs that
brought no rows since it last moved; and again when it moves.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from ...core.figures import human_span, spark_instant

# The watermark Spark reports before the first event: nothing waits on it yet.
NO_WATERMARK = datetime.fromisoformat("1970-01-01T00:00:00+00:00")


@dataclass(frozen=True)
class QuietNotice:
    kind: str  # "quiet": the watermark stood past the setting; "moving": it moves again
    watermark: str  # where it stands (Spark's ISO text)
    quiet_inputs: tuple[str, ...]  # the inputs that brought no rows since it stood (Spark's descriptions)
    message: str


@dataclass
class _Stand:
    """Where the watermark stands, since when, and the input rows each source brought since."""

    watermark: str
    since: datetime
    rows: dict[str, int] = field(default_factory=dict)


class QuietWatch:
    def __init__(self, after_seconds: float, setting: str) -> None:
        # setting: monitoring.quiet_after as the user wrote it, for the message.
        self._after = after_seconds
        self._setting = setting
        self._stand: _Stand | None = None
        self._told = False

    def progress(self, progress: dict[str, Any]) -> QuietNotice | None:
        """A batch's progress (Spark's JSON): the notice it newly brings, if any."""
        watermark = (progress.get("eventTime") or {}).get("watermark")
        now = spark_instant(progress.get("timestamp"))
        if watermark is None or now is None or spark_instant(watermark) in (None, NO_WATERMARK):
            return None
        stand = self._stand
        if stand is None or stand.watermark != watermark:
            moved = self._told and stand is not None
            # Its inputs count from 0 rows on: the rows of the batch that moved it are behind it.
            names = (str(source.get("description")) for source in progress.get("sources") or [])
            self._stand = _Stand(watermark, now, dict.fromkeys(names, 0))
            self._told = False
            if moved:
                assert stand is not None
                stood = human_span((now - stand.since).total_seconds())
                return QuietNotice(
                    "moving",
                    watermark,
                    (),
                    f"QUIET INPUT: the watermark moves again, to {watermark} (it stood {stood}).",
                )
            return None
        for source in progress.get("sources") or []:
            name = str(source.get("description"))
            stand.rows[name] = stand.rows.get(name, 0) + int(source.get("numInputRows") or 0)
        return self._check(now)

    def idle(self, timestamp: str | None) -> QuietNotice | None:
        """An idle event (no new data, no batch) at Spark's `timestamp`: the notice it newly brings, if any."""
        now = spark_instant(timestamp)
        return None if now is None or self._stand is None else self._check(now)

    def _check(self, now: datetime) -> QuietNotice | None:
        stand = self._stand
        assert stand is not None
        stood = (now - stand.since).total_seconds()
        if self._told or stood <= self._after:
            return None
        self._told = True
        quiet = tuple(name for name, rows in stand.rows.items() if not rows)
        if quiet:
            held = f"until events arrive on {' and '.join(quiet)}"
        elif stand.rows:
            held = "although rows arrive: none of them is ahead of it (each input's newest event time holds it)"
        else:
            held = "until events arrive on the inputs"
        message = (
            f"QUIET INPUT: the watermark has stood at {stand.watermark} for {human_span(stood)}"
            f" (monitoring.quiet_after: {self._setting}) while the job ran: results for windows ending after"
            f" {stand.watermark} are held {held}."
        )
        return QuietNotice("quiet", stand.watermark, quiet, message)
