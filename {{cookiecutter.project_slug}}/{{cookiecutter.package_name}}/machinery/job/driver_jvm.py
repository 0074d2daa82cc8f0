"""The driver JVM when `python main.py` (or a command of the package) starts it, not spark-submit.

Its console is relayed through this process so that what log4j cannot route reaches a file:
custom_state's Python worker on the driver prints its start and each call of the processor's init
("Starting execution of UDF ...") with print(), which the JVM copies to its stderr as they are. Those
lines go to logs/python-workers.log, every other line to the console unchanged.

It ignores SIGTERM: a SIGTERM sent to the whole process group (systemd's default KillMode, `timeout`,
a supervisor's kill of the group) reached the JVM too, which exited at once under the job's graceful
stop, ending it in Py4J tracebacks. The job stops it instead: the JVM exits when this process does
(pyspark's gateway ends when its stdin closes). Under spark-submit the JVM is the parent process, and
neither applies.
"""

from __future__ import annotations

import os
import re
import threading
from collections.abc import Mapping
from pathlib import Path
from typing import IO

from pyspark import SparkConf, SparkContext
from pyspark.java_gateway import launch_gateway

WORKER_LOG = "python-workers.log"
# pyspark/sql/streaming/transform_with_state_driver_worker.py's print()s; each ends in an empty line.
WORKER_CHATTER = re.compile(rb"^(Starting )?Streaming TransformWith\w+ Python worker")


def launch_driver_jvm(confs: Mapping[str, str], logs: Path) -> None:
    """Start the driver JVM with `confs` (spark.master and spark.app.name among them), its stderr relayed
    and SIGTERM ignored; the session built next uses it. Nothing when this process has a JVM already."""
    if SparkContext._gateway is not None:
        return
    console = os.dup(2)  # the console as it is now: where the JVM would have printed
    read_end, write_end = os.pipe()
    # Read from before the launch: a JVM fetching connector JARs prints more than a pipe holds.
    relay = threading.Thread(
        target=_relay, args=(os.fdopen(read_end, "rb"), console, logs / WORKER_LOG), name="jvm-stderr", daemon=True
    )
    relay.start()
    try:
        gateway = launch_gateway(SparkConf(loadDefaults=False).setAll(list(confs.items())), {"stderr": write_end})
    except BaseException:
        os.close(write_end)
        relay.join(timeout=30)  # the JVM's last words before the error that names them
        raise
    os.close(write_end)
    jvm = gateway.jvm
    jvm.sun.misc.Signal.handle(jvm.sun.misc.Signal("TERM"), jvm.sun.misc.SignalHandler.SIG_IGN)
    SparkContext._ensure_initialized(gateway=gateway)


def _relay(jvm_stderr: IO[bytes], console: int, worker_log: Path) -> None:
    chatter = False
    log = None
    for line in iter(jvm_stderr.readline, b""):
        if WORKER_CHATTER.match(line) or (chatter and not line.strip()):
            chatter = True
            if log is None:
                worker_log.parent.mkdir(parents=True, exist_ok=True)
                log = worker_log.open("ab", buffering=0)
            log.write(line)
            continue
        chatter = False
        os.write(console, line)
