"""The source and join_source sections: the rate, files and Kafka sources, and what a run needs of each
beyond valid settings (a landing directory that exists, the secrets' variables set)."""

from __future__ import annotations

from pathlib import Path
from typing import Any, ClassVar, Literal

from pydantic import Field, field_validator, model_validator

from ..durations import parse_duration
from ..sizing.limits import JAVA_INT
from .kafka import KafkaConnection
from .local_checks import unset_secrets
from .section import JAVA_LONG, MAX_KEYS, MAX_ROWS_PER_SECOND, PACKAGE, Duration, Folder, Section


class RateSourceSettings(Section):
    rows_per_second: int = Field(
        1000, gt=0, le=MAX_ROWS_PER_SECOND, description="a whole number of rows per second greater than zero"
    )
    rows_per_batch: int | None = Field(
        None, gt=0, le=JAVA_LONG, description="rows per micro-batch greater than zero, or null"
    )
    advance_per_batch: Duration = Field("1 second", description="a Spark interval of 1 millisecond or more")
    start_timestamp_ms: int = Field(0, ge=0, le=JAVA_LONG, description="epoch milliseconds, 0 or more")
    keys: int = Field(1000, gt=0, le=MAX_KEYS, description="a whole number of distinct keys greater than zero")
    num_partitions: int | None = Field(None, gt=0, le=JAVA_INT, description="a whole number greater than zero, or null")

    @field_validator("advance_per_batch")
    @classmethod
    def _whole_milliseconds(cls, value: str) -> str:
        if parse_duration(value) < 0.001:
            raise ValueError("the rate-micro-batch source advances in whole milliseconds; use 1 millisecond or more")
        return value

    @property
    def advance_millis(self) -> int:
        return round(parse_duration(self.advance_per_batch) * 1000)


OnBadRecord = Literal["fail", "drop"]


class FilesSourceSettings(Section):
    path: Folder = Field(f"landing/{PACKAGE}", description="the landing directory")
    format: Literal["json", "csv", "parquet"] = Field("json", description="json, csv or parquet")
    max_files_per_trigger: int | None = Field(
        1000,
        gt=0,
        le=JAVA_INT,
        description="a whole number of files per micro-batch greater than zero, or null for all",
    )
    clean_source: Literal["off", "archive", "delete"] = Field("off", description="off, archive or delete")
    archive_dir: Folder | None = Field(None, description="a directory outside path, or null")
    csv_header: bool = Field(True, description="true or false")
    on_bad_record: OnBadRecord = Field("fail", description="fail or drop")

    @field_validator("clean_source", mode="before")
    @classmethod
    def _unquoted_off(cls, value: Any) -> Any:
        return "off" if value is False else value  # YAML reads an unquoted off as false

    @model_validator(mode="after")
    def _archive_dir_with_archive(self) -> FilesSourceSettings:
        if self.clean_source == "archive" and self.archive_dir is None:
            raise ValueError("clean_source is archive but archive_dir is null; set archive_dir to a directory")
        if self.clean_source != "archive" and self.archive_dir is not None:
            raise ValueError(
                f"archive_dir is set but clean_source is {self.clean_source}; set clean_source to archive,"
                " or archive_dir to null"
            )
        return self


class KafkaSourceSettings(KafkaConnection):
    topic: str | None = Field("events", min_length=1, description="a topic name (or several, comma separated)")
    topic_pattern: str | None = Field(None, min_length=1, description="a Java regular expression, or null")
    starting_offsets: Literal["earliest", "latest"] = Field("earliest", description="earliest or latest")
    max_offsets_per_trigger: int | None = Field(
        None, gt=0, le=JAVA_LONG, description="a whole number of records per micro-batch greater than zero, or null"
    )
    fail_on_data_loss: bool = Field(True, description="true or false")
    on_bad_record: OnBadRecord = Field("fail", description="fail or drop")

    MANAGED: ClassVar[dict[str, str]] = {
        **KafkaConnection.MANAGED,
        "subscribe": "topic",
        "subscribepattern": "topic_pattern",
        "startingoffsets": "starting_offsets",
        "maxoffsetspertrigger": "max_offsets_per_trigger",
        "failondataloss": "fail_on_data_loss",
    }
    SECTION: ClassVar[str] = "source.kafka"

    @model_validator(mode="after")
    def _one_subscription(self) -> KafkaSourceSettings:
        if (self.topic is None) == (self.topic_pattern is None):
            raise ValueError("set exactly one of topic and topic_pattern (the other to null)")
        return self


class SourceSettings(Section):
    type: Literal["rate", "files", "kafka"] = Field("rate", description="rate, files or kafka")
    rate: RateSourceSettings = Field(default_factory=RateSourceSettings)
    files: FilesSourceSettings = Field(default_factory=FilesSourceSettings)
    kafka: KafkaSourceSettings = Field(default_factory=KafkaSourceSettings)


def input_problems(section: str, source: SourceSettings) -> list[str]:
    """What a run needs of this input beyond valid settings: its landing directory, or its Kafka secrets."""
    files = source.files
    if source.type == "files" and "://" not in files.path and not Path(files.path).is_dir():
        return [
            f"{section}.files.path = {files.path!r}: no such directory; create it (files landing there are"
            " read in order of arrival) or fix the path"
        ]
    if source.type != "kafka":
        return []
    return unset_secrets(source.kafka.secrets(section))
