"""Numbers as the reports print them, and the positive-number check the sizing inputs share."""

from __future__ import annotations


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


def require_positive(name: str, value: float) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0:
        raise ValueError(f"{name} must be a number greater than zero, got {value!r}")
