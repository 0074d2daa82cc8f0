"""custom_state: visit sessions per key, kept in your own state with transformWithStateInPandas.

A session is a run of a key's events with gaps of at most `session_timeout`. Its state lives in a
value state, and an event-time timer closes it:
- initialised: `init` declares the state; a key's first event opens its session;
- updated: each micro-batch adds the key's new events (count, first and last seen, recent event ids),
  and an event more than the timeout after the last one closes the session and opens a new one.
  Events behind the watermark are dropped here: Spark passes them on to the processor;
- expired: the timer is set to the last event's time plus the timeout; it fires once the watermark
  passes that instant, that is, when no event of the session can still arrive;
- evicted: the timer emits the session and clears its state, so state holds only open sessions.

Spark refuses a state TTL in event-time mode (STATEFUL_PROCESSOR_INCORRECT_TIME_MODE_TO_ASSIGN_TTL):
TTLs count processing time, which a replay would not reproduce. The event-time timer is the bound
here; docs/state.md explains the processing-time variant with a TTL. The session logic is plain Python
(`advance`), so it is tested without Spark and gives the batch reference the streaming tests use.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass, replace
from datetime import datetime, timedelta

import pandas as pd
from pyspark.sql import DataFrame
from pyspark.sql.streaming import StatefulProcessor, StatefulProcessorHandle

from .machinery.durations import parse_duration

STATE_SCHEMA = "session_start timestamp, session_end timestamp, visits long, recent_event_ids array<string>"
OUTPUT_SCHEMA = f"key string, {STATE_SCHEMA}"


@dataclass(frozen=True)
class Session:
    session_start: datetime
    session_end: datetime
    visits: int
    recent_event_ids: tuple[str, ...]

    def row(self, key: str) -> dict[str, object]:
        return {"key": key, **self.__dict__, "recent_event_ids": list(self.recent_event_ids)}


def advance(
    session: Session | None, events: Iterable[tuple[datetime, str]], timeout: timedelta, recent: int
) -> tuple[list[Session], Session | None]:
    """Fold (event_time, event_id) events, oldest first, into the open session: (closed sessions, open one).

    An event later than the open session's end by more than the timeout closes it; any other event
    (an earlier one too, as it arrived within the watermark) joins it.
    """
    closed = []
    for event_time, event_id in events:
        if session is not None and event_time - session.session_end > timeout:
            closed.append(session)
            session = None
        if session is None:
            session = Session(event_time, event_time, 1, (event_id,))
        else:
            session = replace(
                session,
                session_start=min(session.session_start, event_time),
                session_end=max(session.session_end, event_time),
                visits=session.visits + 1,
                recent_event_ids=(*session.recent_event_ids, event_id)[-recent:],
            )
    return closed, session


class SessionProcessor(StatefulProcessor):
    """One key's open session in a value state; an event-time timer emits and evicts it."""

    def __init__(self, timeout: timedelta, recent: int):
        self.timeout, self.recent = timeout, recent

    def init(self, handle: StatefulProcessorHandle) -> None:
        self.handle = handle
        self.state = handle.getValueState("session", STATE_SCHEMA)

    def handleInputRows(self, key, rows: Iterator[pd.DataFrame], timerValues) -> Iterator[pd.DataFrame]:
        # Spark hands late events to the processor too; drop them here like the built-in operators do,
        # since their session may have been emitted and evicted already.
        watermark = _from_epoch_ms(timerValues.getCurrentWatermarkInMs())
        events = sorted(
            (_naive(event_time), event_id)
            for batch in rows
            for event_time, event_id in zip(batch["event_time"], batch["event_id"], strict=True)
            if _naive(event_time) >= watermark
        )
        if not events:
            return
        session = Session(*self._stored()) if self.state.exists() else None
        closed, session = advance(session, events, self.timeout, self.recent)
        assert session is not None  # events is not empty: one of them opened a session or joined it
        for timer in self.handle.listTimers():
            self.handle.deleteTimer(timer)
        self.state.update((session.session_start, session.session_end, session.visits, list(session.recent_event_ids)))
        self.handle.registerTimer(_epoch_ms(session.session_end + self.timeout))
        if closed:
            yield pd.DataFrame([old.row(key[0]) for old in closed])

    def handleExpiredTimer(self, key, timerValues, expiredTimerInfo) -> Iterator[pd.DataFrame]:
        if self.state.exists():
            session = Session(*self._stored())
            self.state.clear()
            yield pd.DataFrame([session.row(key[0])])

    def _stored(self) -> tuple:
        stored = self.state.get()
        assert stored is not None  # called only when self.state.exists()
        start, end, visits, recent = stored
        return _naive(start), _naive(end), int(visits), tuple(recent)

    def close(self) -> None:
        pass


def sessions(events: DataFrame, watermark: str, session_timeout: str, recent: int) -> DataFrame:
    """Closed sessions per key, emitted when the watermark passes their last event plus the timeout."""
    processor = SessionProcessor(timedelta(seconds=parse_duration(session_timeout)), recent)
    return (
        events.withWatermark("event_time", watermark)
        .groupBy("key")
        .transformWithStateInPandas(processor, OUTPUT_SCHEMA, "Append", "EventTime")
    )


def _naive(moment) -> datetime:
    """Spark hands timestamps to pandas in the session time zone (UTC here) without a zone."""
    return pd.Timestamp(moment).to_pydatetime().replace(tzinfo=None)


def _epoch_ms(moment: datetime) -> int:
    return int(pd.Timestamp(moment).tz_localize("UTC").timestamp() * 1000)


def _from_epoch_ms(milliseconds: int) -> datetime:
    return pd.Timestamp(max(milliseconds, 0), unit="ms").to_pydatetime()
