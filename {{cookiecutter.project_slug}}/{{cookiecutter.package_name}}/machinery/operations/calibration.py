"""Measure what one state row really costs for this query and provider, by running it briefly.

The napkin math takes state_bytes_per_row on trust, but the footprint depends on the provider.
The HDFS-backed store keeps rows as objects in the JVM heap, in hash maps, together with the
versions of the last batches; RocksDB keeps them serialized and compressed in SST files on local
disk. calibrate() runs the project's own query on sample files in a scratch directory (never the
real checkpoint or output), then divides the provider's own size metric by the state rows it
reports for the same batch.
"""

from __future__ import annotations

import math
import sys
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, TextIO

from pyspark.errors import StreamingQueryException
from pyspark.sql import SparkSession

from ..core.durations import AVAILABLE_NOW, parse_duration
from ..core.settings import Settings
from ..core.text import first_line
from ..job.endpoints.sample_input import UNIQUE_KEYS, write_for_settings
from ..job.run.runner import run_query
from ..job.spark.session import apply_confs

# Few partitions, so that fixed per-partition overhead does not count as bytes per row.
CALIBRATION_PARTITIONS = 2
CALIBRATION_FILES = 6
# What each provider's footprint is, and where Spark's progress reports it.
MEASURES = {
    "hdfs": "memoryUsedBytes: JVM heap of the state versions the executor keeps loaded",
    "rocksdb": "customMetrics.rocksdbSstFileSize: SST files on the executor's local disk",
}


@dataclass(frozen=True)
class Calibration:
    """The footprint summed over every batch that held state, and the rows summed the same way."""

    provider: str
    measure: str
    events: int
    batches: int
    peak_rows: int
    summed_rows: int
    summed_bytes: int

    @property
    def bytes_per_row(self) -> int:
        return max(1, math.ceil(self.summed_bytes / self.summed_rows))

    def to_dict(self) -> dict[str, object]:
        return {**asdict(self), "bytes_per_row": self.bytes_per_row}

    def describe(self) -> str:
        return (
            f"measured on {self.provider} ({self.measure}): {self.summed_bytes:,} B over {self.summed_rows:,}"
            f" rows, summed over the {self.batches} batches of a run over {self.events:,} sample events"
            f" ({self.peak_rows:,} state rows at the peak)"
        )


def state_size(operator_progress: dict[str, Any], provider: str) -> int:
    """The provider's footprint from one stateOperators entry of a progress report."""
    if provider == "rocksdb":
        return int(operator_progress["customMetrics"]["rocksdbSstFileSize"])
    return int(operator_progress["memoryUsedBytes"])


def measure(progress: Sequence[Mapping[str, Any]], provider: str, events: int) -> Calibration:
    """Bytes per row over every batch that held state: the sums, not one batch.

    The HDFS-backed store's memoryUsedBytes moves by a third from one batch to the next (it counts
    the versions kept loaded, and Spark's size estimator samples), so one batch is a poor measure;
    the sums over a run are steady (about 10% apart between runs of 2,000 and 8,000 events a file).
    """
    sizes = []
    for report in progress:
        operators = report.get("stateOperators") or []
        rows = sum(op["numRowsTotal"] for op in operators)
        if rows:
            sizes.append((rows, sum(state_size(op, provider) for op in operators)))
    if not sizes:
        raise CalibrationError("the calibration run kept no state rows, so there is nothing to measure")
    return Calibration(
        provider,
        MEASURES[provider],
        events,
        batches=len(sizes),
        peak_rows=max(rows for rows, _ in sizes),
        summed_rows=sum(rows for rows, _ in sizes),
        summed_bytes=sum(size for _, size in sizes),
    )


class CalibrationError(Exception):
    """The run left nothing to measure."""


def state_lifetime_seconds(settings: Settings) -> float:
    """How long, in event time, a row stays in state: the watermark delay plus the operator's own span."""
    span = settings.query.state_span()
    return parse_duration(settings.query.watermark, zero=True) + (parse_duration(span) if span else 0)


def trial_settings(settings: Settings, scratch: Path) -> Settings:
    """The project's query and state store, with inputs, output and checkpoint inside scratch."""
    data = settings.model_dump()
    # The measure divides by Spark's row count, which a store that does not track rows reports as 0.
    data["state_store"]["rocksdb"]["track_total_number_of_rows"] = True
    landing = {"type": "files", "files": {"path": str(scratch / "landing"), "max_files_per_trigger": 1}}
    data["source"] = landing
    if settings.join_source is not None:
        data["join_source"] = {
            "type": "files",
            "files": {"path": str(scratch / "landing-join"), "max_files_per_trigger": 1},
        }
    data["sink"] = {"type": "parquet", "output_mode": "append", "path": str(scratch / "output")}
    data["query"].update(name="calibrate", checkpoint_location=str(scratch / "checkpoint"), trigger=AVAILABLE_NOW)
    # Without changelog checkpointing RocksDB flushes its SST files at every commit, so their size
    # is current; the bytes a row takes do not depend on how changes are uploaded.
    data["state_store"]["changelog_checkpointing"] = False
    # The measurement runs on open-source Spark, here, whatever the project's platform.
    data["spark"].update(shuffle_partitions=CALIBRATION_PARTITIONS, platform="oss", master="local[2]")
    return Settings(**data)


def calibrate(
    spark: SparkSession, settings: Settings, events_per_file: int, progress_to: TextIO = sys.stdout
) -> Calibration:
    """measured_run in a scratch directory that is removed afterwards."""
    with tempfile.TemporaryDirectory(prefix="calibrate-") as scratch:
        return measured_run(spark, settings, Path(scratch), events_per_file, progress_to)


def measured_run(
    spark: SparkSession, settings: Settings, scratch: Path, events_per_file: int, progress_to: TextIO = sys.stdout
) -> Calibration:
    """Run the query over CALIBRATION_FILES sample files, a key per event (per session for custom_state),
    and measure the provider's footprint per state row."""
    trial = trial_settings(settings, scratch)
    # All files within one state lifetime: every row stays until the closing batch, so the size
    # measured is that of live rows, not of rows already deleted and not yet compacted away.
    advance = f"{state_lifetime_seconds(settings) / (CALIBRATION_FILES + 1)} seconds"
    shape = write_for_settings(trial, CALIBRATION_FILES, events_per_file, keys=UNIQUE_KEYS, advance=advance)
    apply_confs(spark, trial)
    try:
        # The files and a closing batch: the end of an available-now run, which processing-time timers put off.
        query = run_query(spark, trial, max_batches=shape.files + 1, progress_to=progress_to)
    except StreamingQueryException as error:
        raise CalibrationError(f"the calibration run failed: {first_line(str(error))}") from None
    return measure(query.recentProgress, trial.state_store.provider, shape.files * shape.events_per_file)
