"""The seam between the machinery and your query: what the machinery needs from `<package>/query.py`.

The query module defines:

    EVENT_SCHEMA: StructType
        the events every source is parsed into (files, Kafka JSON values)
    stateful_query(events: DataFrame, query: QuerySettings, join_events: DataFrame | None) -> DataFrame
        events in, output rows out: on a stream in the job, on batch data in tests; join_events is
        the second input (join_source) when the settings have one, None otherwise. Any number of
        stateful operators, chained as Spark allows: the machinery reads them from the plan of the
        DataFrame it returns (job/query_plan.py) to size, guard and inspect the state.

and may define:

    OPERATOR: str
        a starter's label, one of operators.NAMES: what the project was generated with. It shapes
        the sample input; where the plan holds other operators, the plan wins and the job says so
    events_from_rate(rate: DataFrame, keys: int) -> DataFrame
        Spark's rate source rows (timestamp, value) as events over `keys` distinct keys (demo, bench)
    sample_event(number: int, key: str, event_time: datetime, side: str) -> dict[str, str] | None
        one synthetic event as JSON values, for sample-input and calibration; side is "left", or
        "right" for the second input of a join (None: this number has no such event)
    Params: type[pydantic.BaseModel]
        the query's own business parameters (a threshold, a list of codes): settings.yaml's
        query.params is checked against it like every setting, and stateful_query reads the result
        as query.params

Nothing else of the query module is read, and the machinery never names its columns.
"""

from __future__ import annotations

import functools
import importlib
from types import ModuleType

from .operators import NAMES

PACKAGE = __name__.split(".")[0]
QUERY_MODULE = f"{PACKAGE}.query"
REQUIRED = ("EVENT_SCHEMA", "stateful_query")


class ContractError(Exception):
    """The query module does not offer what the machinery needs; the message names what and where."""


@functools.cache
def user_query() -> ModuleType:
    """The project's query module, checked against the contract once per process."""
    module = importlib.import_module(QUERY_MODULE)
    missing = [name for name in REQUIRED if not hasattr(module, name)]
    if missing:
        raise ContractError(
            f"{QUERY_MODULE} lacks {', '.join(missing)}: the machinery needs each of {', '.join(REQUIRED)}"
            f" (see {__name__})"
        )
    label = getattr(module, "OPERATOR", None)
    if label is not None and label not in NAMES:
        raise ContractError(f"{QUERY_MODULE}.OPERATOR is {label!r}; use one of {', '.join(NAMES)}, or remove it")
    return module


def operator_name() -> str | None:
    """The starter's label, OPERATOR, if the query module keeps one."""
    label = getattr(user_query(), "OPERATOR", None)
    return None if label is None else str(label)
