"""Re-bakes over an existing project (cookiecutter -f, -f -s), numbers as people type them, the
refusal as a terminal shows it, and the prompts."""

from __future__ import annotations

import hashlib
import json
import re
import subprocess
import sys
import tomllib
from importlib import metadata
from pathlib import Path

import pytest
import yaml
from cookiecutter.exceptions import FailedHookException
from packaging.requirements import Requirement

from .conftest import TEMPLATE, bake, recorded_answers, run_in

sys.path.insert(0, str(TEMPLATE / "hooks"))
from answers import DEPENDENCY_MODULES  # noqa: E402

USER_EDITS = {"README.md": "\nOur team's notes.\n", "stream_job/query.py": "\n# our change to the query\n"}


def digest(project: Path) -> dict[str, str]:
    """sha256 of every file under project, by relative path."""
    return {
        str(path.relative_to(project)): hashlib.sha256(path.read_bytes()).hexdigest()
        for path in sorted(project.rglob("*"))
        if path.is_file()
    }


def edited_project(out: Path) -> Path:
    project = bake(out)
    for name, text in USER_EDITS.items():
        with open(project / name, "a", encoding="utf-8") as file:
            file.write(text)
    return project


def loaded_settings(project: Path) -> dict:
    """The settings as the project's own loader reads them (it refuses what it cannot use)."""
    code = "import json; from stream_job.machinery.core.settings import load_settings; print(load_settings().model_dump_json())"
    result = run_in(project, "-c", code)
    assert result.returncode == 0, result.stderr[-3000:]
    return json.loads(result.stdout)


REFUSED = [
    {"watermark": "soon"},
    {"input_rows_per_second": "2.5x", "window": "10 mins"},
    {"stateful_operator": "custom_state", "state_store_provider": "hdfs"},
    {"package_name": "json"},
]


@pytest.mark.parametrize("skip_existing", [False, True], ids=["-f", "-f -s"])
@pytest.mark.parametrize("answers", REFUSED, ids=[json.dumps(a) for a in REFUSED])
def test_a_refused_rebake_leaves_the_project_byte_identical(out, capfd, skip_existing, answers):
    project = edited_project(out)
    before = digest(project)
    with pytest.raises(FailedHookException):
        bake(out, overwrite=True, skip_existing=skip_existing, **answers)
    assert "Nothing was generated or changed" in capfd.readouterr().err
    assert digest(project) == before


def test_an_accepted_rebake_with_f_gives_settings_the_project_loads(out, capfd):
    project = edited_project(out)
    bake(out, overwrite=True, stateful_operator="deduplication", state_store_provider="rocksdb")
    settings = loaded_settings(project)
    assert settings["state_store"]["provider"] == "rocksdb"
    assert recorded_answers(project)["stateful_operator"] == "deduplication"
    assert 'OPERATOR = "deduplication"' in (project / "stream_job" / "query.py").read_text()


def test_an_accepted_rebake_with_f_s_keeps_every_existing_file(out, capfd):
    project = edited_project(out)
    before = digest(project)
    capfd.readouterr()
    bake(out, overwrite=True, skip_existing=True, platform="databricks", state_store_provider="hdfs")
    after = digest(project)
    # Only the file the new answers add appears; every existing one, the user's edits included, is kept.
    assert {name: after[name] for name in before} == before
    assert set(after) - set(before) == {"databricks.yml", "serverless_main.py"}
    assert loaded_settings(project)["state_store"]["provider"] == "rocksdb"
    printed = capfd.readouterr()
    assert "NOTE: settings.yaml was kept as it was (cookiecutter -s) and says provider rocksdb, not hdfs" in printed.err


def test_an_optional_file_is_never_written_for_a_project_that_does_not_use_it(out):
    project = bake(out, platform="databricks", stateful_operator="custom_state")
    optional = ("databricks.yml", "serverless_main.py", "stream_job/sessions.py")
    assert all((project / name).is_file() for name in optional)
    oss = bake(out / "oss")
    assert not any((oss / name).exists() for name in optional)


@pytest.mark.parametrize(
    ("typed", "capacity", "rate_source"),
    [("2.5", 2.5, 3), ("0.001", 0.001, 1), ("1e-3", 0.001, 1), ("1e6", 1_000_000, 1_000_000), ("7", 7, 7)],
)
def test_a_rate_as_people_type_it_is_written_so_that_the_project_loads_it(out, typed, capacity, rate_source):
    project = bake(out, input_rows_per_second=typed)
    settings = loaded_settings(project)
    assert settings["capacity"]["input_rows_per_second"] == pytest.approx(capacity)
    # Spark's rate source makes whole rows each second: the expected rate rounded up.
    assert settings["source"]["rate"]["rows_per_second"] == rate_source
    assert yaml.safe_load((project / "settings.yaml").read_text())["capacity"]["input_rows_per_second"] == capacity


def test_a_fractional_join_rate_is_written_for_both_inputs(out):
    project = bake(out, stateful_operator="stream_stream_join", join_input_rows_per_second="0.5")
    settings = loaded_settings(project)
    assert settings["capacity"]["join_input_rows_per_second"] == 0.5
    assert settings["join_source"]["rate"]["rows_per_second"] == 1


def test_figures_beyond_any_cluster_bake_with_a_loud_warning_naming_them(out, capfd):
    project = bake(out, input_rows_per_second="2e12", state_bytes_per_row="1000000")
    err = capfd.readouterr().err
    assert "WARNING: input_rows_per_second is 2,000,000,000,000 rows/s, more than any Spark cluster reads" in err
    assert re.search(
        r"WARNING: the estimated state is [\d,]+ B \([\d,.]+ PiB\), more than any Spark cluster keeps", err
    )
    assert loaded_settings(project)["capacity"]["input_rows_per_second"] == 2e12


def test_a_refusal_in_a_terminal_ends_without_a_traceback(out):
    cli = Path(sys.executable).parent / "cookiecutter"
    answers = ["watermark=-5 minutes", "input_rows_per_second=1e12x", "package_name=logging"]
    result = subprocess.run(
        [str(cli), "--no-input", "-o", str(out), str(TEMPLATE), *answers], capture_output=True, text=True
    )
    assert result.returncode == 1
    assert "Traceback" not in result.stdout + result.stderr
    errors = [line for line in result.stderr.splitlines() if line.startswith("ERROR: ")]
    assert [line.split()[1] for line in errors] == ["package_name", "input_rows_per_second", "watermark"]
    assert "Hook script failed (exit status: 1)" in result.stdout + result.stderr
    assert list(out.iterdir()) == []


def test_prompts_answered_in_a_terminal_are_checked_the_same_way(out):
    cli = Path(sys.executable).parent / "cookiecutter"
    prompts = len([key for key in json.loads((TEMPLATE / "cookiecutter.json").read_text()) if not key.startswith("_")])
    typed = [""] * prompts
    typed[9] = "10 mins"  # the watermark, the 10th prompt
    result = subprocess.run(
        [str(cli), "-o", str(out), str(TEMPLATE)], input="\n".join(typed) + "\n", capture_output=True, text=True
    )
    assert result.returncode == 1
    assert "ERROR: watermark '10 mins' has the unit 'mins', which Spark does not read; write minutes." in result.stderr
    assert list(out.iterdir()) == []


def test_each_operator_specific_prompt_names_its_operator():
    prompts = json.loads((TEMPLATE / "cookiecutter.json").read_text())["__prompts__"]
    operators = {
        "window": ["windowed_aggregation", "deduplicated_count"],
        "key_cardinality": ["windowed_aggregation", "deduplicated_count", "custom_state"],
        "join_input_rows_per_second": ["stream_stream_join"],
        "join_range": ["stream_stream_join"],
        "session_timeout": ["custom_state"],
    }
    for answer, named in operators.items():
        assert all(operator in prompts[answer] for operator in named), (answer, prompts[answer])
        assert "other operators: press Enter" in prompts[answer]
    for shared in ("input_rows_per_second", "watermark", "state_bytes_per_row"):
        assert "all operators" in prompts[shared]
    assert prompts["changelog_checkpointing"].startswith("rocksdb only:")


def top_level_modules(distribution: metadata.Distribution) -> set[str]:
    listed = distribution.read_text("top_level.txt")
    if listed:
        return set(listed.split())
    names = set()
    for file in distribution.files or []:
        first = file.parts[0]
        if first.endswith((".dist-info", ".data")) or first in ("..", "__pycache__"):
            continue
        names.add(first[: -len(".py")] if first.endswith(".py") else first if len(file.parts) > 1 else "")
    return names - {""}


def test_the_shadowing_list_holds_every_module_the_project_can_import(out):
    """Every dependency of the generated project (all extras) and theirs, from the installed metadata."""
    project = tomllib.loads((bake(out) / "pyproject.toml").read_text())["project"]
    listed = [*project["dependencies"], *(r for extra in project["optional-dependencies"].values() for r in extra)]
    # Each requirement with the extra its marker is read under: pyspark[connect] takes pyspark's connect ones.
    pending, seen, modules = [(text, "") for text in listed], set(), set()
    while pending:
        text, extra = pending.pop()
        requirement = Requirement(text)
        wanted = (requirement.name.lower(), frozenset(requirement.extras))
        if wanted in seen or (requirement.marker and not requirement.marker.evaluate({"extra": extra})):
            continue
        seen.add(wanted)
        distribution = metadata.distribution(requirement.name)
        modules |= top_level_modules(distribution)
        pending += [
            (each, wanted_extra) for each in distribution.requires or [] for wanted_extra in ("", *requirement.extras)
        ]
    importable = {name for name in modules if re.fullmatch(r"[a-z][a-z0-9_]*", name)}
    assert {"pyspark", "pydantic", "yaml", "numpy"} <= importable
    assert importable <= DEPENDENCY_MODULES, sorted(importable - DEPENDENCY_MODULES)
