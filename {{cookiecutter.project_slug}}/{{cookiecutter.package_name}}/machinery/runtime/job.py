"""Build the query from settings, start it, and wait for it to finish or to be stopped."""

from __future__ import annotations

import signal
import sys
import threading
import time
from collections.abc import Callable
from types import FrameType
from typing import Any, TextIO

from pyspark.errors import StreamingQueryException
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.streaming import StreamingQuery

from ..checkpoint.operator_list import check_operators
from ..checkpoint.state_key import check_state_key
from ..contract import QUERY_MODULE, user_query
from ..endpoints.sinks import start_query
from ..endpoints.sources import read_events
from ..plan_operators import PlanOperator, chain, flow_order, unsized
from ..settings import Settings, SettingsError
from ..text import first_line
from .progress import ProgressPrinter
from .query_plan import read_plan
from .watchdog import StateWatchdog

POLL_SECONDS = 0.2
# What signal.signal installs and returns: a function, SIG_DFL or SIG_IGN, or None (not set from Python).
SignalHandler = Callable[[int, FrameType | None], Any] | int | signal.Handlers | None


def build_result(spark: SparkSession, settings: Settings) -> DataFrame:
    """The whole query as a DataFrame: the source (and join_source for a join), then the stateful transform."""
    events = read_events(spark, settings, "source")
    join_events = None if settings.join_source is None else read_events(spark, settings, "join_source")
    return user_query().stateful_query(events, settings.query, join_events)


def follow_plan(result: DataFrame, settings: Settings, remarks_to: TextIO) -> list[PlanOperator]:
    """The stateful operators of the query about to run, checked before it starts: against the settings
    (inputs, store, sink mode, capacity.operators), against the checkpoint's operators and their state
    keys. Where the query module's OPERATOR names another operator, the plan wins, said in one line."""
    plan = read_plan(result)
    # The checkpoint's operators first: when the query no longer fits its state, that is the news.
    check_operators(plan, settings.query.checkpoint_location)
    problems = settings.plan_problems(plan)
    if problems:
        raise SettingsError(problems)
    note = check_state_key(result.sparkSession, result, settings.query.checkpoint_location)
    if note:
        print(f"checkpoint: {note}", file=remarks_to, flush=True)
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


def stop_quietly(spark: SparkSession, query: StreamingQuery) -> None:
    """Stop on purpose: the errors Spark logs for an interrupted batch (aborted writes, cancelled
    tasks, with stack traces) are the expected result of the stop, not news."""
    spark.sparkContext.setLogLevel("OFF")
    query.stop()


def terminated(query: StreamingQuery, stopping: bool, remarks_to: TextIO) -> bool:
    """Whether the query has ended; its failure is raised, unless this job was stopping it.

    A stop interrupts the batch in flight, and Spark sometimes reports that interruption as the
    query's failure: seen about once in 35 stops of a join under load, an InterruptedException from a
    broadcast made while planning the batch, wrapped in an InvocationTargetException that Spark's
    check for a stop does not unwrap. The batch is abandoned uncommitted either way and the next
    start replays it, so a failure after our own stop is said, not raised; a real fault in that
    batch fails again at the next start.
    """
    try:
        # pyspark takes a float timeout (int(timeout * 1000) ms) but annotates it int.
        return bool(query.awaitTermination(POLL_SECONDS))  # type: ignore[arg-type]
    except StreamingQueryException as error:
        if not stopping:
            raise
        print(
            f"stopped: Spark reported the interrupted batch as a failure ({first_line(str(error))});"
            " it was abandoned uncommitted and the next start replays it",
            file=remarks_to,
            flush=True,
        )
        return True


class StopSignals:
    """SIGTERM and SIGINT (Ctrl-C) ask the query to stop, instead of ending the driver mid-call.

    The handlers only record the signal; the polling loop of run_query stops the query. Outside the
    main thread (where Python allows no handlers) nothing is installed.
    """

    SIGNALS = (signal.SIGTERM, signal.SIGINT)

    def __init__(self) -> None:
        self.received: str | None = None
        self._previous: dict[int, SignalHandler] = {}

    def __enter__(self) -> StopSignals:
        if threading.current_thread() is threading.main_thread():
            self._previous = {number: signal.signal(number, self._record) for number in self.SIGNALS}
        return self

    def __exit__(self, *_exc: object) -> None:
        for number, handler in self._previous.items():
            signal.signal(number, handler)

    def _record(self, number: int, _frame: object) -> None:
        self.received = signal.Signals(number).name


def run_query(
    spark: SparkSession,
    settings: Settings,
    max_batches: int | None = None,
    timeout_seconds: float | None = None,
    progress_to: TextIO = sys.stdout,
) -> StreamingQuery:
    """Run until the query ends, `max_batches` batches are committed, the timeout passes, or the
    process gets SIGTERM or SIGINT.

    Stopping after N batches is graceful for the committed ones; a batch already running when the
    N-th commit is seen is abandoned uncommitted and replayed by the next start.
    """
    monitoring = settings.monitoring
    remarks_to = monitoring.remarks_to(progress_to)
    result = build_result(spark, settings)
    plan = follow_plan(result, settings, remarks_to)
    watchdog = StateWatchdog(
        settings.sizing(plan) if any(operator.known for operator in plan) else None,
        settings.state_store.provider,
        monitoring.state_warning_factor,
        monitoring.hdfs_memory_warning_share,
    )
    json_lines = monitoring.progress_format == "json"
    printer = ProgressPrinter(progress_to, json_lines=json_lines, watchdog=watchdog)
    spark.streams.addListener(printer)
    try:
        query = start_query(result, settings.sink, settings.query)
        deadline = None if timeout_seconds is None else time.monotonic() + timeout_seconds
        stopping = False
        with StopSignals() as signals:
            while not terminated(query, stopping, remarks_to):
                enough = max_batches is not None and printer.committed_batches(query.id) >= max_batches
                if signals.received:
                    print(
                        f"{signals.received} received: stopping; a batch in flight is abandoned uncommitted"
                        " and the next start replays it",
                        file=remarks_to,
                        flush=True,
                    )
                if enough or signals.received or (deadline is not None and time.monotonic() >= deadline):
                    stopping = True
                    stop_quietly(spark, query)
        return query
    finally:
        spark.streams.removeListener(printer)
