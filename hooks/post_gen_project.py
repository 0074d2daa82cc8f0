"""Print the sizing decision that settings.yaml now holds, and any warning about the answers.

The decision itself was made before anything was written (hooks/answers.py, through the
template's `review()`) and rendered into settings.yaml with the rest of the project. With
`cookiecutter -s` an existing settings.yaml is kept as it was: then this says so when its provider
differs from this sizing. Standard library only.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

REVIEW = json.loads(
    r"""
{{ review(cookiecutter) | tojson }}
""".strip()
)
BANNER = "!" * 78


def written_provider(settings: Path) -> str | None:
    """The state_store provider in settings.yaml, read as text (cookiecutter's Python has no project code)."""
    match = re.search(
        r"^state_store:\n(?:  .*\n|\s*\n)*?  provider: *(\S+)", settings.read_text(encoding="utf-8"), re.M
    )
    return match.group(1) if match else None


def main() -> int:
    loud = REVIEW["against_recommendation"] or REVIEW["against_partition_advice"] or REVIEW["warnings"]
    out = sys.stderr if loud else sys.stdout
    if loud:
        print(BANNER, file=out)
    print(REVIEW["report"], file=out)
    for warning in REVIEW["warnings"]:
        print(f"WARNING: {warning}", file=out)
    kept = written_provider(Path("settings.yaml"))
    if kept != REVIEW["provider"]:
        print(
            f"NOTE: settings.yaml was kept as it was (cookiecutter -s) and says provider {kept}, not"
            f" {REVIEW['provider']}: a checkpoint keeps the provider it was started with.",
            file=out,
        )
    if loud:
        print(BANNER, file=out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
