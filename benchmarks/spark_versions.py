"""Spark versions: the generated project's tests and the machinery's proofs on another pyspark.

CI runs everything on the pyspark that pyproject.toml pins (4.2.x). This script runs the same
proofs on another release, one bake per operator (answered as CI's bakes are), in a
virtual environment of its own under build/ that holds that pyspark and the project's other
dependencies: the generated project's own tests (`tests/`), then the machinery proofs of
tests/machinery that CI runs in that bake, minus those that need JARs that release does not
have here (the Kafka connector and Delta Lake's JVM sink: see the template's docs/compatibility.md).
Prints one line per bake and writes the counts, the failures and the machine to
RESULTS_DIR/spark_versions.json and spark_versions.md.

    .venv/bin/python benchmarks/spark_versions.py [--pyspark 4.3.0] [--operators deduplication,...]
        [--proofs test_inspect.py,...] [-k EXPRESSION]

--proofs and -k choose some proofs (files of tests/machinery, a pytest -k expression) within what CI
runs in each bake, without the project's own tests; such a run writes spark_versions_selected.json
and .md, so the whole suite's results stay as they were.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from cookiecutter.main import cookiecutter

REPO = Path(__file__).resolve().parents[1]
PROOFS = REPO / "tests" / "machinery"
OPERATORS = ("windowed_aggregation", "deduplication", "stream_stream_join", "custom_state")
# What CI runs in each bake (tests/test_machinery.py), less what needs JARs this release lacks here:
# the Kafka connector (4.3.0 is not served by this machine's Maven Central) and Delta's JVM sink.
NOT_HERE = "not kafka and not delta_spark and not secondary and not soak"
MARKERS = {
    "windowed_aggregation": f"not cluster and {NOT_HERE}",
    "deduplication": f"operator and {NOT_HERE}",
    "stream_stream_join": f"operator and {NOT_HERE}",
    "custom_state": f"operator and {NOT_HERE}",
}
# The answers of CI's bakes (tests/test_machinery.py), so that the proofs meet the projects they expect.
ANSWERS = {
    "windowed_aggregation": {},
    "deduplication": {"stateful_operator": "deduplication"},
    "stream_stream_join": {"stateful_operator": "stream_stream_join", "state_store_provider": "rocksdb"},
    "custom_state": {"stateful_operator": "custom_state", "changelog_checkpointing": False},
}
DEPENDENCIES = [
    "pydantic>=2.11,<3",
    "pydantic-settings>=2.10,<3",
    "pyyaml>=6.0,<7",
    "pyarrow>=18",
    "deltalake>=1.6,<2",
    "pandas>=2.2,<3",
    "protobuf>=6.33",
    "matplotlib>=3.8,<4",
    "pytest>=8,<10",
    "ruff==0.16.9",
    "mypy>=1.13,<2",
    "types-PyYAML",
]


def arguments() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pyspark", default="4.3.0", help="the pyspark release to run on (default: %(default)s)")
    parser.add_argument("--operators", default=",".join(OPERATORS), help="comma-separated (default: all four)")
    parser.add_argument("--results-dir", type=Path, default=REPO / "benchmarks" / "results")
    parser.add_argument(
        "--venv", type=Path, help="the virtual environment to use or make (default: build/venv-pyspark-VERSION)"
    )
    parser.add_argument("--proofs", default="", help="comma-separated files of tests/machinery (default: all)")
    parser.add_argument("-k", dest="keyword", default="", help="a pytest -k expression among the proofs")
    args = parser.parse_args()
    args.proofs = [name.strip() for name in args.proofs.split(",") if name.strip()]
    missing = [name for name in args.proofs if not (PROOFS / name).is_file()]
    if missing:
        parser.error(f"--proofs: no {', '.join(missing)} in {PROOFS}")
    args.operators = [name.strip() for name in args.operators.split(",") if name.strip()]
    unknown = sorted(set(args.operators) - set(OPERATORS))
    if unknown or not args.operators:
        parser.error(f"--operators: unknown {unknown}; choose from {', '.join(OPERATORS)}")
    if not re.fullmatch(r"\d+\.\d+\.\d+", args.pyspark):
        parser.error(f"--pyspark {args.pyspark!r}: give a release such as 4.3.0")
    return args


def environment(version: str, venv: Path | None = None) -> Path:
    """A virtual environment (default build/venv-pyspark-<version>), created once, with that pyspark
    and the project's other dependencies."""
    venv = venv or REPO / "build" / f"venv-pyspark-{version}"
    python = venv / "bin" / "python"
    if python.exists():
        installed = subprocess.run(
            [str(python), "-c", "import pyspark; print(pyspark.__version__)"], capture_output=True
        )
        if installed.returncode == 0 and installed.stdout.decode().strip() == version:
            return python
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    subprocess.run([str(python), "-m", "pip", "install", "-q", f"pyspark=={version}", *DEPENDENCIES], check=True)
    return python


def run_bake(
    python: Path, operator: str, scratch: Path, proofs: list[str] | None = None, keyword: str = ""
) -> dict[str, object]:
    """Bake, then run the project's own tests and the machinery's proofs in it; the counts of both.
    With proofs or a keyword, only those proofs."""
    project = Path(
        cookiecutter(str(REPO), no_input=True, extra_context=ANSWERS[operator], output_dir=str(scratch / operator))
    )
    shutil.copytree(PROOFS, project / "machinery_tests", ignore=shutil.ignore_patterns("__pycache__"))
    pytest = [str(python), "-m", "pytest", "-q", "-p", "no:cacheprovider"]
    chosen = [f"machinery_tests/{name}" for name in proofs or []] or ["machinery_tests"]
    machinery = [
        *pytest,
        "-p",
        "tests.conftest",
        *chosen,
        "-m",
        MARKERS[operator],
        *(["-k", keyword] if keyword else []),
    ]
    suites = [machinery] if proofs or keyword else [[*pytest, "tests"], machinery]
    run: dict[str, object] = {
        "operator": operator,
        "exit": 0,
        "seconds": 0.0,
        "failures": [],
        "when": time.strftime("%Y-%m-%d %H:%M"),
    }
    log = []
    for command in suites:
        started = time.monotonic()
        done = subprocess.run(command, cwd=project, capture_output=True, text=True)
        run["seconds"] = round(float(run["seconds"]) + time.monotonic() - started, 1)  # type: ignore[arg-type]
        run["exit"] = max(int(run["exit"]), done.returncode)  # type: ignore[call-overload]
        summary = next((line for line in reversed(done.stdout.splitlines()) if " in " in line), "")
        for number, word in re.findall(r"(\d+) (passed|failed|skipped|errors?)", summary):
            key = "failed" if word.startswith("error") else word
            run[key] = int(run.get(key, 0)) + int(number)  # type: ignore[call-overload]
        run["failures"] += sorted(set(re.findall(r"^(?:FAILED|ERROR) (\S+)", done.stdout, re.MULTILINE)))  # type: ignore[operator]
        log.append(f"$ {' '.join(command)}\n{done.stdout}\n{done.stderr}")
    (scratch / f"{operator}.log").write_text("\n".join(log))
    return run


def write_results(results_dir: Path, version: str, runs: list[dict[str, object]], selection: str = "") -> None:
    """Write this run's bakes; the other operators' rows of an earlier run on the same pyspark (and
    selection) are kept. A selection of proofs writes spark_versions_selected.*."""
    machine = {"cores": os.cpu_count(), "python": platform.python_version(), "platform": platform.platform()}
    name = "spark_versions_selected" if selection else "spark_versions"
    earlier_file = results_dir / f"{name}.json"
    earlier = json.loads(earlier_file.read_text()) if earlier_file.exists() else {}
    if earlier.get("pyspark") == version and earlier.get("selection", "") == selection:
        rerun = {run["operator"] for run in runs}
        kept = [run for run in earlier.get("runs", []) if run["operator"] not in rerun]
        runs = sorted(kept + runs, key=lambda run: OPERATORS.index(str(run["operator"])))
    record = {"pyspark": version, "machine": machine, "runs": runs, "when": time.strftime("%Y-%m-%d")}
    if selection:
        record["selection"] = selection
    results_dir.mkdir(parents=True, exist_ok=True)
    (results_dir / f"{name}.json").write_text(json.dumps(record, indent=2) + "\n")
    lines = [
        f"# The suite on pyspark {version} ({record['when']}, {machine['cores']} cores)",
        "",
        "One bake per operator, answered as CI's: the generated project's tests and the machinery proofs",
        f"CI runs there, without Kafka and delta-spark (`-m '... and {NOT_HERE}'`).",
        *([f"Only these proofs, without the project's own tests: {selection}.", ""] if selection else [""]),
        "| operator | run on | passed | failed | skipped | seconds | failures |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    for run in runs:
        failures = ", ".join(f"`{name}`" for name in run["failures"]) or "-"  # type: ignore[union-attr]
        lines.append(
            f"| {run['operator']} | {run.get('when', '-')} | {run.get('passed', 0)} | {run.get('failed', 0)} | {run.get('skipped', 0)}"
            f" | {run['seconds']} | {failures} |"
        )
    (results_dir / f"{name}.md").write_text("\n".join(lines) + "\n")


def main() -> int:
    args = arguments()
    python = environment(args.pyspark, args.venv)
    runs = []
    with tempfile.TemporaryDirectory(prefix="spark-versions-") as scratch:
        for operator in args.operators:
            run = run_bake(python, operator, Path(scratch), args.proofs, args.keyword)
            runs.append(run)
            print(json.dumps(run), flush=True)
            if run["exit"] != 0:
                args.results_dir.mkdir(parents=True, exist_ok=True)
                shutil.copy(Path(scratch) / f"{operator}.log", args.results_dir / f"spark_versions_{operator}.log")
    selection = " ".join([*args.proofs, *([f"-k '{args.keyword}'"] if args.keyword else [])])
    write_results(args.results_dir, args.pyspark, runs, selection)
    print(f"results: {args.results_dir / ('spark_versions_selected.md' if selection else 'spark_versions.md')}")
    return 0 if all(run["exit"] == 0 for run in runs) else 1


if __name__ == "__main__":
    sys.exit(main())
