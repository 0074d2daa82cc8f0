"""The stateful operators of a query, as data: what job/plan/query_plan.py reads from Spark's plan, and
what the sizing, the guard and the tools follow. Standard library only (the settings use it).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from .operators import OPERATORS

# Stateful nodes of Spark's plan that no sizing rule here covers: found, guarded, listed, not sized.
# Spark's Scala and Java API builds them; a PySpark query cannot.
OTHER_STATEFUL = {
    "FlatMapGroupsWithState": "flatMapGroupsWithState",
    "TransformWithState": "transformWithStateExec",
}
# How the state key record words each kind of operator's key.
KEY_WORDS = {
    "Aggregate": "aggregation by",
    "Deduplicate": "deduplication by",
    "DeduplicateWithinWatermark": "deduplication by",
    "Join": "join on",
    "GlobalLimit": "limit of",
}


@dataclass(frozen=True)
class DeclaredVariable:
    """A state variable a transformWithState processor declares in its init (job/plan/processor_state.py)."""

    name: str
    # ValueState, ListState or MapState, as Spark's operator metadata names them.
    kind: str
    # Its time to live (ttlDurationMs), None without one.
    ttl_seconds: float | None = None

    def __str__(self) -> str:
        kind = self.kind.removesuffix("State").lower()
        return f"{self.name} ({kind}{f', ttl {self.ttl_seconds:g} s' if self.ttl_seconds else ''})"


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
    # A stream-stream join's type as Spark names it (Inner, LeftOuter, RightOuter, FullOuter, LeftSemi).
    join_type: str | None = None
    # The operator id of the stateful operator whose output feeds it, if any (a join: its left input's).
    upstream: int | None = None
    # An aggregation grouped by its window alone (no key column): one row per window.
    window_only: bool = False
    # A sliding window's slide, a session window's gap ("5 minutes"), as the plan has them.
    slide: str | None = None
    gap: str | None = None
    # applyInPandasWithState's timeout, transformWithState's timers: none, processing_time or event_time.
    timeout: str | None = None
    # Whether Spark drops rows of its state by the watermark (dropDuplicates and an aggregation
    # without a window do only when the watermarked event time is one of their keys).
    evicts: bool = True
    # The name Spark writes into the state metadata, where the plan says it (transformWithState's two APIs).
    spark_operator_name: str | None = None
    # transformWithState: the state variables its processor declares (None when its init could not run here).
    state_variables: tuple[DeclaredVariable, ...] | None = None

    @property
    def known(self) -> bool:
        return self.kind in OPERATORS

    @property
    def spark_name(self) -> str:
        """The name Spark writes into the state metadata."""
        if self.spark_operator_name:
            return self.spark_operator_name
        return OPERATORS[self.kind].spark_name if self.known else OTHER_STATEFUL.get(self.kind, self.kind)

    def sizing_inputs(self) -> dict[str, object]:
        """What the plan says of its state's shape, as the estimate's inputs (capacity.estimate)."""
        found: dict[str, object] = {
            "watermark": self.watermark,
            "window": self.window,
            "slide": self.slide,
            "gap": self.gap,
            "join_range": self.join_range,
            "join_type": self.join_type,
            "timeout": self.timeout,
            "key_cardinality": 1 if self.window_only else None,  # one row per window
            "state_variables": self.state_variables,
        }
        return {name: value for name, value in found.items() if value is not None} | {"evicts": self.evicts}

    @property
    def key_line(self) -> str:
        """Its state key in the words of the checkpoint's state key record (job/guard/state_fit.py)."""
        lead = KEY_WORDS.get(self.node, f"{self.node} by")
        return f"{lead} {self.keys}"

    def describe(self) -> str:
        extra = [f"window {self.window}"] if self.window else []
        extra += [f"slide {self.slide}"] if self.slide else []
        extra += [f"gap {self.gap}"] if self.gap else []
        extra += [f"{self.timeout.replace('_', ' ')} timeout"] if self.timeout else []
        extra += [f"range {self.join_range}"] if self.join_range else []
        extra += [self.join_type] if self.join_type else []
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
