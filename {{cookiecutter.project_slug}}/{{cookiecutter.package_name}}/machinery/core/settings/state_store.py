"""The state_store section: the provider, changelog checkpointing, RocksDB's memory and the checkpoint's
integrity checks, and the rules between them."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BeforeValidator, Field, model_validator

from ..sizing.limits import JAVA_INT
from .section import Section


def _number_from_text(value: Any) -> Any:
    """An environment override arrives as text: '2' is the number 2 for a choice among numbers."""
    return int(value) if isinstance(value, str) and value.strip().isdigit() else value


class RocksDBSettings(Section):
    bounded_memory_usage: bool = Field(False, description="true or false")
    max_memory_usage_mb: int = Field(500, gt=0, le=JAVA_INT, description="megabytes greater than zero")
    block_cache_size_mb: int | None = Field(None, gt=0, le=JAVA_INT, description="megabytes greater than zero, or null")
    write_buffer_size_mb: int | None = Field(
        None, gt=0, le=JAVA_INT, description="megabytes greater than zero, or null"
    )
    max_write_buffer_number: int | None = Field(
        None, gt=0, le=JAVA_INT, description="a whole number greater than zero, or null"
    )
    compact_on_commit: bool = Field(False, description="true or false")
    track_total_number_of_rows: bool = Field(True, description="true or false")


class IntegritySettings(Section):
    """How far the state checkpoint checks itself (docs/state.md, "A checkpoint that checks itself").
    The defaults are Spark 4.2's own, which is what checkpoints written before these settings hold."""

    # 2: each state version's files carry a unique id named in the commit log; needed for file checksums.
    checkpoint_format_version: Annotated[Literal[1, 2], BeforeValidator(_number_from_text)] = Field(
        1, description="1 or 2 (2 needs provider rocksdb)"
    )
    # A checksum file beside each state file (format version 2 only); a mismatch fails the load.
    file_checksums: bool = Field(True, description="true or false")
    # A checksum in each state row, checked when state is loaded; pinned by a checkpoint.
    row_checksums: bool = Field(False, description="true or false")
    # A snapshot that fails to load is skipped and the state rebuilt from older ones and changelogs.
    auto_snapshot_repair: bool = Field(True, description="true or false")


class StateStoreSettings(Section):
    provider: Literal["hdfs", "rocksdb"] = Field(description="hdfs or rocksdb")
    changelog_checkpointing: bool = Field(False, description="true or false (rocksdb only)")
    min_batches_to_retain: int = Field(100, ge=1, le=JAVA_INT, description="a whole number of batches, 1 or more")
    # How state rows are encoded; pinned by a checkpoint. The default is Spark's (and what checkpoints
    # written before this setting hold); avro lets a custom_state processor's state schema evolve.
    encoding_format: Literal["unsaferow", "avro"] = Field("unsaferow", description="unsaferow or avro")
    rocksdb: RocksDBSettings = Field(default_factory=RocksDBSettings)
    integrity: IntegritySettings = Field(default_factory=IntegritySettings)

    @property
    def rows_tracked(self) -> bool:
        """Whether Spark's progress counts the state rows (numRowsTotal): RocksDB's count costs a read
        before each write, which track_total_number_of_rows false saves."""
        return self.provider == "hdfs" or self.rocksdb.track_total_number_of_rows

    @model_validator(mode="after")
    def _changelog_needs_rocksdb(self) -> StateStoreSettings:
        if self.changelog_checkpointing and self.provider != "rocksdb":
            raise ValueError(
                "changelog_checkpointing is true but provider is hdfs: changelog checkpointing is a"
                " RocksDB feature; set changelog_checkpointing to false"
            )
        if self.integrity.checkpoint_format_version == 2 and self.provider != "rocksdb":
            raise ValueError(
                "integrity.checkpoint_format_version is 2 but provider is hdfs: Spark writes format version 2"
                " for RocksDB only; set integrity.checkpoint_format_version to 1"
            )
        return self
