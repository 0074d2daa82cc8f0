"""Find Java before Spark does, so a missing JVM is a sentence, not a Py4J stack trace."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

MIN_JAVA = 17
INSTALL_HINT = "install Java 17 or newer (for example `apt-get install openjdk-17-jre-headless`) or set JAVA_HOME"


class JavaError(Exception):
    """No usable Java for Spark."""


def launched_by_spark_submit() -> bool:
    """spark-submit starts the JVM first and hands Python the gateway port."""
    return "PYSPARK_GATEWAY_PORT" in os.environ


def find_java() -> Path:
    java_home = os.environ.get("JAVA_HOME")
    if java_home:
        java = Path(java_home) / "bin" / "java"
        if not java.is_file():
            raise JavaError(f"JAVA_HOME is {java_home!r} but {java} does not exist; fix JAVA_HOME or {INSTALL_HINT}")
        return java
    found = shutil.which("java")
    if not found:
        raise JavaError(f"Java was not found (no JAVA_HOME, no java on PATH); Spark needs it: {INSTALL_HINT}")
    return Path(found)


def java_major_version(java: Path) -> int:
    result = subprocess.run([str(java), "-version"], capture_output=True, text=True, timeout=60)
    match = re.search(r'version "(\d+)(?:\.(\d+))?', result.stderr + result.stdout)
    if not match:
        raise JavaError(f"could not read the version of {java}; {INSTALL_HINT}")
    major = int(match.group(1))
    return int(match.group(2)) if major == 1 else major  # "1.8" means Java 8


def require_java() -> None:
    """Raise JavaError unless a Java that Spark 4 runs on is available."""
    if launched_by_spark_submit():
        return
    java = find_java()
    major = java_major_version(java)
    if major < MIN_JAVA:
        raise JavaError(f"{java} is Java {major}; Spark 4 needs Java {MIN_JAVA} or newer: {INSTALL_HINT}")
