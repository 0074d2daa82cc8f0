"""What a Spark start with the connectors costs three ways: resolving `--packages`, from the project's
resolved JARs, and from those JARs with the tests' class-data archive.

Bakes a project with the Kafka source and the delta-spark writer, resolves its connectors once (the
`packages --submit-args` command, as `make submit` does), then starts a Spark session in a fresh
process, in turn: with spark.jars.packages and the project's ivysettings.xml (Ivy resolves at every
start, against a warm cache: what every start did before), with spark.jars naming the files in
connector-jars/ (what every start does now), and the same with the class-data archive that `make
test` writes for the suite's JVMs (tests/class_archive.py; written here first when missing). Each
start runs one tiny query, so that the JARs are really on the classpath, and stops. Prints the
medians and the ratios, round by round, and writes them, with the machine, to
RESULTS_DIR/jvm_starts.json and .md.

    .venv/bin/python benchmarks/jvm_starts.py [--rounds 7]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pyspark

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
from tests import class_archive  # noqa: E402  (the archive the suite's JVMs start from)

RESULTS_DIR = Path(__file__).resolve().with_name("results")
ANSWERS = {"source": "kafka", "sink": "delta", "stateful_operator": "windowed_aggregation"}
# One start: a session with the confs given as JSON, a query that loads a class of each connector, stop.
START = """
import json, sys
from pyspark.sql import SparkSession
builder = SparkSession.builder.master("local[1]").config("spark.ui.enabled", "false")
for key, value in json.loads(sys.argv[1]).items():
    builder = builder.config(key, value)
spark = builder.getOrCreate()
utils = spark._jvm.org.apache.spark.util.Utils
assert utils.classIsLoadable("org.apache.spark.sql.kafka010.KafkaSourceProvider")
assert utils.classIsLoadable("io.delta.sql.DeltaSparkSessionExtension")
spark.range(10).count()
spark.stop()
"""


def java_version() -> str:
    """The first line `java -version` prints, such as 'openjdk version "17.0.15" 2025-04-15'."""
    printed = subprocess.run(["java", "-version"], capture_output=True, text=True)
    return (printed.stderr or printed.stdout).splitlines()[0].strip()


def bake(folder: Path) -> Path:
    from cookiecutter.main import cookiecutter

    return Path(cookiecutter(str(REPO), no_input=True, extra_context=ANSWERS, output_dir=str(folder)))


def timed_start(project: Path, confs: dict[str, str], java_options: str = "") -> float:
    started = time.monotonic()
    env = {**os.environ, "SPARK_SUBMIT_OPTS": java_options}
    result = subprocess.run(
        [sys.executable, "-c", START, json.dumps(confs)],
        cwd=project,
        capture_output=True,
        text=True,
        timeout=600,
        env=env,
    )
    if result.returncode != 0:
        sys.exit(f"jvm_starts: a start failed:\n{result.stderr[-3000:]}")
    return time.monotonic() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=7)
    args = parser.parse_args()
    class_archive.main()
    archived = class_archive.java_options()
    with tempfile.TemporaryDirectory() as scratch:
        project = bake(Path(scratch))
        package = json.loads((project / ".cookiecutter.json").read_text())["cookiecutter"]["package_name"]
        printed = subprocess.run(
            [sys.executable, "-m", package, "packages", "--submit-args"], cwd=project, capture_output=True, text=True
        )
        if printed.returncode != 0:
            sys.exit(f"jvm_starts: resolving failed: {printed.stderr[-2000:]}")
        arguments = shlex.split(printed.stdout)
        jars = arguments[arguments.index("--jars") + 1]
        coordinates = subprocess.run(
            [sys.executable, "-m", package, "packages"], cwd=project, capture_output=True, text=True, check=True
        ).stdout.strip()
        resolving = {
            "spark.jars.packages": coordinates,
            "spark.jars.ivySettings": (project / "ivysettings.xml").as_uri(),
        }
        local = {"spark.jars": jars}
        kinds = {"resolving": (resolving, ""), "local": (local, ""), "archived": (local, archived)}
        timed_start(project, resolving)  # warm-up: Ivy's cache filled, the OS's file cache too
        rounds = []
        for round_number in range(args.rounds):
            names = list(kinds)[round_number % 3 :] + list(kinds)[: round_number % 3]  # each goes first in turn
            times = {name: timed_start(project, *kinds[name]) for name in names}
            rounds.append(times)
            print(f"round {round_number + 1}: " + ", ".join(f"{name} {times[name]:.2f} s" for name in kinds))
    median = {name: statistics.median(times[name] for times in rounds) for name in kinds}
    resolving_to_local = statistics.median(times["resolving"] / times["local"] for times in rounds)
    saved = statistics.median(times["resolving"] - times["local"] for times in rounds)
    local_to_archived = statistics.median(times["local"] / times["archived"] for times in rounds)
    results = {
        "machine": {
            "cores": os.cpu_count(),
            "python": platform.python_version(),
            "spark": pyspark.__version__,
            "java": java_version(),
        },
        "packages": coordinates,
        "rounds": args.rounds,
        "median_start_s": {name: round(value, 2) for name, value in median.items()},
        "median_ratio_resolving_to_local": round(resolving_to_local, 2),
        "median_saved_per_start_s": round(saved, 2),
        "median_ratio_local_to_archived": round(local_to_archived, 2),
    }
    RESULTS_DIR.mkdir(exist_ok=True)
    (RESULTS_DIR / "jvm_starts.json").write_text(json.dumps(results, indent=2) + "\n")
    (RESULTS_DIR / "jvm_starts.md").write_text(
        f"# A Spark start with the connectors, three ways\n\n"
        f"{os.cpu_count()} cores, pyspark {pyspark.__version__}, {java_version()},"
        f" {coordinates.replace(',', ', ')}; {args.rounds} rounds, each a fresh process per way starting a"
        " local[1] session, one query, stop.\n\n"
        "| start | median s |\n| --- | ---: |\n"
        f"| spark.jars.packages (Ivy resolves, warm cache) | {median['resolving']:.2f} |\n"
        f"| spark.jars (connector-jars/) | {median['local']:.2f} |\n"
        f"| spark.jars and the class-data archive (the tests' JVMs) | {median['archived']:.2f} |\n\n"
        f"Resolving to local JARs: {resolving_to_local:.2f}x, {saved:.2f} s saved per start (medians of the"
        f" rounds); local JARs to the archive: {local_to_archived:.2f}x.\n"
    )
    print(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
