"""The state store configurations a scratch run (bench, sustain) sets up: each one's provider, changelog
and row count, which a query can run on, and the state rows a run ends with."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..core.operators import OPERATORS
from ..core.settings import StateStoreSettings
from .inspection import counted_state_rows


@dataclass(frozen=True)
class StoreConfiguration:
    """A state store set up one way for a scratch run (bench, sustain)."""

    provider: str
    changelog: bool
    # false: Spark skips the read before each write that keeps numRowsTotal, and reports no row count;
    # the run's rows are counted from the state files instead (the state reader, as inspect does).
    track_rows: bool = True


CONFIGURATIONS = {
    "hdfs": StoreConfiguration("hdfs", False),
    "rocksdb": StoreConfiguration("rocksdb", False),
    "rocksdb+changelog": StoreConfiguration("rocksdb", True),
    # The profile for the most rows per core (docs/state.md, "The tuned RocksDB profile").
    "rocksdb+tuned": StoreConfiguration("rocksdb", True, track_rows=False),
}


def configuration_of(store: StateStoreSettings) -> str:
    """The name of the configuration the settings' state store is set up as."""
    if store.provider == "hdfs":
        return "hdfs"
    if not store.changelog_checkpointing:
        return "rocksdb"
    return "rocksdb+changelog" if store.rocksdb.track_total_number_of_rows else "rocksdb+tuned"


def run_state_rows(configuration: str, last_counted: dict[str, Any], checkpoint: Path) -> int:
    """The state rows at a run's end: Spark's count in its last counted batch, or, where the store does
    not track rows, the state files' count (the checkpoint's last committed batch)."""
    if CONFIGURATIONS[configuration].track_rows:
        return int(last_counted["state_rows"])
    return counted_state_rows(str(checkpoint))


def unsupported(operators: Sequence[str], configuration: str) -> str | None:
    """Why the query's operators cannot run on this configuration, or None."""
    if CONFIGURATIONS[configuration].provider == "hdfs":
        return next((OPERATORS[name].rocksdb_only for name in operators if OPERATORS[name].rocksdb_only), None)
    return None
