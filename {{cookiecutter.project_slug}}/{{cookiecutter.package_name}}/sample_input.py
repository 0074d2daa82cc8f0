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
from datetime import UTC, datetime, timedelta
from pathlib import Path

FILE_PATTERN = re.compile(r"^events-(\d{5})\.json$")


def write_sample_files(
    directory: Path | str,
    files: int,
    events_per_file: int,
    keys: int,
    advance_per_file: timedelta,
    start: datetime = datetime(2026, 1, 1, tzinfo=UTC),
) -> list[Path]:
    """Append `files` files after any earlier ones; file i holds events stamped from start + i * advance.

    Event j of file i has key key-((i * events_per_file + j) mod keys) and lies j/events_per_file
    of the way into the file's stretch of event time, so event time only moves forward.
    """
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    first = 1 + max((int(m.group(1)) for p in directory.iterdir() if (m := FILE_PATTERN.match(p.name))), default=-1)
    base_mtime_ns = time.time_ns()
    written = []
    for index in range(first, first + files):
        begins = start + index * advance_per_file
        lines = []
        for j in range(events_per_file):
            number = index * events_per_file + j
            event_time = begins + advance_per_file * j / events_per_file
            event = {"event_id": f"evt-{number}", "key": f"key-{number % keys}", "event_time": _iso(event_time)}
            lines.append(json.dumps(event))
        path = directory / f"events-{index:05d}.json"
        hidden = directory / f".{path.name}.tmp"
        hidden.write_text("\n".join(lines) + "\n", encoding="utf-8")
        mtime_ns = base_mtime_ns + (index - first) * 1_000_000
        os.utime(hidden, ns=(mtime_ns, mtime_ns))
        hidden.rename(path)
        written.append(path)
    return written


def _iso(moment: datetime) -> str:
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
