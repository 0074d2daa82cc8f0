"""Which Spark the job talks to: a JVM this process starts (Spark Classic) or a Spark Connect server elsewhere.

One process holds one of the two: pyspark's builder turns a process to Connect for good once it builds a
remote session (its columns and functions become Connect's), so the mode is asked of the session at hand.
"""

from __future__ import annotations

import importlib
import socket
import ssl
import warnings
from collections.abc import Mapping
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

from ...core.contract import PACKAGE
from ...core.settings import masked_url
from ...core.text import first_line

if TYPE_CHECKING:  # Spark is imported only when a command needs it
    from pyspark.sql import SparkSession


DEFAULT_PORT = 15002  # Spark Connect's own default (spark.connect.grpc.binding.port)
PROBE_SECONDS = 5.0
# A server that stops answering mid-run: the client retries for about 15 s (50 ms x4 each time, at most
# 5 s apart), enough for a network blip, instead of pyspark's default of at least 10 minutes.
RETRIES, MOST_BACKOFF_MS = 6, 5000


# The Connect client's packages (grpcio, pandas, zstandard, ...): the generated pyproject.toml's extra.
CLIENT_INSTALL = "pip install -e '.[connect]' in the project (make install does)"


class ClientMissing(Exception):
    """This Python lacks the packages of pyspark's Spark Connect client; the message names the install."""


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
    """The Connect client's packages, and a TCP connection to the server's port in the protocol the client
    will speak (TLS or not), before the client is built: without them, pyspark's client fails in a traceback,
    or retries for minutes before it says anything."""
    require_client(url)
    host, port = _address(url)
    try:
        connection = socket.create_connection((host, port), timeout=PROBE_SECONDS)
    except OSError as error:
        raise ServerUnreachable(
            f"spark.remote {masked_url(url)}: no Spark Connect server answers at {host}:{port}"
            f" ({error.strerror or error}); start the server (sbin/start-connect-server.sh, or your platform's) or"
            " fix spark.remote (or SPARK_REMOTE); nothing was started"
        ) from None
    with connection:
        tls = _tls_cause(url, port)
        if tls is not None and not _speaks_tls(connection, host):
            why, without = tls
            raise ServerUnreachable(
                f"spark.remote {masked_url(url)}: the server at {host}:{port} does not speak TLS, and the client"
                f" speaks it because of {why}; serve TLS there (or put a TLS proxy in front), or, for a server"
                f" without TLS, {without}; nothing was started"
            )


def require_client(url: str) -> None:
    """pyspark's Connect client needs packages that pyspark alone lacks: the connect extra installs them."""
    try:
        import pyspark.sql.connect  # noqa: F401  (pyspark checks the client's packages as it imports it)
    except ImportError as error:
        raise ClientMissing(
            f"spark.remote {masked_url(url)}: this Python lacks the Spark Connect client's packages"
            f" ({first_line(str(error))}); install them: {CLIENT_INSTALL}; nothing was started"
        ) from None


def _tls_cause(url: str, port: int) -> tuple[str, str] | None:
    """Why pyspark's client speaks TLS to this server, and the way to a plain connection; None where it does
    not: as its channel builder decides (toChannel), TLS with use_ssl=true or a token, but for a token to the
    host `localhost`, which goes as local credentials over a plain connection."""
    from pyspark.sql.connect.client import DefaultChannelBuilder

    builder = DefaultChannelBuilder(url)
    if builder.use_ssl:
        return "use_ssl=true", "drop use_ssl=true from spark.remote"
    if builder.token is None or builder.host == "localhost":
        return None
    plain = f"sc://localhost:{port} on the server's machine sends the token without TLS"
    if ";token=" in url:
        return "the token in the URL", f"drop the token from spark.remote where the server asks none ({plain})"
    return "the token in SPARK_CONNECT_AUTHENTICATE_TOKEN", f"unset it where the server asks none ({plain})"


def _speaks_tls(connection: socket.socket, host: str) -> bool:
    """Whether the server answers a TLS handshake in TLS (its certificate is gRPC's to check, later)."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.check_hostname, context.verify_mode = False, ssl.CERT_NONE
    context.set_alpn_protocols(["h2"])  # gRPC's, which a TLS gRPC server may require
    try:
        context.wrap_socket(connection, server_hostname=host).close()
    except (ssl.SSLEOFError, ConnectionResetError):  # hung up on the hello: a plaintext server
        return False
    except ssl.SSLError as error:  # an answer that is no TLS record (a plaintext HTTP/2 frame), or a TLS alert
        return error.reason != "WRONG_VERSION_NUMBER"
    except OSError:  # no answer in time: not known here, the client says what it finds
        return True
    return True


def connect_session(url: str, confs: Mapping[str, str]) -> SparkSession:
    """A Spark Connect session at `url` with the confs set on it that the server lets a session set (each
    session has confs of its own there; session.refused_confs says what it refuses), and a client that gives
    a server gone mid-run up in seconds."""
    require_server(url)  # before the client's imports, which need its packages
    from pyspark import cloudpickle
    from pyspark.sql import SparkSession
    from pyspark.sql.connect.client.retries import DefaultPolicy

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
