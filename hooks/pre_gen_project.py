"""Validate the answers before anything is generated; stop with one clear sentence each.

Cookiecutter itself refuses a value outside a choice list or a non-boolean for
changelog_checkpointing; those are not checked again here. The durations (watermark, window,
join_range, session_timeout) and the operator/provider pairing are checked by the post-generation hook with the generated package's own parser: this hook cannot reach the template's
files reliably (cookiecutter hands it the template path as typed, which may be relative to a
folder the hook does not know), and the parser must exist once. A failing post-generation hook
removes the project all the same.

Answers arrive as JSON data (never pasted into code). Standard library only: this runs under
cookiecutter's Python.
"""

from __future__ import annotations

import json
import keyword
import re
import sys

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
RESERVED_PACKAGES = {
    *("pyspark", "py4j", "pydantic", "pydantic_settings", "yaml", "pyarrow", "deltalake"),
    *("tests", "test", "main"),
}


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
    found += number_problems(answers)
    return found


def number_problems(answers: dict) -> list[str]:
    found = []
    checks = [
        ("input_rows_per_second", PLAIN_NUMBER, "a number of rows per second greater than zero, like 10000"),
        ("state_bytes_per_row", WHOLE_NUMBER, "a whole number of bytes greater than zero, like 64"),
        ("shuffle_partitions", WHOLE_NUMBER, "a whole number of partitions greater than zero, like 200"),
        ("state_growth_factor", PLAIN_NUMBER, "a plain number of 1 or more, like 1 or 2.5"),
    ]
    # Used (and written) by the join only; by default it repeats input_rows_per_second, checked above.
    join_rate = answers["join_input_rows_per_second"]
    if answers["stateful_operator"] == "stream_stream_join" and join_rate != answers["input_rows_per_second"]:
        checks.append(("join_input_rows_per_second", PLAIN_NUMBER, "a number of rows per second greater than zero"))
    cardinality = str(answers["key_cardinality"]).strip()
    if cardinality != "unknown" and (not WHOLE_NUMBER.match(cardinality) or int(cardinality) <= 0):
        found.append(
            f"key_cardinality {answers['key_cardinality']!r} is not valid: write a whole number of distinct keys"
            " greater than zero, like 100000, or unknown."
        )
    for name, pattern, expected in checks:
        text = str(answers[name]).strip()
        if not pattern.match(text) or float(text) <= 0:
            found.append(f"{name} {answers[name]!r} is not valid: write {expected}.")
        elif name == "state_growth_factor" and float(text) < 1:
            found.append(
                f"{name} {answers[name]!r} is below 1: state does not shrink over a job's life; write 1 or more."
            )
    return found


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
