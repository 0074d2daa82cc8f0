"""A scratch run of the user's job (bench, sustain): its synthetic rate input, its environment, the process
followed batch by batch, and the machine it ran on."""

from __future__ import annotations

import contextlib
import json
import os
import platform
import signal
import subprocess
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

import pyspark

from ..core.settings import ENV_PREFIX
from .store_configurations import CONFIGURATIONS

# Event time starts on a whole hour (2023-11-14 22:00 UTC) and advances 1 s per batch, so that a run
# stays in one 1-hour window; time 0 would not do: Spark drops rows at the initial watermark, 0, as late.
START_TIMESTAMP_MS = 1_699_999_200_000


class BenchError(Exception):
    """A request that cannot be benchmarked; the message names it."""


class BenchRunFailed(Exception):
    """A benchmark run that failed; the message names its log."""


def rate_overrides(section: str, rows_per_batch: int, keys: int, advance: str = "1 second") -> dict[str, str]:
    return {
        f"{section}__TYPE": "rate",
        f"{section}__RATE__ROWS_PER_BATCH": str(rows_per_batch),
        f"{section}__RATE__KEYS": str(keys),
        f"{section}__RATE__ADVANCE_PER_BATCH": advance,
        f"{section}__RATE__START_TIMESTAMP_MS": str(START_TIMESTAMP_MS),
    }


def percentile(values: list[float], share: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(share * (len(ordered) - 1)))]


def scratch_environment(
    folder: Path, configuration: str, trigger: str, conf: dict[str, str], overrides: dict[str, str]
) -> dict[str, str]:
    """The environment of a scratch run of the user's job (bench, sustain): its checkpoint and parquet
    output in folder, the store configuration, JSON progress to read the batches from, and overrides."""
    store = CONFIGURATIONS[configuration]
    # The driver's heap is a setting of its own (spark.driver_memory), not a spark.conf entry.
    conf = dict(conf)
    heap = {"SPARK__DRIVER_MEMORY": conf.pop("spark.driver.memory")} if "spark.driver.memory" in conf else {}
    scratch = {
        **overrides,
        **heap,
        "STATE_STORE__PROVIDER": store.provider,
        "STATE_STORE__CHANGELOG_CHECKPOINTING": str(store.changelog).lower(),
        **({} if store.track_rows else {"STATE_STORE__ROCKSDB__TRACK_TOTAL_NUMBER_OF_ROWS": "false"}),
        "QUERY__TRIGGER": trigger,
        "QUERY__CHECKPOINT_LOCATION": str(folder / "checkpoint"),
        "SINK__TYPE": "parquet",
        "SINK__PATH": str(folder / "output"),
        "MONITORING__PROGRESS_FORMAT": "json",
        "SPARK__CONF": json.dumps(conf),
    }
    # The user's own overrides stay (the settings were read with them); these win.
    return {**os.environ, **{ENV_PREFIX + name: value for name, value in scratch.items()}}


def batch_events(lines: Iterable[str]) -> Iterator[dict[str, Any]]:
    for line in lines:
        try:
            event = json.loads(line)
        except ValueError:  # not an event: a Python worker's print
            continue
        if isinstance(event, dict) and event.get("event") == "batch":
            yield event


def follow_run(
    command: list[str],
    env: dict[str, str],
    log_path: Path,
    stop: Callable[[list[dict[str, Any]]], str | None],
    cpus: set[int] | None = None,
) -> tuple[int, list[dict[str, Any]]]:
    """The job run as a process of its own (on `cpus` when given), stderr into log_path, its batches'
    progress events read as they come: after each, stop(events so far) may answer "after" (SIGTERM: the
    job stops at the batch boundary, its last events still read) or "now" (SIGTERM, nothing more read).
    Its exit code and the events read."""
    events: list[dict[str, Any]] = []
    with open(log_path, "w") as log:
        process = subprocess.Popen(
            command,
            env=env,
            stdout=subprocess.PIPE,
            stderr=log,
            text=True,
            preexec_fn=None if cpus is None else lambda: os.sched_setaffinity(0, cpus),
        )
        try:
            assert process.stdout is not None  # stdout=PIPE
            for event in batch_events(process.stdout):
                events.append(event)
                decision = stop(events)
                if decision is not None:
                    process.send_signal(signal.SIGTERM)
                    if decision == "now":
                        break
            process.wait()
        finally:
            if process.poll() is None:
                process.kill()
                process.wait()
    return process.returncode, events


def machine() -> dict[str, Any]:
    java = subprocess.run(["java", "-version"], capture_output=True, text=True).stderr.splitlines()
    cpu = platform.processor() or "unknown"
    with contextlib.suppress(OSError):
        models = [
            line.split(":", 1)[1] for line in Path("/proc/cpuinfo").read_text().splitlines() if "model name" in line
        ]
        cpu = models[0].strip() if models else cpu
    return {
        "platform": platform.platform(),
        "cpu": cpu,
        "cpus": os.cpu_count(),
        "memory_gib": round(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30, 1),
        "python": platform.python_version(),
        "java": java[0] if java else "unknown",
        "pyspark": pyspark.__version__,
    }
