"""Numbers, lengths of time and instants as reports print them; the positive-number check of the sizing inputs."""

from __future__ import annotations

from datetime import UTC, datetime


def num(value: float) -> str:
    """1,234 for whole numbers, 1,234.5 otherwise."""
    if float(value).is_integer():
        return f"{int(value):,}"
    return f"{value:,.3f}".rstrip("0")


def cores_text(count: float) -> str:
    """'1 core', '3 cores'."""
    return f"{num(count)} core" + ("" if count == 1 else "s")


def human_bytes(value: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(value) < 1024 or unit == "TiB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    raise AssertionError("unreachable")


def human_span(seconds: float) -> str:
    """'45 s', '12.5 minutes', '3.0 hours', '2.1 days': a length of time as a report gives it."""
    for unit, length in (("days", 86400), ("hours", 3600)):
        if seconds >= 2 * length:
            return f"{seconds / length:,.1f} {unit}"
    return f"{seconds:,.0f} s" if seconds < 120 else f"{seconds / 60:,.1f} minutes"


def epoch_ms_text(ms: int) -> str:
    """Epoch milliseconds as Spark's progress writes an instant: '2026-11-29T15:00:00.000Z'."""
    return datetime.fromtimestamp(ms / 1000, UTC).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"


def spark_instant(text: object) -> datetime | None:
    """Spark's ISO timestamp text ('2026-11-29T15:00:00.000Z') as an aware datetime; None if it is not one."""
    if not isinstance(text, str):
        return None
    try:
        return datetime.fromisoformat(text)
    except ValueError:
        return None


def require_positive(name: str, value: float) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0:
        raise ValueError(f"{name} must be a number greater than zero, got {value!r}")
