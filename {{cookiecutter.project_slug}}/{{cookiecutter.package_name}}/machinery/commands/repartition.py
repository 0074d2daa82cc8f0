"""`repartition`: move a stopped job's RocksDB state into another number of partitions."""

from __future__ import annotations

import argparse
import dataclasses
import tempfile
from pathlib import Path

from ..core.checkpoint.file_access import LocationPath
from ..core.checkpoint.files import interrupted, last_committed, local_checkpoint
from ..core.checkpoint.object_store import store_of
from ..core.checkpoint.run_lock import holding
from ..core.checkpoint.sink_log import COMPACT_INTERVAL_CONF, DEFAULT_COMPACT_INTERVAL, LOG_DIR
from ..core.contract import PACKAGE
from ..core.settings import Settings, load_settings
from ..job.endpoints.output_log import OutputLog
from ..operations.repartition import (
    Plan,
    RepartitionFailed,
    RepartitionRefused,
    Result,
    plan,
    recover,
    repartition,
    require_runner,
)
from ..operations.repartition_on_store import (
    copied_here,
    output_here,
    recover_on_store,
    repartition_on_store,
    unchanged_names,
)
from .arguments import EXIT_QUERY_FAILED, add_settings_argument, positive_int


def register(commands: argparse._SubParsersAction) -> None:
    command = commands.add_parser(
        "repartition",
        help="move a stopped job's RocksDB state into another number of shuffle partitions (Spark 4.2+)",
        description="Rewrite the state of a stopped job's RocksDB checkpoint into N partitions with Spark's"
        " offline runner (a private Spark API), keeping a copy of the checkpoint until the state is verified.",
    )
    add_settings_argument(command)
    command.add_argument(
        "--partitions", type=positive_int, help="the new count (default: spark.shuffle_partitions of the settings)"
    )
    command.add_argument(
        "--finish-last-batch",
        action="store_true",
        help="first run the batch the job left unfinished, on its recorded input, then repartition",
    )
    command.add_argument(
        "--keep-copy", action="store_true", help="keep the copy of the checkpoint after the result is verified"
    )
    command.set_defaults(handler=cmd_repartition)


def cmd_repartition(args: argparse.Namespace) -> int:
    settings = load_settings(args.settings)
    location = settings.query.checkpoint_location
    if settings.spark.connect_url is not None:
        raise RepartitionRefused(
            f"{location}: Spark repartitions state in Spark Classic only (its StreamingCheckpointManager; a Spark"
            " Connect session has no such call), and spark.remote is set; run it without spark.remote (and"
            " SPARK_REMOTE) on a machine whose Spark reaches the checkpoint, with the job stopped; nothing was changed"
        )
    if store_of(location):
        return _repartition_on_store(args, settings)
    output = _output_log(settings)
    recovered = _recover_interrupted(location, output, settings.query.lease_seconds)
    planned = _planned(location, settings, args, recovered)
    if planned is None:
        return 0
    chosen, as_pinned = planned
    print(
        f"repartition: {chosen.checkpoint}, state of batch {chosen.last_committed}: {chosen.partitions_now} ->"
        f" {chosen.partitions_new} partitions; a copy is kept at {chosen.working_copy} until the result is verified",
        flush=True,
    )
    from ..job.spark.session import job_session
    from ..operations.inspection import inspect_checkpoint
    from ..operations.state_reader import READER_CONFS

    pinned_session = job_session(as_pinned, with_connectors=chosen.finish_first, also=READER_CONFS)
    with holding(location, "the repartition", settings.query.lease_seconds), pinned_session as spark:
        try:
            if chosen.finish_first:
                chosen = _finish_last_batch(spark, as_pinned, chosen)
            result = repartition(
                spark,
                chosen,
                lambda batch: inspect_checkpoint(spark, location, (batch, "rocksdb"), batch),
                args.keep_copy,
                _as_the_session_sets_it(output, spark),
            )
        except RepartitionFailed as error:
            print(f"repartition failed: {error}", flush=True)
            return EXIT_QUERY_FAILED
    return _report(result, chosen, settings, args.settings)


def _planned(
    location: str, settings: Settings, args: argparse.Namespace, recovered: bool
) -> tuple[Plan, Settings] | None:
    """The plan, and the job's own settings as the checkpoint holds them (its session, the batch to finish);
    None when an interrupted repartition was just recovered into the count asked for (said in a line)."""
    try:
        chosen = plan(location, args.partitions or settings.spark.shuffle_partitions, args.finish_last_batch)
    except RepartitionRefused as refused:
        if recovered and "nothing to do" in str(refused):
            print(f"repartition: {refused}")
            return None
        raise
    require_runner()
    as_pinned = settings.model_copy(
        update={"spark": settings.spark.model_copy(update={"shuffle_partitions": chosen.partitions_now})}
    )
    return chosen, as_pinned


def _report(result: Result, chosen: Plan, settings: Settings, settings_file: Path) -> int:
    if result.recorded is not None:
        print(f"repartition: {result.recorded}")
    for (operator, store), rows in sorted(result.after.items()):
        print(f"repartition: operator {operator} store {store}: {rows:,} rows before and after")
    kept = f"the copy is kept at {result.copy_kept}" if result.copy_kept else "the copy was removed"
    print(
        f"repartition: done: batch {result.batch} holds the state in {chosen.partitions_new} partitions"
        f" (verified by Spark's state reader); {kept}"
    )
    print(_next_step(settings, chosen.partitions_new, settings_file))
    return 0


def _repartition_on_store(args: argparse.Namespace, settings: Settings) -> int:
    """The repartition of a checkpoint on an object store: on a copy here, then uploaded
    (operations/repartition_on_store.py)."""
    location, sink = settings.query.checkpoint_location, settings.sink
    if sink.writes_files and not store_of(sink.path):
        raise RepartitionRefused(
            f"{location} is on an object store and sink.path {sink.path} is not: repartition records its batch in"
            " the output with the checkpoint, on the store; keep both there (a savepoint moves them), nothing was"
            " changed"
        )
    if args.finish_last_batch or args.keep_copy:
        raise RepartitionRefused(
            f"{location} is on an object store, where --finish-last-batch and --keep-copy are not offered: start the"
            f" job with --max-batches 1 to finish its last batch, and take a savepoint (python -m {PACKAGE} savepoint"
            " create) to keep a copy; nothing was changed"
        )
    if sink.type == "delta":
        _require_deltalake(Path(sink.path))
    on_store = OutputLog(sink.type, LocationPath(sink.path), LocationPath(location)) if sink.writes_files else None
    from ..job.spark.session import job_session
    from ..operations.inspection import inspect_checkpoint
    from ..operations.state_reader import READER_CONFS

    with holding(location, "the repartition", settings.query.lease_seconds):
        recovered = recover_on_store(location, on_store)
        for line in recovered:
            print(f"repartition: {line}", flush=True)
        with tempfile.TemporaryDirectory(prefix="repartition-") as staging:
            checkpoint = copied_here(location, Path(staging))
            with unchanged_names(checkpoint):
                planned = _planned(str(checkpoint.here), settings, args, bool(recovered))
            if planned is None:
                return 0
            chosen, as_pinned = planned
            print(
                f"repartition: {location}, state of batch {chosen.last_committed}: {chosen.partitions_now} ->"
                f" {chosen.partitions_new} partitions, on a copy here ({checkpoint.here}), uploaded once verified",
                flush=True,
            )
            here = str(checkpoint.here)
            with job_session(as_pinned, with_connectors=False, also=READER_CONFS) as spark:
                store_output = _as_the_session_sets_it(on_store, spark)
                if store_output is not None:
                    store_output = dataclasses.replace(store_output, checkpoint=checkpoint.here)
                try:
                    result = repartition_on_store(
                        spark,
                        chosen,
                        checkpoint,
                        lambda batch: inspect_checkpoint(spark, here, (batch, "rocksdb"), batch),
                        output_here(store_output, Path(staging), checkpoint),
                        store_output,
                    )
                except RepartitionFailed as error:
                    print(f"repartition failed: {str(error).replace(here, location)}", flush=True)
                    return EXIT_QUERY_FAILED
    return _report(result, chosen, settings, args.settings)


def _recover_interrupted(location: str, output: OutputLog | None, lease_seconds: float) -> bool:
    """Put back what a repartition that did not finish left (a kill, a crash), before anything else."""
    checkpoint = local_checkpoint(location)
    if checkpoint is None or interrupted(checkpoint) is None:
        return False
    with holding(location, "the repartition", lease_seconds):
        for line in recover(checkpoint, output):
            print(f"repartition: {line}", flush=True)
    return True


def _output_log(settings: Settings) -> OutputLog | None:
    """The log of the sink's output that gets the runner's batch (the parquet sink's, a Delta table's), checked
    before anything; None for a sink without one, and for a Delta table elsewhere than on this machine's disk
    (Spark's Delta sink and the writers go on from the next batch; only a local table is checked for it)."""
    sink, checkpoint = settings.sink, local_checkpoint(settings.query.checkpoint_location)
    output = local_checkpoint(sink.path) if sink.type in ("parquet", "delta") else None
    if sink.type == "parquet" and output is None:
        raise RepartitionRefused(
            f"the parquet output {sink.path} is not on the local file system: repartition adds a batch"
            f" that the file sink never ran, and writes its empty entry into {LOG_DIR} itself. Repartition where"
            " the output is mounted locally (or a copy of it, with the job stopped)"
        )
    if output is None or checkpoint is None:
        return None
    if sink.type == "delta":
        _require_deltalake(output)
    return OutputLog(sink.type, output, checkpoint)


def _require_deltalake(table: Path) -> None:
    try:
        import deltalake  # noqa: F401
    except ImportError:
        raise RepartitionRefused(
            f"sink.path {table} is a Delta table, and repartition records the batch it adds in it with the"
            " deltalake package, which is not installed: pip install deltalake, then run again"
        ) from None


def _as_the_session_sets_it(output: OutputLog | None, spark) -> OutputLog | None:
    """The file sink's merge interval as the job's session sets it (a log's own merges decide once it has one)."""
    if output is None:
        return None
    interval = int(spark.conf.get(COMPACT_INTERVAL_CONF, str(DEFAULT_COMPACT_INTERVAL)))
    return dataclasses.replace(output, compact_interval=interval)


def _finish_last_batch(spark, settings: Settings, chosen: Plan) -> Plan:
    """Run the batch the job left unfinished, alone, on its recorded input (its offsets are in the log)."""
    from ..job.endpoints.sinks import start_query
    from ..job.plan.merge_key import merge_key
    from ..job.run.runner import beats_file, build_result, sink_rows

    batch = chosen.last_batch
    print(f"repartition: running batch {batch}, which the job left unfinished, on its recorded input", flush=True)
    from ..job.spark.spark_errors import spark_errors
    from ..operations.state_reader import spark_message

    try:
        # A quiet input's heartbeats are streams of the checkpoint: the batch run again reads its beat from its
        # offsets, and the beats file stays empty (nothing is quiet in one batch).
        with beats_file(settings) as beats:
            result = build_result(spark, settings, beats)
            key = merge_key(result, settings.sink) if settings.sink.merges else None
            start_query(
                sink_rows(result, settings), settings.sink, settings.query, key, one_batch=True
            ).awaitTermination()
    except spark_errors() as error:
        raise RepartitionRefused(
            f"batch {batch} failed when run again ({spark_message(error)}): start the job to see why; nothing"
            " was repartitioned"
        ) from None
    if last_committed(chosen.checkpoint) != batch:
        raise RepartitionRefused(f"batch {batch} did not commit when run again: start the job to see why")
    return dataclasses.replace(chosen, last_committed=batch, finish_first=False)


def _next_step(settings: Settings, partitions: int, settings_file) -> str:
    if settings.spark.shuffle_partitions == partitions:
        return f"next: start the job: {settings_file} already sets spark.shuffle_partitions to {partitions}"
    return (
        f"next: set spark.shuffle_partitions to {partitions} in {settings_file} (it says"
        f" {settings.spark.shuffle_partitions}), then start the job; a start with the old count is refused"
    )
