"""The seam between the machinery and your query: what the machinery needs from `<package>/query.py`.

The query module defines:

    OPERATOR: str
        the stateful operator the query runs, one of operators.NAMES; it decides how the state is
        sized, guarded and sampled (and it is pinned into the checkpoint by the state it shapes)
    EVENT_SCHEMA: StructType
        the events every source is parsed into (files, Kafka JSON values)
    events_from_rate(rate: DataFrame, keys: int) -> DataFrame
        Spark's rate source rows (timestamp, value) as events over `keys` distinct keys (demo, bench)
    stateful_query(events: DataFrame, query: QuerySettings, join_events: DataFrame | None) -> DataFrame
        events in, output rows out: on a stream in the job, on batch data in tests; join_events is
        the second input of a stream_stream_join, None otherwise
    sample_event(number: int, key: str, event_time: datetime, side: str) -> dict[str, str] | None
        one synthetic event as JSON values, for sample-input and calibration; side is "left", or
        "right" for the second input of a join (None: this number has no such event)

Nothing else of the query module is read, and the machinery never names its columns.
"""

from __future__ import annotations

import functools
import importlib
from types import ModuleType

from .operators import NAMES

PACKAGE = __name__.split(".")[0]
QUERY_MODULE = f"{PACKAGE}.query"
REQUIRED = ("OPERATOR", "EVENT_SCHEMA", "events_from_rate", "stateful_query", "sample_event")


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
    if module.OPERATOR not in NAMES:
        raise ContractError(f"{QUERY_MODULE}.OPERATOR is {module.OPERATOR!r}; use one of {', '.join(NAMES)}")
    return module


def operator_name() -> str:
    return str(user_query().OPERATOR)
