"""Write deterministic JSON event files into the landing directory: demos, tests and first runs.

Files appear atomically (written under a name starting with "." that Spark ignores, then renamed)
and with modification times one millisecond apart, because the file source takes files in order of
modification time and a tie would make the order, and so the watermark's progress, arbitrary.
"""

from __future__ import annotations

import json
import os
import re
import time
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from functools import partial
from pathlib import Path

from ...core.contract import user_query
from ...core.durations import parse_duration
from ...core.operators import OPERATORS
from ...core.settings import Settings
from ...core.sizing.limits import MAXIMA
from .schema_events import schema_event

FILE_PATTERN = re.compile(r"^events-(\d{5})\.json$")
START = datetime(2026, 1, 1, tzinfo=UTC)
# Distinct keys of the sample events, unless the starter's operator asks for others.
DEFAULT_KEYS = 100
# As many keys as the settings allow, more than any run's events: every event is its own key (a
# join's payment matches one order; a bench's or calibration's state grows by every event).
UNIQUE_KEYS = MAXIMA["key_cardinality"]
# Payments a quarter, three quarters and one and a half join ranges after their orders: two of
# three match, the third comes too late.
PAYMENT_DELAY_SHARES = (0.25, 0.75, 1.5)


def sample_moments(
    index: int,
    events_per_file: int,
    keys: int,
    advance_per_file: timedelta,
    run_length: int = 1,
    start: datetime = START,
) -> list[tuple[int, str, datetime]]:
    """(number, key, event time) of file `index`'s events: event j lies j/events_per_file of the way into
    the file's stretch of time, and event n has key key-((n // run_length) mod keys), so run_length > 1
    gives each key runs of consecutive events, that is, visit sessions."""
    begins = start + index * advance_per_file
    return [
        (number, f"key-{(number // run_length) % keys}", begins + advance_per_file * j / events_per_file)
        for j in range(events_per_file)
        for number in [index * events_per_file + j]
    ]


def sample_events(
    index: int,
    events_per_file: int,
    keys: int,
    advance_per_file: timedelta,
    run_length: int = 1,
    start: datetime = START,
    delays: tuple[timedelta, ...] | None = None,
) -> list[dict[str, str]]:
    """The events of file `index`, made by the query module's sample_event; with delays, the right side
    of a join (each left event's match, that many after it, in turn)."""
    query = user_query()
    schema = query.EVENT_SCHEMA
    sample_event = getattr(query, "sample_event", None) or partial(schema_event, schema)
    events = []
    for number, key, moment in sample_moments(index, events_per_file, keys, advance_per_file, run_length, start):
        if delays is None:
            event = sample_event(number, key, moment, "left")
        else:
            event = sample_event(number, key, moment + delays[number % len(delays)], "right")
        if event is not None:
            events.append(event)
    return events


def write_sample_files(
    directory: Path | str,
    files: int,
    events_per_file: int,
    keys: int,
    advance_per_file: timedelta,
    run_length: int = 1,
    payment_delays: tuple[timedelta, ...] | None = None,
    start: datetime = START,
) -> list[Path]:
    """Append `files` files of sample_events after any earlier ones; with payment_delays, their payments."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    first = 1 + max((int(m.group(1)) for p in directory.iterdir() if (m := FILE_PATTERN.match(p.name))), default=-1)
    base_mtime_ns = time.time_ns()
    written = []
    for index in range(first, first + files):
        events = sample_events(index, events_per_file, keys, advance_per_file, run_length, start, payment_delays)
        lines = [json.dumps(event) for event in events]
        path = directory / f"events-{index:05d}.json"
        hidden = directory / f".{path.name}.tmp"
        hidden.write_text("\n".join(lines) + "\n", encoding="utf-8")
        mtime_ns = base_mtime_ns + (index - first) * 1_000_000
        os.utime(hidden, ns=(mtime_ns, mtime_ns))
        hidden.rename(path)
        written.append(path)
    return written


@dataclass(frozen=True)
class SampleShape:
    """What write_for_settings wrote: the same shape into source and, for a join, join_source."""

    files: int
    events_per_file: int
    keys: int
    advance_per_file: timedelta
    run_length: int

    def describe(self) -> str:
        keys = "a key per event" if self.keys == UNIQUE_KEYS else f"{self.keys} keys"
        runs = f" in runs of {self.run_length}" if self.run_length > 1 else ""
        return f"{self.files} files of {self.events_per_file} events ({keys}{runs})"


def write_for_settings(
    settings: Settings,
    files: int,
    events_per_file: int,
    keys: int | None = None,
    advance: str | None = None,
    run_length: int | None = None,
) -> SampleShape:
    """Sample files into the settings' landing directories, shaped for the operator unless told otherwise.

    Defaults: each file covers one watermark, so windows close quickly (one window, query.window, where
    the watermark is zero; custom_state: twice the session timeout, so sessions end); 100 keys (the join: one per order); runs of 10 events per
    key for custom_state, making sessions.
    """
    label = settings.query.operator  # the starter's; without one, a shape that suits most chains
    op = None if label is None else OPERATORS[label]
    if advance is None:
        query = settings.query
        advance = query.watermark if parse_duration(query.watermark, zero=True) else query.window
        if op is not None and op.sample_spans_lifetime:
            advance = f"{2 * parse_duration(query.state_span() or advance)} seconds"
    default_keys = DEFAULT_KEYS if settings.join_source is None else None
    shape = SampleShape(
        files,
        events_per_file,
        keys or (default_keys if op is None else op.sample_keys) or UNIQUE_KEYS,
        timedelta(seconds=parse_duration(advance, zero=True)),  # zero: a calibration's files all at one instant
        run_length or (1 if op is None else op.sample_run_length),
    )
    fields = (shape.files, shape.events_per_file, shape.keys, shape.advance_per_file, shape.run_length)
    write_sample_files(settings.source.files.path, *fields)
    if settings.join_source is not None:
        join_range = parse_duration(settings.query.join.range)
        delays = tuple(timedelta(seconds=join_range * share) for share in PAYMENT_DELAY_SHARES)
        write_sample_files(settings.join_source.files.path, *fields, payment_delays=delays)
    return shape
