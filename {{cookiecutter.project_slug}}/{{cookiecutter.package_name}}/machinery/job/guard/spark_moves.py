"""A checkpoint moved to another Spark release: proven, said, or refused before Spark starts.

Spark writes a checkpoint's state in formats it keeps the right to change between releases (UnsafeRow,
the default encoding, is "an inherently unstable format" by Spark's own word), and does not promise that
an older release reads a newer one's state. Spark records no version in a checkpoint; the state key record
(state_fit.KeyRecord) names the Spark that ran each start. Against it:
- the same release (major.minor): nothing to say;
- a move this template has proven for every operator of the checkpoint (a starter's checkpoint written on
  one release and restarted on the other, exact output: tests/machinery/test_upgrades.py): a note;
- a newer release, not proven: a note naming the way back, a savepoint taken before (an upgrade is what
  Spark means to allow; `check` says it before a start);
- an older release, not proven: refused, in one line naming both.
A join's state in format 4 on a Spark before 4.3 is refused apart (checkpoint.join_format_refusals).
"""

from __future__ import annotations

from collections.abc import Sequence

from ...core.confs import spark_release
from ...core.contract import PACKAGE
from ...core.operators import OPERATORS
from ...core.real_time import STATE_NAMES

# The releases between which a checkpoint moved both ways with exact output, for each starter's operators
# (windowed count, deduplication, join, custom_state; the HDFS-backed store and RocksDB with changelog
# checkpointing; custom_state's Avro encoding): tests/machinery/test_upgrades.py.
PROVEN_RELEASES = frozenset({((4, 2), (4, 3)), ((4, 3), (4, 2))})
PROVEN_OPERATORS = frozenset(
    OPERATORS[kind].spark_name
    for kind in ("windowed_aggregation", "deduplication", "stream_stream_join", "custom_state")
)


def spark_move(written: str | None, running: str, operators: Sequence[str]) -> tuple[list[str], list[str]]:
    """(notes, refusals) for a checkpoint whose state Spark `written` wrote last (None: not recorded) started on
    Spark `running`; `operators`: the Spark names of its stateful operators (state/<id>/_metadata)."""
    if written is None or not operators or spark_release(written) == spark_release(running):
        return [], []
    names = {STATE_NAMES.get(name, name) for name in operators}
    unproven = sorted(names - PROVEN_OPERATORS)
    what = f"the checkpoint's state was last written by Spark {written}, and this is Spark {running}"
    if (spark_release(written), spark_release(running)) in PROVEN_RELEASES and not unproven:
        return [f"{what}: a move proven for its operators, both ways (docs/state.md, Moving to another Spark)"], []
    why = f"not proven for {', '.join(unproven)}" if unproven else f"a move not proven between {written} and {running}"
    if spark_release(running) > spark_release(written):
        return [
            f"{what} ({why}; Spark means an upgrade to read the state): the way back is a savepoint taken on Spark"
            f" {written} before this start (python -m {PACKAGE} savepoint create PATH; `check` says this before one)"
        ], []
    return [], [
        f"{what}, an older release ({why}): Spark does not promise that an older release reads a newer one's"
        f" state. Start it on pyspark {written} or later (pin it in pyproject.toml), or restore the savepoint"
        " taken before the upgrade"
    ]
