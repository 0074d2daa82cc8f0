"""The driver JVM when `python main.py` (or a command of the package) starts it, not spark-submit.

Its console is relayed through this process so that what log4j cannot route reaches a file:
custom_state's Python worker on the driver prints its start and each call of the processor's init
("Starting execution of UDF ...") with print(), which the JVM copies to its stderr as they are: those
go to logs/python-workers.log, every other line to the console unchanged. A start that fails (the JVM
exits before pyspark gets its port) is one line naming the cause read from the JVM's own output, which
stays on the console above it and in logs/jvm-start.log. (Connector JARs are resolved before, in a JVM
of their own: connector_jars.py.)

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
from pyspark.errors import PySparkRuntimeError
from pyspark.java_gateway import launch_gateway

from ...core.checkpoint.run_lock import held_lock_fds

WORKER_LOG = "python-workers.log"
START_LOG = "jvm-start.log"  # a failed start's whole output, the last one's
# pyspark/sql/streaming/transform_with_state_driver_worker.py's print()s; each ends in an empty line.
WORKER_CHATTER = re.compile(rb"^(Starting )?Streaming TransformWith\w+ Python worker")


# The JVM the job starts exits at its first OutOfMemoryError (-XX:+ExitOnOutOfMemoryError) with this
# code, instead of going on half-broken: a crash the checkpoint recovers from, and a cause that can be named.
OUT_OF_MEMORY_OPTION = "-XX:+ExitOnOutOfMemoryError"
OUT_OF_MEMORY_EXIT = 3

# What a JVM prints when it cannot start, the most telling first: Ivy's resolution error, a JVM option
# it refuses, the exception that ended spark-submit's main, spark-submit's own error line.
START_FAILURES = (
    re.compile(r"unresolved dependency: [^\],\n]+"),
    re.compile(r"download failed: [^\],\n]+"),
    re.compile(r"^(?:Invalid|Unrecognized|Improperly specified) .+", re.M),
    re.compile(r'^Exception in thread "main" (.+)', re.M),
    re.compile(r"^Error: (?!Could not create the Java Virtual Machine)(.+)", re.M),
    re.compile(r"^\S+(?:Exception|Error): .+", re.M),
)


class JvmStartError(Exception):
    """The driver JVM exited before pyspark got its port: the cause, read from the JVM's own output."""


def jvm_start_cause(output: str) -> str:
    """The line of a failed JVM start's output that says why (its last line when none is known)."""
    for pattern in START_FAILURES:
        found = pattern.search(output)
        if found:
            return (found.group(1) if pattern.groups else found.group(0)).strip()[:400]
    lines = [line.strip() for line in output.splitlines() if line.strip()]
    return lines[-1][:400] if lines else "it printed nothing"


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
    relay = _Relay(os.dup(2), logs)  # the console as it is now (where the JVM would have printed)
    read_end, write_end = os.pipe()
    # Read from before the launch: a JVM may print more than a pipe holds before it is up.
    reader = threading.Thread(target=relay.run, args=(os.fdopen(read_end, "rb"),), name="jvm-stderr", daemon=True)
    reader.start()
    try:
        # The JVM shares the checkpoint locks this process holds (run_lock.py): they last until it exits too.
        popen = {"stderr": write_end, "pass_fds": held_lock_fds()}
        gateway = launch_gateway(SparkConf(loadDefaults=False).setAll(list(confs.items())), popen)
    except BaseException as error:
        os.close(write_end)
        reader.join(timeout=30)  # the JVM's last words, before the error
        output = relay.launched()
        if isinstance(error, PySparkRuntimeError) and error.getCondition() == "JAVA_GATEWAY_EXITED":
            log = logs / START_LOG
            logs.mkdir(parents=True, exist_ok=True)
            log.write_bytes(output)
            raise JvmStartError(
                f"the driver JVM exited before it was up: {jvm_start_cause(output.decode(errors='replace'))} (its"
                f" whole output: {log}); fix that and start again (nothing was started)"
            ) from None
        raise
    os.close(write_end)
    relay.launched()
    jvm = gateway.jvm
    jvm.sun.misc.Signal.handle(jvm.sun.misc.Signal("TERM"), jvm.sun.misc.SignalHandler.SIG_IGN)
    SparkContext._ensure_initialized(gateway=gateway)


class _Relay:
    """The JVM's stderr, line by line: to the console, but the driver's Python worker's chatter to
    logs/python-workers.log (while the JVM starts its lines wait, kept for the cause of a failed start)."""

    def __init__(self, console: int, logs: Path) -> None:
        self.console, self.logs = console, logs
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

    def launched(self) -> bytes:
        """Show the start's lines on the console; return them."""
        with self.lock:
            lines, self.starting = self.starting or [], None
        output = b"".join(lines)
        self._show(output)
        return output

    def _show(self, data: bytes) -> None:
        while data:
            data = data[os.write(self.console, data) :]

    def _append(self, name: str, lines: list[bytes]) -> None:
        self.logs.mkdir(parents=True, exist_ok=True)
        with (self.logs / name).open("ab") as log:
            log.writelines(lines)
