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
from stream_job.machinery.core.checkpoint.file_access import LocationPath
from stream_job.machinery.core.checkpoint.object_store import StoreFiles
from stream_job.machinery.core.checkpoint.sink_log import read_sink_log
from stream_job.machinery.job.endpoints.delta import DeltaLakeBatchWriter, open_table
from stream_job.machinery.job.run.advice import store_gone_advice
from stream_job.machinery.job.spark.connectors import file_system_confs
from stream_job.machinery.job.spark.session import start_confs
from stream_job.machinery.testing import run_batch

from .conftest import (
    BAKED_OPERATOR,
    DEFAULT_OPERATOR,
    PROJECT_DIR,
    batch_expectation,
    clean_env,
    expected_row_count,
    files_job,
    free_port,
    read_events_batch,
    run_cli,
    run_main,
    run_python,
)
from .test_connect import ConnectServer

pytestmark = [
    pytest.mark.streaming,
    pytest.mark.faults,
    # One bake proves it: the store's files, lease and connector do not depend on the operator.
    pytest.mark.skipif(BAKED_OPERATOR != DEFAULT_OPERATOR, reason="the default bake runs it"),
]

BUCKET = "lake"
LEASE_SECONDS = 6


def moto_server(port: int, log: Path, **env: str) -> subprocess.Popen:
    """moto's S3 server on a loopback port (`env`: its own settings, such as checking credentials)."""
    return subprocess.Popen(
        [str(Path(sys.executable).parent / "moto_server"), "-H", "127.0.0.1", "-p", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=open(log, "w"),  # noqa: SIM115
        env={**os.environ, **env},
    )


@pytest.fixture(scope="module")
def s3_server(tmp_path_factory):
    """moto's S3 server on a free loopback port, with the bucket; the AWS variables that reach it."""
    port = free_port()
    server = moto_server(port, tmp_path_factory.mktemp("moto") / "server.log")
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


def job_process(settings: Path, env: dict[str, str], *more: str) -> subprocess.CompletedProcess[str]:
    """`python main.py --settings settings more...` as a process of its own: the session the S3 connector's."""
    return run_python("main.py", "--settings", str(settings), *more, env=env, timeout=600)


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


def table_batches(client, prefix: str) -> list[int]:
    """The batch ids the Delta table's commits record (their txn versions), in commit order."""
    found = []
    for key in keys(client, f"{prefix}/_delta_log/"):
        if key.endswith(".json"):
            lines = client.get_object(Bucket=BUCKET, Key=key)["Body"].read().decode().splitlines()
            found += [json.loads(line)["txn"]["version"] for line in lines if '"txn"' in line]
    return found


def table_rows(spark, table: str):
    return spark.createDataFrame(open_table(table).to_pyarrow_table())


def test_credentials_the_store_refuses_are_one_line_and_write_nothing(s3_server, write_settings, tmp_path):
    """A server that checks credentials (moto's, with IAM on from its first request) refuses keys it does not
    know: one line before anything starts, naming the variables to set."""
    port = free_port()
    server = moto_server(port, tmp_path / "server.log", INITIAL_NO_AUTH_ACTION_COUNT="0")
    try:
        changes = files_job(tmp_path, "parquet", "rocksdb")
        changes["query"]["checkpoint_location"] = f"s3a://{BUCKET}/checkpoint"
        endpoint = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 30
        while True:  # until the server answers (its refusals are the answer)
            refused = run_main("--settings", str(write_settings(changes)), env={"AWS_ENDPOINT_URL": endpoint})
            if "does not answer" not in refused.stderr or time.monotonic() > deadline:
                break
            time.sleep(0.5)
    finally:
        server.terminate()
        server.wait(timeout=30)
    assert refused.returncode == 2, refused.stderr
    assert refused.stderr.strip().endswith(
        f"query.checkpoint_location = 's3a://{BUCKET}/checkpoint': the S3 API at {endpoint} refuses these credentials"
        f" for bucket {BUCKET} (AWS Error ACCESS_DENIED during HeadBucket operation: No response body.); set"
        " AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY (or AWS_PROFILE) to ones that may read and write it"
    ), refused.stderr


@pytest.mark.parametrize(
    ("writer", "mode"),
    [
        pytest.param("delta", "update", id="deltalake-merge"),
        pytest.param("delta-spark", "append", id="delta-spark-sink", marks=pytest.mark.delta_spark),
    ],
)
def test_a_delta_table_on_s3_holds_each_batch_once_and_the_guard_reads_it(
    s3_server, spark, make_settings, write_settings, tmp_path, writer, mode
):
    """Both writers on s3a: deltalake MERGEs each batch (update mode), Spark's Delta sink appends; the job is
    stopped after a batch and started again, and the table holds each batch once and the batch job's
    rows. The guard then reads the table on S3: a new checkpoint against it, and a data file deleted, are each
    one line before Spark starts."""
    aws, client = s3_server
    changes = files_job(tmp_path, writer, "rocksdb", changelog=True, files=3)
    changes["sink"]["output_mode"] = mode
    local = make_settings(changes)
    root = f"s3a://{BUCKET}/{tmp_path.name}"
    changes["sink"]["path"] = table = f"{root}/table"
    changes["query"]["checkpoint_location"] = checkpoint = f"{root}/checkpoint"
    path = write_settings(changes)
    env = {**clean_env(), **aws}
    # Stopped after its first batch (and the one in flight), then started again: the restart reads its state
    # back from S3 and still has a file to read (a restart without new input runs no closing batch).
    for more in (["--max-batches", "1"], []):
        run = job_process(path, env, *more)
        assert run.returncode == 0, run.stderr[-3000:]
    assert batches(checkpoint, "commits") == [0, 1, 2, 3]  # the files, then the closing batch
    recorded = table_batches(client, f"{tmp_path.name}/table")
    assert recorded == sorted(set(recorded)) == [0, 1, 2, 3], recorded
    if mode == "update":
        expected = run_batch(spark, read_events_batch(spark, local.source.files.path), None, query=local.query)
    else:
        expected = batch_expectation(spark, local)
    held = table_rows(spark, table)
    assertDataFrameEqual(held, expected.select(*held.columns))
    if mode == "update":  # inspect reads the state and its change feed from the checkpoint on S3
        looked = run_python(
            "-m", "stream_job", "inspect", "--settings", str(path), "--json", "--key", "key-0", env=env, timeout=600
        )
        assert looked.returncode == 0, looked.stderr[-3000:]
        found = json.loads(looked.stdout)
        assert found["key"] == "key-0" and found["history"], found

    query = json.loads(client.get_object(Bucket=BUCKET, Key=f"{tmp_path.name}/checkpoint/metadata")["Body"].read())
    fresh = {**changes, "query": {**changes["query"], "checkpoint_location": f"{root}/fresh"}}
    again = run_main("--settings", str(write_settings(fresh)))
    assert again.returncode == 4, again.stderr
    assert f"sink.path {table} holds the output of query {query['id']} up to batch 3" in again.stderr, again.stderr
    # A file the table's log lists (a batch the stop interrupted may have left others, never committed).
    written = [uri.removeprefix(f"s3a://{BUCKET}/") for uri in open_table(table).file_uris()]
    client.delete_object(Bucket=BUCKET, Key=written[0])
    lost = run_main("--settings", str(write_settings(changes)))
    assert lost.returncode == 4, lost.stderr
    assert f"sink.path {table} has lost committed output: 1 of the files its log lists as committed are gone" in (
        lost.stderr
    ), lost.stderr


def test_the_deltalake_writer_on_s3_skips_a_replayed_batch(s3_server, spark, tmp_path):
    """A batch run again after a crash between the table's commit and Spark's, on a table on S3: not written
    twice (the writer reads the query id from the checkpoint through Spark: here a local one)."""
    checkpoint = tmp_path / "checkpoint"
    checkpoint.mkdir()
    (checkpoint / "metadata").write_text(json.dumps({"id": "query-1"}))
    table = f"s3a://{BUCKET}/{tmp_path.name}/table"
    writer = DeltaLakeBatchWriter(table, str(checkpoint))
    batch = spark.createDataFrame([(0, "a", 3)], "window_start long, key string, events long")
    writer(batch, 0)
    writer(batch, 0)
    assert writer.skipped_batches == [0]
    assert open_table(table).transaction_version("query-1") == 0
    assert table_rows(spark, table).collect() == batch.collect()


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
    restart = run_python("-c", RESTART_THEN_READ, str(path), str(tmp_path / "read"), env=env, timeout=600)
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
    refuses_what_the_output_and_landing_on_s3_say(client, changes, root, write_settings, tmp_path)


def refuses_what_the_output_and_landing_on_s3_say(client, changes: dict, root: str, write_settings, tmp_path) -> None:
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
    assert (
        f"python -m stream_job savepoint restore SAVEPOINT --checkpoint {root}/checkpoint --output {root}/output"
        f" --landing {root}/moved" in landing.stderr
    ), landing.stderr
    for key in keys(client, f"{prefix}/moved/"):
        client.delete_object(Bucket=BUCKET, Key=key)

    moves_by_a_savepoint(client, changes, root, write_settings, tmp_path)
    # A file the sink's log lists (a batch in flight at the kill may have left others, never committed).
    log = read_sink_log(LocationPath(f"{root}/output"), StoreFiles(root))
    assert log is not None and log.live_files
    written = [str(log.live_files[0]).removeprefix(f"s3a://{BUCKET}/")]
    client.delete_object(Bucket=BUCKET, Key=written[0])
    lost = run_main("--settings", str(write_settings(changes)))
    assert lost.returncode == 4, lost.stderr
    assert (
        f"sink.path {root}/output has lost committed output: 1 of the files its log lists as committed are gone"
        f" (s3a://{BUCKET}/{written[0]})" in lost.stderr
    ), lost.stderr
    left = [key for key in keys(client, prefix) if "/restored/" not in key]  # the savepoint's restore made those
    assert left == [key for key in before if key != written[0]]


def moves_by_a_savepoint(client, changes: dict, root: str, write_settings, tmp_path) -> None:
    """A savepoint of the stopped job on S3 (taken down to this machine's disk), restored to new folders on S3
    with every path Spark wrote moved there, verified against its manifest, and found whole by the guard."""
    savepoint, moved = tmp_path / "savepoint", f"{root}/restored"
    made = run_cli("savepoint", "create", "--settings", str(write_settings(changes)), str(savepoint))
    assert made.returncode == 0, made.stderr[-3000:]
    manifest = json.loads((savepoint / "manifest.json").read_text())
    assert manifest["locations"] == {"checkpoint": f"{root}/checkpoint", "output": f"{root}/output"}
    assert not any(name.endswith(".lease") for name in manifest["files"])
    given = ["--checkpoint", f"{moved}/checkpoint", "--output", f"{moved}/output"]
    restored = run_cli("savepoint", "restore", str(savepoint), *given)
    assert restored.returncode == 0, restored.stderr[-3000:]
    assert f'query.checkpoint_location: "{moved}/checkpoint"' in restored.stdout
    verified = run_cli("savepoint", "verify", str(savepoint), *given)
    assert verified.returncode == 0, verified.stderr[-3000:]
    assert "the restored files match the manifest" in verified.stdout
    prefix = moved.removeprefix(f"s3a://{BUCKET}/")
    log = [key for key in keys(client, f"{prefix}/output/_spark_metadata/") if key.rsplit("/", 1)[-1].isdigit()]
    entry = client.get_object(Bucket=BUCKET, Key=log[-1])["Body"].read().decode()
    assert f'"{moved}/output/part-' in entry and f'"{root}/output/' not in entry, entry
    there = {**changes, "query": {**changes["query"], "checkpoint_location": f"{moved}/checkpoint"}}
    there["sink"] = {**changes["sink"], "path": f"{moved}/output"}
    checked = run_cli("check", "--settings", str(write_settings(there)))
    assert checked.returncode == 0, checked.stdout + checked.stderr
    again = run_cli("savepoint", "restore", str(savepoint), *given)
    assert again.returncode != 0 and f"{moved}/checkpoint is not empty" in again.stderr, again.stderr
    repartitions_on_s3(client, there, moved, write_settings)
    # Down to this machine's disk too (where repartition runs): the paths moved from s3a:// to file:.
    here = ["--checkpoint", str(tmp_path / "here" / "checkpoint"), "--output", str(tmp_path / "here" / "output")]
    down = run_cli("savepoint", "restore", str(savepoint), *here)
    assert down.returncode == 0, down.stderr[-3000:]
    entry = max((tmp_path / "here" / "output" / "_spark_metadata").glob("[0-9]*"), key=lambda path: int(path.stem))
    assert f'"file://{tmp_path}/here/output/part-' in entry.read_text()
    local = {**there, "query": {**there["query"], "checkpoint_location": here[1]}, "sink": {**there["sink"]}}
    local["sink"]["path"] = here[3]
    assert run_cli("check", "--settings", str(write_settings(local))).returncode == 0


def repartitions_on_s3(client, changes: dict, root: str, write_settings) -> None:
    """The restored job's RocksDB state moved from 2 into 3 partitions on S3: run on a copy here, verified by
    Spark's state reader, then uploaded with its batch recorded in the parquet sink's log; the guard then
    holds the settings to 3 partitions."""
    changes = {**changes}  # the caller's own go on with 2
    path = write_settings(changes)
    command = [sys.executable, "-m", "stream_job", "repartition", "--settings", str(path), "--partitions", "3"]
    env = {**clean_env(), **{key: os.environ[key] for key in os.environ if key.startswith("AWS_")}}
    prefix = root.removeprefix(f"s3a://{BUCKET}/")
    # Killed in its upload: the marker is there, the commit not; a start is refused, the next run rolls back.
    killed = subprocess.Popen(command, cwd=PROJECT_DIR, env=env, start_new_session=True, stdout=subprocess.DEVNULL)
    deadline = time.monotonic() + 300
    while killed.poll() is None and time.monotonic() < deadline:
        if any(".repartitioning-" in key for key in keys(client, prefix)):
            os.killpg(killed.pid, signal.SIGKILL)
            break
        time.sleep(0.02)
    assert killed.wait(timeout=60) == -signal.SIGKILL, "the repartition ended before its upload could be killed"
    assert f"{prefix}/checkpoint/commits/7" not in keys(client, f"{prefix}/checkpoint/commits/")
    held = run_cli("check", "--settings", str(path))
    assert held.returncode != 0 and "into 3 partitions did not finish" in held.stdout + held.stderr, held
    time.sleep(LEASE_SECONDS + 1)  # the killed run's lease lapses
    moved = run_python(*command[1:], env=env, timeout=600)
    assert moved.returncode == 0, moved.stdout[-3000:] + moved.stderr[-3000:]
    assert f"repartition: put {root}/checkpoint back as it was before the repartition into 3" in moved.stdout
    assert "repartition: done: batch 7 holds the state in 3 partitions" in moved.stdout, moved.stdout
    assert not [key for key in keys(client, prefix) if ".repartitioning" in key]  # no marker left
    assert f"{prefix}/checkpoint/commits/7" in keys(client, f"{prefix}/checkpoint/commits/")
    assert f"{prefix}/output/_spark_metadata/7" in keys(client, f"{prefix}/output/_spark_metadata/")
    refused = run_cli("check", "--settings", str(path))
    assert refused.returncode == 4 and "spark.shuffle_partitions is 2 in settings, but the checkpoint" in (
        refused.stdout + refused.stderr
    )
    changes["spark"] = {**changes["spark"], "shuffle_partitions": 3}
    assert run_cli("check", "--settings", str(write_settings(changes))).returncode == 0


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


def test_a_job_through_spark_connect_keeps_its_checkpoint_and_output_on_s3(
    s3_server, spark, make_settings, write_settings, tmp_path
):
    """A Spark Connect server with the S3 connector, and a client that reaches the checkpoint on S3 itself:
    its guard and its lease read and write the store from the client's machine (no disk shared through the
    session), the server's Spark runs the query, and the output holds the batch computation's rows."""
    aws, client = s3_server
    changes = files_job(tmp_path, "parquet", "rocksdb", changelog=True, files=3)
    local = make_settings(changes)
    root = f"s3a://{BUCKET}/{tmp_path.name}"
    changes["sink"]["path"], changes["query"]["checkpoint_location"] = f"{root}/output", f"{root}/checkpoint"
    confs = start_confs(file_system_confs(make_settings(changes)))  # the S3 connector's JARs, S3A's confs
    server = ConnectServer(tmp_path, [arg for key, value in confs.items() for arg in ("--conf", f"{key}={value}")], aws)
    server.start()
    try:
        changes["spark"]["remote"] = server.url
        run = job_process(write_settings(changes), {**clean_env(), **aws})
    finally:
        server.kill()
    assert run.returncode == 0, run.stderr[-3000:]
    assert f"checkpoint: no checkpoint yet at {root}/checkpoint: this run starts one" in run.stdout
    assert "through Spark Connect" in run.stdout, run.stdout
    assert batches(f"{root}/checkpoint", "commits") == [0, 1, 2, 3]
    assert f"{tmp_path.name}/checkpoint/.lease" not in keys(client, tmp_path.name)  # taken and released
    log = read_sink_log(LocationPath(f"{root}/output"), StoreFiles(root))
    assert log is not None
    import pyarrow as pa
    import pyarrow.parquet as pq

    rows = pa.concat_tables([pq.read_table(log.files.open(path)) for path in log.live_files])
    assertDataFrameEqual(spark.createDataFrame(rows.to_pandas()), batch_expectation(spark, local))


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
    # 2 instances: 75.8 for the batch's own logs and output, 22.9 for each instance.
    assert sum(bill["per_batch"].values()) == pytest.approx(75.8 + 2 * 22.9)
    assert bill["per_month"] == pytest.approx(30 * 24 * 60 * (75.8 + 2 * 22.9))
    changes["capacity"] = {"request_prices": {"write_per_1000": 0.01, "read_per_1000": 0.0008}}  # twice S3's
    doubled = json.loads(run_cli("estimate", "--settings", str(write_settings(changes)), "--json").stdout)
    assert doubled["object_store_requests"]["cost_per_month"] == pytest.approx(2 * bill["cost_per_month"])
    changes["source"] = {"type": "files", "files": {"path": "s3a://lake/landing"}}  # its own requests, 55.9
    landing = json.loads(run_cli("estimate", "--settings", str(write_settings(changes)), "--json").stdout)
    assert sum(landing["object_store_requests"]["per_batch"].values()) == pytest.approx(75.8 + 2 * 22.9 + 55.9)
    changes["query"]["trigger"] = "available_now"
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
