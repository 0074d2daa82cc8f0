"""`run`: the streaming job itself (what main.py does), and the advice printed when it fails."""

from __future__ import annotations

import argparse
import re
import shutil
import sys
from contextlib import ExitStack
from pathlib import Path
from typing import TYPE_CHECKING, TextIO

from ..core import real_time
from ..core.checkpoint.file_access import LOCAL
from ..core.checkpoint.files import RESTORE_OR_RESTART, START_OVER, CheckpointRead, empty_state_files
from ..core.checkpoint.run_lock import holding
from ..core.contract import PACKAGE
from ..core.settings import Settings, SettingsError, load_settings, nearest_existing_folder
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
from ..job.guard.checkpoint import GuardReport, check_checkpoint
from ..job.guard.real_time_checks import refuse_before_spark
from ..job.guard.state_checks import local_checksum_failures
from ..job.spark.java import launched_by_spark_submit
from ..job.spark.remote import is_connect, require_server
from ..job.spark.spark_errors import message_chain, writer_task_errors

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

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
    from ..job.spark.session_files import checkpoint_files

    with ExitStack() as stack:
        # Spark Classic starts only after the checks (in _run), so that bad input never starts a JVM; a Spark
        # Connect session starts no JVM here and comes first, to read a checkpoint on the server's disk.
        spark = stack.enter_context(job_session(settings)) if settings.spark.connect_url is not None else None
        files = LOCAL if spark is None else checkpoint_files(spark, settings.query.checkpoint_location)
        # The lock keeps a second job or a repartition off this checkpoint while the guard reads it and the
        # job runs; one only the server sees cannot be locked here (Spark's stopActiveRunOnRestart then
        # stops a run of the query that is still going when this one starts).
        if files is LOCAL:
            stack.enter_context(holding(settings.query.checkpoint_location, "this job"))
        report = check_checkpoint(settings, files, output_seen=files is LOCAL)
        for remark in partition_remarks(settings, report):
            print(f"partitions: {remark}", file=remarks_to)
        if not guard_passes(report, remarks_to):
            return EXIT_CHECKPOINT_DRIFT
        if settings.sink.delta_writer == "deltalake":
            require_deltalake()
        return _run(settings, args, remarks_to, report.held, spark or stack.enter_context(job_session(settings)))


def _run(
    settings: Settings, args: argparse.Namespace, remarks_to: TextIO, held: CheckpointRead | None, spark: SparkSession
) -> int:
    from pyspark.errors import StreamingQueryException

    from ..job.endpoints.kafka import check_kafka_endpoints, require_brokers
    from ..job.guard.schema_evolution import schema_refusal_advice
    from ..job.run.runner import run_query, startup_line
    from ..job.spark.connectors import require_connectors
    from ..job.spark.session import log_dir, refused_confs

    print(startup_line(spark, settings), file=remarks_to, flush=True)
    refused = refused_confs(spark, settings)
    if refused:
        print(
            f"spark.conf: the Spark Connect server keeps its own value of {', '.join(refused)} (fixed when it"
            " starts, or by its platform); set them where the server starts",
            file=remarks_to,
            flush=True,
        )
    try:
        require_connectors(spark, settings)
        require_brokers(settings)
        endpoints = check_kafka_endpoints(spark, settings)
        for remark in endpoints.remarks:
            print(f"source: {remark}", file=remarks_to, flush=True)
        run_query(
            spark, settings, args.max_batches, args.timeout, held=held, kafka_partitions=endpoints.kafka_partitions
        )
    except StreamingQueryException as error:
        # In real time the query's error may be a task's that only says another task failed: that one's too.
        causes = writer_task_errors(spark, error)
        chain = "\n".join([message_chain(error), *causes])
        named = [
            *bad_record_advice(chain, settings),
            *delta_sink_refusal(chain),
            *real_time_slots_advice(chain),
            *broker_gone_advice(chain, settings),
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


def damaged_checkpoint_advice(message: str, checkpoint: str) -> list[str]:
    """When Spark's error points into the checkpoint: the files concerned, and the ways out.

    Spark names a missing file, but not a truncated one ("An error occurred during loading
    state"); then the state files of zero bytes are named, or else the state folder.
    """
    root = checkpoint.removeprefix("file:").rstrip("/")
    if any(reason in message for reason in NOT_WRITABLE):
        return permission_advice(message, root)
    paths = {"/" + path.lstrip("/").rstrip(".,;:)") for path in re.findall(r"(?:file:)?(/[^\s'\"]+)", message)}
    named = sorted(_state_version(path) for path in paths if path.startswith(root + "/"))
    if not named and "CANNOT_LOAD_STATE_STORE" in message and "://" not in root:
        damaged = {*empty_state_files(Path(root)), *local_checksum_failures(Path(root))}
        named = [str(path) for path in sorted(damaged)] or [f"{root}/state (a state file there)"]
    if not named:
        return []
    return [
        *(f"checkpoint file: {path}" for path in named),
        f"The checkpoint is damaged there; nothing was committed past it. To recover, {RESTORE_OR_RESTART}.",
    ]


# What the file system says when this user may not write somewhere: not damage.
NOT_WRITABLE = ("Permission denied", "Read-only file system")


def permission_advice(message: str, checkpoint: str) -> list[str]:
    """A folder this user may not write in (a chmod, another owner, a read-only mount): the folders
    Spark names, and the fix, which restores nothing."""
    named = re.findall(r"(?:file:)?(/[^\n]*?) \((Permission denied|Read-only file system)\)", message)
    folders = sorted({str(Path(path).parent) for path, _ in named})
    target = checkpoint if all(folder.startswith(checkpoint + "/") for folder in folders) else " ".join(folders)
    if any(reason == "Read-only file system" for _, reason in named) or "Permission denied" not in message:
        fix = f"remount the file system of {target} read-write (or move it to one that is)"
    else:
        fix = f"give the user that runs the job write access: chmod -R u+rwX '{target}' (or chown -R it to that user)"
    return [
        *(f"not writable: {folder}" for folder in folders),
        f"This user may not write there ({' / '.join(sorted({reason for _, reason in named}) or NOT_WRITABLE)}):"
        f" nothing is damaged, and nothing was committed past the last batch. To go on, {fix}, then start again;"
        " the batch runs again.",
    ]


def disk_full_advice(message: str, settings: Settings) -> list[str]:
    """A full disk: the space left where the job writes, and that a restart after freeing it is safe."""
    if "No space left on device" not in message:
        return []
    places = {"query.checkpoint_location": settings.query.checkpoint_location}
    if settings.sink.writes_files:
        places["sink.path"] = settings.sink.path
    lines = []
    for setting, location in places.items():
        folder = nearest_existing_folder(location)
        if folder is not None:  # remote storage's free space cannot be asked here
            lines.append(f"disk full: {setting} {location} has {shutil.disk_usage(folder).free / 2**20:,.1f} MiB free")
    return [
        *lines,
        "Free space and start again: the batch that failed was not committed and runs again, and what was"
        " committed stays (a sink counts only committed batches).",
    ]


def data_loss_advice(message: str, settings: Settings) -> list[str]:
    """Kafka deleted records (retention, or by hand) before the job read them, and failOnDataLoss stopped it."""
    if "failOnDataLoss" not in message:
        return []
    sections = [section for section, source in settings.inputs.items() if source.type == "kafka"]
    setting = " / ".join(f"{section}.kafka.fail_on_data_loss" for section in sections)
    return [
        f"data loss: records the checkpoint still needed were deleted from Kafka before they were read"
        f" (retention ran first, or the topic was recreated); {setting} is true, so the job stopped and committed"
        f" nothing past them. Set it to false to go on without them (they are lost for the output), or replay"
        f" them from elsewhere into a new checkpoint; then raise the topic's retention.ms above the job's longest"
        f" stop."
    ]


def bad_record_advice(message: str, settings: Settings) -> list[str]:
    """A bad record a source refused with on_bad_record fail (job/endpoints/sources.py): where it came
    from (its file, or Kafka topic, partition and offset), what is wrong with it, the record, and the
    ways on."""
    from ..job.endpoints.sources import BAD_RECORD_ERROR

    # Spark's raise_error message (not the plan's text of that expression, which a failure's message may
    # quote); the record runs to the end of the line, but for the SQL states Spark appends to its messages.
    pattern = r"\[USER_RAISED_EXCEPTION\] " + BAD_RECORD_ERROR + r" (\S+) (.+?): (.+?); row (.*?)(?: SQLSTATE: \w+)*$"
    found = re.search(pattern, message, re.M)
    if found is None:
        return []
    section, origin, what, row = found.groups()
    source = settings.inputs.get(section)
    setting = f"{section}.{source.type}.on_bad_record" if source else "on_bad_record"
    bound = settings.query.max_event_time_ahead
    ahead = (
        f" (query.max_event_time_ahead, {bound}, is how far ahead of the processing time an event may be;"
        " epoch milliseconds read as seconds land some 50,000 years ahead)"
        if "ahead of the processing time" in what
        else ""
    )
    # A real-time batch writes each result to Kafka as its record arrives: those before the bad one may be out.
    written = (
        "the results of its records before this one may be out already, and are written again when it runs again"
        if settings.query.real_time and settings.sink.type == "kafka"
        else "nothing of it was written"
    )
    return [
        f"bad record: {origin} holds {what}{ahead}: {row}; {setting} is fail,"
        f" so the batch stopped uncommitted ({written}). Fix or remove the row at its source, or"
        " set on_bad_record to drop to skip and count such rows; the next start runs the batch again."
    ]


def broker_gone_advice(message: str, settings: Settings) -> list[str]:
    """Kafka's client gave up on a broker that stopped answering while the job ran (Spark's Kafka source
    tries 3 times, each within Kafka's 60 s API timeout, so some 3 minutes): where, and the way on."""
    from ..job.endpoints.kafka import KAFKA_ERROR, unanswered_endpoints

    found = KAFKA_ERROR.search(message)
    if found is None or found[1] != "TimeoutException":
        return []
    said = re.sub(r"( SQLSTATE: \w+)+$", "", found[2].strip())
    silent = unanswered_endpoints(settings)
    now = f"no broker answers at {' nor at '.join(silent)} now" if silent else "a broker answers there again"
    return [
        f"kafka: the Kafka client gave up on the broker while the job ran (TimeoutException: {said}); {now}. The"
        " checkpoint holds every committed batch: start the job once the broker is back, and the batch in flight"
        " runs again (its results written again to a Kafka sink, which is at least once)"
    ]


def real_time_slots_advice(message: str) -> list[str]:
    """A real-time batch Spark would not start for want of task slots (core/real_time.py): its one line."""
    line = real_time.slots_gone_line(message)
    return [] if line is None else [f"real-time: {line}"]


def delta_sink_refusal(message: str) -> list[str]:
    """A batch the Delta writer refused (job/endpoints/delta.py): its one line, which says the way on."""
    from ..core.delta_merge import DELTA_SINK_REFUSED

    found = re.search(DELTA_SINK_REFUSED + r" (.+?)(?: SQLSTATE: \w+)*$", message, re.M)
    return [] if found is None else [f"delta sink: {found.group(1)}"]


def _state_version(path: str) -> str:
    """RocksDB names N.changelog when version N is missing, even if it was written as N.zip."""
    if path.endswith(".changelog") and not Path(path).exists() and not Path(path).with_suffix(".zip").exists():
        version = Path(path).with_suffix("")
        return f"{version}.zip or {version}.changelog (neither is there: version {version.name} of this state is lost)"
    return path
