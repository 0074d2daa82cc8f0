"""Connector JARs: the coordinates and confs the settings need, resolved once into the project, and a
clear error when they are missing or a JVM cannot start.

pip's pyspark ships neither the Kafka connector nor Delta Lake's JARs. They are resolved through Spark's
Ivy with the project's ivysettings.xml into connector-jars/, once, and every JVM starts from those files
(test_exactly_once runs the delta-spark writer on them); here the missing-JAR, failed-resolution and
failed-start paths run, on a real session and in real processes, and two starts that race on the first
resolution both start and finish. A damaged JAR is named before a JVM starts.
"""

from __future__ import annotations

import hashlib
import shlex
import shutil
from pathlib import Path

import pyspark
import pytest
import yaml
from stream_job.machinery.core.settings import load_settings
from stream_job.machinery.job.spark.connector_jars import JARS_FOLDER, LOCK_FILE, resolution_key
from stream_job.machinery.job.spark.connectors import (
    DELTA_EXTENSION,
    PROVEN_KAFKA_CONNECTORS,
    Connector,
    ConnectorError,
    KafkaFallback,
    kafka_fallback,
    missing_connectors,
    require_connectors,
    required_connectors,
    resolution_confs,
)
from stream_job.machinery.job.spark.session import static_confs

from .conftest import KAFKA_SOURCE, PROJECT_DIR, clean_env, run_python

SPARK = pyspark.__version__
SPARK_MINOR = ".".join(SPARK.split(".")[:2])
KAFKA = f"org.apache.spark:spark-sql-kafka-0-10_2.13:{SPARK_MINOR}.0"  # the minor's first release
DELTA = f"io.delta:delta-spark_{SPARK_MINOR}_2.13:4.4.0"
DELTA_SPARK = {"source": {"type": "rate"}, "sink": {"type": "delta", "delta": {"writer": "delta-spark"}}}
BOTH = {"source": KAFKA_SOURCE["source"], "sink": DELTA_SPARK["sink"]}
# The project's resolver: Maven Central, or the mirror its ivysettings.xml names.
IVY_SETTINGS = {"spark.jars.ivySettings": (PROJECT_DIR / "ivysettings.xml").as_uri()}


def coordinates(settings) -> list[str]:
    return [connector.coordinate for connector in required_connectors(settings)]


@pytest.mark.delta_spark
def test_coordinates_follow_the_installed_spark(make_settings):
    assert coordinates(make_settings(BOTH)) == [KAFKA, DELTA]
    assert coordinates(make_settings({"source": {"type": "rate"}, "sink": {"type": "parquet"}})) == []
    assert (
        coordinates(
            make_settings({"source": {"type": "rate"}, "sink": {"type": "delta", "delta": {"writer": "deltalake"}}})
        )
        == []
    )
    newer = {
        "source": {"type": "rate"},
        "sink": {"type": "delta", "delta": {"writer": "delta-spark", "version": "4.5.0"}},
    }
    assert coordinates(make_settings(newer)) == [f"io.delta:delta-spark_{SPARK_MINOR}_2.13:4.5.0"]


# The driver's heap as the bake wrote it, for a JVM this process starts.
HEAP = {"spark.driver.memory": "1g"}


@pytest.mark.delta_spark
def test_delta_spark_session_confs(make_settings):
    settings = make_settings(DELTA_SPARK | {"spark": {"conf": {"spark.sql.extensions": "com.example.Ext"}}})
    confs = static_confs(settings, submitted=False)
    assert confs == {
        "spark.sql.extensions": "com.example.Ext,io.delta.sql.DeltaSparkSessionExtension",
        "spark.sql.catalog.spark_catalog": "org.apache.spark.sql.delta.catalog.DeltaCatalog",
        "spark.jars.packages": DELTA,
        **IVY_SETTINGS,
        **HEAP,
    }
    # Under spark-submit the JVM is up already: its --packages decide, nothing is fetched here.
    assert "spark.jars.packages" not in static_confs(settings, submitted=True)


def test_fetching_can_be_turned_off_and_merges_with_own_packages(make_settings):
    off = make_settings(KAFKA_SOURCE | {"spark": {"fetch_packages": False}})
    assert static_confs(off, submitted=False) == HEAP
    own = make_settings(KAFKA_SOURCE | {"spark": {"conf": {"spark.jars.packages": "com.example:lib:1.0"}}})
    assert static_confs(own, submitted=False) == {
        "spark.jars.packages": f"com.example:lib:1.0,{KAFKA}",
        **IVY_SETTINGS,
        **HEAP,
    }
    # A resolver of the user's own in spark.conf is kept, and so are Ivy's other confs.
    mirror = make_settings(
        KAFKA_SOURCE | {"spark": {"conf": {"spark.jars.ivySettings": "/etc/ivy.xml", "spark.jars.ivy": "/opt/ivy"}}}
    )
    resolution = {"spark.jars.packages": KAFKA, "spark.jars.ivySettings": "/etc/ivy.xml", "spark.jars.ivy": "/opt/ivy"}
    assert resolution_confs(mirror) == resolution
    assert static_confs(mirror, submitted=False) == {**resolution, **HEAP}
    # Under spark-submit its --driver-memory decides (make submit passes spark.driver_memory).
    assert "spark.driver.memory" not in static_confs(mirror, submitted=True)


def test_kafka_follows_the_minor_and_delta_spark_is_refused_where_delta_has_no_build(make_settings):
    kafka = make_settings(KAFKA_SOURCE)
    assert [c.coordinate for c in required_connectors(kafka, "4.3.0")] == [
        "org.apache.spark:spark-sql-kafka-0-10_2.13:4.3.0"
    ]
    # Where Maven does not serve that one, the connector proven on Spark 4.3 (connector_jars resolves it then).
    assert kafka_fallback(kafka, "4.3.0") == KafkaFallback(
        "org.apache.spark:spark-sql-kafka-0-10_2.13:4.3.0", "org.apache.spark:spark-sql-kafka-0-10_2.13:4.2.0", "4.3"
    )
    assert kafka_fallback(kafka, "4.2.1") is None  # no other connector proven on 4.2
    assert [c.coordinate for c in required_connectors(make_settings(DELTA_SPARK), "4.1.1")] == [
        "io.delta:delta-spark_4.1_2.13:4.4.0"
    ]
    with pytest.raises(ConnectorError) as caught:
        required_connectors(make_settings(DELTA_SPARK), "4.3.0")
    assert str(caught.value) == (
        "sink.delta.writer delta-spark: Delta Lake publishes no delta-spark build for Spark 4.3 (pyspark 4.3.0 is"
        " installed; builds exist for Spark 4.0, 4.1, 4.2). Install pyspark 4.2.x (pip install"
        " 'pyspark>=4.2.1,<4.3'), or set sink.delta.writer to deltalake"
    )


def test_a_pinned_kafka_connector_is_the_one_fetched(make_settings):
    """spark.kafka_connector_version: a project pins the connector its Maven serves, or a vendor's build."""
    pinned = make_settings({**KAFKA_SOURCE, "spark": {"kafka_connector_version": "4.2.0"}})
    assert [c.coordinate for c in required_connectors(pinned, "4.3.0")] == [
        "org.apache.spark:spark-sql-kafka-0-10_2.13:4.2.0"
    ]
    assert kafka_fallback(pinned, "4.3.0") is None  # a pin is the one fetched, served or not


def test_missing_connectors_asks_the_session(spark):
    """Through the session, as a Spark Connect server is asked: the format resolves, the extension is set."""
    # The shared session starts with the Kafka connector (conftest._shared_session), not delta-spark.
    present = Connector("test", "x:y:1", "org.apache.spark.sql.kafka010.KafkaSourceProvider", "kafka")
    absent = Connector("test", "x:z:1", DELTA_EXTENSION, "delta", DELTA_EXTENSION)
    unextended = Connector("test", "x:w:1", "org.apache.spark.sql.kafka010.KafkaSourceProvider", "kafka", "com.x.Ext")
    assert missing_connectors(spark, [present, absent, unextended]) == [absent, unextended]


@pytest.mark.delta_spark
def test_require_connectors_names_the_packages_to_add(spark, make_settings):
    with pytest.raises(ConnectorError) as caught:
        require_connectors(spark, make_settings(BOTH))
    message = str(caught.value)
    assert message.startswith(
        "sink.type delta with sink.delta.writer delta-spark needs io.delta.sql.DeltaSparkSessionExtension, which is"
        " not on Spark's classpath."
    )
    assert f"spark-submit --packages {DELTA} main.py" in message
    require_connectors(spark, make_settings(KAFKA_SOURCE))


def test_packages_command(write_settings, make_settings):
    settings = str(write_settings(KAFKA_SOURCE))
    result = run_python("-m", "stream_job", "packages", "--settings", settings)
    assert (result.returncode, result.stdout) == (0, f"{KAFKA}\n")
    # make submit's arguments: the JARs the project resolved once (the shared session's start did), as --jars.
    result = run_python("-m", "stream_job", "packages", "--submit-args", "--settings", settings)
    assert result.returncode == 0, result.stderr
    option, jars = shlex.split(result.stdout)
    folder = PROJECT_DIR / JARS_FOLDER / resolution_key(resolution_confs(make_settings(KAFKA_SOURCE)))
    assert option == "--jars"
    assert jars.split(",") == [str(folder / name) for name in (folder / "jars.txt").read_text().split()]
    assert str(folder / f"org.apache.spark_spark-sql-kafka-0-10_2.13-{SPARK_MINOR}.0.jar") in jars.split(",")
    nothing = run_python("-m", "stream_job", "packages", "--submit-args", "--settings", str(write_settings()))
    assert (nothing.returncode, nothing.stdout) == (0, "\n")


# In the real-time bake too, on pyspark 4.3, whose name for Kafka's missing provider is another: unknown
# there, it let the job on to the Kafka endpoint check, a traceback ('JavaPackage' object is not callable).
@pytest.mark.parametrize(
    "changes",
    [
        pytest.param(KAFKA_SOURCE, marks=pytest.mark.real_time),
        pytest.param(BOTH, marks=pytest.mark.delta_spark),
    ],
    ids=["kafka", "kafka-and-delta-spark"],
)
def test_job_without_the_jars_exits_3_with_the_packages_to_add(write_settings, tmp_path, changes):
    checkpoint = tmp_path / "checkpoint"
    query = {"checkpoint_location": str(checkpoint), "trigger": "10 seconds"}  # micro-batches into parquet
    path = write_settings(changes | {"spark": {"fetch_packages": False}, "query": query})
    result = run_python("main.py", "--settings", str(path))
    assert result.returncode == 3, result.stderr[-2000:]
    (line,) = [line for line in result.stderr.splitlines() if line.startswith("connector error:")]
    if changes is BOTH:  # both named in one line
        assert line.startswith(
            "connector error: source.type kafka needs org.apache.spark.sql.kafka010.KafkaSourceProvider, sink.type"
            " delta with sink.delta.writer delta-spark needs io.delta.sql.DeltaSparkSessionExtension, which is not"
        ), line
    expected = KAFKA if changes is KAFKA_SOURCE else f"{KAFKA},{DELTA}"
    assert f"`spark-submit --packages {expected} main.py`" in line
    if SPARK_MINOR in PROVEN_KAFKA_CONNECTORS:  # and the connector that runs where Maven does not serve Spark's own
        proven = f"org.apache.spark:spark-sql-kafka-0-10_2.13:{PROVEN_KAFKA_CONNECTORS[SPARK_MINOR]}"
        assert f"main.py` ({proven} in place of {KAFKA} where Maven does not serve it: proven on Spark" in line
    assert "Traceback" not in result.stderr
    assert not checkpoint.exists()


def test_failed_resolution_is_a_sentence_naming_ivys_cause(write_settings, make_settings, tmp_path):
    # A mirror that does not answer: the resolution fails as it would without network access. A package the
    # project has not resolved yet (another version), so that it is resolved now, in an Ivy home of its own.
    unreachable = tmp_path / "ivysettings.xml"
    unreachable.write_text(
        (PROJECT_DIR / "ivysettings.xml").read_text().replace("https://repo1.maven.org/maven2/", "http://127.0.0.1:9/")
    )
    never = "org.example:not-served:0.0.1"
    conf = {
        "spark.jars.ivySettings": unreachable.as_uri(),
        "spark.jars.ivy": str(tmp_path / "ivy"),
        "spark.jars.packages": never,
    }
    checkpoint = tmp_path / "checkpoint"
    changes = KAFKA_SOURCE | {"spark": {"conf": conf}, "query": {"checkpoint_location": str(checkpoint)}}
    path = write_settings(changes)
    result = run_python("main.py", "--settings", str(path), env=clean_env())
    assert result.returncode == 3, result.stderr[-2000:]
    (line,) = [line for line in result.stderr.splitlines() if line.startswith("connector error:")]
    log = PROJECT_DIR / "logs" / "packages.log"
    assert line == (
        f"connector error: resolving the packages {never},{KAFKA} failed: unresolved dependency:"
        f" org.example#not-served;0.0.1: not found (Ivy's whole report: {log}). Check access to Maven Central (or"
        " the mirror named in ivysettings.xml) and start again; without Maven access, set spark.fetch_packages"
        " false and list the JARs in spark.conf as spark.jars"
    )
    assert ":: resolving dependencies ::" in log.read_text()  # Ivy's report, in the log, not on the console
    assert "Traceback" not in result.stderr
    assert not checkpoint.exists()
    # Nothing half-resolved is left in the project: the next start resolves again.
    assert not (PROJECT_DIR / JARS_FOLDER / resolution_key(resolution_confs(make_settings(changes)))).exists()
    assert (tmp_path / "ivy" / LOCK_FILE).exists()  # the lock was taken in the Ivy home the resolution used


def test_a_damaged_connector_jar_is_one_line_naming_it_and_nothing_starts(write_settings, make_settings, tmp_path):
    """Each JAR's SHA-1, recorded at the resolution (from the files Ivy checked against Maven's .sha1), is
    checked at each start before a JVM starts. On a copy of the project's resolved Kafka JARs: a folder that
    predates the record is recorded at its next start; a JAR cut short then is named, with the way out."""
    project = tmp_path / "project"  # the working directory a start finds ivysettings.xml and connector-jars/ in
    project.mkdir()
    shutil.copy(PROJECT_DIR / "ivysettings.xml", project)
    key = resolution_key(resolution_confs(make_settings(KAFKA_SOURCE)))
    folder = shutil.copytree(PROJECT_DIR / JARS_FOLDER / key, project / JARS_FOLDER / key)
    record = folder / "sha1.txt"
    record.unlink(missing_ok=True)  # resolved before the record existed
    checkpoint = tmp_path / "checkpoint"
    settings = str(write_settings(KAFKA_SOURCE | {"query": {"checkpoint_location": str(checkpoint)}}))
    submit_args = ("-m", "stream_job", "packages", "--submit-args", "--settings", settings)
    env = {**clean_env(), "PYTHONPATH": str(PROJECT_DIR)}  # the project's package, run in the copy's folder

    recorded = run_python(*submit_args, cwd=project, env=env)
    assert recorded.returncode == 0, recorded.stderr[-2000:]
    names = (folder / "jars.txt").read_text().split()
    assert record.read_text() == "".join(f"{sha1(folder / name)}  {name}\n" for name in names)

    kafka_jar = folder / f"org.apache.spark_spark-sql-kafka-0-10_2.13-{SPARK_MINOR}.0.jar"
    kafka_jar.write_bytes(kafka_jar.read_bytes()[: kafka_jar.stat().st_size // 2])  # a copy cut short
    damaged = run_python(str(PROJECT_DIR / "main.py"), "--settings", settings, cwd=project, env=env)
    assert damaged.returncode == 3, damaged.stderr[-2000:]
    assert damaged.stderr.splitlines() == [
        f"connector error: the connector JAR {kafka_jar} is damaged: its SHA-1 is not the one recorded in {record}"
        f" at its download (Maven's, checked by Ivy). Delete {project / JARS_FOLDER} and start again, which"
        " resolves the connectors anew (nothing was started)"
    ]
    assert "kafka -> parquet" not in damaged.stdout  # no session's start line: no JVM
    assert not checkpoint.exists()

    record.unlink()  # the same JAR in a folder without a record: not recorded as it is
    unrecorded = run_python(*submit_args, cwd=project, env=env)
    assert unrecorded.returncode == 3, unrecorded.stderr[-2000:]
    assert unrecorded.stderr.splitlines() == [
        f"connector error: the connector JAR {kafka_jar} is damaged: it does not read back as a whole JAR (a ZIP"
        f" entry is cut or fails its CRC). Delete {project / JARS_FOLDER} and start again, which resolves the"
        " connectors anew (nothing was started)"
    ]
    assert not record.exists()


def sha1(path: Path) -> str:
    return hashlib.sha1(path.read_bytes()).hexdigest()


def test_a_jvm_that_cannot_start_is_one_line_naming_its_own_cause(write_settings, tmp_path):
    checkpoint = tmp_path / "checkpoint"
    # (Spark's launcher passes -XX:+IgnoreUnrecognizedVMOptions: an unknown option would be ignored.)
    conf = {"spark.driver.extraJavaOptions": "-Xss1x"}
    path = write_settings({"spark": {"conf": conf}, "query": {"checkpoint_location": str(checkpoint)}})
    result = run_python("main.py", "--settings", str(path), "--max-batches", "1", env=clean_env())
    assert result.returncode == 3, result.stderr[-2000:]
    (line,) = [line for line in result.stderr.splitlines() if line.startswith("spark error:")]
    log = PROJECT_DIR / "logs" / "jvm-start.log"
    assert line == (
        "spark error: the driver JVM exited before it was up: Invalid thread stack size: -Xss1x (its whole"
        f" output: {log}); fix that and start again (nothing was started)"
    )
    # The JVM's own words stay on the console above the line, and in the log.
    assert "Error: Could not create the Java Virtual Machine." in result.stderr
    assert "Invalid thread stack size: -Xss1x" in log.read_text()
    assert "Traceback" not in result.stderr
    assert not checkpoint.exists()


SECRET = "Sup3r-Secret-Value-4711"


def test_secrets_never_appear_in_settings_or_any_output(write_settings, tmp_path):
    """A SASL password and a secret Kafka option, read from the environment, through every command."""
    kafka = {
        "security_protocol": "SASL_SSL",
        "sasl_mechanism": "PLAIN",
        "sasl_username": "svc-stream",
        "sasl_password_env": "TEST_KAFKA_PASSWORD",
        "secret_options": {"kafka.ssl.truststore.password": "TEST_TRUSTSTORE_PASSWORD"},
    }
    changes = {
        "source": {"type": "kafka", "kafka": kafka},
        "sink": {"type": "parquet", "output_mode": "append"},
        "spark": {"fetch_packages": False, "secret_conf": {"spark.hadoop.fs.s3a.secret.key": "TEST_S3_SECRET"}},
        "query": {"checkpoint_location": str(tmp_path / "checkpoint")},
    }
    path = str(write_settings(changes))
    env = {
        **clean_env(),
        "TEST_KAFKA_PASSWORD": SECRET,
        "TEST_TRUSTSTORE_PASSWORD": f"{SECRET}-trust",
        "TEST_S3_SECRET": f"{SECRET}-s3",
    }
    assert SECRET not in Path(path).read_text()

    results = {
        "run": run_python("main.py", "--settings", path, env=env),
        "check": run_python("-m", "stream_job", "check", "--settings", path, env=env),
        "estimate": run_python("-m", "stream_job", "estimate", "--settings", path, env=env),
        "packages": run_python("-m", "stream_job", "packages", "--settings", path, env=env),
        "config": run_python("-m", "stream_job", "config", "--settings", path, env=env),
    }

    # The run got as far as Spark (its start-up line) and stopped at the missing connector.
    assert results["run"].returncode == 3, results["run"].stderr[-2000:]
    assert "kafka -> parquet" in results["run"].stdout
    assert [result.returncode for result in results.values()] == [3, 0, 0, 0, 0]
    # The effective configuration names where each secret comes from.
    config = yaml.safe_load(results["config"].stdout)
    assert config["spark_confs"]["spark.hadoop.fs.s3a.secret.key"] == "<secret from $TEST_S3_SECRET>"
    options = config["source_options"]["source"]
    assert options["kafka.ssl.truststore.password"] == "<secret from $TEST_TRUSTSTORE_PASSWORD>"
    assert options["kafka.sasl.jaas.config"].endswith(' password="<secret from $TEST_KAFKA_PASSWORD>";')
    for name, result in results.items():
        assert SECRET not in result.stdout + result.stderr, name
    # The settings object holds the variable's name, never its value.
    settings = load_settings(path)
    assert SECRET not in repr(settings) and SECRET not in settings.model_dump_json()
