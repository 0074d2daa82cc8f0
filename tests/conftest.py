"""Baking helpers: real cookiecutter runs into temporary folders."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from cookiecutter.main import cookiecutter

TEMPLATE = Path(__file__).resolve().parents[1]

# CI balance (make test runs with -n 2 --dist loadgroup): each group runs whole on one worker. The
# default bake's machinery proofs (about 17 minutes) and the generated projects' gates (about 4)
# make one; the three operator bakes' proofs (about 18) the other; the short tests fill in around
# them. Measured in one CI run: 1,020 s, 240 s and 538 + 332 + 229 s. Left to worksteal, two long
# bakes could queue on one worker while the other ran out of work.
CI_WORKER_1 = pytest.mark.xdist_group("ci-worker-1")
CI_WORKER_2 = pytest.mark.xdist_group("ci-worker-2")


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


def run_in(project: Path, *args: str, timeout: float = 600) -> subprocess.CompletedProcess[str]:
    """Run `python args...` inside a baked project, with this interpreter."""
    return subprocess.run([sys.executable, *args], cwd=project, capture_output=True, text=True, timeout=timeout)


@pytest.fixture
def out(tmp_path: Path) -> Path:
    folder = tmp_path / "out"
    folder.mkdir()
    return folder
