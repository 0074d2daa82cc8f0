"""`run`: the streaming job itself (what main.py does), and the lines printed when it fails (job/run/advice.py)."""

from __future__ import annotations

import argparse
import sys
from contextlib import ExitStack
from typing import TYPE_CHECKING, TextIO

from ..core.checkpoint.file_access import LOCAL
from ..core.checkpoint.files import START_OVER, CheckpointRead
from ..core.checkpoint.object_store import store_of
from ..core.checkpoint.run_lock import holding
from ..core.contract import PACKAGE
from ..core.settings import Settings, SettingsError, load_settings
from ..core.sizing.partitions import (
    TASKS_PER_CORE,
    TOO_MANY_FACTOR,
    beyond_any_batch,
    for_cores,
    local_cores,
    too_many_waves,
)
from ..core.text import first_line
from ..job.endpoints.delta import require_deltalake
from ..job.guard.checkpoint import GuardReport, check_checkpoint, output_seen
from ..job.guard.real_time_checks import refuse_before_spark
from ..job.spark.java import launched_by_spark_submit
from ..job.spark.remote import is_connect, require_server
from ..job.spark.spark_errors import message_chain, writer_task_errors

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from ..job.spark.session_files import CheckpointReader

from .arguments import (
    EXIT_CHECKPOINT_DRIFT,
    EXIT_QUERY_FAILED,
    add_settings_argument,
    positive_float,
    positive_int,
)


def register(commands: argparse._SubParsersAction) -> None:
    run = commands.add_parser("run", help="run the streaming job (what main.py does)")
    add_settings_argument(run)
    run.add_argument("--max-batches", type=positive_int, help="stop gracefully after N committed micro-batches")
    run.add_argument("--timeout", type=positive_float, metavar="SECONDS", help="stop gracefully after SECONDS")
    run.add_argument(
        "--local-partitions",
        action="store_true",
        help="use the shuffle partitions advised for the cores of a local spark.master instead of"
        " spark.shuffle_partitions (for a demo or scratch checkpoint: the first run pins the count)",
    )
    run.set_defaults(handler=cmd_run)


def cmd_run(args: argparse.Namespace) -> int:
    settings = load_settings(args.settings)
    if args.local_partitions:
        settings = with_local_partitions(settings, sys.stdout)
    problems = settings.problems_before_run()
    if problems:
        raise SettingsError(problems)
    if settings.spark.connect_url is None:
        refuse_before_spark(settings)  # this process's pyspark; a Connect server's release is checked at the start
    else:  # before the lock and the guard: a missing server changes nothing
        require_server(settings.spark.connect_url)
    remarks_to = settings.monitoring.remarks_to(sys.stdout)
    from ..job.spark.session import job_session  # Spark is imported only when a command needs it
    from ..job.spark.session_files import checkpoint_reader, reader_here

    location = settings.query.checkpoint_location
    with ExitStack() as stack:
        # Spark Classic starts only after the checks (in _run), so that bad input never starts a JVM; a Spark
        # Connect session starts no JVM here and comes first, to read a checkpoint on the server's disk.
        spark = stack.enter_context(job_session(settings)) if settings.spark.connect_url is not None else None
        checkpoint = reader_here(location) if spark is None else checkpoint_reader(spark, location)
        files = LOCAL if checkpoint is None else checkpoint.files()
        # The lock (a lease on S3, from any machine) keeps a second job or a repartition off this checkpoint while
        # the guard reads it and the job runs; one only the server sees cannot be locked here (Spark's stopActiveRunOnRestart then
        # stops a run of the query that is still going when this one starts).
        if files is LOCAL or store_of(location):
            stack.enter_context(holding(location, "this job", settings.query.lease_seconds))
        report = check_checkpoint(
            settings, files, output_seen(settings, files), None if spark is None else spark.version
        )
        for remark in partition_remarks(settings, report):
            print(f"partitions: {remark}", file=remarks_to)
        if not guard_passes(report, remarks_to):
            return EXIT_CHECKPOINT_DRIFT
        if settings.sink.delta_writer == "deltalake":
            require_deltalake()
        spark = spark or stack.enter_context(job_session(settings))
        # Which reader serves the checkpoint is decided once: the state key record and the stop take it.
        checkpoint = checkpoint or checkpoint_reader(spark, location)
        return _run(settings, args, remarks_to, report.held, spark, checkpoint)


def _run(
    settings: Settings,
    args: argparse.Namespace,
    remarks_to: TextIO,
    held: CheckpointRead | None,
    spark: SparkSession,
    checkpoint: CheckpointReader,
) -> int:
    from pyspark.errors import StreamingQueryException

    from ..job.endpoints.kafka import check_kafka_endpoints
    from ..job.guard.schema_evolution import schema_refusal_advice
    from ..job.run.advice import (
        bad_record_advice,
        broker_gone_advice,
        damaged_checkpoint_advice,
        data_loss_advice,
        delta_sink_refusal,
        disk_full_advice,
        real_time_slots_advice,
        store_gone_advice,
    )
    from ..job.run.runner import run_start
    from ..job.spark.connectors import require_connectors
    from ..job.spark.session import log_dir, refused_confs, startup_line

    print(startup_line(spark, settings), file=remarks_to, flush=True)
    refused = refused_confs(spark, settings)
    if refused:
        print(
            f"spark.conf: the Spark Connect server keeps its own value of {', '.join(refused)} (fixed when it"
            " starts, or by its platform); set them where the server starts",
            file=remarks_to,
            flush=True,
        )
    require_connectors(spark, settings)
    endpoints = check_kafka_endpoints(spark, settings)  # Kafka asked once: the slot check takes its count
    for remark in endpoints.remarks:
        print(f"source: {remark}", file=remarks_to, flush=True)
    try:
        run_start(spark, settings, checkpoint, held, endpoints.kafka_partitions, args.max_batches, args.timeout)
    except StreamingQueryException as error:
        # In real time the query's error may be a task's that only says another task failed: that one's too.
        causes = writer_task_errors(spark, error)
        chain = "\n".join([message_chain(error), *causes])
        named = [
            *bad_record_advice(chain, settings),
            *delta_sink_refusal(chain),
            *real_time_slots_advice(chain),
            *broker_gone_advice(chain, endpoints),
            *store_gone_advice(chain, settings),
        ]
        if named:  # a cause the job knows: its one line says where, what and the ways on; the checkpoint is fine
            print(*named, sep="\n", file=sys.stderr)
            return EXIT_QUERY_FAILED
        print(f"query {settings.query.name} failed: {causes[0] if causes else first_line(str(error))}", file=sys.stderr)
        # The console leaves out Spark's own lines of a failed batch (log4j2.properties): say where they are.
        report = "the Spark Connect server's log" if is_connect(spark) else log_dir() / "spark.log"
        print(f"details: Spark's whole report of the failure is in {report}", file=sys.stderr)
        print(f"checkpoint: {settings.query.checkpoint_location}", file=sys.stderr)
        for line in damaged_checkpoint_advice(chain, settings.query.checkpoint_location):
            print(line, file=sys.stderr)
        for line in disk_full_advice(chain, settings):
            print(line, file=sys.stderr)
        for line in data_loss_advice(chain, settings) + schema_refusal_advice(chain):
            print(line, file=sys.stderr)
        return EXIT_QUERY_FAILED
    return 0


def with_local_partitions(settings: Settings, remarks_to: TextIO) -> Settings:
    """The settings with the partition count advised for the local master's cores, said in one line."""
    cores = local_cores(settings.spark.master)
    if cores is None:
        raise SettingsError(
            [
                f"--local-partitions needs a local spark.master such as local[2], not {settings.spark.master!r};"
                f" on a cluster set spark.shuffle_partitions (python -m {PACKAGE} estimate advises one)"
            ]
        )
    count = for_cores(cores)
    print(
        f"partitions: {count} shuffle partitions ({TASKS_PER_CORE} per core of {settings.spark.master}) in place"
        f" of spark.shuffle_partitions {settings.spark.shuffle_partitions}; checkpoint"
        f" {settings.query.checkpoint_location} pins them",
        file=settings.monitoring.remarks_to(remarks_to),
    )
    spark = settings.spark.model_copy(update={"shuffle_partitions": count})
    return settings.model_copy(update={"spark": spark})


def partition_remarks(settings: Settings, report: GuardReport) -> list[str]:
    """spark.shuffle_partitions against the cores the job runs on. Before the first run pins it, a
    count no batch gets through is refused (SettingsError) and one that makes every batch pay many
    waves of tasks is warned about, as estimate does; a checkpoint that pins such a count is told the
    way out. A checkpoint that pins another count is the guard's."""
    count = settings.spark.shuffle_partitions
    local = None if launched_by_spark_submit() else local_cores(settings.spark.master)
    cores = local or settings.capacity.max_cores
    beyond = beyond_any_batch(count, cores)
    advised = (
        f"{for_cores(cores)} ({TASKS_PER_CORE} per core)"
        if cores
        else f"what python -m {PACKAGE} estimate advises (with capacity.max_cores, the cores it runs on)"
    )
    checkpoint = settings.query.checkpoint_location
    if report.last_batch is None:
        if beyond:
            raise SettingsError(
                [
                    f"spark.shuffle_partitions = {count}: {beyond}; the first run would pin the count into"
                    f" checkpoint {checkpoint}: set it to {advised}"
                ]
            )
        if cores and count > TOO_MANY_FACTOR * for_cores(cores):
            return [
                f"WARNING: {too_many_waves(count, cores)}, and this first run pins the count into checkpoint"
                f" {checkpoint}; if that is not meant, stop now and set spark.shuffle_partitions to {advised}"
            ]
        return []
    if beyond and not any(drift.setting == "spark.shuffle_partitions" for drift in report.drifts):
        way_out = (
            f"stop the job and move the state into fewer partitions: python -m {PACKAGE} repartition --partitions N"
            if settings.state_store.provider == "rocksdb"
            else f"a checkpoint of the hdfs store cannot be repartitioned: {START_OVER}"
        )
        return [f"WARNING: checkpoint {checkpoint} pins {count} shuffle partitions: {beyond}; {way_out}"]
    return []


def guard_passes(report: GuardReport, notes_to: TextIO | None = None) -> bool:
    """Print the guard's notes (on stdout unless told), and each drift as one line on stderr; True
    when there is none."""
    for note in report.notes:
        print(f"checkpoint: {note}", file=notes_to or sys.stdout)
    for drift in report.drifts:
        print(f"checkpoint error: {drift.message(report.checkpoint)}", file=sys.stderr)
    for refusal in report.refusals:
        print(f"checkpoint error: {refusal}", file=sys.stderr)
    return report.consistent
