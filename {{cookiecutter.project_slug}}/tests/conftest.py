"""Shared fixtures: one local Spark session for the whole run, settings written to real files."""

from __future__ import annotations

import copy
import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
import yaml
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from {{ cookiecutter.package_name }}.capacity import parse_duration
from {{ cookiecutter.package_name }}.job import apply_operator
from {{ cookiecutter.package_name }}.sample_input import write_sample_files
from {{ cookiecutter.package_name }}.schema import EVENT_SCHEMA
from {{ cookiecutter.package_name }}.settings import ENV_PREFIX, Settings, load_settings

PROJECT_DIR = Path(__file__).resolve().parents[1]
PROJECT_SETTINGS = PROJECT_DIR / "settings.yaml"


def run_python(*args: str, env: dict[str, str] | None = None, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    """`python args...` in the project folder, as a real separate process."""
    return subprocess.run(
        [sys.executable, *args], cwd=PROJECT_DIR, capture_output=True, text=True, timeout=timeout, env=env
    )


def clean_env() -> dict[str, str]:
    """This environment without the developer's own settings overrides."""
    return {name: value for name, value in os.environ.items() if not name.upper().startswith(ENV_PREFIX)}


def committed_batches(checkpoint: Path | str) -> list[int]:
    commits = Path(checkpoint) / "commits"
    return sorted(int(path.name) for path in commits.iterdir() if path.name.isdigit()) if commits.is_dir() else []


def files_job(tmp_path: Path, sink: str, provider: str, changelog: bool = False, files: int = 6) -> dict[str, Any]:
    """Settings changes for a deterministic run: `files` landing files, one per micro-batch, until all are done.

    Each file covers two minutes of event time for 4 keys; with a 1-minute window and watermark the
    run closes most windows, and a crash or replay has several batches with output to get wrong.
    """
    landing = tmp_path / "landing"
    write_sample_files(landing, files=files, events_per_file=40, keys=4, advance_per_file=timedelta(minutes=2))
    return {
        "spark": {"shuffle_partitions": 2, "platform": "oss", "master": "local[2]"},
        "state_store": {"provider": provider, "changelog_checkpointing": changelog},
        "source": {"type": "files", "files": {"path": str(landing), "max_files_per_trigger": 1}},
        "sink": {
            "type": sink,
            "output_mode": "append",
            "path": str(tmp_path / "output"),
            "delta": {"writer": "deltalake"},
        },
        "query": {
            "name": f"test_{tmp_path.name}",
            "watermark": "1 minute",
            "window": "1 minute",
            "checkpoint_location": str(tmp_path / "checkpoint"),
            "trigger": "available_now",
        },
    }


def batch_expectation(spark: SparkSession, settings: Settings) -> DataFrame:
    """The same computation as a batch job on the same files (in order, none late), as a stream emits it.

    Deduplication emits each first event at once. A windowed count emits a window when the watermark
    passes its end; an available-now run ends with a batch that moves the watermark to the newest
    event time less the delay, so its output holds exactly the windows ending by that instant.
    """
    events = spark.read.schema(EVENT_SCHEMA).json(settings.source.files.path)
    result = apply_operator(events, settings.query)
    if settings.query.operator != "windowed_aggregation":
        return result
    newest = events.agg(F.max("event_time")).first()[0]
    watermark = newest - timedelta(seconds=parse_duration(settings.query.watermark))
    return result.where(F.col("window_end") <= F.lit(watermark))


def expected_row_count(operator: str, files: int) -> int:
    """Rows the files_job input yields: 40 events per file over 2 minutes, 4 keys, 1-minute watermark.

    Deduplication keeps all 40 x files events (none repeat). The windowed count closes windows
    0 .. 2 x files - 3 (the newest event is at 2 x files minutes less 3 s), 4 keys each.
    """
    return 40 * files if operator == "deduplication" else (2 * files - 2) * 4


@pytest.fixture(scope="session")
def spark() -> Iterator[SparkSession]:
    session = (
        SparkSession.builder.master("local[2]")
        .appName("{{ cookiecutter.package_name }}-tests")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.session.timeZone", "UTC")
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    yield session
    session.stop()


@pytest.fixture(autouse=True)
def _stop_leftover_streams(request: pytest.FixtureRequest) -> Iterator[None]:
    yield
    if "spark" in request.fixturenames:
        for query in request.getfixturevalue("spark").streams.active:
            query.stop()


@pytest.fixture(autouse=True)
def _no_settings_from_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    """A developer's own overrides must not leak into the tests."""
    import os

    for name in list(os.environ):
        if name.upper().startswith(ENV_PREFIX):
            monkeypatch.delenv(name)


def deep_merge(base: dict[str, Any], changes: dict[str, Any]) -> dict[str, Any]:
    merged = copy.deepcopy(base)
    for key, value in changes.items():
        if isinstance(value, dict) and isinstance(merged.get(key), dict):
            merged[key] = deep_merge(merged[key], value)
        else:
            merged[key] = value
    return merged


@pytest.fixture
def write_settings(tmp_path: Path) -> Callable[..., Path]:
    """Write the project's settings.yaml with changes into tmp_path; return the file's path."""

    def write(changes: dict[str, Any] | None = None, name: str = "settings.yaml") -> Path:
        data = deep_merge(yaml.safe_load(PROJECT_SETTINGS.read_text()), changes or {})
        path = tmp_path / name
        path.write_text(yaml.safe_dump(data, sort_keys=False))
        return path

    return write


@pytest.fixture
def make_settings(write_settings: Callable[..., Path]) -> Callable[..., Settings]:
    """Settings loaded, the real way, from a file holding the project's settings plus changes."""

    def make(changes: dict[str, Any] | None = None) -> Settings:
        return load_settings(write_settings(changes))

    return make
