"""The driver JVM when `python main.py` (or a command of the package) starts it, not spark-submit.

Its console is relayed through this process so that what log4j cannot route reaches a file:
custom_state's Python worker on the driver prints its start and each call of the processor's init
("Starting execution of UDF ...") with print(), which the JVM copies to its stderr as they are, and
Ivy reports each resolution of spark.jars.packages there, some fifty lines at every start. Those go
to logs/python-workers.log and logs/packages.log, every other line to the console unchanged.

It ignores SIGTERM: a SIGTERM sent to the whole process group (systemd's default KillMode, `timeout`,
a supervisor's kill of the group) reached the JVM too, which exited at once under the job's graceful
stop, ending it in Py4J tracebacks. The job stops it instead: the JVM exits when this process does
(pyspark's gateway ends when its stdin closes). Under spark-submit the JVM is the parent process, and
neither applies.
"""

from __future__ import annotations

import os
import re
import subprocess
import threading
from collections.abc import Mapping
from pathlib import Path
from typing import IO

from pyspark import SparkConf, SparkContext
from pyspark.java_gateway import launch_gateway

WORKER_LOG = "python-workers.log"
PACKAGES_LOG = "packages.log"
# pyspark/sql/streaming/transform_with_state_driver_worker.py's print()s; each ends in an empty line.
WORKER_CHATTER = re.compile(rb"^(Starting )?Streaming TransformWith\w+ Python worker")
# Ivy's report of resolving spark.jars.packages, printed at every start: its settings, each module
# found, the resolution table (and, when it fails, the Java trace after the error).
IVY_REPORT = re.compile(rb"^(:: |\t| |Ivy Default Cache|The jars for the packages|\S+#\S+ added as a dependency)")


# The JVM the job starts exits at its first OutOfMemoryError (-XX:+ExitOnOutOfMemoryError) with this
# code, instead of going on half-broken: a crash the checkpoint recovers from, and a cause that can be named.
OUT_OF_MEMORY_OPTION = "-XX:+ExitOnOutOfMemoryError"
OUT_OF_MEMORY_EXIT = 3


def jvm_ran_out_of_memory(wait: float) -> bool:
    """Whether the driver JVM this process started has exited at an OutOfMemoryError, waiting up to `wait`
    seconds for a JVM on its way out."""
    process = getattr(SparkContext._gateway, "proc", None)
    if process is None:
        return False
    try:
        return process.wait(timeout=wait) == OUT_OF_MEMORY_EXIT
    except subprocess.TimeoutExpired:  # still running: not this
        return False


def launch_driver_jvm(confs: Mapping[str, str], logs: Path) -> None:
    """Start the driver JVM with `confs` (spark.master and spark.app.name among them), its stderr relayed
    and SIGTERM ignored; the session built next uses it. Nothing when this process has a JVM already."""
    if SparkContext._gateway is not None:
        return
    # The console as it is now (where the JVM would have printed); Ivy reports only with packages to fetch.
    relay = _Relay(os.dup(2), logs, ivy="spark.jars.packages" in confs)
    read_end, write_end = os.pipe()
    # Read from before the launch: a JVM fetching connector JARs prints more than a pipe holds.
    reader = threading.Thread(target=relay.run, args=(os.fdopen(read_end, "rb"),), name="jvm-stderr", daemon=True)
    reader.start()
    try:
        gateway = launch_gateway(SparkConf(loadDefaults=False).setAll(list(confs.items())), {"stderr": write_end})
    except BaseException:
        os.close(write_end)
        reader.join(timeout=30)  # the JVM's last words, Ivy's report among them, before the error
        relay.launched(success=False)
        raise
    os.close(write_end)
    relay.launched(success=True)
    jvm = gateway.jvm
    jvm.sun.misc.Signal.handle(jvm.sun.misc.Signal("TERM"), jvm.sun.misc.SignalHandler.SIG_IGN)
    SparkContext._ensure_initialized(gateway=gateway)


class _Relay:
    """The JVM's stderr, line by line: to the console, but the driver's Python worker's chatter to
    logs/python-workers.log and, once the JVM is up, Ivy's report to logs/packages.log (while it starts
    the lines wait, in order: a failed resolution prints the report on the console with its error)."""

    def __init__(self, console: int, logs: Path, ivy: bool) -> None:
        self.console, self.logs, self.ivy = console, logs, ivy
        self.lock = threading.Lock()
        self.starting: list[bytes] | None = []  # None once the JVM is up
        self.chatter = False

    def run(self, jvm_stderr: IO[bytes]) -> None:
        for line in iter(jvm_stderr.readline, b""):
            with self.lock:
                if self.starting is not None:
                    self.starting.append(line)
                    continue
            if WORKER_CHATTER.match(line) or (self.chatter and not line.strip()):
                self.chatter = True
                self._append(WORKER_LOG, [line])
            else:
                self.chatter = False
                self._show(line)

    def launched(self, success: bool) -> None:
        with self.lock:
            lines, self.starting = self.starting or [], None
        moved = success and self.ivy
        report = [line for line in lines if moved and IVY_REPORT.match(line)]
        if report:
            self._append(PACKAGES_LOG, report)
        self._show(b"".join(line for line in lines if not (moved and IVY_REPORT.match(line))))

    def _show(self, data: bytes) -> None:
        while data:
            data = data[os.write(self.console, data) :]

    def _append(self, name: str, lines: list[bytes]) -> None:
        self.logs.mkdir(parents=True, exist_ok=True)
        with (self.logs / name).open("ab") as log:
            log.writelines(lines)
