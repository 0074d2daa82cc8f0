"""The job on object storage: landing, checkpoint and output on s3a://, against a real S3 API server.

moto's S3 server runs on loopback (`moto_server`, from PyPI), and the job reaches it the way it reaches
S3: the AWS variables (AWS_ENDPOINT_URL, AWS_REGION, the credentials), Hadoop's S3A with the hadoop-aws
connector resolved into connector-jars/, path-style requests. The server honours S3's conditional writes
(If-None-Match, If-Match), which the checkpoint's lease is made of.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from pyspark.testing import assertDataFrameEqual
from stream_job.machinery.core.checkpoint.object_store import StoreFiles
from stream_job.machinery.job.run.advice import store_gone_advice

from .conftest import (
    BAKED_OPERATOR,
    DEFAULT_OPERATOR,
    PROJECT_DIR,
    batch_expectation,
    clean_env,
    expected_row_count,
    files_job,
    free_port,
    run_cli,
    run_main,
)

pytestmark = [
    pytest.mark.streaming,
    pytest.mark.faults,
    # One bake proves it: the store's files, lease and connector do not depend on the operator.
    pytest.mark.skipif(BAKED_OPERATOR != DEFAULT_OPERATOR, reason="the default bake runs it"),
]

BUCKET = "lake"
LEASE_SECONDS = 6


@pytest.fixture(scope="module")
def s3_server(tmp_path_factory):
    """moto's S3 server on a free loopback port, with the bucket; the AWS variables that reach it."""
    port = free_port()
    server = subprocess.Popen(
        [str(Path(sys.executable).parent / "moto_server"), "-H", "127.0.0.1", "-p", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=open(tmp_path_factory.mktemp("moto") / "server.log", "w"),  # noqa: SIM115
    )
    aws = {
        "AWS_ENDPOINT_URL": f"http://127.0.0.1:{port}",
        "AWS_REGION": "us-east-1",
        "AWS_ACCESS_KEY_ID": "test-key",
        "AWS_SECRET_ACCESS_KEY": "test-secret",
    }
    import boto3

    client = boto3.client(
        "s3",
        endpoint_url=aws["AWS_ENDPOINT_URL"],
        region_name="us-east-1",
        aws_access_key_id="test-key",
        aws_secret_access_key="test-secret",
    )
    deadline = time.monotonic() + 30
    while True:
        try:
            client.create_bucket(Bucket=BUCKET)
            break
        except Exception:
            if time.monotonic() > deadline or server.poll() is not None:
                raise
            time.sleep(0.2)
    saved = dict(os.environ)
    os.environ.update(aws)  # the readers of this process (StoreFiles, the lease) and run_main's
    try:
        yield aws, client
    finally:
        os.environ.clear()
        os.environ.update(saved)
        server.terminate()
        server.wait(timeout=30)


def keys(client, prefix: str) -> list[str]:
    found = client.list_objects_v2(Bucket=BUCKET, Prefix=prefix).get("Contents", [])
    return sorted(item["Key"] for item in found)


def batches(checkpoint: str, log: str) -> list[int]:
    root = Path(checkpoint)
    return sorted(int(path.name) for path in StoreFiles(checkpoint).list(root / log) if path.name.isdigit())


def test_a_bucket_that_is_not_there_or_a_server_that_does_not_answer_is_one_line_and_writes_nothing(
    s3_server, make_settings, write_settings, tmp_path
):
    _, client = s3_server
    changes = files_job(tmp_path, "parquet", "rocksdb")
    changes["query"]["checkpoint_location"] = "s3a://no-such-bucket/checkpoint"
    before = keys(client, "")
    missing = run_main("--settings", str(write_settings(changes)))
    assert missing.returncode != 0
    assert "query.checkpoint_location = 's3a://no-such-bucket/checkpoint': there is no bucket no-such-bucket" in (
        missing.stderr
    ), missing.stderr
    assert len(missing.stderr.strip().splitlines()) == 1, missing.stderr
    changes["query"]["checkpoint_location"] = f"s3a://{BUCKET}/checkpoint"
    unanswered = run_main(
        "--settings", str(write_settings(changes)), env={"AWS_ENDPOINT_URL": f"http://127.0.0.1:{free_port()}"}
    )
    assert unanswered.returncode != 0
    assert "does not answer" in unanswered.stderr and "AWS_ENDPOINT_URL" in unanswered.stderr, unanswered.stderr
    assert keys(client, "") == before


def test_a_delta_table_on_s3_is_refused_in_one_line_for_now(s3_server, write_settings, tmp_path):
    _, client = s3_server
    changes = files_job(tmp_path, "delta", "rocksdb")
    changes["sink"]["path"] = f"s3a://{BUCKET}/{tmp_path.name}/table"
    refused = run_main("--settings", str(write_settings(changes)))
    assert refused.returncode == 2
    assert refused.stderr.strip().endswith(
        f"sink.path = 's3a://{BUCKET}/{tmp_path.name}/table': a Delta table on object storage is not supported yet"
        " (neither writer's exactly-once, append or MERGE, is proven there); write parquet there (sink.type parquet),"
        " or keep the table on a disk this machine mounts"
    ), refused.stderr
    assert keys(client, tmp_path.name) == []


def test_a_job_on_s3_refuses_a_second_driver_and_killed_mid_batch_restarts_exact(
    s3_server, spark, make_settings, write_settings, tmp_path
):
    aws, client = s3_server
    # RocksDB without changelog checkpointing: every batch's commit uploads a snapshot (its SST files), so
    # the kill falls during an upload or beside one.
    changes = files_job(tmp_path, "parquet", "rocksdb", changelog=False)
    local = make_settings(changes)
    expected = batch_expectation(spark, local)  # the same events read from the local landing folder
    landing = Path(changes["source"]["files"]["path"])
    for path in sorted(landing.iterdir()):  # uploaded in order: the file source reads them by arrival
        client.upload_file(str(path), BUCKET, f"{tmp_path.name}/landing/{path.name}")
        time.sleep(1.05)  # S3's modification times are to the second
    root = f"s3a://{BUCKET}/{tmp_path.name}"
    changes["source"]["files"]["path"] = f"{root}/landing"
    changes["sink"]["path"] = f"{root}/output"
    changes["query"]["checkpoint_location"] = checkpoint = f"{root}/checkpoint"
    changes["query"]["lease"] = f"{LEASE_SECONDS} seconds"
    path = write_settings(changes)
    env = {**clean_env(), **aws}

    with open(tmp_path / "first-run.log", "w") as log:
        first = subprocess.Popen(
            [sys.executable, "main.py", "--settings", str(path)],
            cwd=PROJECT_DIR,
            stdout=log,
            stderr=log,
            env=env,
            start_new_session=True,
        )
        deadline, in_flight, refused = time.monotonic() + 300, None, None
        while time.monotonic() < deadline and first.poll() is None:
            logged, committed = batches(checkpoint, "offsets"), batches(checkpoint, "commits")
            if committed and refused is None:  # a second driver (another machine's, or this one's) meanwhile
                refused = run_main("--settings", str(path))
            if len(committed) >= 2 and logged and logged[-1] not in committed:
                os.killpg(first.pid, signal.SIGKILL)
                first.wait(timeout=60)
                in_flight = logged[-1]
                break
            time.sleep(0.05)
    assert in_flight is not None, (tmp_path / "first-run.log").read_text()[-3000:]
    assert refused is not None and refused.returncode == 4, refused
    assert f"{checkpoint} is leased by this job on" in refused.stderr, refused.stderr
    assert "stop that driver first" in refused.stderr

    # The killed driver's lease stands until it lapses; then a start takes it over and runs the rest.
    soon = run_main("--settings", str(path))
    assert soon.returncode == 4 and "is leased by" in soon.stderr, soon.stderr
    time.sleep(LEASE_SECONDS + 1)
    restart = subprocess.run(
        [sys.executable, "-c", RESTART_THEN_READ, str(path), str(tmp_path / "read")],
        cwd=PROJECT_DIR,
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
    )
    assert restart.returncode == 0, restart.stderr[-3000:]
    assert "took over the lease of this job on" in restart.stderr
    assert f"batch {in_flight}:" in restart.stdout
    assert batches(checkpoint, "commits") == list(range(7))
    assert expected.count() == expected_row_count(local.query.operator, files=6)
    assertDataFrameEqual(spark.read.parquet(str(tmp_path / "read")), expected)
    assert f"{tmp_path.name}/checkpoint/.lease" not in keys(client, tmp_path.name)  # released at the end
    # The guard read the checkpoint on S3: a pinned conf changed is refused before Spark starts.
    changes["spark"]["shuffle_partitions"] = 3
    drift = run_main("--settings", str(write_settings(changes)))
    assert drift.returncode == 4
    assert f"spark.shuffle_partitions is 3 in settings, but the checkpoint {checkpoint} holds 2" in drift.stderr
    shutil.rmtree(tmp_path / "read")
    changes["spark"]["shuffle_partitions"] = 2
    refuses_what_the_output_and_landing_on_s3_say(client, changes, root, write_settings)


def refuses_what_the_output_and_landing_on_s3_say(client, changes: dict, root: str, write_settings) -> None:
    """The guard reads the output's log and the landing folder on S3 as on a local disk: each finding is one
    line before Spark starts, and nothing is written."""
    prefix = root.removeprefix(f"s3a://{BUCKET}/")
    before = keys(client, prefix)
    fresh = {**changes, "query": {**changes["query"], "checkpoint_location": f"{root}/fresh"}}
    ahead = run_main("--settings", str(write_settings(fresh)))
    assert ahead.returncode == 4, ahead.stderr
    assert (
        f"sink.path {root}/output holds the output of batches up to 6 (its log {root}/output/_spark_metadata), and"
        f" the checkpoint {root}/fresh has logged no batch yet" in ahead.stderr
    ), ahead.stderr

    for key in keys(client, f"{prefix}/landing/"):
        client.copy_object(Bucket=BUCKET, Key=key.replace("/landing/", "/moved/"), CopySource=f"{BUCKET}/{key}")
    moved = {**changes, "source": {**changes["source"], "files": {**changes["source"]["files"]}}}
    moved["source"]["files"]["path"] = f"{root}/moved"
    landing = run_main("--settings", str(write_settings(moved)))
    assert landing.returncode == 4, landing.stderr
    assert (
        f"source.files.path is {root}/moved in settings, but the checkpoint {root}/checkpoint holds {root}/landing:"
        in landing.stderr
    ), landing.stderr
    assert f"point the settings back at the folders it wrote ({root}/landing)" in landing.stderr
    for key in keys(client, f"{prefix}/moved/"):
        client.delete_object(Bucket=BUCKET, Key=key)

    written = [key for key in keys(client, f"{prefix}/output/") if key.endswith(".parquet")]
    client.delete_object(Bucket=BUCKET, Key=written[0])
    lost = run_main("--settings", str(write_settings(changes)))
    assert lost.returncode == 4, lost.stderr
    assert (
        f"sink.path {root}/output has lost committed output: 1 of the files its log lists as committed are gone"
        f" (s3a://{BUCKET}/{written[0]})" in lost.stderr
    ), lost.stderr
    assert keys(client, prefix) == [key for key in before if key != written[0]]


# The restart, and the output read back by the same session (it has the S3 connector), into a local copy.
RESTART_THEN_READ = """
import sys
from stream_job.machinery.commands import main
from stream_job.machinery.core.settings import load_settings
from stream_job.machinery.job.spark.session import build_session
code = main(["run", "--settings", sys.argv[1]])
if code == 0:
    settings = load_settings(sys.argv[1])
    build_session(settings).read.parquet(settings.sink.path).write.parquet(sys.argv[2])
sys.exit(code)
"""


def test_estimate_bills_the_requests_of_a_checkpoint_on_s3(write_settings):
    """The bill's figures, as core/sizing/requests.py fits them to the requests an S3 API server counted
    (benchmarks/object_store_requests.py): per batch by the state store instances, a month by the trigger."""
    changes = {
        "spark": {"shuffle_partitions": 2},
        "query": {"checkpoint_location": "s3a://lake/ckpt", "trigger": "1 minute"},
    }
    result = run_cli("estimate", "--settings", str(write_settings(changes)), "--json")
    assert result.returncode == 0, result.stderr
    bill = json.loads(result.stdout)["object_store_requests"]
    # 2 instances: 54.55 for the batch's own logs and output, 13.5 for each instance.
    assert sum(bill["per_batch"].values()) == pytest.approx(54.55 + 2 * 13.5)
    assert bill["per_month"] == pytest.approx(30 * 24 * 60 * (54.55 + 2 * 13.5))
    changes["capacity"] = {"request_prices": {"write_per_1000": 0.01, "read_per_1000": 0.0008}}  # twice S3's
    doubled = json.loads(run_cli("estimate", "--settings", str(write_settings(changes)), "--json").stdout)
    assert doubled["object_store_requests"]["cost_per_month"] == pytest.approx(2 * bill["cost_per_month"])
    changes["query"]["trigger"] = "available_now"  # a rate source runs no such trigger: files
    changes["source"] = {"type": "files"}
    text = run_cli("estimate", "--settings", str(write_settings(changes)))
    assert "Object store requests (checkpoint s3a://lake/ckpt)" in text.stdout
    assert "not estimated for a available_now trigger" in text.stdout
    changes["query"]["checkpoint_location"] = "checkpoints/local"
    assert "Object store requests" not in run_cli("estimate", "--settings", str(write_settings(changes))).stdout


# What a job on S3 ended with when its server stopped answering mid-run (run by hand against moto's server:
# stopped, after S3A's retries; paused with SIGSTOP, after its call timeout); then it ends in one line.
REFUSED = (
    "terminated with exception: getFileStatus on s3a://lake/out/_spark_metadata:"
    " software.amazon.awssdk.core.exception.SdkClientException: Unable to execute HTTP request: Connect to"
    " 127.0.0.1:5099 [/127.0.0.1] failed: Connection refused (SDK Attempt Count: 6):    software.amazon"
)
HUNG = (
    "terminated with exception: getFileStatus on s3a://lake/ckpt/offsets:"
    " software.amazon.awssdk.core.exception.ApiCallTimeoutException: Client execution did not complete before the"
    " specified timeout configuration: 15000 millis SQLSTATE: XXKST"
)


def test_a_store_that_stops_answering_mid_run_is_one_line_saying_whether_it_answers_now(s3_server, make_settings):
    settings = make_settings({"query": {"checkpoint_location": f"s3a://{BUCKET}/gone"}})
    [answers] = store_gone_advice(HUNG, settings)
    assert answers == (
        "object store: S3 stopped answering while the job ran (getFileStatus on s3a://lake/ckpt/offsets: Client"
        " execution did not complete before the specified timeout configuration); it answers again now. The"
        " checkpoint holds every committed batch: start the job once the store answers, and the batch in flight"
        " runs again"
    )
    os.environ["AWS_ENDPOINT_URL"], endpoint = f"http://127.0.0.1:{free_port()}", os.environ["AWS_ENDPOINT_URL"]
    try:
        [silent] = store_gone_advice(REFUSED, settings)
    finally:
        os.environ["AWS_ENDPOINT_URL"] = endpoint
    assert (
        "(getFileStatus on s3a://lake/out/_spark_metadata: Connect to 127.0.0.1:5099 failed: Connection refused)"
        in (silent)
    )
    assert "; it does not answer now." in silent
    assert store_gone_advice("java.io.IOException: No space left on device", settings) == []
