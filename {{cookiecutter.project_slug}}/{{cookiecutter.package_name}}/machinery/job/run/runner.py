"""Build the query from settings, start it, and wait for it to finish or to be stopped."""

from __future__ import annotations

import contextlib
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import TextIO

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.streaming import StreamingQuery

from ...core.checkpoint.files import CheckpointRead
from ...core.contract import QUERY_MODULE
from ...core.plan_operators import PlanOperator, chain, flow_order, unsized
from ...core.settings import Settings, SettingsError
from ..endpoints.heartbeats import with_heartbeats, without_heartbeats
from ..endpoints.kafka import source_partitions
from ..endpoints.sinks import start_query
from ..endpoints.sources import read_inputs
from ..guard.real_time_checks import refuse_too_few_slots
from ..guard.state_fit import check_fit
from ..plan.merge_key import checked_output, merged_by_line
from ..plan.query_plan import query_result, read_plan
from ..spark.driver_jvm import jvm_ran_out_of_memory
from ..spark.heap import OutOfMemory, local_probe, start_warning
from ..spark.remote import ServerGone, is_connect, server_gone
from ..spark.session_files import CheckpointReader, checkpoint_reader
from ..spark.spark_errors import spark_errors
from .advice import out_of_memory_line
from .beats import BeatClock
from .progress import ProgressPrinter, StateWatchdog
from .python_modules import require_operator_modules
from .quiet import QuietWatch
from .stopping import StopSignals, stop_on_batch_boundary, terminated


def build_result(spark: SparkSession, settings: Settings, beats: Path | None = None) -> DataFrame:
    """The whole query as a DataFrame: the source (and join_source, where set), then the stateful transform.
    With `beats` (query.quiet_input_after: the file the driver writes the beats to), each input with its heartbeats."""
    events, join_events = read_inputs(spark, settings)
    if beats is not None:
        events = with_heartbeats(spark, beats, events, "source")
        join_events = None if join_events is None else with_heartbeats(spark, beats, join_events, "join_source")
    return query_result(spark, settings, events, join_events)


def sink_rows(result: DataFrame, settings: Settings) -> DataFrame:
    """What the sink writes: the result, without a quiet input's heartbeats where the settings add them."""
    return result if settings.query.quiet_input_after is None else without_heartbeats(result)


def follow_plan(
    result: DataFrame, settings: Settings, held: CheckpointRead | None, checkpoint: CheckpointReader, remarks_to: TextIO
) -> list[PlanOperator]:
    """The stateful operators of the query about to run, checked before it starts against the settings
    and the checkpoint's state (state_fit.py). Where the query module's OPERATOR names another
    operator, the plan wins, said in one line."""
    plan = read_plan(result)
    require_operator_modules(plan)
    note, evolutions = check_fit(result, plan, settings, held, checkpoint, record_key=True)
    if note:
        print(f"checkpoint: {note}", file=remarks_to, flush=True)
    for evolution in evolutions:
        print(f"state schema: {evolution}", file=remarks_to, flush=True)
    for operator in plan:
        if not operator.known:
            print(f"query: {unsized(operator)}", file=remarks_to, flush=True)
    kinds = [operator.kind for operator in flow_order(plan)]
    if settings.query.operator is not None and kinds != [settings.query.operator]:
        print(
            f"query: the plan runs {chain(kinds)}; {QUERY_MODULE}.OPERATOR ({settings.query.operator}) only shapes"
            " the sample input: the sizing, the guard and the tools follow the plan",
            file=remarks_to,
            flush=True,
        )
    return plan


LAST_EVENTS_SECONDS = 10.0
UNTRACKED_ROWS = (
    "state rows: state_store.rocksdb.track_total_number_of_rows is false, so Spark counts none (its progress"
    " says 0) and the state watchdog's rows warning is off; `inspect` counts them from the checkpoint"
)


def run_query(
    spark: SparkSession,
    settings: Settings,
    max_batches: int | None = None,
    timeout_seconds: float | None = None,
    progress_to: TextIO | None = None,
    held: CheckpointRead | None = None,
) -> StreamingQuery:
    """run_start for a run that is not a start of `run` (a test, a tool): the checkpoint's reader is chosen
    here, and for a real-time query on Spark Classic Kafka is asked for the source topics' partitions."""
    checkpoint = checkpoint_reader(spark, settings.query.checkpoint_location)
    counted = settings.query.real_time and settings.source.type == "kafka" and not is_connect(spark)
    kafka_partitions = source_partitions(spark, settings) if counted else None
    return run_start(spark, settings, checkpoint, held, kafka_partitions, max_batches, timeout_seconds, progress_to)


def run_start(
    spark: SparkSession,
    settings: Settings,
    checkpoint: CheckpointReader,
    held: CheckpointRead | None,
    kafka_partitions: int | None,
    max_batches: int | None = None,
    timeout_seconds: float | None = None,
    progress_to: TextIO | None = None,
) -> StreamingQuery:
    """Run until the query ends, `max_batches` batches are committed, the timeout passes, or the
    process gets SIGTERM or SIGINT; each of the last three stops on a batch boundary (stopping.py).
    What the start decided is passed on, not found again: `checkpoint`, the checkpoint with the reader that
    serves its files (the state key record and the stop read through it); `held`, what the checkpoint's files
    said when the guard read them, for the plan's checks (state_fit.py), None (a scratch or test run) leaving
    them the state key record alone to compare with; `kafka_partitions`, the source topics' partitions the
    start's endpoint check counted, for the real-time slot check (None: not counted).
    """
    after = settings.query.quiet_input_seconds
    with beats_file(settings) as beats:
        clock = None if beats is None or after is None else BeatClock(list(settings.inputs), after, beats)
        return _run(
            spark, settings, checkpoint, held, kafka_partitions, max_batches, timeout_seconds, progress_to, clock
        )


@contextlib.contextmanager
def beats_file(settings: Settings) -> Iterator[Path | None]:
    """The file a run's quiet-input beats are written to (query.quiet_input_after), on this machine, where the
    heartbeats' Python source runs; removed after the run. None without the setting."""
    if settings.query.quiet_input_after is None:
        yield None
        return
    with tempfile.TemporaryDirectory(prefix="quiet-input-") as folder:
        yield Path(folder) / "beats.json"


def _run(
    spark: SparkSession,
    settings: Settings,
    checkpoint: CheckpointReader,
    held: CheckpointRead | None,
    kafka_partitions: int | None,
    max_batches: int | None,
    timeout_seconds: float | None,
    progress_to: TextIO | None,
    clock: BeatClock | None,
) -> StreamingQuery:
    monitoring = settings.monitoring
    progress_to = sys.stdout if progress_to is None else progress_to  # the standard output of now, not of import time
    remarks_to = monitoring.remarks_to(progress_to)
    result = build_result(spark, settings, None if clock is None else clock.beats)
    key = checked_output(result, settings)  # before anything is written
    if key:
        print(f"sink: {merged_by_line(key, settings.sink.path)}", file=remarks_to, flush=True)
    plan = follow_plan(result, settings, held, checkpoint, remarks_to)
    refuse_too_few_slots(spark, settings, plan, kafka_partitions, remarks_to)
    endless = None if max_batches is not None else settings.endless_run(plan)
    if endless:
        raise SettingsError([endless])
    sizing = settings.sizing(plan) if any(operator.known for operator in plan) else None
    probe = local_probe(spark)
    warning = start_warning(settings, sizing, probe)
    if is_connect(spark) and settings.state_store.provider == "hdfs" and plan:
        warning = warning or (
            "the Spark Connect server's heap is not visible from here: the heap watchdog is off; the HDFS-backed"
            " state's memory is Spark's own figure on each progress line"
        )
    if warning:
        print(f"memory: {warning}", file=remarks_to, flush=True)
    if plan and not settings.state_store.rows_tracked:  # a query with state
        print(UNTRACKED_ROWS, file=remarks_to, flush=True)
    watchdog = StateWatchdog(
        sizing if settings.state_store.rows_tracked else None,
        settings.state_store.provider,
        monitoring.state_warning_factor,
        monitoring.hdfs_memory_warning_share,
        probe,
    )
    json_lines = monitoring.progress_format == "json"
    quiet_after = monitoring.quiet_after_seconds
    quiet = None if quiet_after is None else QuietWatch(quiet_after, str(monitoring.quiet_after))
    if clock is not None:
        print(f"query: {quiet_inputs_line(settings)}", file=remarks_to, flush=True)
    printer = ProgressPrinter(progress_to, json_lines, watchdog, settings.state_store.rows_tracked, quiet, clock)
    written = sink_rows(result, settings)
    spark.streams.addListener(printer)
    gone = False  # the Connect server stopped answering: nothing more to ask of it
    try:
        query = start_query(written, settings.sink, settings.query, key)
        deadline = None if timeout_seconds is None else time.monotonic() + timeout_seconds
        with StopSignals() as signals:
            while not terminated(query, False, remarks_to):
                why = _why_stop(printer.committed_batches(query.id), max_batches, deadline, signals)
                if why:
                    print(
                        f"{why}: stopping once the batch in flight commits (at most query.stop_timeout,"
                        f" {settings.query.stop_timeout}; a second SIGTERM or Ctrl-C stops at once)",
                        file=remarks_to,
                        flush=True,
                    )
                    stop_on_batch_boundary(
                        spark,
                        query,
                        lambda: start_query(written, settings.sink, settings.query, key, one_batch=True),
                        settings,
                        checkpoint,
                        signals,
                        remarks_to,
                    )
                    break
        return query
    except Exception as error:
        if server_gone(error):
            gone = True
            raise ServerGone(
                f"spark.remote {settings.spark.connect_url_shown}: the Spark Connect server stopped answering while query"
                f" {settings.query.name} ran; its checkpoint is where the server keeps it: start the job again once"
                " the server is back (a batch in flight runs again)"
            ) from None
        # An error the JVM sent is from a JVM still up; any other may be its end: wait for it to exit.
        answered = isinstance(error, spark_errors())
        if jvm_ran_out_of_memory(wait=0 if answered else 10):
            raise OutOfMemory(out_of_memory_line(settings, sizing, watchdog.heap_max)) from None
        raise
    finally:
        if not gone and not jvm_ran_out_of_memory(wait=0):
            if is_connect(spark):
                # pyspark 4.2's Connect client deadlocks when its last listener is removed while the thread
                # that hands events on waits to pass one (a query's end, told a moment after it): let it pass.
                printer.wait_until_all_ended(LAST_EVENTS_SECONDS)
            spark.streams.removeListener(printer)


def quiet_inputs_line(settings: Settings) -> str:
    after = settings.query.quiet_input_after
    return (
        f"an input that brings no rows for {after} (query.quiet_input_after) gets heartbeats at the wall clock less"
        f" {after}, and the watermark follows them: an event arriving after such a spell behind the watermark is late"
    )


def _why_stop(committed: int, max_batches: int | None, deadline: float | None, signals: StopSignals) -> str | None:
    if signals.received:
        return f"{signals.received} received"
    if max_batches is not None and committed >= max_batches:
        return f"{committed} batches committed (--max-batches {max_batches})"
    if deadline is not None and time.monotonic() >= deadline:
        return "--timeout reached"
    return None
