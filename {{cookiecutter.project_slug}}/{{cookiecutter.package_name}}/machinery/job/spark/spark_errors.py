"""Errors Spark answered with, on Spark Classic (py4j's, pyspark's captured ones) and Spark Connect alike.

Both sessions raise pyspark's PySparkException for what Spark refused or failed; only Classic adds py4j's
own error for a Java exception pyspark did not convert. py4j is imported only here, and lazily: a Connect
client may not have it.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from ...core.text import first_line
from .remote import is_connect

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

# What a real-time batch's task that reads a shuffle fails with when the task writing it failed. Spark
# ends the query with whichever task's failure reached it first, often the reader's (2 in 5 runs of a
# bad record with 4 shuffle partitions): the writer's own error, the cause, is then only in its task's.
SHUFFLE_WRITER_FAILED = "the writer task likely failed"
# How long the writer task's failure may take to reach Spark's status store after the query's end.
TASK_ERRORS_WAIT_SECONDS = 5.0


def spark_errors() -> tuple[type[Exception], ...]:
    """The exceptions that are Spark's answer (the JVM or the server is up and said no)."""
    from pyspark.errors import PySparkException

    try:
        from py4j.protocol import Py4JJavaError
    except ImportError:  # the Connect-only client
        return (PySparkException,)
    return (PySparkException, Py4JJavaError)


def root_message(error: BaseException) -> str:
    """The first line of Spark's error and of its root cause, without the Java stack."""
    java = getattr(error, "java_exception", None)
    if java is None:
        return first_line(str(error))
    root = java
    while root.getCause() is not None and root.getCause() != root:
        root = root.getCause()
    message = first_line(str(java.toString()))
    return message if root == java else f"{message} (caused by {first_line(str(root.toString()))})"


def message_chain(error: BaseException) -> str:
    """Spark's message and those of its causes, where a full disk or a missing file is often named: Classic
    keeps the Java causes converted in `_cause`, Connect the server's in the stack trace it sends."""
    messages: list[str] = []
    cause: BaseException | None = error
    while cause is not None and len(messages) < 20:
        messages.append(str(cause))
        cause = getattr(cause, "_cause", None)
    trace = getattr(error, "getStackTrace", lambda: None)()
    if trace:
        messages.append(str(trace))
    return "\n".join(messages)


def writer_task_errors(spark: SparkSession, error: BaseException) -> list[str]:
    """Where a real-time query ended with a shuffle reader's failure, the first lines of the errors of its
    run's tasks that failed otherwise (the writer's: a bad record, a broker gone), from Spark's status
    store, what its UI shows; [] for any other error, and on Spark Connect (the store is the server's)."""
    if SHUFFLE_WRITER_FAILED not in message_chain(error) or is_connect(spark):
        return []
    parameters: dict[str, str] = getattr(error, "getMessageParameters", dict)() or {}
    run_id = parameters.get("runId")  # STREAM_FAILED's
    if run_id is None:
        return []
    deadline = time.monotonic() + TASK_ERRORS_WAIT_SECONDS
    while True:
        found = [line for line in _failed_task_errors(spark, run_id) if SHUFFLE_WRITER_FAILED not in line]
        if found or time.monotonic() > deadline:
            return list(dict.fromkeys(found))
        time.sleep(0.2)


def _failed_task_errors(spark: SparkSession, run_id: str) -> list[str]:
    """The first line of each failed task's error in the jobs of a query run (its job group is the run id)."""
    tracker, store = spark.sparkContext.statusTracker(), spark._jsc.sc().statusStore()
    errors = []
    for job in tracker.getJobIdsForGroup(run_id):
        for stage in getattr(tracker.getJobInfo(job), "stageIds", []):
            info = tracker.getStageInfo(stage)
            tasks: Any = store.taskList(stage, info.currentAttemptId if info else 0, 10_000).iterator()
            while tasks.hasNext():
                task = tasks.next()
                if task.status() == "FAILED" and task.errorMessage().isDefined():
                    errors.append(first_line(str(task.errorMessage().get())))
    return errors
