"""Validate every answer before anything is generated; stop with one clear sentence.

Cookiecutter itself refuses a value outside a choice list or a non-boolean for
changelog_checkpointing; those are not checked again here.

Answers arrive as JSON data (never pasted into code). The watermark is checked with the
generated package's own parser, loaded from the template, so there is one parser.
Standard library only: this runs under cookiecutter's Python.
"""

from __future__ import annotations

import importlib.util
import json
import keyword
import re
import sys
from pathlib import Path

ANSWERS = json.loads(
    r"""
{{ cookiecutter | tojson }}
""".strip()
)

SLUG = re.compile(r"^[a-z0-9][a-z0-9._-]*$")
PACKAGE = re.compile(r"^[a-z_][a-z0-9_]*$")
PLAIN_NUMBER = re.compile(r"^\d+(\.\d+)?$")
WHOLE_NUMBER = re.compile(r"^\d+$")
# Names a job package must not take: they would shadow what the job imports.
RESERVED_PACKAGES = {"pyspark", "py4j", "pydantic", "pydantic_settings", "yaml", "tests", "test", "main"}
NOT_YET = {
    "source": {"files", "kafka"},
    "sink": {"delta"},
}


def load_capacity_module():
    """The generated package's capacity.py, straight from the template folder."""
    path = (
        Path(ANSWERS["_repo_dir"])
        / "{{ '{{cookiecutter.project_slug}}' }}"
        / "{{ '{{cookiecutter.package_name}}' }}"
        / "capacity.py"
    )
    spec = importlib.util.spec_from_file_location("_template_capacity", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def problems(answers: dict) -> list[str]:
    """One sentence per bad answer, each naming the answer and the fix."""
    found = []
    slug = str(answers["project_slug"])
    if not SLUG.match(slug):
        found.append(
            f"project_slug {slug!r} is not a usable directory name: use lower-case letters, "
            "digits, '-', '_' or '.', starting with a letter or digit (for example 'stream-job')."
        )
    package = str(answers["package_name"])
    if not PACKAGE.match(package) or keyword.iskeyword(package):
        found.append(
            f"package_name {package!r} is not a valid Python package name: use lower-case letters, "
            "digits and '_', not starting with a digit (for example 'stream_job')."
        )
    elif package in RESERVED_PACKAGES:
        found.append(f"package_name {package!r} would shadow a module the job imports; choose another name.")
    for answer, values in NOT_YET.items():
        if answers[answer] in values:
            found.append(
                f"{answer} {answers[answer]!r} is not available in this version of the template; "
                f"choose {'rate' if answer == 'source' else 'parquet or console'}."
            )
    found += number_problems(answers)
    found += watermark_problems(answers)
    return found


def number_problems(answers: dict) -> list[str]:
    found = []
    checks = [
        ("input_rows_per_second", PLAIN_NUMBER, "a number of rows per second greater than zero, like 10000"),
        ("state_bytes_per_row", WHOLE_NUMBER, "a whole number of bytes greater than zero, like 64"),
        ("shuffle_partitions", WHOLE_NUMBER, "a whole number of partitions greater than zero, like 200"),
        ("state_growth_factor", PLAIN_NUMBER, "a plain number of 1 or more, like 1 or 2.5"),
    ]
    for name, pattern, expected in checks:
        text = str(answers[name]).strip()
        if not pattern.match(text) or float(text) <= 0:
            found.append(f"{name} {answers[name]!r} is not valid: write {expected}.")
        elif name == "state_growth_factor" and float(text) < 1:
            found.append(
                f"{name} {answers[name]!r} is below 1: state does not shrink over a job's life; write 1 or more."
            )
    return found


def watermark_problems(answers: dict) -> list[str]:
    capacity = load_capacity_module()
    try:
        capacity.parse_duration(answers["watermark"])
    except capacity.DurationError as error:
        return [f"watermark {error}."]
    return []


def main() -> int:
    found = problems(ANSWERS)
    for sentence in found:
        print(f"ERROR: {sentence}", file=sys.stderr)
    if found:
        print("Nothing was generated. Run cookiecutter again with the answers fixed.", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
