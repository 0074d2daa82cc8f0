"""The sink section: parquet, Delta (its writer and MERGE key), console or Kafka, and the output mode
each takes."""

from __future__ import annotations

from typing import ClassVar, Literal

from pydantic import Field, model_validator

from ..sizing.limits import JAVA_INT
from .kafka import KafkaConnection
from .section import PACKAGE, Folder, Section


class KafkaSinkSettings(KafkaConnection):
    """The Kafka sink: each output row one record, its value the row as JSON, its key the key columns' JSON."""

    topic: str = Field("results", min_length=1, pattern=r"^[A-Za-z0-9._-]+$", description="one topic name")
    key_columns: list[str] = Field(
        default_factory=lambda: ["key"], min_length=1, description="a list of the output's column names"
    )

    MANAGED: ClassVar[dict[str, str]] = {**KafkaConnection.MANAGED, "topic": "topic"}
    SECTION: ClassVar[str] = "sink.kafka"


class DeltaSinkSettings(Section):
    writer: Literal["delta-spark", "deltalake"] = Field("delta-spark", description="delta-spark or deltalake")
    # The Delta Lake (JVM) release fetched for delta-spark; it must be built for this Spark minor version.
    version: str = Field("4.4.0", pattern=r"^\d+\.\d+\.\d+$", description="a Delta Lake release such as 4.4.0")
    # Update mode: the output columns a batch's rows are MERGEd into the table by. Empty: the grouping
    # columns (and window) of the query's last aggregation, read from its plan (job/plan/merge_key.py).
    key_columns: list[str] = Field(default_factory=list, description="a list of the output's column names")


class SinkSettings(Section):
    type: Literal["parquet", "delta", "console", "kafka"] = Field(description="parquet, delta, console or kafka")
    output_mode: Literal["append", "update"] = Field(
        "append", description="append or update (complete would keep every window's state forever)"
    )
    path: Folder = Field(f"output/{PACKAGE}", description="an output directory")
    console_rows: int = Field(20, gt=0, le=JAVA_INT, description="rows to print per batch, greater than zero")
    delta: DeltaSinkSettings = Field(default_factory=DeltaSinkSettings)
    kafka: KafkaSinkSettings = Field(default_factory=KafkaSinkSettings)

    @property
    def writes_files(self) -> bool:
        """Whether the output is files under sink.path (parquet, delta), which the job's checks read."""
        return self.type in ("parquet", "delta")

    @property
    def delta_writer(self) -> str | None:
        """delta-spark or deltalake when the sink is delta, otherwise None."""
        return self.delta.writer if self.type == "delta" else None

    @model_validator(mode="after")
    def _mode_fits_sink(self) -> SinkSettings:
        if self.type == "parquet" and self.output_mode != "append":
            raise ValueError(
                f"output_mode {self.output_mode} is not supported by the parquet sink, which only appends"
                " rows; use output_mode append (or the delta sink, which MERGEs updates by key)"
            )
        return self

    @property
    def merges(self) -> bool:
        """Whether each batch is MERGEd into a Delta table by the result's key (update mode into delta)."""
        return self.type == "delta" and self.output_mode == "update"
