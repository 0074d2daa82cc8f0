"""The stateful operators the checkpoint holds state for, against those of the query about to run.

Spark records each stateful operator of a query in `state/<operator id>/_metadata` (its name and its
stores). A query whose operators are the same, in the same order, restarts on that state; one with an
operator added, removed or swapped would read another operator's state, or none, so it is refused
before it starts, with both lists and the way out. It only reads the checkpoint.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

from ..core.checkpoint.files import local_checkpoint, stateful_operators
from ..core.operators import BY_SPARK_NAME
from ..core.plan_operators import OTHER_STATEFUL, PlanOperator, chain, flow_order

_BY_SPARK_NAME = BY_SPARK_NAME | {spark: node for node, spark in OTHER_STATEFUL.items()}


class OperatorsChanged(Exception):
    """The query's stateful operators are not those whose state the checkpoint holds."""


def recorded_operators(checkpoint: str) -> list[str] | None:
    """The operators the checkpoint holds state for, by Spark's operator id, in our names; None when the
    checkpoint is not on the local file system (its state metadata is read through Spark there)."""
    folder = local_checkpoint(checkpoint)
    if folder is None:
        return None
    names = [info["operatorName"] for info in stateful_operators(folder)]
    return [_BY_SPARK_NAME.get(name, name) for name in names]


def operators_drift(plan: Sequence[PlanOperator], checkpoint: str) -> str | None:
    """One line when the plan's operators differ from the checkpoint's by kind or order, else None."""
    recorded = recorded_operators(checkpoint)
    now = [operator.kind for operator in plan]
    if not recorded or recorded == now:
        return None
    held_flow = list(reversed(recorded))
    now_flow = [operator.kind for operator in flow_order(plan)]
    return (
        f"the query's stateful operators changed: the checkpoint {checkpoint} holds the state of"
        f" {chain(held_flow)}, and the query now runs {chain(now_flow)} ({_difference(held_flow, now_flow)})."
        " Spark keeps each operator's state by its place in the query, so the state cannot serve the new"
        f" query. Either change the query back to {chain(held_flow)}, or set query.checkpoint_location to a new"
        " directory and reprocess the input from the start."
    )


def check_operators(plan: Sequence[PlanOperator], checkpoint: str) -> None:
    """Raise OperatorsChanged with the line of operators_drift, if any."""
    drift = operators_drift(plan, checkpoint)
    if drift:
        raise OperatorsChanged(drift)


def _difference(held: list[str], now: list[str]) -> str:
    added = list((Counter(now) - Counter(held)).elements())
    removed = list((Counter(held) - Counter(now)).elements())
    parts = [f"{name} added" for name in added] + [f"{name} removed" for name in removed]
    return ", ".join(parts) or "the same operators in another order"
