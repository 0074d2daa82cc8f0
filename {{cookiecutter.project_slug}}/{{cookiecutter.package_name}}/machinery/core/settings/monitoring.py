"""The monitoring section: the progress lines' format, Spark's metrics, and the watchdog's warnings."""

from __future__ import annotations

import sys
from typing import Literal, TextIO

from pydantic import Field

from ..durations import parse_duration
from .section import MAX_FACTOR, Duration, Section


class MonitoringSettings(Section):
    # text: one line per batch; json: one JSON object per line (for log shippers).
    progress_format: Literal["text", "json"] = Field("text", description="text or json")
    # Spark's own streaming metrics (spark.sql.streaming.metricsEnabled), for Prometheus and other sinks.
    metrics_enabled: bool = Field(False, description="true or false")
    # Warn once when the measured state rows pass the estimate by this factor.
    state_warning_factor: float = Field(2.0, gt=1, le=MAX_FACTOR, description="a number greater than 1")
    # Warn loudly when HDFS-backed state per partition passes this share of the 1 GiB RocksDB threshold.
    hdfs_memory_warning_share: float = Field(0.8, gt=0, le=1, description="a share greater than 0 and at most 1")
    # Say when the watermark has stood still this long while the job ran (an input gone quiet holds results
    # back); null: never (job/run/quiet.py).
    quiet_after: Duration | None = Field("15 minutes", description="a Spark interval such as '15 minutes', or null")

    @property
    def quiet_after_seconds(self) -> float | None:
        return None if self.quiet_after is None else parse_duration(self.quiet_after)

    def remarks_to(self, progress_to: TextIO) -> TextIO:
        """Where the job's own remarks go: beside the progress lines, or to stderr when the progress
        is JSON lines, so that stdout carries the events only."""
        return sys.stderr if self.progress_format == "json" else progress_to
