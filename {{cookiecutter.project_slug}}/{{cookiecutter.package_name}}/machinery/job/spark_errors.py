"""Errors Spark answered with, on Spark Classic (py4j's, pyspark's captured ones) and Spark Connect alike.

Both sessions raise pyspark's PySparkException for what Spark refused or failed; only Classic adds py4j's
own error for a Java exception pyspark did not convert. py4j is imported only here, and lazily: a Connect
client may not have it.
"""

from __future__ import annotations

from ..core.text import first_line


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
