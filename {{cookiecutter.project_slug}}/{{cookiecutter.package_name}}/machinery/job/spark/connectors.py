"""JVM connectors that pip's pyspark does not ship: which the settings need, and whether they are there.

The Kafka source and the delta-spark sink live in JARs fetched from Maven, through Spark's Ivy with
the project's ivysettings.xml: Maven Central, or the mirror named there. `python main.py` and `make
submit` resolve them once into the project (connector_jars.py) and start from those files; the
command line printed for a cluster passes `--packages` (submit_arguments). The job checks for them
right after the session starts, so a missing JAR is one sentence naming the `--packages` to add, not
a ClassNotFoundException from inside the first micro-batch.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import pyspark
from pyspark.sql import SparkSession

from ...core.settings import Settings
from .java import launched_by_spark_submit
from .object_store import S3A_FILE_SYSTEM, hadoop_aws_coordinate, s3a_confs, s3a_locations
from .project_files import project_file
from .remote import is_connect

SCALA_VERSION = "2.13"
DELTA_EXTENSION = "io.delta.sql.DeltaSparkSessionExtension"
DELTA_CATALOG = "org.apache.spark.sql.delta.catalog.DeltaCatalog"
IVY_SETTINGS = "ivysettings.xml"
IVY_SETTINGS_CONF = "spark.jars.ivySettings"
PACKAGES_CONF = "spark.jars.packages"
# The confs Spark's Ivy reads besides the packages: a resolving JVM gets them as spark.conf sets them, a
# JVM started from the resolved files needs none of them.
IVY_CONFS = (IVY_SETTINGS_CONF, "spark.jars.ivy", "spark.jars.repositories", "spark.jars.excludes")
# The Spark releases Delta Lake publishes delta-spark for (4.4.x: delta-spark_4.0, _4.1 and _4.2);
# none for 4.3 yet.
DELTA_SPARK_MINORS = ("4.0", "4.1", "4.2")


class ConnectorError(Exception):
    """A JVM connector the settings need is not on Spark's classpath and could not be fetched."""

    def __init__(self, message: str, cause: str = "") -> None:
        super().__init__(message)
        self.cause = cause  # where a resolution failed, Ivy's own line


@dataclass(frozen=True)
class Connector:
    needed_for: str
    coordinate: str
    probe_class: str
    # The format name its JAR registers, or a location on the file system it brings (s3a://...): resolving
    # it is the presence check.
    data_source: str
    extension: str | None = None  # the session extension it needs in spark.sql.extensions, if any


# The Kafka connector of another minor proven on a Spark minor, taken where Maven does not serve the minor's
# own (KafkaFallback): 4.2.0 on Spark 4.3, real-time mode killed and restarted in the template's CI (whose
# Maven Central mirror serves no 4.3.0); 4.0.0 there fails a stream's first batch (NoSuchMethodError).
PROVEN_KAFKA_CONNECTORS = {"4.3": "4.2.0"}


@dataclass(frozen=True)
class KafkaFallback:
    """The proven connector to resolve when the one asked (Spark's own minor's) is not served."""

    asked: str  # a coordinate, group:artifact:version
    proven: str
    spark_minor: str

    def not_served(self, cause: str) -> bool:
        """Whether Ivy's cause is the asked connector not found (its form: group#artifact;version)."""
        group, artifact, version = self.asked.split(":")
        return f"{group}#{artifact};{version}: not found" in cause

    def instead(self) -> str:
        return (
            f"{self.proven} in place of {self.asked} where Maven does not serve it: proven on Spark {self.spark_minor}"
        )

    def line(self) -> str:
        asked, proven = (coordinate.split(":", 1)[1] for coordinate in (self.asked, self.proven))
        return (
            f"connectors: {asked} (Spark {self.spark_minor}'s own) is not served by Maven Central or the mirror in"
            f" ivysettings.xml: running on {proven}, the connector proven on Spark {self.spark_minor} (real-time mode"
            f" included); delete connector-jars/ to ask for {asked} again, or set spark.kafka_connector_version"
        )


def spark_minor(version: str) -> str:
    return ".".join(version.split(".")[:2])


def kafka_connector_version(spark_version: str, pinned: str | None = None) -> str:
    """spark.kafka_connector_version when set; else the connector of Spark's minor release, x.y.0: Spark
    publishes it with the minor, and it runs on the minor's patch releases (4.2.0 on pyspark 4.2.1,
    tested here, where 4.2.1's is not served). A connector of another minor is the user's pin: whether
    it runs depends on the two releases."""
    return pinned or f"{spark_minor(spark_version)}.0"


def kafka_coordinate(version: str) -> str:
    return f"org.apache.spark:spark-sql-kafka-0-10_{SCALA_VERSION}:{version}"


def kafka_fallback(settings: Settings, spark_version: str = pyspark.__version__) -> KafkaFallback | None:
    """Where the settings ask for Spark's own minor's Kafka connector (no spark.kafka_connector_version) and
    a connector of another minor is proven on that minor: the one to take if Maven does not serve the first."""
    minor = spark_minor(spark_version)
    proven = PROVEN_KAFKA_CONNECTORS.get(minor)
    if not settings.kafka_endpoints or settings.spark.kafka_connector_version or proven is None:
        return None
    return KafkaFallback(kafka_coordinate(kafka_connector_version(spark_version)), kafka_coordinate(proven), minor)


def required_connectors(settings: Settings, spark_version: str = pyspark.__version__) -> list[Connector]:
    connectors = []
    kafka_endpoints = list(settings.kafka_endpoints)
    if kafka_endpoints:
        connectors.append(
            Connector(
                " and ".join(f"{section}.type kafka" for section in kafka_endpoints),
                kafka_coordinate(kafka_connector_version(spark_version, settings.spark.kafka_connector_version)),
                "org.apache.spark.sql.kafka010.KafkaSourceProvider",
                "kafka",
            )
        )
    on_s3 = s3a_locations(settings.locations)
    if on_s3:
        connectors.append(
            Connector(
                " and ".join(f"{setting} on s3a://" for setting in on_s3),
                hadoop_aws_coordinate(),
                S3A_FILE_SYSTEM,
                next(iter(on_s3.values())),
            )
        )
    if settings.sink.delta_writer == "delta-spark":
        if spark_minor(spark_version) not in DELTA_SPARK_MINORS:
            raise ConnectorError(
                f"sink.delta.writer delta-spark: Delta Lake publishes no delta-spark build for Spark"
                f" {spark_minor(spark_version)} (pyspark {spark_version} is installed; builds exist for Spark"
                f" {', '.join(DELTA_SPARK_MINORS)}). Install pyspark 4.2.x (pip install 'pyspark>=4.2.1,<4.3'),"
                " or set sink.delta.writer to deltalake"
            )
        connectors.append(
            Connector(
                "sink.type delta with sink.delta.writer delta-spark",
                f"io.delta:delta-spark_{spark_minor(spark_version)}_{SCALA_VERSION}:{settings.sink.delta.version}",
                DELTA_EXTENSION,
                "delta",
                DELTA_EXTENSION,
            )
        )
    return connectors


def packages(settings: Settings) -> str:
    """The value for spark-submit --packages (empty when nothing is needed)."""
    return ",".join(connector.coordinate for connector in required_connectors(settings))


def resolution_confs(settings: Settings) -> dict[str, str]:
    """What Spark's Ivy resolves for these settings: the connectors' packages after any of spark.conf's own,
    the resolver (resolver_confs), and spark.conf's other Ivy confs as set there. Empty when nothing is needed
    or spark.fetch_packages is false."""
    needed = packages(settings)
    if not needed or not settings.spark.fetch_packages:
        return {}
    own = settings.spark.conf
    items = [*str(own.get(PACKAGES_CONF, "")).split(","), *needed.split(",")]
    ivy = {key: str(own[key]) for key in IVY_CONFS if key in own}
    return {**ivy, PACKAGES_CONF: ",".join(dict.fromkeys(item for item in items if item)), **resolver_confs(settings)}


def file_system_confs(settings: Settings) -> dict[str, str]:
    """What a session needs to reach the settings' s3a:// locations, whatever else it leaves out (a tool's, one
    that reads the output): the S3A confs, and the S3 connector to resolve (none under spark-submit, whose
    --packages decide). Empty without such a location."""
    if not s3a_locations(settings.locations):
        return {}
    confs = s3a_confs(settings.spark.conf)
    if settings.spark.fetch_packages and not launched_by_spark_submit():
        confs.update({PACKAGES_CONF: hadoop_aws_coordinate(), **resolver_confs(settings)})
    return confs


def resolver_confs(settings: Settings) -> dict[str, str]:
    """spark.jars.ivySettings: the project's ivysettings.xml, unless spark.conf names one of its own."""
    found = project_file(IVY_SETTINGS)
    if IVY_SETTINGS_CONF in settings.spark.conf or found is None:
        return {}
    return {IVY_SETTINGS_CONF: found.as_uri()}  # a URI: Spark parses it as one


def submit_arguments(settings: Settings, jars: Sequence[Path] = ()) -> list[str]:
    """The spark-submit arguments the settings call for: the driver's heap when it is not Spark's
    default, and the connectors: `jars`, their files resolved on this machine, as --jars; without
    them (a cluster's command line, whose driver may start on another machine) --packages and the
    resolver's conf. None of the connectors when nothing is needed."""
    memory = settings.spark.driver_memory
    heap = [] if memory.lower() in ("1g", "1024m", "1024") else ["--driver-memory", memory]
    needed = packages(settings)
    if not needed:
        return heap
    if jars:
        return [*heap, "--jars", ",".join(str(jar) for jar in jars)]
    confs = [part for key, value in resolver_confs(settings).items() for part in ("--conf", f"{key}={value}")]
    return [*heap, "--packages", needed, *confs]


# How Spark says it has no provider for a format: Kafka's own error (Spark 4.2's legacy one, its name from
# Spark 4.3 on), and the general one (which Classic's pyspark leaves as a Py4JJavaError, its condition only
# in the text). A name missing here lets a job without the Kafka JARs on to the endpoint check, whose
# AdminClient then fails as a Python traceback.
SOURCE_NOT_FOUND = ("_LEGACY_ERROR_TEMP_1140", "KAFKA_DATA_SOURCE_NOT_ENABLED", "DATA_SOURCE_NOT_FOUND")


def missing_connectors(spark: SparkSession, connectors: list[Connector]) -> list[Connector]:
    """The connectors whose data source Spark cannot resolve, or whose session extension Spark was not
    started with: asked through the session, so a Spark Connect server answers for its own classpath."""
    extensions = str(spark.conf.get("spark.sql.extensions", None) or "").split(",")
    return [
        connector
        for connector in connectors
        if not _resolves(spark, connector)
        or (connector.extension is not None and connector.extension not in extensions)
    ]


def _resolves(spark: SparkSession, connector: Connector) -> bool:
    """Whether Spark finds the format's provider (_provider_found) or the location's file system."""
    source = connector.data_source
    return (
        _file_system_found(spark, source, connector.probe_class) if "://" in source else _provider_found(spark, source)
    )


def _file_system_found(spark: SparkSession, location: str, file_system_class: str) -> bool:
    """Whether Spark's Hadoop has a file system for the location's scheme: its class asked on Spark Classic; on
    Spark Connect, a file under the location that is not there is read (one request to the store), and only a
    missing file system fails with its class not found."""
    if not is_connect(spark):
        return bool(spark._jvm.org.apache.spark.util.Utils.classIsLoadable(file_system_class))  # type: ignore[union-attr]
    try:
        spark.read.format("binaryFile").load(f"{location.rstrip('/')}/.connector-probe").schema  # noqa: B018
    except Exception as error:  # noqa: BLE001  # the file's absence is the answer when the class loaded
        cause = str(error)
        return "No FileSystem for scheme" not in cause and "ClassNotFoundException" not in cause
    return True


def _provider_found(spark: SparkSession, data_source: str) -> bool:
    """Whether Spark finds a provider for the format: a read without options fails either way, but only a
    missing provider fails with SOURCE_NOT_FOUND (a found one asks for its options). No broker, file or
    job is touched; `.schema` makes Spark Connect analyse the read, as Classic's load() does."""
    try:
        spark.read.format(data_source).load().schema  # noqa: B018  # the analysis is the check
    except Exception as error:  # noqa: BLE001  # the provider's own complaints mean it was found
        condition = getattr(error, "getCondition", lambda: None)()
        return condition not in SOURCE_NOT_FOUND and not any(f"[{name}]" in str(error) for name in SOURCE_NOT_FOUND)
    return True


def require_connectors(spark: SparkSession, settings: Settings) -> None:
    """Raise ConnectorError naming each missing connector and the --packages that brings it."""
    missing = missing_connectors(spark, required_connectors(settings, spark.version))
    if not missing:
        return
    names = ", ".join(f"{c.needed_for} needs {c.probe_class}" for c in missing)
    coordinates = ",".join(c.coordinate for c in missing)
    fallback = kafka_fallback(settings, spark.version)
    instead = "" if fallback is None or fallback.asked not in coordinates else f" ({fallback.instead()})"
    if is_connect(spark):  # the server's classpath and confs: the job can fetch nothing for it
        confs = "".join(
            f" --conf spark.sql.extensions={DELTA_EXTENSION} --conf spark.sql.catalog.spark_catalog={DELTA_CATALOG}"
            for c in missing
            if c.extension == DELTA_EXTENSION
        )
        raise ConnectorError(
            f"{names}, which the Spark Connect server does not have. Start the server with `--packages"
            f" {coordinates}{confs}`{instead} (or its JARs as --jars); this job cannot add them to a server"
        )
    raise ConnectorError(
        f"{names}, which is not on Spark's classpath. Start the job with"
        f" `spark-submit --packages {coordinates} main.py`{instead} (make submit does), or run it with python and"
        " spark.fetch_packages true on a machine that can reach Maven Central (or the mirror in"
        " ivysettings.xml); without Maven access,"
        " download the JARs with their dependencies and list them in spark.conf as spark.jars"
    )
