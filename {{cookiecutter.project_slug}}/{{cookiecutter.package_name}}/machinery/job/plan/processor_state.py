"""The state variables a transformWithStateInPandas processor declares, learned before the query starts.

Spark learns them on the driver while it plans the first batch: it sends the pickled processor to a
Python worker, which calls its `init` with a handle that records each getValueState / getListState
/ getMapState. The same is done here, without a query: the processor is unpickled from the plan's
UDF (a copy: the user's object is not touched) and its `init` called with a handle that records the
declarations. An `init` that does more than declare state (reads a file, calls the handle otherwise)
is not run here; `declared_state` then returns None and Spark checks the schemas itself at start.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ...core.plan_operators import DeclaredVariable

if TYPE_CHECKING:
    from pyspark.sql import DataFrame
    from pyspark.sql.types import StructType


PLAN_NODE = "TransformWithStateInPySpark"


@dataclass(frozen=True)
class StateVariable:
    name: str
    # ValueState, ListState or MapState, as Spark's operator metadata names them.
    kind: str
    value: StructType
    # A map state's own key (the grouping key is the state's key for every kind).
    user_key: StructType | None = None
    # The time to live it declares (ttlDurationMs), None without one.
    ttl_ms: int | None = None

    def shape(self) -> DeclaredVariable:
        """What the sizing needs of it (core has no Spark types)."""
        return DeclaredVariable(self.name, self.kind, None if self.ttl_ms is None else self.ttl_ms / 1000)


class _RecordingHandle:
    """The part of StatefulProcessorHandle that `init` uses to declare state, recording each call."""

    def __init__(self) -> None:
        self.variables: list[StateVariable] = []

    def getValueState(self, stateName: str, schema: Any, ttlDurationMs: int | None = None) -> None:
        self.variables.append(StateVariable(stateName, "ValueState", _struct(schema), ttl_ms=ttlDurationMs))

    def getListState(self, stateName: str, schema: Any, ttlDurationMs: int | None = None) -> None:
        self.variables.append(StateVariable(stateName, "ListState", _struct(schema), ttl_ms=ttlDurationMs))

    def getMapState(self, stateName: str, userKeySchema: Any, valueSchema: Any, ttlDurationMs: int | None = None):
        variable = StateVariable(stateName, "MapState", _struct(valueSchema), _struct(userKeySchema), ttlDurationMs)
        self.variables.append(variable)


def _struct(schema: Any) -> StructType:
    from pyspark.sql.types import DataType, StructType

    parsed = DataType.fromDDL(schema) if isinstance(schema, str) else schema
    assert isinstance(parsed, StructType), f"a state schema is a struct, got {parsed!r}"
    return parsed


def declared_state(result: DataFrame) -> list[list[StateVariable] | None]:
    """The state variables each transformWithStateInPandas processor of the query declares in its
    `init`, in the order a pre-order walk of the plan meets them (read_plan's order); None for one
    whose `init` cannot run here; none on Spark Connect."""
    from pyspark.serializers import CloudPickleSerializer

    from ..spark.remote import is_connect

    if is_connect(result.sparkSession):  # the pickled processor is only in the client's private plan: none read
        return []
    found = []
    for node in _pre_order(result._jdf.queryExecution().analyzed()):
        if node.nodeName() == PLAN_NODE:
            command = bytes(node.functionExpr().func().command().unsafeArray())
            function, _ = CloudPickleSerializer().loads(command)
            found.append(_declared(getattr(getattr(function, "__self__", None), "_stateful_processor", None)))
    return found


def declared_variables(result: DataFrame) -> list[tuple[DeclaredVariable, ...] | None]:
    """declared_state as the plan's operators carry it: each variable's name, kind and time to live."""
    return [None if found is None else tuple(map(StateVariable.shape, found)) for found in declared_state(result)]


def _declared(processor: Any) -> list[StateVariable] | None:
    if processor is None:
        return None
    handle = _RecordingHandle()
    try:
        processor.init(handle)
    except Exception:  # an init that needs the real handle or the executor's files: Spark checks at start
        return None
    return handle.variables


def _pre_order(plan: Any):
    yield plan
    children = plan.children()
    for index in range(children.size()):
        yield from _pre_order(children.apply(index))
