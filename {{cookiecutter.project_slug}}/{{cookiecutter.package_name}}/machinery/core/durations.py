"""Durations as Spark writes them ("10 minutes", "1 hour 30 minutes"): one parser for every setting,
answer and command that takes one. Standard library only: the template's hooks use it too."""

from __future__ import annotations

import re

# The trigger that is not a duration: run what is there, in batches, then stop.
AVAILABLE_NOW = "available_now"
# Units Spark's interval parser accepts for a watermark. Months and years are refused on
# purpose: Spark counts a month as 31 days there, which is never what a user means.
_UNIT_SECONDS = {
    "microsecond": 1e-6,
    "millisecond": 1e-3,
    "second": 1.0,
    "minute": 60.0,
    "hour": 3600.0,
    "day": 86400.0,
    "week": 604800.0,
}
# Abbreviations people type that Spark's interval parser does not take: the unit to write instead.
_SPELLED_OUT = {
    **dict.fromkeys(("us", "usec", "usecs"), "microseconds"),
    **dict.fromkeys(("ms", "msec", "msecs", "milli", "millis"), "milliseconds"),
    **dict.fromkeys(("s", "sec", "secs"), "seconds"),
    **dict.fromkeys(("m", "min", "mins"), "minutes"),
    **dict.fromkeys(("h", "hr", "hrs"), "hours"),
    **dict.fromkeys(("d",), "days"),
    **dict.fromkeys(("w", "wk", "wks"), "weeks"),
}
_PAIR = re.compile(r"(\d+(?:\.\d+)?)\s*([a-z]+)(?=\s|$)")


# A hundred years: Spark keeps an interval in microseconds, and the sizing multiplies durations by
# rates; nothing longer is meant.
LONGEST_SECONDS = 100 * 365 * 86400


class DurationError(ValueError):
    """A duration string that Spark would not accept (or that is not positive)."""


def parse_duration(text: str, zero: bool = False) -> float:
    """Seconds in a Spark interval string such as "10 minutes" or "1 hour 30 minutes". Zero only with
    `zero`: a watermark delay may be (an event older than the newest one is then late), a window may not."""
    if not isinstance(text, str):
        raise DurationError(f"expected text such as '10 minutes', got {text!r}")
    body = text.strip().lower()
    if body.startswith("interval "):
        body = body[len("interval ") :].strip()
    if not body:
        raise DurationError("is empty; write a number and a unit, such as '10 minutes'")
    if body.startswith("-"):
        raise DurationError(f"{text!r} is negative; a duration is a length of time, such as '10 minutes'")
    seconds = 0.0
    position = 0
    for match in _PAIR.finditer(body):
        if body[position : match.start()].strip():
            break
        number, typed = match.groups()
        unit = typed[:-1] if typed.endswith("s") and typed[:-1] in (*_UNIT_SECONDS, "month", "year") else typed
        if unit in ("month", "year"):
            raise DurationError(f"{text!r} uses {unit}s; write it in days or weeks instead")
        if typed in _SPELLED_OUT:
            raise DurationError(
                f"{text!r} has the unit {typed!r}, which Spark does not read; write {_SPELLED_OUT[typed]}"
            )
        if unit not in _UNIT_SECONDS:
            raise DurationError(f"{text!r} has an unknown unit {typed!r}; use {_unit_list()}")
        if not match.group(0)[len(number) :].startswith((" ", "\t")):
            raise DurationError(f"{text!r} needs a space between the number and the unit, such as '{number} {typed}'")
        seconds += float(number) * _UNIT_SECONDS[unit]
        position = match.end()
    if position == 0 or body[position:].strip():
        raise DurationError(
            f"{text!r} is not an interval Spark can parse; write '<number> <unit>' with a unit "
            f"among {_unit_list()}, such as '30 seconds' or '2 hours'"
        )
    if seconds < 0 or (seconds == 0 and not zero):
        raise DurationError(f"{text!r} must be longer than zero")
    if seconds > LONGEST_SECONDS:
        raise DurationError(f"{text!r} is longer than {LONGEST_SECONDS // 86400:,} days; write a shorter duration")
    return seconds


def _unit_list() -> str:
    return ", ".join(f"{unit}s" for unit in _UNIT_SECONDS)


def named_duration(name: str, text: object, zero: bool = False) -> float:
    """parse_duration, with the setting or answer named in the error."""
    try:
        return parse_duration(text, zero)  # type: ignore[arg-type]
    except DurationError as error:
        raise DurationError(f"{name} {error}") from None
