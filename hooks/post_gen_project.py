"""Check the watermark, size the state, settle the provider, and write the decision into settings.yaml.

Runs inside the freshly generated project and imports its capacity module, so the estimate (and
the watermark parser) the project ships is the one that made the decision. On a bad answer it
exits 1 and cookiecutter removes the project. Standard library only.
"""

from __future__ import annotations

import importlib
import json
import sys
from pathlib import Path

ANSWERS = json.loads(
    r"""
{{ cookiecutter | tojson }}
""".strip()
)

PACKAGE = ANSWERS["package_name"]
SETTINGS = Path("settings.yaml")
# Lines of the rendered settings.yaml that this hook replaces; each must appear exactly once.
DECISION_MARKER = "  # @sizing-decision@"
PROVIDER_LINE = "  provider: auto"
CHANGELOG_LINE = "  changelog_checkpointing: auto"
# Files that only some projects get: path -> whether this project keeps it.
OPTIONAL_PATHS = {
    "databricks.yml": ANSWERS["platform"] == "databricks",  # the Asset Bundle
    f"{PACKAGE}/sessions.py": ANSWERS["stateful_operator"] == "custom_state",  # the custom state processor
}


def load_machinery(module: str):
    """A module of the generated package's machinery (standard library only), from this very project."""
    sys.path.insert(0, str(Path.cwd()))
    try:
        return importlib.import_module(f"{PACKAGE}.machinery.{module}")
    finally:
        sys.path.pop(0)


def decision_comment(sizing, decision) -> list[str]:
    """The sizing written beside the provider key, so the reasoning travels with the setting."""
    e = sizing
    lines = [
        "Chosen at generation time by the capacity estimator",
        f"(python -m {PACKAGE} estimate reproduces it):",
        f"  operator {e.operator}: {e.formula}",
        f"  headline rows = {e.watermark} x {e.input_rows_per_second:g} rows/s = {e.headline_rows:,}",
        f"  rows = {e.rows_working}",
        f"  bytes = {e.rows:,} x {e.state_bytes_per_row} B = {e.total_bytes:,} B; {e.state_bytes_per_row} B per row is",
        f"    your answer, not a measurement: `python -m {PACKAGE} estimate --calibrate` measures it",
        f"  per partition = {e.total_bytes:,} B / {e.shuffle_partitions} = {e.bytes_per_partition:,} B",
        f"  x growth {e.growth_factor:g} = {e.projected_bytes_per_partition:,} B"
        f" (RocksDB from {e.threshold_bytes:,} B)",
        f"  recommended: {e.recommended_provider}; requested: {ANSWERS['state_store_provider']};"
        f" written: {decision.provider}",
        *decision.notes,
        "The provider and spark.shuffle_partitions are pinned into the checkpoint at the first run;",
        "changing either later needs a new checkpoint location and reprocessing.",
    ]
    return [f"  # {line}" for line in lines]


def replace_once(lines: list[str], old: str, new: list[str]) -> list[str]:
    hits = [i for i, line in enumerate(lines) if line.rstrip() == old]
    if len(hits) != 1:
        raise RuntimeError(f"settings.yaml: expected the line {old!r} once, found it {len(hits)} times")
    i = hits[0]
    return lines[:i] + new + lines[i + 1 :]


def write_decision(sizing, decision) -> None:
    lines = SETTINGS.read_text(encoding="utf-8").splitlines()
    lines = replace_once(lines, DECISION_MARKER, decision_comment(sizing, decision))
    lines = replace_once(lines, PROVIDER_LINE, [f"  provider: {decision.provider}"])
    changelog = "true" if decision.changelog_checkpointing else "false"
    lines = replace_once(lines, CHANGELOG_LINE, [f"  changelog_checkpointing: {changelog}"])
    SETTINGS.write_text("\n".join(lines) + "\n", encoding="utf-8")


def refuse(sentence: str) -> int:
    """Stop: cookiecutter then removes the half-made project."""
    print(f"ERROR: {sentence}", file=sys.stderr)
    print("Nothing was generated. Run cookiecutter again with the answers fixed.", file=sys.stderr)
    return 1


def main() -> int:
    durations, capacity = load_machinery("durations"), load_machinery("sizing.capacity")
    # Every duration lands in settings.yaml, whichever operator uses it, so each must parse.
    for name in ("watermark", "window", "join_range", "session_timeout"):
        try:
            durations.parse_duration(ANSWERS[name])
        except durations.DurationError as error:
            return refuse(f"{name} {error}.")
    cardinality = str(ANSWERS["key_cardinality"]).strip()
    joined = ANSWERS["stateful_operator"] == "stream_stream_join"
    try:
        sizing = capacity.estimate(
            input_rows_per_second=float(ANSWERS["input_rows_per_second"]),
            watermark=ANSWERS["watermark"],
            state_bytes_per_row=int(ANSWERS["state_bytes_per_row"]),
            shuffle_partitions=int(ANSWERS["shuffle_partitions"]),
            growth_factor=float(ANSWERS["state_growth_factor"]),
            operator=ANSWERS["stateful_operator"],
            window=ANSWERS["window"],
            key_cardinality=None if cardinality == "unknown" else int(cardinality),
            join_input_rows_per_second=float(ANSWERS["join_input_rows_per_second"]) if joined else None,
            join_range=ANSWERS["join_range"],
            session_timeout=ANSWERS["session_timeout"],
        )
        # Cookiecutter has already turned the boolean answer into true or false.
        decision = capacity.decide(ANSWERS["state_store_provider"], bool(ANSWERS["changelog_checkpointing"]), sizing)
    except ValueError as error:  # bad durations, and pairings such as custom_state with hdfs
        return refuse(f"{error}.")
    write_decision(sizing, decision)
    for path, wanted in OPTIONAL_PATHS.items():
        if not wanted:
            Path(path).unlink()
    banner = "!" * 78
    if decision.against_recommendation:
        print(banner, file=sys.stderr)
    print(capacity.report(sizing, decision), file=sys.stderr if decision.against_recommendation else sys.stdout)
    if decision.against_recommendation:
        print(banner, file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
