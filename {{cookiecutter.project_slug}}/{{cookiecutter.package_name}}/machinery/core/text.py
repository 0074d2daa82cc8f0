"""Messages cut down for one line of output."""

from __future__ import annotations


def first_line(text: str) -> str:
    """The first non-empty line of text, stripped: the gist of Spark's message, without the stack after it."""
    return next((line.strip() for line in text.splitlines() if line.strip()), text.strip())
