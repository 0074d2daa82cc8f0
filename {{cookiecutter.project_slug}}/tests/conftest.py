"""Shared fixtures: one local Spark session for the whole run, settings written to real files."""

from __future__ import annotations

import copy
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from pyspark.sql import SparkSession

from {{ cookiecutter.package_name }}.settings import ENV_PREFIX, Settings, load_settings

PROJECT_DIR = Path(__file__).resolve().parents[1]
PROJECT_SETTINGS = PROJECT_DIR / "settings.yaml"


def run_python(*args: str, env: dict[str, str] | None = None, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    """`python args...` in the project folder, as a real separate process."""
    return subprocess.run(
        [sys.executable, *args], cwd=PROJECT_DIR, capture_output=True, text=True, timeout=timeout, env=env
    )


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
