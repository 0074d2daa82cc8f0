"""Stopping a running query on a batch boundary: the signals that ask for it, and the stop itself.

Spark has no "stop after this batch": `query.stop()` interrupts the batch in flight, which leaves its
offsets logged without a commit. The next start replays it, so nothing is lost, but a checkpoint
left that way is not one that `repartition`, a copy or an upgrade can take as it is. So a stop first
waits for the batch in flight to commit, then stops between batches; a batch that a trigger started
in the moment between (or that was in flight when the job was killed before) is run alone to its
commit. All of it within `query.stop_timeout`; past that, the batch in flight is abandoned as
Spark's own stop does, and a line says so.
"""

from __future__ import annotations

import signal
import threading
import time
from collections.abc import Callable
from types import FrameType
from typing import Any, TextIO

from pyspark.errors import StreamingQueryException
from pyspark.sql import SparkSession
from pyspark.sql.streaming import StreamingQuery

from ...core.checkpoint.files import last_committed, unfinished_batch
from ...core.settings import Settings
from ...core.text import first_line
from ..spark.remote import set_log_level
from ..spark.session_files import CheckpointReader

POLL_SECONDS = 0.2
# What signal.signal installs and returns: a function, SIG_DFL or SIG_IGN, or None (not set from Python).
SignalHandler = Callable[[int, FrameType | None], Any] | int | signal.Handlers | None


class StopSignals:
    """SIGTERM and SIGINT (Ctrl-C) ask the query to stop, instead of ending the driver mid-call.

    The handlers only count the signals; the polling loop of run_query stops the query, on a batch
    boundary after the first and at once after a second. Outside the main thread (where Python allows
    no handlers) nothing is installed.
    """

    SIGNALS = (signal.SIGTERM, signal.SIGINT)

    def __init__(self) -> None:
        self.received: str | None = None
        self.count = 0
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
        self.count += 1

    @property
    def insisted(self) -> bool:
        """A second signal: stop now, abandoning the batch in flight."""
        return self.count > 1


def stop_quietly(spark: SparkSession, query: StreamingQuery) -> None:
    """Stop on purpose: the errors Spark logs for an interrupted batch (aborted writes, cancelled
    tasks, with stack traces) are the expected result of the stop, not news."""
    set_log_level(spark, "OFF")
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


def stop_on_batch_boundary(
    spark: SparkSession,
    query: StreamingQuery,
    one_batch: Callable[[], StreamingQuery],
    settings: Settings,
    checkpoint: CheckpointReader,
    signals: StopSignals,
    remarks_to: TextIO,
) -> None:
    """Let the batch in flight commit, stop between batches, and run alone (one_batch starts the query
    for that) a batch left without its commit; each step within query.stop_timeout (a second signal
    ends the wait). Says how it ended. `checkpoint`: the query's, with the reader the start chose."""
    deadline = time.monotonic() + settings.query.stop_timeout_seconds

    def waiting() -> bool:
        return time.monotonic() < deadline and not signals.insisted

    # Between triggers (isTriggerActive false) nothing is half-done; a job that is behind has no such
    # moment, so the wait also ends when the batch in flight has committed (the last progress moves on).
    in_flight_after = _last_batch(query)
    while (
        waiting() and query.isActive and query.status.get("isTriggerActive") and _last_batch(query) == in_flight_after
    ):
        if terminated(query, False, remarks_to):  # not stopped yet: a failure of that batch is real news
            break
    stop_quietly(spark, query)
    terminated(query, True, remarks_to)
    folder = checkpoint.root
    files = checkpoint.files()  # a Connect server's: through the session, read afresh
    batch = unfinished_batch(folder, files)
    if batch is not None and waiting():
        # The next trigger fired before the stop: its batch is logged; run it alone, on its logged input
        # (a once trigger runs the unfinished batch and nothing more).
        print(f"stopping: batch {batch} had started; running it alone to its commit", file=remarks_to, flush=True)
        set_log_level(spark, "WARN")
        again = one_batch()
        while not terminated(again, False, remarks_to) and waiting():
            pass
        if again.isActive:
            stop_quietly(spark, again)
            terminated(again, True, remarks_to)
        batch = unfinished_batch(folder, files)
    if batch is None:
        committed = last_committed(folder, files)
        last = f"batch {committed} committed" if committed is not None else "no batch ran"
        print(f"stopped on a batch boundary: {last}, nothing in flight", file=remarks_to, flush=True)
        return
    why = (
        "a second signal asked to stop at once"
        if signals.insisted
        else f"it did not commit within query.stop_timeout ({settings.query.stop_timeout})"
    )
    print(
        f"stopped: batch {batch} was abandoned uncommitted ({why}); the next start replays it, and a repartition"
        " needs --finish-last-batch to run it first",
        file=remarks_to,
        flush=True,
    )


def _last_batch(query: StreamingQuery) -> int:
    progress = query.lastProgress
    return -1 if progress is None else int(progress["batchId"])
