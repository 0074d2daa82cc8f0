"""A real single-node Kafka broker on 127.0.0.1, for local development, `make demo` and the tests.

Kafka's own broker in KRaft mode (its controller in the same process, no ZooKeeper), run with
`java` from the JARs of `org.apache.kafka:kafka_2.13`, which mvn fetches once from Maven Central
(or the mirror in ~/.m2/settings.xml) into a cache that every project shares. A broker lives in a
directory: its data, its log, and broker.json (ports and pid), so `up` after `down` finds its
topics again. The topics are created and fed with Kafka's own command-line tools (one JVM each).
Nothing here is for production: one node, no replication, listeners on 127.0.0.1 only.
"""

from __future__ import annotations

import base64
import fcntl
import json
import os
import shutil
import signal
import socket
import subprocess
import time
import uuid
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from pathlib import Path

from ..job.spark.java import find_java

KAFKA_VERSION = "4.2.0"
# Kafka logs through slf4j 1.7; this binds it to the log4j2 that Kafka ships.
LOG4J_SLF4J_VERSION = "2.24.3"
CACHE = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "stateful-streaming" / "kafka"
START_TIMEOUT_SECONDS = 90
STOP_TIMEOUT_SECONDS = 30
JVM_OPTIONS = ["-Xms128m", "-Xmx512m", "-XX:+UseG1GC"]
STATE_FILE = "broker.json"

TOPIC_COMMAND = "org.apache.kafka.tools.TopicCommand"
PRODUCER = "org.apache.kafka.tools.ConsoleProducer"
DELETE_RECORDS = "org.apache.kafka.tools.DeleteRecordsCommand"

POM = """<project xmlns="http://maven.apache.org/POM/4.0.0">
  <modelVersion>4.0.0</modelVersion>
  <groupId>local</groupId><artifactId>kafka-broker</artifactId><version>1</version><packaging>pom</packaging>
  <dependencies>
    <dependency><groupId>org.apache.kafka</groupId><artifactId>kafka_2.13</artifactId><version>{kafka}</version></dependency>
    <dependency><groupId>org.apache.kafka</groupId><artifactId>kafka-tools</artifactId><version>{kafka}</version>
      <exclusions><exclusion><groupId>org.apache.kafka</groupId><artifactId>connect-runtime</artifactId></exclusion></exclusions>
    </dependency>
    <dependency><groupId>org.apache.logging.log4j</groupId><artifactId>log4j-slf4j-impl</artifactId><version>{log4j}</version></dependency>
  </dependencies>
</project>
"""


class LocalKafkaError(Exception):
    """The local broker could not be fetched, started, stopped or used."""


def broker_jars(cache: Path = CACHE) -> Path:
    """The folder of the broker's JARs, fetched by mvn on first use (a lock keeps parallel callers to one fetch)."""
    home = cache / KAFKA_VERSION
    lib = home / "lib"
    home.mkdir(parents=True, exist_ok=True)
    with open(home / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if (home / "complete").is_file():
            return lib
        mvn = shutil.which("mvn")
        if mvn is None:
            raise LocalKafkaError(
                "the local Kafka broker comes from Maven Central through Maven, and mvn is not on PATH:"
                " install Maven (for example `apt-get install maven`), or point the settings at a broker you run"
            )
        (home / "pom.xml").write_text(POM.format(kafka=KAFKA_VERSION, log4j=LOG4J_SLF4J_VERSION), encoding="utf-8")
        partial = home / "lib.partial"
        shutil.rmtree(partial, ignore_errors=True)
        command = [mvn, "-q", "-B", "-f", str(home / "pom.xml"), "dependency:copy-dependencies"]
        command += ["-DincludeScope=runtime", f"-DoutputDirectory={partial}"]
        result = subprocess.run(command, capture_output=True, text=True, timeout=900)
        if result.returncode != 0:
            last = " ".join((result.stdout + result.stderr).strip().splitlines()[-3:])
            raise LocalKafkaError(
                f"mvn could not fetch org.apache.kafka:kafka_2.13:{KAFKA_VERSION} for the local broker: {last};"
                " check the access to Maven Central, or the mirror in ~/.m2/settings.xml"
            )
        shutil.rmtree(lib, ignore_errors=True)
        partial.rename(lib)
        (home / "complete").touch()
        return lib


@dataclass
class Broker:
    """A broker's directory and ports; users (name -> password) makes a SASL listener, PLAIN and SCRAM-SHA-256."""

    directory: Path
    port: int
    controller_port: int
    sasl_port: int | None = None
    users: dict[str, str] = field(default_factory=dict)
    pid: int | None = None

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def sasl_bootstrap(self) -> str:
        if self.sasl_port is None:
            raise LocalKafkaError("this broker has no SASL listener: start it with users")
        return f"127.0.0.1:{self.sasl_port}"

    def save(self) -> None:
        data = {**asdict(self), "directory": str(self.directory)}
        (self.directory / STATE_FILE).write_text(json.dumps(data, indent=2), encoding="utf-8")


def load(directory: Path | str) -> Broker | None:
    """The broker whose state is in directory (running or not), or None if none was ever started there."""
    path = Path(directory) / STATE_FILE
    if not path.is_file():
        return None
    data = json.loads(path.read_text(encoding="utf-8"))
    return Broker(**{**data, "directory": Path(data["directory"])})


def running(directory: Path | str) -> Broker | None:
    broker = load(directory)
    if broker is None or broker.pid is None or not _alive(broker.pid) or not _answers(broker.port):
        return None
    return broker


def start(directory: Path | str, port: int = 0, users: dict[str, str] | None = None) -> Broker:
    """Start the broker of directory (first time: format its storage on the given port, 0 for a free one)."""
    directory = Path(directory).resolve()
    already = running(directory)
    if already is not None:
        return already
    broker = load(directory)
    if broker is None:
        directory.mkdir(parents=True, exist_ok=True)
        broker = Broker(directory, port or _free_port(), _free_port(), _free_port() if users else None, users or {})
        _write_properties(broker)
        _format(broker)
    for taken in (broker.port, broker.controller_port, broker.sasl_port):
        if taken is not None and _answers(taken):
            raise LocalKafkaError(
                f"port {taken} on 127.0.0.1, which the broker in {directory} uses, is taken by another process;"
                f" stop it, or start a new broker in another directory"
            )
    command = [str(find_java()), *JVM_OPTIONS, *_log_options(broker), "-cp", _classpath(), "kafka.Kafka"]
    with open(directory / "broker.log", "ab") as log:
        process = subprocess.Popen(
            [*command, str(directory / "server.properties")],
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # outlives `make kafka-up`, and a Ctrl-C in the terminal
        )
    broker.pid = process.pid
    broker.save()
    deadline = time.monotonic() + START_TIMEOUT_SECONDS
    while not _answers(broker.port):
        if process.poll() is not None or time.monotonic() > deadline:
            process.kill()
            tail = " ".join((directory / "broker.log").read_text(errors="replace").strip().splitlines()[-3:])
            raise LocalKafkaError(f"the local broker in {directory} did not start: {tail}")
        time.sleep(0.1)
    return broker


def stop(directory: Path | str) -> bool:
    """Stop the broker of directory (its data stays); False when none was running."""
    broker = load(directory)
    if broker is None or broker.pid is None or not _alive(broker.pid):
        return False
    os.kill(broker.pid, signal.SIGTERM)
    deadline = time.monotonic() + STOP_TIMEOUT_SECONDS
    while _alive(broker.pid) and time.monotonic() < deadline:
        time.sleep(0.1)
    if _alive(broker.pid):
        os.kill(broker.pid, signal.SIGKILL)
    broker.pid = None
    broker.save()
    return True


def create_topic(bootstrap: str, topic: str, partitions: int = 1) -> None:
    """Create topic unless it exists."""
    run_tool(TOPIC_COMMAND, "--bootstrap-server", bootstrap, "--create", "--if-not-exists", "--topic", topic,
             "--partitions", str(partitions), "--replication-factor", "1")  # fmt: skip


def produce(bootstrap: str, topic: str, values: Iterable[str]) -> None:
    """Write one record per value, in order, with no key (all records of a one-partition topic keep their order)."""
    text = "".join(value.replace("\n", " ") + "\n" for value in values)
    run_tool(PRODUCER, "--bootstrap-server", bootstrap, "--topic", topic, stdin=text)


def delete_records(bootstrap: str, topic: str, partition: int, before_offset: int, folder: Path) -> None:
    """Delete the records of one partition before an offset, as retention would."""
    plan = folder / f"delete-{topic}-{partition}.json"
    offsets = {"partitions": [{"topic": topic, "partition": partition, "offset": before_offset}], "version": 1}
    plan.write_text(json.dumps(offsets), encoding="utf-8")
    run_tool(DELETE_RECORDS, "--bootstrap-server", bootstrap, "--offset-json-file", str(plan))


def run_tool(main_class: str, *arguments: str, stdin: str | None = None) -> str:
    """Run one of Kafka's command-line tools; its output, or LocalKafkaError with its last lines."""
    command = [str(find_java()), *JVM_OPTIONS, "-cp", _classpath(), main_class, *arguments]
    result = subprocess.run(command, input=stdin, capture_output=True, text=True, timeout=300)
    if result.returncode != 0:
        last = " ".join((result.stdout + result.stderr).strip().splitlines()[-3:])
        raise LocalKafkaError(f"{main_class.rsplit('.', 1)[-1]} failed: {last}")
    return result.stdout


def _classpath() -> str:
    return str(broker_jars() / "*")


def cluster_id() -> str:
    """A random cluster id as Kafka writes them (URL-safe base64 of a UUID), never starting with "-": the
    storage tool would take such an id for an option (one start in 64 failed that way)."""
    while True:
        candidate = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        if not candidate.startswith("-"):
            return candidate


def _format(broker: Broker) -> None:
    arguments = ["format", "--config", str(broker.directory / "server.properties"), "--cluster-id", cluster_id()]
    arguments.append("--standalone")
    for name, password in broker.users.items():
        arguments += ["--add-scram", f"SCRAM-SHA-256=[name={name},password={password}]"]
    run_tool("kafka.tools.StorageTool", *arguments)


def _write_properties(broker: Broker) -> None:
    listeners = [f"PLAINTEXT://127.0.0.1:{broker.port}"]
    protocols = ["CONTROLLER:PLAINTEXT", "PLAINTEXT:PLAINTEXT"]
    if broker.sasl_port is not None:
        listeners.append(f"SASL_PLAINTEXT://127.0.0.1:{broker.sasl_port}")
        protocols.append("SASL_PLAINTEXT:SASL_PLAINTEXT")
    lines = [
        "process.roles=broker,controller",
        "node.id=1",
        f"controller.quorum.bootstrap.servers=127.0.0.1:{broker.controller_port}",
        f"listeners={','.join(listeners)},CONTROLLER://127.0.0.1:{broker.controller_port}",
        f"advertised.listeners={','.join(listeners)}",
        "inter.broker.listener.name=PLAINTEXT",
        "controller.listener.names=CONTROLLER",
        f"listener.security.protocol.map={','.join(protocols)}",
        f"log.dirs={broker.directory / 'data'}",
        "num.partitions=1",
        "auto.create.topics.enable=false",  # a misspelt topic is an error, not a new empty topic
        "offsets.topic.replication.factor=1",
        "transaction.state.log.replication.factor=1",
        "transaction.state.log.min.isr=1",
        "share.coordinator.state.topic.replication.factor=1",
        "share.coordinator.state.topic.min.isr=1",
        "group.initial.rebalance.delay.ms=0",
    ]
    if broker.users:
        plain_users = " ".join(f'user_{name}="{password}"' for name, password in broker.users.items())
        lines += [
            "sasl.enabled.mechanisms=PLAIN,SCRAM-SHA-256",
            "listener.name.sasl_plaintext.sasl.enabled.mechanisms=PLAIN,SCRAM-SHA-256",
            "listener.name.sasl_plaintext.plain.sasl.jaas.config=org.apache.kafka.common.security.plain.PlainLoginModule"
            f" required {plain_users};",
            "listener.name.sasl_plaintext.scram-sha-256.sasl.jaas.config="
            "org.apache.kafka.common.security.scram.ScramLoginModule required;",
        ]
    (broker.directory / "server.properties").write_text("\n".join(lines) + "\n", encoding="utf-8")


def _log_options(broker: Broker) -> list[str]:
    return [f"-Dkafka.logs.dir={broker.directory / 'logs'}"]


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _answers(port: int) -> bool:
    with socket.socket() as probe:
        probe.settimeout(0.2)
        return probe.connect_ex(("127.0.0.1", port)) == 0


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # A child that exited but was not reaped is a zombie: not alive for our purpose.
    status = Path(f"/proc/{pid}/stat")
    return not (status.is_file() and status.read_text().split(") ")[-1].startswith("Z"))
