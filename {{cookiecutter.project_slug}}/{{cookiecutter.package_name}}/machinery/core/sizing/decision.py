"""The provider, changelog setting and heap a project gets from its estimate: `auto` resolved, an
explicit choice honoured (with a warning against the sizing), and what cannot apply dropped.

Standard library only: the bake decides through it (hooks/answers.py).
"""

from __future__ import annotations

from dataclasses import dataclass

from ..figures import human_bytes
from ..operators import operator as find_operator
from . import memory
from .estimate import Estimate


@dataclass(frozen=True)
class Decision:
    """The provider and changelog setting a project gets, and why."""

    provider: str
    changelog_checkpointing: bool
    against_recommendation: bool
    notes: tuple[str, ...]
    # The heap each executor (a local run's driver) starts with: what the HDFS-backed state needs
    # beside Spark's own memory, or Spark's default beside RocksDB, whose state is native memory.
    heap: str = "1g"


def decide(requested_provider: str, changelog_checkpointing: bool, sizing: Estimate) -> Decision:
    """Resolve `auto`, honour an explicit choice, and drop changelog where it cannot apply."""
    if requested_provider not in ("auto", "hdfs", "rocksdb"):
        raise ValueError(f"provider must be auto, hdfs or rocksdb, got {requested_provider!r}")
    recommended = sizing.recommended_provider
    notes = []
    needs_rocksdb = [part.operator for part in sizing.operators if find_operator(part.operator).rocksdb_only]
    only_rocksdb = find_operator(needs_rocksdb[0]).rocksdb_only if needs_rocksdb else None
    if only_rocksdb:
        if requested_provider == "hdfs":
            raise ValueError(
                f"{needs_rocksdb[0]} needs the rocksdb state store ({only_rocksdb});"
                " answer rocksdb or auto for state_store_provider"
            )
        if recommended == "hdfs":
            notes.append(f"rocksdb although the sizing says hdfs: {only_rocksdb}.")
        recommended = "rocksdb"
    provider = recommended if requested_provider == "auto" else requested_provider
    against = provider != recommended
    if against:
        notes.append(
            f"WARNING: you chose {provider} but the sizing recommends {recommended} "
            f"({human_bytes(sizing.projected_bytes_per_partition)} per partition against a "
            f"{human_bytes(sizing.threshold_bytes)} threshold). Your choice is kept; check it "
            "before the first run, because the provider cannot be changed once the checkpoint exists."
        )
    changelog = changelog_checkpointing
    if changelog and provider == "hdfs":
        changelog = False
        notes.append(
            "changelog checkpointing is written as off: it is a RocksDB feature and the "
            "HDFS-backed store always writes its own delta files."
        )
    heap = memory.memory_setting(sizing.executor_heap_bytes if provider == "hdfs" else memory.SPARK_DEFAULT_HEAP)
    return Decision(provider, changelog, against, tuple(notes), heap)
