"""The template served the way `cookiecutter gh:org/template` gets it, from a git repository:
bakes from a git URL, an absolute and a relative path; answers that replay byte for byte; and
cruft create, check and update, with a change of the machinery brought into a project whose query
its user has edited."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from .conftest import TEMPLATE, run_command
from .test_rebake import digest

BIN = Path(sys.executable).parent
GIT_IDENTITY = {
    "GIT_AUTHOR_NAME": "Template Tests",
    "GIT_AUTHOR_EMAIL": "tests@example.invalid",
    "GIT_COMMITTER_NAME": "Template Tests",
    "GIT_COMMITTER_EMAIL": "tests@example.invalid",
}
MACHINERY_FILE = Path("{{cookiecutter.project_slug}}", "{{cookiecutter.package_name}}", "machinery", "core", "text.py")
TEMPLATE_CHANGE = (
    '\n\ndef shout(text: str) -> str:\n    """A change of the template\'s machinery."""\n    return text.upper()\n'
)


def run(*command: str | Path, cwd: Path, check: bool = True, stdin: str | None = None) -> subprocess.CompletedProcess:
    env = {**os.environ, **GIT_IDENTITY}
    result = subprocess.run(
        [str(part) for part in command], cwd=cwd, capture_output=True, text=True, env=env, input=stdin
    )
    if check:
        assert result.returncode == 0, f"{command}: {result.stdout[-2000:]}{result.stderr[-3000:]}"
    return result


class TemplateRepository:
    """A bare git repository of this template (as on a git host) and a working clone to change it."""

    def __init__(self, folder: Path) -> None:
        self.work = folder / "template-work"
        self.bare = folder / "template.git"
        # The working tree as it is (tracked and new files, nothing git ignores).
        listed = run("git", "ls-files", "-z", "--cached", "--others", "--exclude-standard", cwd=TEMPLATE).stdout
        for name in filter(None, listed.split("\0")):
            if (TEMPLATE / name).is_file():
                (self.work / name).parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(TEMPLATE / name, self.work / name)
        run("git", "init", "-q", "-b", "main", cwd=self.work)
        run("git", "add", "-A", cwd=self.work)
        run("git", "commit", "-q", "-m", "template", cwd=self.work)
        run("git", "clone", "-q", "--bare", self.work, self.bare, cwd=folder)
        run("git", "remote", "add", "origin", self.bare, cwd=self.work)
        self.url = f"file://{self.bare}"

    def commit(self, path: Path, appended: str) -> None:
        with open(self.work / path, "a", encoding="utf-8") as file:
            file.write(appended)
        run("git", "commit", "-q", "-am", f"change {path.name}", cwd=self.work)
        run("git", "push", "-q", "origin", "main", cwd=self.work)


@pytest.fixture
def template(tmp_path: Path) -> Iterator[TemplateRepository]:
    yield TemplateRepository(tmp_path)


def cookiecutter(*args: str | Path, cwd: Path, stdin: str | None = None) -> subprocess.CompletedProcess:
    # A fresh home: cookiecutter keeps its clones and replay files there.
    return run(BIN / "cookiecutter", "--config-file", cwd / "no-config.yaml", *args, cwd=cwd, check=False, stdin=stdin)


@pytest.fixture
def workdir(tmp_path: Path) -> Path:
    folder = tmp_path / "work"
    folder.mkdir()
    (folder / "no-config.yaml").write_text(
        f"cookiecutters_dir: {tmp_path / 'clones'}\nreplay_dir: {tmp_path / 'replay'}\n", encoding="utf-8"
    )
    return folder


@pytest.mark.parametrize("where", ["git URL", "absolute path", "relative path"])
def test_every_answer_is_checked_wherever_the_template_comes_from(template, workdir, where):
    source = {"git URL": template.url, "absolute path": str(template.work)}.get(where)
    if source is None:
        source = os.path.relpath(template.work, workdir)
    bad = cookiecutter("--no-input", "-o", "out", source, "watermark=soon", "window=-1 minute", cwd=workdir)
    assert bad.returncode == 1
    assert "ERROR: watermark 'soon' is not an interval Spark can parse" in bad.stderr
    assert "ERROR: window '-1 minute' is negative" in bad.stderr
    assert not (workdir / "out" / "stream-job").exists()
    good = cookiecutter("--no-input", "-o", "out", source, "input_rows_per_second=2.5", cwd=workdir)
    assert good.returncode == 0, good.stderr
    assert "provider: hdfs" in (workdir / "out" / "stream-job" / "settings.yaml").read_text()


def test_the_recorded_answers_replay_the_project_byte_for_byte(template, workdir):
    answers = ["stateful_operator=custom_state", "project_name=Visit Sessions", "input_rows_per_second=0.5"]
    first = cookiecutter("--no-input", "-o", "first", template.url, *answers, cwd=workdir)
    assert first.returncode == 0, first.stderr
    project = workdir / "first" / "visit-sessions"
    recorded = (project / ".cookiecutter.json").read_text()
    # No machine paths: the file is the same wherever and from whatever the project was baked.
    assert str(workdir) not in recorded and "_output_dir" not in recorded and "_repo_dir" not in recorded
    # Not --no-input (cookiecutter refuses it with a replay): it asks once whether to fetch the
    # template again over its earlier clone; yes.
    replay = ("--replay-file", project / ".cookiecutter.json", "-o", "again", template.url)
    again = cookiecutter(*replay, cwd=workdir, stdin="y\n")
    assert again.returncode == 0, again.stderr
    assert digest(workdir / "again" / "visit-sessions") == digest(project)


def test_cruft_brings_a_machinery_change_into_a_project_and_keeps_the_users_edit(template, workdir):
    extra = json.dumps({"stateful_operator": "deduplication", "project_name": "Orders"})
    run(
        BIN / "cruft",
        "create",
        template.url,
        "--no-input",
        "--output-dir",
        "out",
        "--extra-context",
        extra,
        cwd=workdir,
    )
    project = workdir / "out" / "orders"
    assert run(BIN / "cruft", "check", cwd=project).returncode == 0
    query = project / "orders" / "query.py"
    edited = query.read_text().replace('OPERATOR = "deduplication"', '# Our dedup window.\nOPERATOR = "deduplication"')
    assert edited != query.read_text()
    query.write_text(edited)
    run("git", "init", "-q", "-b", "main", cwd=project)
    run("git", "add", "-A", cwd=project)
    run("git", "commit", "-q", "-m", "our project", cwd=project)

    template.commit(MACHINERY_FILE, TEMPLATE_CHANGE)
    stale = run(BIN / "cruft", "check", cwd=project, check=False)
    assert stale.returncode == 1, stale.stdout
    run(BIN / "cruft", "update", "--skip-apply-ask", cwd=project)

    assert (project / "orders" / "machinery" / "core" / "text.py").read_text().endswith(TEMPLATE_CHANGE)
    assert query.read_text() == edited
    assert run(BIN / "cruft", "check", cwd=project).returncode == 0
    # The updated project still loads its settings and sizes its state.
    estimate = run_command(project, "estimate", "--json")
    assert estimate.returncode == 0, estimate.stderr
    assert json.loads(estimate.stdout)["operator"] == "deduplication"
