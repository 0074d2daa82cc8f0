"""Which Spark the job talks to: a JVM this process starts (Spark Classic) or a Spark Connect server elsewhere.

One process holds one of the two: pyspark's builder turns a process to Connect for good once it builds a
remote session (its columns and functions become Connect's), so the mode is asked of the session at hand.
"""

from __future__ import annotations

import importlib
import socket
import warnings
from collections.abc import Mapping
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

from ..core.contract import PACKAGE

if TYPE_CHECKING:  # Spark is imported only when a command needs it
    from pyspark.sql import SparkSession


DEFAULT_PORT = 15002  # Spark Connect's own default (spark.connect.grpc.binding.port)
PROBE_SECONDS = 5.0
# A server that stops answering mid-run: the client retries for about 15 s (50 ms x4 each time, at most
# 5 s apart), enough for a network blip, instead of pyspark's default of at least 10 minutes.
RETRIES, MOST_BACKOFF_MS = 6, 5000


class ServerUnreachable(Exception):
    """No Spark Connect server answers at spark.remote; the message names it and the way on."""


class ServerGone(Exception):
    """The Spark Connect server stopped answering while the job ran; the message says what is left and the way on."""


def is_connect(spark: SparkSession) -> bool:
    """Whether `spark` is a Spark Connect session: no JVM in this process, no `_jvm`, `_jdf` or `sparkContext`;
    the checkpoint and the output are on the server's file system."""
    try:
        from pyspark.sql.connect.session import SparkSession as ConnectSession
    except ImportError:  # pyspark without the Connect client's packages (grpcio): no Connect session can exist
        return False
    return isinstance(spark, ConnectSession)


def set_log_level(spark: SparkSession, level: str) -> None:
    """Spark's log level in the JVM this process started; a Connect server's log is the server's to set."""
    if not is_connect(spark):
        spark.sparkContext.setLogLevel(level)


def require_server(url: str) -> None:
    """A TCP connection to the server's port, before the client is built: without one, pyspark's client
    retries a missing server for minutes before it says anything."""
    host, port = _address(url)
    try:
        socket.create_connection((host, port), timeout=PROBE_SECONDS).close()
    except OSError as error:
        raise ServerUnreachable(
            f"spark.remote {url}: no Spark Connect server answers at {host}:{port} ({error.strerror or error});"
            " start the server (sbin/start-connect-server.sh, or your platform's) or fix spark.remote (or"
            " SPARK_REMOTE); nothing was started"
        ) from None


def connect_session(url: str, confs: Mapping[str, str]) -> SparkSession:
    """A Spark Connect session at `url` with the confs set on it that the server lets a session set (each
    session has confs of its own there; session.refused_confs says what it refuses), and a client that gives
    a server gone mid-run up in seconds."""
    from pyspark import cloudpickle
    from pyspark.sql import SparkSession
    from pyspark.sql.connect.client.retries import DefaultPolicy

    require_server(url)
    # The project's code travels with the query: functions and classes of the package (the query's
    # processor, the deltalake writer's foreachBatch) are pickled by value, not by name, so the server's
    # Python needs only the libraries (pyspark, deltalake, pandas), not this project. (Session artifacts
    # would not do: Spark 4.2's foreachBatch worker does not import them.)
    cloudpickle.register_pickle_by_value(importlib.import_module(PACKAGE))
    # The client warns as it gives a server up, and as its listeners' thread loses it; the job's own line says it.
    warnings.filterwarnings("ignore", message=r"\[RETRIES_EXCEEDED\]")
    warnings.filterwarnings("ignore", message="StreamingQueryListenerBus Handler thread received exception")
    spark = SparkSession.builder.remote(url).getOrCreate()
    spark.client.set_retry_policies([DefaultPolicy(max_retries=RETRIES, max_backoff=MOST_BACKOFF_MS)])
    set_confs(spark, confs)
    return spark


def set_confs(spark: SparkSession, confs: Mapping[str, str]) -> list[str]:
    """Set each conf on the session; those the server refuses, by name: fixed when a Spark starts
    (spark.ui.*, spark.driver.*, static SQL confs), or by its platform (Databricks serverless: most)."""
    from pyspark.errors import PySparkException

    refused = []
    for key, value in confs.items():
        try:
            spark.conf.set(key, value)
        except PySparkException:
            refused.append(key)
    return refused


def server_gone(error: BaseException) -> bool:
    """Whether a Connect call failed because the server stopped answering (killed, restarted, the network)."""
    return str(getattr(error, "_grpc_status_code", "")).endswith("UNAVAILABLE")


def _address(url: str) -> tuple[str, int]:
    parts = urlsplit(url.split(";", 1)[0])
    return parts.hostname or "localhost", parts.port or DEFAULT_PORT
