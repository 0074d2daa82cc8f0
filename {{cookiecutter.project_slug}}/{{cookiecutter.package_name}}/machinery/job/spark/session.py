"""Settings -> Spark confs -> SparkSession. The one place where state store confs are decided."""

from __future__ import annotations

import logging
import os
import shlex
import sys
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path

import py4j as py4j_package
import pyspark
from pyspark.sql import SparkSession

from ...core import real_time
from ...core.confs import (
    CHANGELOG_CONF,
    ENCODING_CONF,
    INTEGRITY_CONFS,
    JOIN_FORMAT_CONF,
    MANAGED_CONFS,
    MIN_BATCH_CONF,
    PARTITIONS_CONF,
    PROVIDER_CLASSES,
    PROVIDER_CONF,
    ROCKSDB_CONFS,
    STATE_STORE,
    join_format_for,
)
from ...core.settings import Settings, SettingsError, connect_url, unset_secrets
from .connector_jars import RESOLUTION_CONFS, resolved_jars
from .connectors import (
    DELTA_CATALOG,
    DELTA_EXTENSION,
    PACKAGES_CONF,
    KafkaFallback,
    file_system_confs,
    kafka_fallback,
    resolution_confs,
)
from .driver_jvm import OUT_OF_MEMORY_OPTION, jvm_ran_out_of_memory, launch_driver_jvm
from .java import launched_by_spark_submit, require_java
from .object_store import s3a_confs, s3a_locations
from .project_files import project_file
from .remote import ServerGone, connect_session, is_connect, server_gone, set_confs, set_log_level


def spark_confs(settings: Settings, spark_version: str = pyspark.__version__) -> dict[str, str]:
    """The SQL confs the job sets. All are runtime SQL confs, read when a query starts."""
    store = settings.state_store
    confs = {
        PARTITIONS_CONF: str(settings.spark.shuffle_partitions),
        PROVIDER_CONF: PROVIDER_CLASSES[settings.spark.platform][store.provider],
        "spark.sql.streaming.minBatchesToRetain": str(store.min_batches_to_retain),
        ENCODING_CONF: store.encoding_format,
        "spark.sql.session.timeZone": "UTC",
    }
    if settings.monitoring.metrics_enabled:
        confs["spark.sql.streaming.metricsEnabled"] = "true"
    if settings.query.real_time:  # Spark refuses a batch shorter than its minimum: the setting's is the one
        confs[MIN_BATCH_CONF] = f"{real_time.batch_ms(settings.query.trigger)}ms"
    confs.update({conf: _text(getattr(store.integrity, field)) for field, conf in INTEGRITY_CONFS.items()})
    join_format = join_format_for(store.provider, spark_version)
    if join_format is not None:  # for a new checkpoint: Spark keeps the format an existing one holds
        confs[JOIN_FORMAT_CONF] = join_format
    if store.provider == "rocksdb":
        confs[CHANGELOG_CONF] = _text(store.changelog_checkpointing)
        for field, suffix in ROCKSDB_CONFS.items():
            value = getattr(store.rocksdb, field)
            if value is not None:
                confs[f"{STATE_STORE}.rocksdb.{suffix}"] = _text(value)
    confs.update({key: _text(value) for key, value in settings.spark.conf.items()})
    return confs


JAVA_OPTIONS = "spark.driver.extraJavaOptions"
LOG_CONFIG = "log4j2.properties"


def driver_java_options(confs: dict[str, str]) -> dict[str, str]:
    """The driver JVM's options when this process starts it (local mode's executors run in it too): exit at
    the first OutOfMemoryError (driver_jvm.py says why), and log4j2.properties, from the working directory or
    else the project folder, logging to logs/ beside it. Java options the user set are kept, and win if they
    name a log4j configuration. Under spark-submit the JVM runs already: its --driver-java-options decide."""
    if launched_by_spark_submit():
        return {}
    options = confs.get(JAVA_OPTIONS, "")
    ours = [OUT_OF_MEMORY_OPTION] if OUT_OF_MEMORY_OPTION not in options else []
    found = project_file(LOG_CONFIG)
    if found is not None and "configurationFile" not in options:
        config, logs = (shlex.quote(str(path)) for path in (found, log_dir()))
        ours[:0] = [f"-Dlog4j2.configurationFile={config}", f"-Djob.log.dir={logs}"]
    return {JAVA_OPTIONS: " ".join([options, *ours]).strip()} if ours else {}


def log_dir() -> Path:
    """logs/ beside log4j2.properties (in the working directory when the project has none)."""
    found = project_file(LOG_CONFIG)
    return (found.parent if found else Path.cwd()) / "logs"


def secret_confs(settings: Settings, environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """spark.secret_conf, each value read from the environment variable it names; `environ` stands in
    for the environment (the effective configuration shows each variable's name, not its value)."""
    if environ is None:
        unset = unset_secrets(settings.spark.secret_conf_variables)
        if unset:
            raise SettingsError(unset)
        environ = os.environ
    return {key: environ[name] for key, name in settings.spark.secret_conf.items()}


def static_confs(settings: Settings, submitted: bool) -> dict[str, str]:
    """Confs that only take effect when the session starts: the connectors' packages (resolved into local
    JARs when the JVM starts: start_confs) and the Delta extensions."""
    # The heap the sizing asks for; under spark-submit its --driver-memory decides (`make submit` passes this).
    confs = {} if submitted else {"spark.driver.memory": settings.spark.driver_memory}
    if settings.sink.delta_writer == "delta-spark":
        confs["spark.sql.extensions"] = _joined(settings.spark.conf.get("spark.sql.extensions"), DELTA_EXTENSION)
        confs["spark.sql.catalog.spark_catalog"] = DELTA_CATALOG
    if s3a_locations(settings.locations):  # its connector is among resolution_confs' packages
        confs.update(s3a_confs(settings.spark.conf))
    # Under spark-submit the JVM runs already: its --jars or --packages decide, and require_connectors checks.
    if not submitted:
        confs.update(resolution_confs(settings))
    return confs


def start_confs(confs: Mapping[str, str], fallback: KafkaFallback | None = None) -> dict[str, str]:
    """The confs a JVM starts with: spark.jars.packages replaced by the files they resolve to, from the
    project's connector-jars/ (resolved there first when it has none, `fallback` where Maven does not serve
    the Kafka connector asked), in spark.jars, and no Ivy conf (spark-submit would load Ivy's settings for
    one, printing a line on stdout, where inspect --json goes)."""
    started = {key: value for key, value in confs.items() if key not in RESOLUTION_CONFS}
    if PACKAGES_CONF in confs:
        jars = resolved_jars(confs, log_dir(), fallback)
        started["spark.jars"] = _joined(confs.get("spark.jars"), ",".join(str(jar) for jar in jars))
    return started


def _joined(existing: object, addition: str) -> str:
    items = [item for item in str(existing or "").split(",") if item]
    return ",".join(items + [item for item in addition.split(",") if item not in items])


def _text(value: object) -> str:
    return str(value).lower() if isinstance(value, bool) else str(value)


def quiet_py4j_threads() -> None:
    """py4j logs when the JVM goes away under a call (an out-of-memory exit, a kill), a traceback beside
    the job's one-line end that names the cause itself: from its own threads (the one that calls the
    job's progress listener) on its loggers, which keep their records to a handler of their own (none),
    and, when the connection resets while a call waits for its answer, from GatewayClient.send_command
    on the root logger (logging.exception), whose records from py4j's files the root logger drops.
    A user's logging.config can still attach a handler to the "py4j" logger."""
    py4j = logging.getLogger("py4j")
    if not py4j.handlers:
        py4j.addHandler(logging.NullHandler())
        py4j.propagate = False
    root = logging.getLogger()
    if not any(isinstance(each, _FromPy4jFiles) for each in root.filters):
        root.addFilter(_FromPy4jFiles())


class _FromPy4jFiles(logging.Filter):
    """Drops the records py4j's own code logs on the root logger (a logger's filters see only the
    records logged on it, so nothing logged elsewhere and propagated is touched)."""

    folder = os.path.dirname(py4j_package.__file__) + os.sep

    def filter(self, record: logging.LogRecord) -> bool:
        return not record.pathname.startswith(self.folder)


def build_session(
    settings: Settings, with_connectors: bool = True, also: Mapping[str, str] | None = None
) -> SparkSession:
    """The job's SparkSession, configured from settings (without connector JARs for reading output), with
    the confs `also` beside them; through the Spark Connect server of spark.remote where one is set."""
    url = settings.spark.connect_url
    if url is not None:  # the server's JVM, its master, connectors and static confs: only the runtime confs are ours
        return connect_session(url, {**spark_confs(settings), **(also or {}), **secret_confs(settings)})
    require_java()
    quiet_py4j_threads()
    builder = SparkSession.builder.appName(settings.spark.app_name)
    # spark-submit always decides the master (its default is local[*]); settings apply to `python main.py`.
    if not launched_by_spark_submit():
        builder = builder.master(settings.spark.master)
        # Python workers (custom_state runs Python per key) use this interpreter and its packages,
        # not whichever python3 comes first on PATH.
        os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    confs = {**spark_confs(settings), **(also or {})}
    if with_connectors:
        confs.update(static_confs(settings, launched_by_spark_submit()))
    else:
        confs.update(file_system_confs(settings))
    confs.update(secret_confs(settings))
    confs.update(driver_java_options(confs))
    if not launched_by_spark_submit():
        confs = start_confs(confs, kafka_fallback(settings))
        launch_driver_jvm(
            {**confs, "spark.master": settings.spark.master, "spark.app.name": settings.spark.app_name}, log_dir()
        )
    for key, value in confs.items():
        builder = builder.config(key, value)
    return builder.getOrCreate()


@contextmanager
def job_session(
    settings: Settings, with_connectors: bool = True, also: Mapping[str, str] | None = None
) -> Iterator[SparkSession]:
    """The session a command runs the job's work on, with the runtime confs `also` set too: see `_own_or_shared`."""
    confs = {**spark_confs(settings), **(also or {})}
    with _own_or_shared(lambda: build_session(settings, with_connectors, also), confs) as spark:
        yield spark


@contextmanager
def tool_session(app_name: str, confs: dict[str, str], settings: Settings | None = None) -> Iterator[SparkSession]:
    """The session a tool (inspect, calibrate, the plan's check) reads with: see `_own_or_shared`; through the
    Spark Connect server of the settings' spark.remote (without settings, SPARK_REMOTE) where one is set."""
    url = connect_url(settings.spark.remote if settings is not None else None)
    reach = {} if settings is None or url else file_system_confs(settings)  # a store's locations: S3A and its JARs
    start = (lambda: connect_session(url, confs)) if url else (lambda: local_session(app_name, {**confs, **reach}))
    with _own_or_shared(start, confs) as spark:
        yield spark


# The confs a checkpoint pins: a server that refuses one and runs another value would write a checkpoint
# that the settings, the sizing and the guard do not describe.
PINNED_CONFS = (
    PROVIDER_CONF,
    PARTITIONS_CONF,
    ENCODING_CONF,
    INTEGRITY_CONFS["checkpoint_format_version"],
    INTEGRITY_CONFS["row_checksums"],
)


def startup_line(spark: SparkSession, settings: Settings) -> str:
    """The line a start begins with: the Spark it runs on, its input and output, the state store, the checkpoint."""
    store = settings.state_store
    changelog = " with changelog checkpointing" if store.changelog_checkpointing else ""
    writer = f" ({settings.sink.delta_writer})" if settings.sink.delta_writer else ""
    sources = " + ".join(source.type for source in settings.inputs.values())
    through = f" through Spark Connect {settings.spark.connect_url_shown}" if is_connect(spark) else ""
    return (
        f"{settings.query.name}: Spark {spark.version} on {spark.conf.get('spark.master', None)}{through},"
        f" {sources} ->"
        f" {settings.sink.type}{writer}, state store {store.provider}{changelog},"
        f" {settings.spark.shuffle_partitions} shuffle partitions, checkpoint {settings.query.checkpoint_location}"
    )


def refused_confs(spark: SparkSession, settings: Settings) -> list[str]:
    """On Spark Connect, the job's confs that the server does not let a session set, left with its own
    value; SettingsError where that value differs from one the checkpoint pins."""
    if not is_connect(spark):
        return []
    wanted = {**spark_confs(settings), **{key: _text(value) for key, value in settings.spark.conf.items()}}
    refused = set_confs(spark, wanted)
    for key in refused:
        held = spark.conf.get(key, None)
        if key in PINNED_CONFS and held != wanted[key]:
            owner = MANAGED_CONFS[key]
            raise SettingsError(
                [
                    f"{owner}: the Spark Connect server at {settings.spark.connect_url_shown} does not let a session set"
                    f" {key} (its platform fixes it) and runs {held}, not {wanted[key]}; the checkpoint would pin"
                    f" the server's: set {owner} to match it, or run where it can be set"
                ]
            )
    return refused


@contextmanager
def _own_or_shared(start: Callable[[], SparkSession], confs: Mapping[str, str]) -> Iterator[SparkSession]:
    """A session of the command's own, started with the confs and stopped when it ends; or, where this
    process runs one already (a test's shared session, a notebook's), that one, left running, with the
    confs' runtime SQL part set for the command's time and put back after (the others are fixed when a
    session starts)."""
    runtime = {key: value for key, value in confs.items() if key.startswith("spark.sql.")}
    active = SparkSession.getActiveSession()
    if active is None:
        spark = start()
        gone = False
        try:
            yield spark
        except Exception as error:
            gone = isinstance(error, ServerGone) or server_gone(error)
            raise
        finally:
            # A JVM or a Connect server that is gone has nothing to stop (the client would wait for the server).
            if not gone and not jvm_ran_out_of_memory(wait=0):
                spark.stop()
        return
    before = {key: active.conf.get(key, None) for key in runtime}
    # A Connect session's platform may refuse some (Databricks serverless): refused_confs says which.
    refused = set_confs(active, runtime)
    try:
        yield active
    finally:
        release_state_stores(active)
        for key, held in before.items():
            if key in refused:
                continue
            if held is None:
                active.conf.unset(key)
            else:
                active.conf.set(key, held)


def release_state_stores(spark: SparkSession) -> None:
    """Unload the state stores the command's queries left loaded in a shared session, waiting for their
    maintenance in flight: otherwise a snapshot upload still pending writes into the checkpoint after the
    command returned, where a copy, a savepoint or a restore made next would race it. Only where the
    executors run in this JVM (a local master) and no other query runs (it would lose its loaded state);
    an own session does this when it stops."""
    # On Spark Connect the stores are the server's, shared by all its sessions: not this process's to unload.
    if is_connect(spark) or spark.streams.active or not (spark.sparkContext.master or "").startswith("local"):
        return
    state_package = spark.sparkContext._jvm.org.apache.spark.sql.execution.streaming.state  # type: ignore[union-attr]
    state_store = getattr(getattr(state_package, "StateStore$"), "MODULE$")
    # Maintenance first, without the providers' lock: a maintenance thread may be waiting for that lock,
    # and stop() holds it while it waits for the threads (minutes, until a timeout).
    state_store.stopMaintenanceTaskWithoutLock()
    state_store.stop()


def local_session(app_name: str, confs: dict[str, str]) -> SparkSession:
    """A local session for the project's own tools (inspect, calibrate), never for the job itself."""
    require_java()
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    builder = SparkSession.builder.appName(app_name).master("local[2]")
    confs = {
        **start_confs(confs),
        **driver_java_options(confs),
        "spark.ui.enabled": "false",
        "spark.ui.showConsoleProgress": "false",
    }
    for key, value in confs.items():
        builder = builder.config(key, value)
    launch_driver_jvm({**confs, "spark.master": "local[2]", "spark.app.name": app_name}, log_dir())
    spark = builder.getOrCreate()
    set_log_level(spark, "ERROR")
    return spark


def apply_confs(spark: SparkSession, settings: Settings) -> None:
    """Set the job's runtime SQL confs on a running session (tests share one session across providers).

    Core confs fixed at start-up (spark.ui.*, spark.executor.*) cannot change on a running session;
    they are skipped here and only take effect through build_session.
    """
    for key, value in spark_confs(settings).items():
        if key.startswith("spark.sql."):
            spark.conf.set(key, value)
