"""What a start from the project's resolved JARs saves against a start that resolves `--packages`.

Bakes a project with the Kafka source and the delta-spark writer, resolves its connectors once (the
`packages --submit-args` command, as `make submit` does), then starts a Spark session in a fresh
process, in turn: with spark.jars.packages and the project's ivysettings.xml (Ivy resolves at every
start, against a warm cache: what every start did before), and with spark.jars naming the files in
connector-jars/ (what every start does now). Each start runs one tiny query, so that the JARs are
really on the classpath, and stops. Prints the medians and the ratio, pair by pair, and writes them,
with the machine, to RESULTS_DIR/connector_starts.json and .md.

    .venv/bin/python benchmarks/connector_starts.py [--rounds 7]
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


def bake(folder: Path) -> Path:
    from cookiecutter.main import cookiecutter

    return Path(cookiecutter(str(REPO), no_input=True, extra_context=ANSWERS, output_dir=str(folder)))


def timed_start(project: Path, confs: dict[str, str]) -> float:
    started = time.monotonic()
    result = subprocess.run(
        [sys.executable, "-c", START, json.dumps(confs)], cwd=project, capture_output=True, text=True, timeout=600
    )
    if result.returncode != 0:
        sys.exit(f"connector_starts: a start failed:\n{result.stderr[-3000:]}")
    return time.monotonic() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=7)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as scratch:
        project = bake(Path(scratch))
        package = json.loads((project / ".cookiecutter.json").read_text())["cookiecutter"]["package_name"]
        printed = subprocess.run(
            [sys.executable, "-m", package, "packages", "--submit-args"], cwd=project, capture_output=True, text=True
        )
        if printed.returncode != 0:
            sys.exit(f"connector_starts: resolving failed: {printed.stderr[-2000:]}")
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
        timed_start(project, resolving)  # warm-up: Ivy's cache filled, the OS's file cache too
        pairs = []
        for round_number in range(args.rounds):
            order = [("resolving", resolving), ("local", local)]
            if round_number % 2:
                order.reverse()
            times = {name: timed_start(project, confs) for name, confs in order}
            pairs.append(times)
            print(f"round {round_number + 1}: resolving {times['resolving']:.2f} s, local JARs {times['local']:.2f} s")
    resolving_s = statistics.median(pair["resolving"] for pair in pairs)
    local_s = statistics.median(pair["local"] for pair in pairs)
    ratio = statistics.median(pair["resolving"] / pair["local"] for pair in pairs)
    saved = statistics.median(pair["resolving"] - pair["local"] for pair in pairs)
    results = {
        "machine": {"cores": os.cpu_count(), "python": platform.python_version(), "spark": pyspark.__version__},
        "packages": coordinates,
        "rounds": args.rounds,
        "median_start_s": {"resolving_packages": round(resolving_s, 2), "local_jars": round(local_s, 2)},
        "median_ratio_resolving_to_local": round(ratio, 2),
        "median_saved_per_start_s": round(saved, 2),
    }
    RESULTS_DIR.mkdir(exist_ok=True)
    (RESULTS_DIR / "connector_starts.json").write_text(json.dumps(results, indent=2) + "\n")
    (RESULTS_DIR / "connector_starts.md").write_text(
        f"# A Spark start with the connectors: resolving --packages against local JARs\n\n"
        f"{os.cpu_count()} cores, pyspark {pyspark.__version__}, {coordinates.replace(',', ', ')};"
        f" {args.rounds} pairs, each a fresh process starting a local[1] session, one query, stop.\n\n"
        "| start | median s |\n| --- | ---: |\n"
        f"| spark.jars.packages (Ivy resolves, warm cache) | {resolving_s:.2f} |\n"
        f"| spark.jars (connector-jars/) | {local_s:.2f} |\n\n"
        f"Saved per start: {saved:.2f} s (median of the pairs); ratio {ratio:.2f}x.\n"
    )
    print(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
