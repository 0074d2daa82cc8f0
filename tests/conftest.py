"""Baking helpers: real cookiecutter runs into temporary folders."""

from __future__ import annotations

import contextlib
import functools
import importlib
import io
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from cookiecutter.main import cookiecutter

from .class_archive import java_options

TEMPLATE = Path(__file__).resolve().parents[1]

# CI balance (make test runs with -n 3 --dist loadgroup on 2 cores): the longest runs are xdist groups, each
# handed to one worker, first: the default bake's everything-else run and the real-time bake's (29.7 minutes
# of a worker together in the last CI, a slow one), its faults-and-Kafka run and the join bake's (28.4), and
# the custom_state, deduplication, chains-and-merge and Connect bakes' (33.7). The short tests (some 10
# worker-minutes) go one at a time to the worker that runs out of work first (xdist hands a worker more once
# it has 2 tests or fewer left), so the three end together while the groups differ by less than they take.
# A third worker on 2 cores: the proofs wait on processes, the disk and their triggers for part of their
# time, which a third run fills; the same proofs took 30:36 of pytest with two workers and 28:14 with three,
# one run after the other, and 37:02 and 36:10 in a second such pair on a slower day. Measured before: with the chains and state files queued behind the default bake's
# runs, that worker ran 22:29 of pytest's 22:31 while the other idled for its last 2 minutes. Left to
# worksteal, two long bakes queued behind each other on one worker (25:38 for the whole CI when it took 30;
# 27:04 for pytest alone when pytest 9.2 silently broke the grouping, hence its pin and the check below).
DEFAULT_BAKE = pytest.mark.xdist_group("default-bake")
FAULTS_AND_JOIN = pytest.mark.xdist_group("faults-and-join")
OTHER_BAKES = pytest.mark.xdist_group("other-bakes")


def pytest_configure(config: pytest.Config) -> None:
    """Every Spark JVM the tests start (the bakes' subprocesses inherit the environment) maps the class-data
    archive when `make test` wrote one (tests/class_archive.py)."""
    options = java_options()
    if options and options not in os.environ.get("SPARK_SUBMIT_OPTS", ""):
        os.environ["SPARK_SUBMIT_OPTS"] = f"{os.environ.get('SPARK_SUBMIT_OPTS', '')} {options}".strip()


@pytest.hookimpl(trylast=True)  # after xdist's own hook, which tags a grouped test's node id with its group
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """The grouped (longest) runs first: xdist hands out work in collection order."""
    items.sort(key=lambda item: item.get_closest_marker("xdist_group") is None)
    if getattr(config.option, "loadgroup", False):  # an xdist worker under --dist loadgroup
        # xdist would spread an untagged group over the workers without a word: its tests fail instead.
        UNGROUPED.update(
            item.nodeid for item in items if item.get_closest_marker("xdist_group") and "@" not in item.nodeid
        )


UNGROUPED: set[str] = set()


def pytest_runtest_setup(item: pytest.Item) -> None:
    if item.nodeid in UNGROUPED:
        pytest.fail(
            f"pytest {pytest.__version__} with pytest-xdist does not group this test (pytest-xdist issue 1386,"
            " pytest 9.2 and later): install pyproject.toml's pytest pin (make setup)"
        )


def bake(output_dir: Path, *, overwrite: bool = False, skip_existing: bool = False, **answers: Any) -> Path:
    """Generate a project with default answers overridden by `answers`; return its folder.
    overwrite and skip_existing are cookiecutter's -f and -s."""
    return Path(
        cookiecutter(
            str(TEMPLATE),
            no_input=True,
            extra_context=answers,
            output_dir=str(output_dir),
            default_config=True,
            overwrite_if_exists=overwrite,
            skip_if_file_exists=skip_existing,
        )
    )


def recorded_answers(project: Path) -> dict[str, Any]:
    """The answers a project records in .cookiecutter.json (cookiecutter's replay form)."""
    return json.loads((project / ".cookiecutter.json").read_text(encoding="utf-8"))["cookiecutter"]


def run_command(project: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """`python -m <package> args...` of a baked project, run in this process (its package imported from
    the project, then forgotten: bakes share package names) on one local session kept for the whole run,
    which the command takes instead of starting a JVM: its exit code and what it printed. The machinery is
    the same in every bake (test_bake.py proves it), so only the project's own query and settings differ."""
    package = recorded_answers(project)["package_name"]
    stdout, stderr = io.StringIO(), io.StringIO()
    saved_path, folder = list(sys.path), os.getcwd()
    shared_session()
    _forget(package)
    sys.path.insert(0, str(project))
    os.chdir(project)
    try:
        with contextlib.redirect_stdout(stdout), contextlib.redirect_stderr(stderr):
            commands = importlib.import_module(f"{package}.machinery.commands")
            try:
                code = commands.main(list(args))
            except SystemExit as exit:  # argparse's usage errors
                code = exit.code if isinstance(exit.code, int) else 1
    finally:
        os.chdir(folder)
        sys.path[:] = saved_path
        _forget(package)
    return subprocess.CompletedProcess(["-m", package, *args], code, stdout.getvalue(), stderr.getvalue())


def _forget(package: str) -> None:
    for name in [name for name in sys.modules if name == package or name.startswith(f"{package}.")]:
        del sys.modules[name]


@functools.cache
def shared_session():
    """One local session for this test process's in-process commands (started on first use)."""
    from pyspark.sql import SparkSession

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    spark = (
        SparkSession.builder.master("local[2]")
        .appName("template-tests")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def run_in(
    project: Path, *args: str, timeout: float = 600, python: Path | None = None, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """Run `python args...` inside a baked project, with this interpreter or `python`, in this environment plus env."""
    command = [str(python or sys.executable), *args]
    environment = {**os.environ, **(env or {})}
    return subprocess.run(command, cwd=project, capture_output=True, text=True, timeout=timeout, env=environment)


@pytest.fixture
def out(tmp_path: Path) -> Path:
    folder = tmp_path / "out"
    folder.mkdir()
    return folder
