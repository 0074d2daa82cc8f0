"""What the commands share: argument types, the settings argument and the exit codes."""

from __future__ import annotations

import argparse
from pathlib import Path

from ..core.settings import DEFAULT_SETTINGS_FILE

EXIT_QUERY_FAILED = 1
EXIT_BAD_INPUT = 2
EXIT_MISSING_DEPENDENCY = 3
EXIT_CHECKPOINT_DRIFT = 4


def positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number; give one greater than zero") from None
    if value <= 0:
        raise argparse.ArgumentTypeError(f"{text!r} must be greater than zero")
    return value


def non_negative_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number; give 0 or more") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"{text!r} must be 0 or more")
    return value


def positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number; give one greater than zero") from None
    if not value > 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"{text!r} must be a finite number greater than zero")
    return value


def add_settings_argument(command: argparse.ArgumentParser, purpose: str = "settings file") -> None:
    command.add_argument(
        "--settings", type=Path, default=DEFAULT_SETTINGS_FILE, help=f"{purpose} (default: %(default)s)"
    )
