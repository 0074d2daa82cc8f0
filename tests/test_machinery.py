"""The machinery's proofs, run inside real bakes.

`tests/machinery/` holds the proofs of the template's machinery (crashes and repeated kills, damaged
checkpoints, disk errors, the guard, the state key, inspect, bench, calibration, monitoring, the
soak, the standalone cluster, the bad-settings table, ...). They need a real project around them:
each run copies them into a fresh bake and runs them there, on that bake's example query. The
machinery is byte for byte the same in every bake (tests/test_bake.py proves it), so a test that
does not depend on the operator runs once, in the default bake (in two runs, the crashes and Kafka's
proofs and then the rest, so that no test item takes 15 minutes; the chains of test_chains.py, marker
`chains`, and the savepoints and integrity faults, marker `state_files`, in a third run: tests/conftest.py
says which worker runs which); a test marked
`operator` runs in the bake of every operator (a parametrized one may mark only some cases: inspect in a fresh process
per operator on RocksDB, on HDFS in the default bake only; bench in the default bake and in
custom_state's, which runs on RocksDB alone); the standalone cluster test (marker `cluster`) runs in the join bake,
on RocksDB with two inputs. A test marked `secondary` proves what another proves more strictly
(it names which); CI leaves it and the soak out to save time, `make test-all` (TEST_ALL=1) runs them.
Markers choose, never test names.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

from . import real_time_spark
from .conftest import DEFAULT_BAKE, FAULTS_AND_JOIN, OTHER_BAKES, TEMPLATE, bake, run_in

pytestmark = pytest.mark.slow

PROOFS = Path(__file__).resolve().parent / "machinery"
# CI leaves out the secondary proofs and the soak (as CI always has): make test-all runs them. The Connect
# proofs run in a bake of their own (below).
LEFT_OUT = ("" if os.environ.get("TEST_ALL") else " and not secondary and not soak") + " and not connect"
BAKES = [
    # The default bake's proofs in two runs: the crashes and the Kafka broker's proofs (before the join
    # bake's, on one worker), and the rest (before the real-time bake's, on another), the concurrent starts
    # among them (they need the broker too, but that worker has the time: 110 s moved, some 15 s of a broker).
    pytest.param(
        {},
        "not cluster and not chains and not state_files and not delta_merge and (faults or kafka) and not concurrent"
        + LEFT_OUT,
        marks=FAULTS_AND_JOIN,
        id="windowed_aggregation:faults-and-kafka",
    ),
    pytest.param(
        {},
        "not cluster and not chains and not state_files and not delta_merge and (concurrent or not (faults or kafka))"
        + LEFT_OUT,
        marks=DEFAULT_BAKE,
        id="windowed_aggregation:everything-else",
    ),
    pytest.param(
        {"stateful_operator": "deduplication"}, "operator" + LEFT_OUT, marks=OTHER_BAKES, id="deduplication:operator"
    ),
    pytest.param(
        {"stateful_operator": "stream_stream_join", "state_store_provider": "rocksdb"},
        "(operator or cluster)" + LEFT_OUT,
        marks=FAULTS_AND_JOIN,
        id="stream_stream_join:operator-and-cluster",
    ),
    # RocksDB without changelog checkpointing: the store the other bakes do not crash.
    pytest.param(
        {"stateful_operator": "custom_state", "changelog_checkpointing": False},
        "operator" + LEFT_OUT,
        marks=OTHER_BAKES,
        id="custom_state:operator",
    ),
    # The chains of tests/machinery/test_chains.py, the savepoints and the integrity faults, and update mode
    # into Delta (test_delta_merge.py), in a default bake of their own (the custom_state chain runs in the
    # custom_state bake: it needs its processor). On the worker of the custom_state and deduplication bakes.
    pytest.param(
        {},
        "(chains or state_files or delta_merge) and not operator" + LEFT_OUT,
        marks=OTHER_BAKES,
        id="windowed_aggregation:chains-state-files-and-merge",
    ),
    # Through a Spark Connect server (tests/machinery/test_connect.py starts it): a default bake of its own,
    # on the worker of the custom_state and deduplication bakes.
    pytest.param({}, "connect", marks=OTHER_BAKES, id="windowed_aggregation:connect"),
    # Spark's real-time mode, on pyspark 4.3.0 (tests/real_time_spark.py), the bake as generated: its Kafka
    # connector the proven 4.2.0, which the project takes by itself where Maven does not serve 4.3.0 (the
    # mirror here does not; job/spark/connectors.py PROVEN_KAFKA_CONNECTORS). After the default bake's
    # everything-else run, on its worker. Its JVMs start without a class-data archive: one of pyspark
    # 4.3.0's own took 70 s of CI's set-up beside .venv's and saved about as much here (a wash).
    pytest.param(
        {"source": "kafka", "sink": "kafka", "real_time": True},
        "real_time",
        marks=DEFAULT_BAKE,
        id="real-time:pyspark-4.3.0",
    ),
]


@pytest.mark.parametrize(("answers", "markers"), BAKES)
def test_machinery_proofs_pass_in_a_real_bake(out, answers, markers, request):
    project = bake(out, **answers)
    shutil.copytree(PROOFS, project / "machinery_tests", ignore=shutil.ignore_patterns("__pycache__"))
    if "connect" in markers:  # every other starter's project, run through the same Connect server
        (project / "connect-starters").mkdir()
        # The answers' first operator is this bake's.
        for operator in json.loads((TEMPLATE / "cookiecutter.json").read_text())["stateful_operator"][1:]:
            starter = bake(out / "starters", stateful_operator=operator)
            shutil.move(starter, project / "connect-starters" / operator)
    python = real_time_spark.PYTHON if answers.get("real_time") else None
    # -p tests.conftest: the bake's own Spark session fixture serves the proofs too.
    command = ["-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "tests.conftest", "machinery_tests", "-m", markers]
    # Each run takes at most about 10 minutes on 2 cores in CI (14 with make test-all's secondary proofs).
    # Each proof's duration, in JUnit XML under build/ beside the template's own (their 20 slowest in the log).
    name = f"machinery-{request.node.callspec.id.replace(':', '-')}"
    junit = TEMPLATE / "build" / "junit" / f"{name}.xml"
    # The next pyspark, for the proofs that move a checkpoint between releases (machinery_tests/test_upgrades.py).
    upgrade = {"NEXT_SPARK_PYTHON": str(real_time_spark.PYTHON)}
    tests = run_in(project, *command, "--durations=20", f"--junitxml={junit}", timeout=1800, python=python, env=upgrade)
    # The proofs' whole output (a JVM's own words when it died at its start among them, and their 20
    # slowest: where CI's time goes) and the bake's JVM-start and connector-resolution logs, under build/.
    logs = TEMPLATE / "build" / "logs" / name
    logs.mkdir(parents=True, exist_ok=True)
    (logs / "machinery_tests.log").write_text(tests.stdout + tests.stderr)
    for kept in ("jvm-start.log", "packages.log"):
        if (project / "logs" / kept).is_file():
            shutil.copy(project / "logs" / kept, logs / kept)
    assert tests.returncode == 0, tests.stdout[-6000:] + tests.stderr[-3000:]
    # pytest's summary, its last line: a test's name may hold "failed" (the durations list names them).
    summary = tests.stdout.strip().splitlines()[-1]
    assert " passed" in summary and "failed" not in summary and "error" not in summary, summary
