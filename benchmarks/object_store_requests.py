"""The requests a job makes of S3 a batch, counted by an S3 API server, against what `estimate` bills.

For a windowed count, a deduplication and a join (each operator's default bake, rate source, parquet
sink, RocksDB with changelog checkpointing, 2 shuffle partitions), at a 1-second and a 5-second trigger:
runs the job with its checkpoint and output on moto's S3 server (on loopback; the server logs every
request) for a few batches and for more, each on a fresh server, and takes the difference per batch
(the steady state: the start's requests taken off); the windowed count also from landing files on S3 (a
files source, one file a batch) at 1 second. Compares each with the bill of
machinery/core/sizing/requests.py (its constants come from such runs) and prints the ratio; writes
RESULTS_DIR/object_store_requests.json and .md.

    .venv/bin/python benchmarks/object_store_requests.py
"""

from __future__ import annotations

import collections
import os
import re
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from overhead import machine, run, save

REPO = Path(__file__).resolve().parents[1]
RESULTS_DIR = Path(__file__).resolve().parent / "results"
OPERATORS = {"windowed count": "windowed_aggregation", "deduplication": "deduplication", "join": "stream_stream_join"}
# (trigger seconds, the shorter run's batches, the longer run's)
TRIGGERS = ((1, 5, 25), (5, 3, 11))
# A request line of the server's log; the server colours the lines of some statuses (a 404, a 206) with terminal
# escapes, which are taken off first: a HEAD that finds nothing is billed like any.
REQUEST = re.compile(r'"(GET|PUT|HEAD|DELETE|POST) (\S+) HTTP')
COLOUR = re.compile(r"\x1b\[[0-9;]*m")


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def counted(log: Path) -> collections.Counter[str]:
    """The server's requests by S3's kinds: a GET of a bucket with a prefix is a LIST."""
    kinds: collections.Counter[str] = collections.Counter()
    for line in log.read_text().splitlines():
        found = REQUEST.search(COLOUR.sub("", line))
        if found:
            method, path = found.groups()
            kinds["LIST" if method == "GET" and ("list-type" in path or "prefix=" in path) else method] += 1
    return kinds


def requests_of_run(
    project: Path,
    trigger: int,
    batches: int,
    scratch: Path,
    join: bool,
    files_source: bool = False,
    settings: dict[str, str] | None = None,
) -> collections.Counter[str]:
    """The requests of `batches` batches of the project's job on a fresh server; with `files_source`, its input
    read from landing files on S3 (one a batch) instead of the rate source; `settings`: overrides of its own."""
    port = free_port()
    log = scratch / f"server-{port}.log"
    with open(log, "w") as server_log:
        server = subprocess.Popen(
            [str(Path(sys.executable).parent / "moto_server"), "-H", "127.0.0.1", "-p", str(port)],
            stdout=subprocess.DEVNULL,
            stderr=server_log,
        )
    aws = {
        "AWS_ACCESS_KEY_ID": "bench",
        "AWS_SECRET_ACCESS_KEY": "bench",
        "AWS_REGION": "us-east-1",
        "AWS_ENDPOINT_URL": f"http://127.0.0.1:{port}",
    }
    try:
        import boto3

        client = boto3.client(
            "s3",
            endpoint_url=aws["AWS_ENDPOINT_URL"],
            region_name="us-east-1",
            aws_access_key_id="bench",
            aws_secret_access_key="bench",
        )
        for _ in range(100):
            try:
                client.create_bucket(Bucket="lake")
                break
            except Exception:  # noqa: BLE001  # the server is starting
                time.sleep(0.1)
        source = {"STREAM_JOB_SOURCE__TYPE": "rate", "STREAM_JOB_SOURCE__RATE__ROWS_PER_BATCH": "1000"}
        if files_source:
            source = land_files(project, client, scratch / f"landing-{port}", batches + 1)
        before = counted(log)
        env = {
            **os.environ,
            **aws,
            "STREAM_JOB_QUERY__CHECKPOINT_LOCATION": "s3a://lake/checkpoint",
            "STREAM_JOB_SINK__PATH": "s3a://lake/output",
            **source,
            "STREAM_JOB_SPARK__SHUFFLE_PARTITIONS": "2",
            "STREAM_JOB_QUERY__TRIGGER": f"{trigger} seconds",
            **({"STREAM_JOB_JOIN_SOURCE__RATE__ROWS_PER_SECOND": "1000"} if join else {}),
            **(settings or {}),
        }
        run([sys.executable, "main.py", "--max-batches", str(batches)], project, env)
        return counted(log) - before
    finally:
        server.terminate()
        server.wait(timeout=30)


def land_files(project: Path, client, folder: Path, files: int) -> dict[str, str]:
    """`files` landing files of 1,000 events each uploaded to s3://lake/landing/, and the settings that read them,
    one a batch."""
    written = subprocess.run(
        [sys.executable, "-c", LANDING, str(folder), str(files)],
        cwd=project,
        capture_output=True,
        text=True,
        check=True,
    )
    for name in written.stdout.split():
        client.upload_file(str(folder / name), "lake", f"landing/{name}")
    return {
        "STREAM_JOB_SOURCE__TYPE": "files",
        "STREAM_JOB_SOURCE__FILES__PATH": "s3a://lake/landing",
        "STREAM_JOB_SOURCE__FILES__MAX_FILES_PER_TRIGGER": "1",
    }


# The bake's own sample files (its event schema), written in its project.
LANDING = """
import sys
from datetime import timedelta
from stream_job.machinery.job.endpoints.sample_input import write_sample_files
paths = write_sample_files(sys.argv[1], int(sys.argv[2]), 1000, 100, timedelta(seconds=10))
print(" ".join(path.name for path in paths))
"""


def main() -> None:
    from importlib.metadata import version

    # What S3 ran through: Hadoop's S3A of pyspark's Hadoop (the bundle its pom names), and the server.
    result: dict = {
        "machine": {**machine(), "hadoop_aws": "3.5.0 (AWS SDK bundle 2.35.4)", "moto": version("moto")},
        "cases": [],
    }
    lines = [
        "| query | trigger | counted a batch | PUT / HEAD / LIST / GET / DELETE | billed a batch | billed / counted |",
        "| --- | ---: | ---: | --- | ---: | ---: |",
    ]
    with tempfile.TemporaryDirectory() as scratch_name:
        scratch = Path(scratch_name)
        for label, operator in OPERATORS.items():
            out = scratch / operator
            run(
                [
                    sys.executable,
                    "-m",
                    "cookiecutter",
                    "--no-input",
                    "-o",
                    str(out),
                    str(REPO),
                    f"stateful_operator={operator}",
                ],
                REPO,
            )
            project = out / "stream-job"
            sys.path.insert(0, str(project))
            from stream_job.machinery.core.sizing.requests import request_bill  # the bake's own bill

            instances = 2 * (4 if operator == "stream_stream_join" else 1)
            # The windowed count from landing files on S3 too (the files source's own requests), at 1 s.
            cases = [(trigger, short, long, False) for trigger, short, long in TRIGGERS]
            cases += [(1, 5, 25, True)] if operator == "windowed_aggregation" else []
            for trigger, short, long, files_source in cases:
                join = operator == "stream_stream_join"
                first = requests_of_run(project, trigger, short, scratch, join, files_source)
                second = requests_of_run(project, trigger, long, scratch, join, files_source)
                per_batch = {
                    kind: (second[kind] - first[kind]) / (long - short)
                    for kind in ("PUT", "HEAD", "LIST", "GET", "DELETE", "POST")
                }
                billed = request_bill(instances, trigger, False, files_sources=int(files_source)).batch_total
                total = sum(per_batch.values())
                case = {
                    "query": f"{label}, files on S3" if files_source else label,
                    "trigger_seconds": trigger,
                    "counted_per_batch": per_batch,
                    "billed_per_batch": billed,
                    "ratio": billed / total,
                }
                result["cases"].append(case)
                kinds = " / ".join(f"{per_batch[kind]:.1f}" for kind in ("PUT", "HEAD", "LIST", "GET", "DELETE"))
                lines.append(
                    f"| {case['query']} | {trigger} s | {total:.1f} | {kinds} | {billed:.1f} | {billed / total:.2f} |"
                )
                print(lines[-1], flush=True)
            sys.path.remove(str(project))
            for name in [name for name in sys.modules if name.startswith("stream_job")]:
                del sys.modules[name]
    save(
        RESULTS_DIR,
        "object_store_requests",
        result,
        ["# Object-store requests a batch: counted against billed", "", *lines, ""],
    )


if __name__ == "__main__":
    main()
