"""Refuse bad answers before anything is written: every problem, one line each.

The checks are hooks/answers.py's, run by cookiecutter while it renders this script (the
template's `review()`, from local_extensions.py): this script only reports them. Cookiecutter runs
it before it renders any file, so a refusal leaves an existing project (`-f`, `-f -s`) untouched,
and a new project folder is removed. Cookiecutter's own choice lists and boolean conversion come
before it. Standard library only: this runs under cookiecutter's Python.
"""

from __future__ import annotations

import json
import sys

REVIEW = json.loads(
    r"""
{{ review(cookiecutter) | tojson }}
""".strip()
)


def main() -> int:
    for problem in REVIEW["problems"]:
        print(f"ERROR: {problem}", file=sys.stderr)
    if REVIEW["problems"]:
        print(
            "Nothing was generated or changed. Run cookiecutter again with the answers fixed (cookiecutter"
            " has saved these answers for --replay: answer the prompts again rather than replaying them).",
            file=sys.stderr,
        )
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
