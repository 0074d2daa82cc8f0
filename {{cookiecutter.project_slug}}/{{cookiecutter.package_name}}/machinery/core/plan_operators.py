"""The stateful operators of a query, as data: what job/query_plan.py reads from Spark's plan, and
what the sizing, the guard and the tools follow. Standard library only (the settings use it).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from .operators import OPERATORS

# Stateful nodes of Spark's plan that no sizing rule here covers: found, guarded, listed, not sized.
OTHER_STATEFUL = {
    "Deduplicate": "dedupe",
    "FlatMapGroupsWithState": "flatMapGroupsWithState",
    "FlatMapGroupsInPandasWithState": "applyInPandasWithState",
    "TransformWithState": "transformWithStateExec",
}
# How the state key record words each kind of operator's key.
KEY_WORDS = {
    "Aggregate": "aggregation by",
    "Deduplicate": "deduplication by",
    "DeduplicateWithinWatermark": "deduplication by",
    "Join": "join on",
}


@dataclass(frozen=True)
class PlanOperator:
    """One stateful operator of the plan: what the machinery needs to size, guard and inspect it."""

    operator_id: int
    # A name of operators.py, or Spark's plan node for an operator the machinery has no sizing rule for.
    kind: str
    # The plan node (Aggregate, DeduplicateWithinWatermark, Join, ...).
    node: str
    # The columns that key its state, with their types ("window struct<...>, key string").
    keys: str
    # The longest watermark delay among its inputs ("10 minutes"), None without one.
    watermark: str | None
    # A windowed aggregation's window length, a join's time range ("15 minutes"), as the plan has them.
    window: str | None = None
    join_range: str | None = None
    # The operator id of the stateful operator whose output feeds it, if any (a join: its left input's).
    upstream: int | None = None
    # An aggregation grouped by its window alone (no key column): one row per window.
    window_only: bool = False

    @property
    def known(self) -> bool:
        return self.kind in OPERATORS

    @property
    def spark_name(self) -> str:
        """The name Spark writes into the state metadata."""
        return OPERATORS[self.kind].spark_name if self.known else OTHER_STATEFUL.get(self.kind, self.kind)

    @property
    def key_line(self) -> str:
        """Its state key in the words of the checkpoint's state key record (job/state_fit.py)."""
        lead = KEY_WORDS.get(self.node, f"{self.node} by")
        return f"{lead} {self.keys}"

    def describe(self) -> str:
        extra = [f"window {self.window}"] if self.window else []
        extra += [f"range {self.join_range}"] if self.join_range else []
        extra += [f"watermark {self.watermark}"] if self.watermark else []
        return f"{self.kind} by {self.keys}" + (f" ({', '.join(extra)})" if extra else "")


def flow_order(operators: Sequence[PlanOperator]) -> list[PlanOperator]:
    """The operators in the order events reach them (Spark's ids count from the sink back)."""
    return sorted(operators, key=lambda operator: -operator.operator_id)


def chain(kinds: Sequence[str]) -> str:
    """A list of operators as a user reads it: `deduplication -> windowed_aggregation`."""
    return " -> ".join(kinds) if kinds else "no stateful operator"


def unsized(operator: PlanOperator) -> str:
    """The line said of a stateful operator the estimate has no rule for."""
    return (
        f"operator {operator.operator_id}, {operator.kind} (Spark's {operator.spark_name}), has no sizing rule here:"
        " the guard and inspect cover it, the estimate and the watchdog leave its state out"
    )
