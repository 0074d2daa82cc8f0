"""Live observability: JSON-lines progress, the state-size watchdog, and Spark's streaming metrics.

The input is the soak's (tests/test_soak.py): the rate-micro-batch source, 1,000 events per batch
10 s of event time apart over 50 keys, counted per 1-minute window with a 2-minute watermark. Its
state levels off at 150 to 200 rows; the sizing below is told 5 keys, so it estimates 15 rows.
"""

from __future__ import annotations

import io
import json
import re
import shutil
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest
from stream_job.machinery.core.settings import load_settings
from stream_job.machinery.job.endpoints.sample_input import UNIQUE_KEYS
from stream_job.machinery.job.run.progress import format_progress
from stream_job.machinery.job.run.runner import run_query
from stream_job.machinery.job.spark.session import apply_confs

from .conftest import (
    PROJECT_DIR,
    clean_env,
    committed_batches,
    deep_merge,
    free_port,
    run_main,
    run_python,
    write_settings_file,
)
from .test_soak import SOAK

pytestmark = pytest.mark.streaming

# The soak's input and query, with the sizing told 5 keys: 3 open windows x 5 keys = 15 rows, a
# tenth of what the query keeps.
SOURCE = deep_merge(
    SOAK,
    {
        "join_source": None,
        "capacity": {"input_rows_per_second": 100, "key_cardinality": 5},
    },
)


def changes_for(tmp_path, monitoring: dict, trigger: str = "100 milliseconds") -> dict:
    return deep_merge(
        SOURCE,
        {
            "sink": {"path": str(tmp_path / "output")},
            "query": {"name": "watched", "checkpoint_location": str(tmp_path / "checkpoint"), "trigger": trigger},
            "monitoring": monitoring,
        },
    )


def test_json_lines_carry_each_batch_with_the_operators_own_metrics(spark, tmp_path):
    settings = load_settings(
        write_settings_file(tmp_path / "settings.yaml", changes_for(tmp_path, {"progress_format": "json"}))
    )
    assert settings.sizing().rows == 15
    apply_confs(spark, settings)
    out = io.StringIO()

    query = run_query(spark, settings, max_batches=4, progress_to=out)

    events = [json.loads(line) for line in out.getvalue().splitlines()]  # every line is one JSON object
    assert events[0]["event"] == "started" and events[0]["query"] == "watched"
    batches = [event for event in events if event["event"] == "batch"]
    assert len(batches) >= 4
    # A batch that had started when the stop came runs alone in a query of its own (stopping.py): it is
    # printed like the others, but not in this query's progress.
    progress = {p["batchId"]: p for p in query.recentProgress}
    assert len([event for event in batches if event["batch_id"] in progress]) >= 4
    for event in (event for event in batches if event["batch_id"] in progress):
        spark_progress = progress[event["batch_id"]]
        operators = spark_progress["stateOperators"]
        assert event["input_rows"] == spark_progress["numInputRows"] == 1000
        assert event["state_rows"] == sum(operator["numRowsTotal"] for operator in operators)
        assert event["state_memory_bytes"] == sum(operator["memoryUsedBytes"] for operator in operators)
        assert event["durations_ms"] == spark_progress["durationMs"]
        assert event["watermark"] == spark_progress["eventTime"]["watermark"]
        # The operators' custom metrics as this Spark version reports them, not a list of names.
        reported = [operator["customMetrics"] for operator in operators]
        assert [operator["custom_metrics"] for operator in event["state_operators"]] == reported
        assert all(reported)
        # The text line says the same.
        assert format_progress(spark_progress).startswith(f"batch {event['batch_id']}: 1,000 input rows, ")
    # The watchdog spoke once, as an event in the stream, at the first batch past 2 x 15 rows.
    (warning,) = [event for event in events if event["event"] == "state_warning"]
    crossed = next(event for event in batches if event["state_rows"] > 30)
    assert warning["kind"] == "rows_over_estimate"
    assert warning["message"].startswith(
        f"state watchdog: batch {crossed['batch_id']} holds {crossed['state_rows']:,} state rows,"
        f" {crossed['state_rows'] / 15:.1f}x the estimate of 15 (warning at 2x, monitoring.state_warning_factor)."
    )


def test_the_watchdog_warns_once_and_loudly_near_the_hdfs_threshold_through_main_py(tmp_path):
    # A millionth of 1 GiB per partition, about 1 KiB: crossed by the first batch with state.
    monitoring = {"progress_format": "text", "state_warning_factor": 3, "hdfs_memory_warning_share": 0.000001}
    path = write_settings_file(tmp_path / "settings.yaml", changes_for(tmp_path, monitoring))

    run = run_main("--settings", str(path), "--max-batches", "6")

    assert run.returncode == 0, run.stderr[-3000:]
    assert len([line for line in run.stdout.splitlines() if line.startswith("batch ")]) >= 6
    (rows_warning,) = [line for line in run.stderr.splitlines() if line.startswith("state watchdog: ")]
    assert re.fullmatch(
        r"state watchdog: batch \d+ holds [\d,]+ state rows, [\d.]+x the estimate of 15 \(warning at 3x,"
        r" monitoring\.state_warning_factor\)\. Recheck the capacity section of settings\.yaml .*",
        rows_warning,
    )
    (loud,) = [line for line in run.stderr.splitlines() if line.startswith("STATE WATCHDOG: ")]
    assert re.fullmatch(
        r"STATE WATCHDOG: batch \d+: the HDFS-backed state holds [\d.]+ (?:B|[KMG]iB) of JVM heap per partition on"
        r" average \([\d.]+ (?:B|[KMG]iB) over 2 partitions; skewed partitions hold more\), past 0\.0001% of the"
        r" 1\.0 GiB per partition where .* The provider cannot be switched on this checkpoint: .* To move to"
        r" RocksDB, set state_store\.provider to rocksdb with a new query\.checkpoint_location and an empty"
        r" sink\.path, and reprocess the input; until then, give the executors more memory\.",
        loud,
    )


def test_metrics_enabled_puts_the_query_on_the_prometheus_endpoint(tmp_path):
    # A free port now may be taken before Spark binds it: with no retries Spark then fails to start
    # (instead of moving to the next port unseen), and the run is made again on another.
    for _ in range(3):
        process, streaming, output = watch_prometheus(tmp_path, free_port())
        if "BindException" not in output and "could not bind" not in output:
            break
    assert streaming, "no spark_streaming_watched_ metric in 240 s: " + output[-3000:]
    assert process.returncode == 0, output[-3000:]
    names = {line.split("{")[0].split(" ")[0] for line in streaming}
    assert any(name.endswith("spark_streaming_watched_states_rowsTotal_Value") for name in names), names
    assert any(name.endswith("spark_streaming_watched_inputRate_total_Value") for name in names), names
    # The watermark's gauge, which docs/operations.md ("A quiet input") gives for a quiet-input alert.
    assert any(name.endswith("spark_streaming_watched_eventTime_watermark_Value") for name in names), names


def watch_prometheus(tmp_path: Path, port: int) -> tuple[subprocess.Popen, list[str], str]:
    """The job with its UI on port, stopped once the Prometheus endpoint shows the query's metrics:
    (the process, those lines, what it printed)."""
    changes = changes_for(tmp_path, {"metrics_enabled": True}, trigger="1 second")
    changes["spark"]["conf"] = {
        "spark.ui.enabled": "true",
        "spark.ui.port": str(port),
        "spark.port.maxRetries": "0",
        "spark.metrics.conf.*.sink.prometheusServlet.class": "org.apache.spark.metrics.sink.PrometheusServlet",
        "spark.metrics.conf.*.sink.prometheusServlet.path": "/metrics/prometheus",
    }
    for folder in ("checkpoint", "output"):  # a run refused at its port may have started them
        shutil.rmtree(tmp_path / folder, ignore_errors=True)
    path = write_settings_file(tmp_path / "settings.yaml", changes)
    process = subprocess.Popen(
        [sys.executable, "main.py", "--settings", str(path), "--timeout", "300"],
        cwd=PROJECT_DIR,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=clean_env(),
    )
    streaming: list[str] = []
    try:
        # Generous: in CI two Spark-heavy bakes share 2 cores, and the first batch can take minutes.
        deadline = time.monotonic() + 240
        while not streaming and process.poll() is None and time.monotonic() < deadline:
            time.sleep(1)
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics/prometheus", timeout=5) as page:
                    text = page.read().decode()
            except OSError:
                continue  # the UI is not up yet
            streaming = [line for line in text.splitlines() if "spark_streaming_watched_" in line]
    finally:
        process.send_signal(signal.SIGTERM)
        output = process.communicate(timeout=60)[0]
    return process, streaming, output


@pytest.mark.faults
def test_a_heap_too_small_for_the_state_is_warned_and_its_out_of_memory_ends_in_one_line(tmp_path):
    # The default answers' state (6.7M rows of a windowed count, every event its own key) on the
    # HDFS-backed store, in a 520 MiB heap: 300,000 events a batch fill it within a few batches.
    changes = {
        "spark": {"shuffle_partitions": 2, "master": "local[2]", "driver_memory": "520m"},
        "state_store": {"provider": "hdfs", "changelog_checkpointing": False},
        "source": {
            "type": "rate",
            "rate": {"rows_per_batch": 300_000, "advance_per_batch": "30 seconds", "keys": UNIQUE_KEYS},
        },
        "sink": {"type": "parquet", "path": str(tmp_path / "output")},
        "query": {"checkpoint_location": str(tmp_path / "checkpoint"), "trigger": "100 milliseconds"},
    }
    path = write_settings_file(tmp_path / "settings.yaml", changes)

    run = run_python("main.py", "--settings", str(path), env=clean_env())

    assert run.returncode == 1, run.stderr[-3000:]
    # Said at start: the heap is smaller than the state will need.
    assert "memory: WARNING: the driver's heap (spark.driver_memory; a local run's executors are the driver) is" in (
        run.stdout
    )
    lines = [line for line in run.stderr.splitlines() if line.strip() and not line.startswith("WARNING: Using")]
    assert any(line.startswith("HEAP WATCHDOG: batch ") for line in lines), run.stderr[-3000:]
    # The end: one line naming the state, the heap and the fix, no Py4J traceback.
    assert re.fullmatch(
        r"out of memory: the JVM's [\d.]+ MiB heap ran out \(java\.lang\.OutOfMemoryError\) holding the HDFS-backed"
        r" state, estimated at [\d.]+ GiB per executor; set spark\.driver_memory \(on a cluster"
        r" spark\.executor\.memory\) to \d+g or more and start again \(the checkpoint is intact: the batch runs"
        r" again\), or move the state to rocksdb on a new checkpoint",
        lines[-1],
    )
    assert "Traceback" not in run.stderr
    assert committed_batches(tmp_path / "checkpoint")  # batches before it committed, as after any crash


# py4j's own call, against a JVM that resets the connection while the call waits for its answer (as a
# JVM does that exits at an OutOfMemoryError mid-call): py4j logs it on the root logger.
CALL_RESET_MID_ANSWER = """
import socket, struct, threading
from py4j.java_gateway import GatewayClient, GatewayParameters
from stream_job.machinery.job.spark.session import quiet_py4j_threads

if QUIET:
    quiet_py4j_threads()
server = socket.create_server(("127.0.0.1", 0))

def reset_after_the_command():
    connection, _ = server.accept()
    while not connection.recv(1024).endswith(b"e\\n"):
        pass
    connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    connection.close()

threading.Thread(target=reset_after_the_command).start()
client = GatewayClient(gateway_parameters=GatewayParameters(port=server.getsockname()[1]))
print(repr(client.send_command("c\\nt\\ngetName\\ne\\n")))
"""


@pytest.mark.parametrize("quiet", [False, True], ids=["py4j as it is", "as the job sets it"])
def test_a_call_the_jvm_resets_prints_no_py4j_traceback_once_the_job_has_built_its_session(quiet):
    run = run_python("-c", f"QUIET = {quiet}\n{CALL_RESET_MID_ANSWER}", env=clean_env(), timeout=60)

    assert run.returncode == 0, run.stderr
    assert run.stdout.strip() == "'x'"  # py4j's answer for a failed call: the job's own handling follows
    if quiet:
        assert run.stderr == ""
    else:  # what the out-of-memory end printed before its line, now and then, in CI
        assert "Exception while sending command." in run.stderr
        assert "ConnectionResetError" in run.stderr
