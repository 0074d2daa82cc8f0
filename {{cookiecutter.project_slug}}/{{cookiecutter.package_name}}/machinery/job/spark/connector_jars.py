"""Connector JARs resolved once into the project; every later JVM starts from those files.

Spark resolves `spark.jars.packages` with Ivy at every JVM start, in the user's Ivy home (~/.ivy2.5.2):
seconds at each start, and unsafe for two processes at once: two starts resolving together corrupt
each other's downloads in Ivy's cache (".part (No such file or directory)", then "unresolved
dependency"), and both copy into the home's one jars/ folder. So the first start that needs a set of
packages resolves it in a JVM started for that alone, holding a lock on the Ivy home (every other
start that resolves there, of this project or another, waits for it), copies the JARs Spark resolved
into connector-jars/<key>/ beside the project's ivysettings.xml, and moves that folder into place
whole (a start that finds it finds it complete). Every start after that passes those files as
spark.jars, with no Ivy at all.

Each JAR's SHA-1 is recorded beside them (sha1.txt, sha1sum's format) from the files Ivy downloaded,
which it checked against the .sha1 Maven publishes, and every start checks the files against it before
a JVM starts (about 0.1 s for the Kafka connector's 61 MiB): a damaged JAR (a truncated copy, a disk
error) is one line naming it, where Spark would fail later on a class it cannot load. A folder resolved
before the record existed is checked once as ZIP files (every entry against its CRC) and then recorded.
Where Maven does not serve the Kafka connector of Spark's own minor, the proven one of another minor
is taken (connectors.KafkaFallback), and every start from those JARs says so in a line.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import shutil
import sys
import time
import zipfile
import zlib
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from urllib.parse import unquote, urlparse

from .connectors import IVY_CONFS, IVY_SETTINGS, PACKAGES_CONF, ConnectorError, KafkaFallback
from .driver_jvm import jvm_start_cause
from .project_files import project_file

JARS_FOLDER = "connector-jars"
RESOLUTION_CONFS = (PACKAGES_CONF, *IVY_CONFS)
IVY_HOME_CONF = "spark.jars.ivy"
# What Spark 4's Ivy (2.5.2) uses as its home when spark.jars.ivy names none.
DEFAULT_IVY_HOME = Path.home() / ".ivy2.5.2"
LOCK_FILE = ".connector-resolution.lock"
JAR_LIST = "jars.txt"  # the JARs in Spark's classpath order, one a line: written last, in a folder moved in whole
RESOLUTION_LOG = "packages.log"
CHECKSUMS = "sha1.txt"  # each JAR's SHA-1 and name, as `sha1sum` writes them
PACKAGES_LIST = "packages.txt"  # the packages resolved, one a line: the fallback's where it was taken


def resolved_jars(resolution: Mapping[str, str], logs: Path, fallback: KafkaFallback | None = None) -> list[Path]:
    """The JAR files that the packages in `resolution` (spark.jars.packages and Ivy's other confs) resolve
    to, from the project's connector-jars/, resolved there first when it has none (with `fallback`'s proven
    Kafka connector where Maven does not serve the one asked), and checked against their SHA-1s."""
    folder = jars_root() / resolution_key(resolution)
    found = _listed(folder)
    if found is None:
        with _locked(ivy_home(resolution) / LOCK_FILE):
            found = _listed(folder)  # another start resolved them while this one waited
            if found is None:
                _move_into_place(*_resolve_or_fall_back(resolution, logs, fallback), folder)
                found = _listed(folder)
    assert found is not None, folder
    require_intact(folder, found)
    if fallback is not None and fallback.proven in _packages_of(folder):
        print(fallback.line(), file=sys.stderr)
    _log(logs, f"--- a start from {folder} ({len(found)} JARs): {resolution[PACKAGES_CONF]}\n")
    return found


def _resolve_or_fall_back(
    resolution: Mapping[str, str], logs: Path, fallback: KafkaFallback | None
) -> tuple[list[Path], str]:
    """The JARs, and the packages they are (with the fallback's Kafka connector where it was taken)."""
    packages = resolution[PACKAGES_CONF]
    try:
        return _resolve(resolution, logs), packages
    except ConnectorError as failed:
        if fallback is None or not fallback.not_served(failed.cause):
            raise
        return _fall_back(resolution, logs, fallback, failed.cause)


def _fall_back(
    resolution: Mapping[str, str], logs: Path, fallback: KafkaFallback, refused: str
) -> tuple[list[Path], str]:
    packages = resolution[PACKAGES_CONF]
    proven = packages.replace(fallback.asked, fallback.proven)
    _log(logs, f"--- {fallback.asked} is not served: {fallback.proven}, proven on Spark {fallback.spark_minor}\n")
    try:
        return _resolve({**resolution, PACKAGES_CONF: proven}, logs), proven
    except ConnectorError as failed:
        cause = f"{refused}; {fallback.proven}, proven on Spark {fallback.spark_minor}, failed too: {failed.cause}"
        raise resolution_failed(packages, cause, logs / RESOLUTION_LOG) from None


def require_intact(folder: Path, jars: list[Path]) -> None:
    """ConnectorError naming the first JAR whose SHA-1 is not the recorded one; a folder that has no record
    (resolved before there was one) is recorded now, after each JAR reads back whole as a ZIP file."""
    record = folder / CHECKSUMS
    if not record.is_file():
        for jar in jars:
            if not _reads_whole(jar):
                raise damaged(jar, "it does not read back as a whole JAR (a ZIP entry is cut or fails its CRC)")
        _write_whole(record, _checksum_lines({jar.name: _sha1(jar) for jar in jars}))
        return
    lines = record.read_text(encoding="utf-8").splitlines()
    recorded = {name: digest for digest, name in (line.split(maxsplit=1) for line in lines)}
    for jar in jars:
        if _sha1(jar) != recorded.get(jar.name):
            raise damaged(
                jar, f"its SHA-1 is not the one recorded in {record} at its download (Maven's, checked by Ivy)"
            )


def damaged(jar: Path, why: str) -> ConnectorError:
    return ConnectorError(
        f"the connector JAR {jar} is damaged: {why}. Delete {jar.parent.parent} and start again, which resolves"
        " the connectors anew (nothing was started)"
    )


def _packages_of(folder: Path) -> list[str]:
    listed = folder / PACKAGES_LIST
    return listed.read_text(encoding="utf-8").split() if listed.is_file() else []


def _sha1(path: Path) -> str:
    with path.open("rb") as data:
        return hashlib.file_digest(data, "sha1").hexdigest()


def _checksum_lines(digests: Mapping[str, str]) -> str:
    return "".join(f"{digest}  {name}\n" for name, digest in digests.items())


def _reads_whole(jar: Path) -> bool:
    try:
        with zipfile.ZipFile(jar) as archive:
            return archive.testzip() is None
    except (zipfile.BadZipFile, OSError, EOFError, zlib.error):
        return False


def _write_whole(path: Path, text: str) -> None:
    """Written beside and renamed into place: a start reading it meanwhile reads none or all of it."""
    building = path.with_name(f".{path.name}.{os.getpid()}")
    building.write_text(text, encoding="utf-8")
    building.replace(path)


def _log(logs: Path, line: str) -> None:
    logs.mkdir(parents=True, exist_ok=True)
    with (logs / RESOLUTION_LOG).open("a") as log:
        log.write(line)


def jars_root() -> Path:
    """connector-jars/ beside the project's ivysettings.xml (in the working directory when there is none)."""
    found = project_file(IVY_SETTINGS)
    return (found.parent if found else Path.cwd()) / JARS_FOLDER


def ivy_home(resolution: Mapping[str, str]) -> Path:
    return Path(resolution.get(IVY_HOME_CONF) or DEFAULT_IVY_HOME).expanduser()


def resolution_key(resolution: Mapping[str, str]) -> str:
    """A folder name per set of packages, and per repository list and exclusions (what changes the JARs)."""
    parts = [resolution.get(conf, "") for conf in (PACKAGES_CONF, "spark.jars.repositories", "spark.jars.excludes")]
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()[:16]


def _listed(folder: Path) -> list[Path] | None:
    """The folder's JARs, or None when it holds no complete list (not resolved yet, or a JAR was deleted)."""
    try:
        names = (folder / JAR_LIST).read_text(encoding="utf-8").split()
    except FileNotFoundError:
        return None
    jars = [folder / name for name in names]
    return jars if all(jar.is_file() for jar in jars) else None


@contextmanager
def _locked(lock_file: Path) -> Iterator[None]:
    """The Ivy home's lock, held while one process resolves in it; a second waits, and says so once."""
    lock_file.parent.mkdir(parents=True, exist_ok=True)
    with lock_file.open("a") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            print(f"connectors: waiting for another start resolving JARs in {lock_file.parent}", file=sys.stderr)
            fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _resolve(resolution: Mapping[str, str], logs: Path) -> list[Path]:
    """Resolve the packages in a JVM of their own (spark-submit's resolution, then pyspark's gateway, no
    SparkContext) and return the JAR files it put on its classpath, in their order. Its output goes to
    logs/packages.log; a failure is one ConnectorError naming the packages, the cause and the way out."""
    from pyspark import SparkConf
    from pyspark.errors import PySparkRuntimeError
    from pyspark.java_gateway import launch_gateway

    from .java import require_java

    require_java()
    packages = resolution[PACKAGES_CONF]
    log = logs / RESOLUTION_LOG
    _log(logs, f"--- resolving {packages}\n")
    confs = [(key, value) for key, value in resolution.items() if key in RESOLUTION_CONFS]
    started = time.monotonic()
    with log.open("ab") as output:
        start = output.tell()
        submit_args = os.environ.pop("PYSPARK_SUBMIT_ARGS", None)  # a start's own arguments, not this one's
        try:
            gateway = launch_gateway(SparkConf(loadDefaults=False).setAll(confs), {"stdout": output, "stderr": output})
        except PySparkRuntimeError as error:
            if error.getCondition() != "JAVA_GATEWAY_EXITED":
                raise
            raise resolution_failed(packages, jvm_start_cause(_output_since(log, start)), log) from None
        finally:
            if submit_args is not None:
                os.environ["PYSPARK_SUBMIT_ARGS"] = submit_args
    try:
        listed = gateway.jvm.java.lang.System.getProperty("spark.jars") or ""
    finally:
        gateway.shutdown()
        process = gateway.proc
        process.stdin.close()  # pyspark's gateway exits when its stdin closes
        process.wait(timeout=60)
    jars = [Path(unquote(urlparse(item).path)) for item in listed.split(",") if item]
    _log(logs, f"--- resolved {packages} into {len(jars)} JARs in {time.monotonic() - started:.1f} s\n")
    if not jars:
        raise resolution_failed(packages, "Spark resolved no JAR", log)
    return jars


def resolution_failed(packages: str, cause: str, log: Path) -> ConnectorError:
    return ConnectorError(
        f"resolving the packages {packages} failed: {cause} (Ivy's whole report: {log}). Check access to Maven"
        " Central (or the mirror named in ivysettings.xml) and start again; without Maven access, set"
        " spark.fetch_packages false and list the JARs in spark.conf as spark.jars",
        cause,
    )


def _output_since(log: Path, offset: int) -> str:
    with log.open("rb") as output:
        output.seek(offset)
        return output.read().decode(errors="replace")


def _move_into_place(jars: list[Path], packages: str, folder: Path) -> None:
    """Copy the JARs into a folder of this process's own beside `folder`, with the packages they are and the
    SHA-1s of the files Ivy checked, then rename it to `folder` at once."""
    folder.parent.mkdir(parents=True, exist_ok=True)
    building = folder.parent / f".{folder.name}.{os.getpid()}"
    shutil.rmtree(building, ignore_errors=True)
    building.mkdir()
    for jar in jars:
        shutil.copy2(jar, building / jar.name)
    (building / PACKAGES_LIST).write_text(packages.replace(",", "\n") + "\n", encoding="utf-8")
    (building / CHECKSUMS).write_text(_checksum_lines({jar.name: _sha1(jar) for jar in jars}), encoding="utf-8")
    (building / JAR_LIST).write_text("".join(f"{jar.name}\n" for jar in jars), encoding="utf-8")
    if folder.exists():  # incomplete (a JAR deleted): replaced whole
        shutil.rmtree(folder)
    try:
        building.rename(folder)
    except OSError:  # a start resolving through another Ivy home moved its copy in first: that one stands
        shutil.rmtree(building, ignore_errors=True)
